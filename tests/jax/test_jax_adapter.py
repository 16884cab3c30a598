"""headrace.jax.to_jax, tested in a pytest process of its own (``jax_cases.py``): once JAX has run in a
process, ``os.fork()`` there may deadlock (JAX is multithreaded and says so), and the suite's later tests fork
DataLoader and pipeline worker processes from its process."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs jax (pip install 'headrace[jax]')")
def test_to_jax_cases_in_a_process_of_their_own() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                           "tests/jax/jax_cases.py"], cwd=REPO, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout, done.stdout[-2000:]


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs jax (pip install 'headrace[jax]')")
def test_without_orbax_the_checkpoint_args_name_what_to_install() -> None:
    code = ("import sys; sys.modules['orbax'] = None; sys.modules['orbax.checkpoint'] = None\n"
            "import headrace.jax_orbax as m\n"
            "assert m.ORBAX is False and m.CheckpointHandler\n"
            "try:\n    from headrace.jax_orbax import CheckpointSave\nexcept ImportError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CheckpointSave needs Orbax: pip install orbax-checkpoint" in done.stdout
