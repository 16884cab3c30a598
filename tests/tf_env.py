"""TensorFlow's own virtual environment for the differential tests, made on first use.

``tf_python()`` returns a Python that imports ``tensorflow-cpu`` as pinned in ``tests/tf-requirements.txt``:
``$HEADRACE_TF_PYTHON`` when set, else ``<repo>/.venv-tf/bin/python``, which it creates (``python -m venv``,
then ``pip install -r tests/tf-requirements.txt``; about a minute with a warm pip cache, a 250 MB download
without) when it is absent or was made from other requirements. So the README's one test command runs the
differential suite on a fresh clone too; TensorFlow never enters headrace's environment.

``HEADRACE_SKIP_TF=1`` skips the differential tests instead (the skip says so). A failed creation fails the
tests with pip's last lines and the log file's path, never a silent skip.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "tests" / "tf-requirements.txt"
VENV = REPO / ".venv-tf"
MARKER = VENV / ".headrace-requirements.sha256"
LOG = REPO / ".venv-tf.log"
CREATE_TIMEOUT_S = 1200


def _wanted() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def _ready() -> bool:
    return (VENV / "bin" / "python").exists() and MARKER.exists() and MARKER.read_text().strip() == _wanted()


def _run(cmd: list[str], log: object, deadline_s: float) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=True, timeout=deadline_s)


def _create() -> None:
    if VENV.is_symlink():  # a developer's shared environment: use it as it is, never delete through the link
        MARKER.write_text(_wanted() + "\n")
        return
    shutil.rmtree(VENV, ignore_errors=True)
    with LOG.open("w") as log:
        # the base interpreter, not this venv's: a venv made from a venv would see headrace's packages
        base = getattr(sys, "_base_executable", sys.executable)
        _run([base, "-m", "venv", str(VENV)], log, 120)
        _run([str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], log,
             CREATE_TIMEOUT_S)
    MARKER.write_text(_wanted() + "\n")


def tf_python() -> str:
    """The path of a Python with the pinned TensorFlow, created if need be (see the module docstring).

    Raises (through pytest): ``Skipped`` when ``HEADRACE_SKIP_TF=1``; ``Failed`` when ``$HEADRACE_TF_PYTHON``
    does not exist or the environment cannot be created (pip's output is in ``.venv-tf.log``).
    """
    if os.environ.get("HEADRACE_SKIP_TF", "") not in ("", "0"):
        pytest.skip("HEADRACE_SKIP_TF is set: the differential tests against tf.data were not run")
    given = os.environ.get("HEADRACE_TF_PYTHON")
    if given:
        if not Path(given).exists():
            pytest.fail(f"HEADRACE_TF_PYTHON={given!r} does not exist; unset it to let the tests create .venv-tf")
        return given
    with (REPO / ".venv-tf.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # concurrent pytest processes create it once
        if not _ready():
            try:
                _create()
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
                tail = LOG.read_text(errors="replace")[-2000:] if LOG.exists() else ""
                pytest.fail(f"could not create TensorFlow's environment {VENV} for the differential tests "
                            f"({exc}); pip's output is in {LOG}:\n{tail}\nSet HEADRACE_SKIP_TF=1 to skip them.")
    return str(VENV / "bin" / "python")
