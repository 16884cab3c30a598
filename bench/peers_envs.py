"""The peers' own Pythons for ``bench/peers.py``: TensorFlow and Grain never enter headrace's environment.

- **tf.data**: ``tests/tf_env.py``'s ``tf_python()``, the environment of the differential tests
  (``<repo>/.venv-tf`` from ``tests/tf-requirements.txt``, or ``$HEADRACE_TF_PYTHON``), made on first use.
- **Grain**: ``<repo>/.venv-grain`` from ``bench/grain-requirements.txt`` (``grain`` 0.2.x and the packages
  headrace's parse / decode functions need at ``constraints.txt``'s versions: the Grain contenders run the same
  functions as the others, from ``<repo>/src``), or ``$HEADRACE_GRAIN_PYTHON``; made on first use (about a
  minute with a warm pip cache), remade when the requirements file changes. Its own venv, not ``.venv-tf``:
  adding Grain to ``tests/tf-requirements.txt`` would remake every checkout's test environment.

Each returns a path, or raises ``Unavailable`` with the reason (pip's last lines and its log's path), which
``bench/peers.py`` prints in place of that peer's figures.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class Unavailable(Exception):
    """A peer whose environment cannot be had here; the message says why."""


def tf_python() -> str:
    if str(REPO / "tests") not in sys.path:
        sys.path.insert(0, str(REPO / "tests"))
    try:
        import pytest
        import tf_env
    except ImportError as exc:
        raise Unavailable(f"tests/tf_env.py needs pytest to make .venv-tf: {exc}") from None
    try:
        return tf_env.tf_python()
    except (pytest.skip.Exception, pytest.fail.Exception) as exc:  # BaseExceptions, not Exceptions
        raise Unavailable(str(exc)) from None


def grain_python() -> str:
    given = os.environ.get("HEADRACE_GRAIN_PYTHON")
    if given:
        if not Path(given).exists():
            raise Unavailable(f"HEADRACE_GRAIN_PYTHON={given!r} does not exist")
        return given
    return _venv(REPO / ".venv-grain", REPO / "bench" / "grain-requirements.txt")


def _venv(venv: Path, requirements: Path) -> str:
    """``venv``'s Python, made from ``requirements`` (pinned by its hash in a marker file) if need be."""
    python, marker = venv / "bin" / "python", venv / ".headrace-requirements.sha256"
    log_path = venv.with_name(venv.name + ".log")
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    with venv.with_name(venv.name + ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once make it once
        if python.exists() and marker.exists() and marker.read_text().strip() == wanted:
            return str(python)
        print(f"making {venv} from {requirements.relative_to(REPO)} (once; pip's output in {log_path})",
              flush=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        base = getattr(sys, "_base_executable", sys.executable)  # not a venv's: it would see its packages
        steps = [([base, "-m", "venv", "--clear", str(venv)], 120),
                 ([str(python), "-m", "pip", "install", "-q", "-r", str(requirements)], 1200)]
        with log_path.open("w") as log:
            for cmd, timeout in steps:
                try:
                    subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=True, timeout=timeout,
                                   cwd=requirements.parent)
                except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
                    log.flush()
                    tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
                    raise Unavailable(f"could not make {venv} ({exc}); pip's last lines: {tail}; "
                                      f"log: {log_path}") from None
        marker.write_text(wanted + "\n")
    return str(python)
