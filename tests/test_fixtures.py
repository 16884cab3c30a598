"""The repository is self-contained: its TensorFlow-written fixtures are tracked and intact, and no test,
source or CI file reads anything beside the clone (a user's clone has nothing beside it)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # (not from conftest: tests/service has a conftest of its own)
FIXTURES = REPO / "tests" / "data"



def test_every_fixture_file_matches_its_recorded_sha256() -> None:
    sums = (FIXTURES / "SHA256SUMS").read_text().split("\n")
    entries = [line.split(None, 1) for line in sums if line.strip()]
    assert len(entries) == 12, entries
    for digest, name in entries:
        path = FIXTURES / name.strip()
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, f"{path} differs from SHA256SUMS"
    listed = {name.strip() for _, name in entries}
    on_disk = {str(p.relative_to(FIXTURES)) for p in (FIXTURES / "tfrecord").iterdir()}
    assert listed == on_disk, f"unlisted or missing fixtures: {listed ^ on_disk}"


def test_nothing_reads_outside_the_clone() -> None:
    pattern = re.compile(r"\.\.[/\\]shared|shared[/\\]fixtures|parent\s*/\s*[\"']shared[\"']")
    offenders = []
    for top in ("src", "tests", "bench", ".ci"):
        for path in (REPO / top).rglob("*"):
            if (path.is_file() and path.suffix in ("", ".py", ".sh", ".toml", ".cfg") and path != Path(__file__)
                    and not any(part.endswith(".egg-info") or part == "__pycache__" for part in path.parts)):
                text = path.read_text(errors="replace")
                offenders += [f"{path.relative_to(REPO)}:{text[:m.start()].count(chr(10)) + 1}"
                              for m in pattern.finditer(text)]
    assert not offenders, f"these read a folder beside the clone, which a user's clone does not have: {offenders}"
