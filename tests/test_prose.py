"""Prose in the right place: the source cites no tracker ("issue 22": the repository has no tracker; the
rationale lives in docs/design/), and every docs/ page the source names exists."""

from __future__ import annotations

import re

from tests.conftest import REPO

SRC = REPO / "src" / "headrace"
TRACKER = re.compile(r"\b[Ii]ssues? #?\d+")
NAMED_FILE = re.compile(r"\b(docs/[\w./-]+\.md)\b")


def _hits(pattern: re.Pattern[str]) -> list[tuple[str, int, str]]:
    return [(str(path.relative_to(REPO)), n, m.group(0) if not m.groups() else m.group(1))
            for path in sorted(SRC.rglob("*.py"))
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            for m in pattern.finditer(line)]


def test_the_source_cites_no_tracker_issue():
    hits = [f"{path}:{n}: {text!r}" for path, n, text in _hits(TRACKER)]
    assert not hits, ("the source cites tracker issues the repository does not have; move the rationale to a "
                      f"docs/design/ page and name the page: {hits}")


def test_the_tracker_pattern_sees_the_forms_it_forbids():
    for text in ("issue 22", "(Issue 24: 16 slots)", "issue #22", "issues 22 and 23"):
        assert TRACKER.search(text), text
    for text in ("issued 22 requests", "the issue is 22 bytes", "tissue 3"):
        assert not TRACKER.search(text), text


def test_every_docs_page_the_source_names_exists():
    missing = [f"{path}:{n}: {name}" for path, n, name in _hits(NAMED_FILE) if not (REPO / name).exists()]
    assert _hits(NAMED_FILE), "the source names no docs/ page: the pattern is broken"
    assert not missing, f"the source names docs pages that are not in the repository: {missing}"
