"""The differential tests' TensorFlow environment is made by the test command itself (``tests/tf_env.py``):
created when absent, re-made when its requirements change, reused otherwise; skipped only on request."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import tf_env


@pytest.fixture
def fake_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    req = tmp_path / "req.txt"
    req.write_text("# nothing to install: the mechanism, not TensorFlow\n")
    for name, value in {"REQUIREMENTS": req, "VENV": tmp_path / "venv", "LOG": tmp_path / "venv.log",
                        "MARKER": tmp_path / "venv" / ".headrace-requirements.sha256",
                        "REPO": tmp_path}.items():
        monkeypatch.setattr(tf_env, name, value)
    monkeypatch.delenv("HEADRACE_TF_PYTHON", raising=False)
    monkeypatch.delenv("HEADRACE_SKIP_TF", raising=False)
    return req


@pytest.mark.slow
def test_the_environment_is_created_when_absent_and_remade_when_its_requirements_change(fake_env: Path) -> None:
    python = tf_env.tf_python()
    assert python == str(tf_env.VENV / "bin" / "python")
    out = subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True, timeout=60)
    assert Path(out.stdout.strip()).resolve() == tf_env.VENV.resolve()
    stamp = tf_env.VENV / "kept"
    stamp.write_text("")
    tf_env.tf_python()
    assert stamp.exists()  # same requirements: reused, not re-made
    fake_env.write_text("# changed\n")
    tf_env.tf_python()
    assert not stamp.exists() and tf_env.MARKER.read_text().strip() == tf_env._wanted()


def test_a_failed_creation_fails_naming_the_log_and_the_skip_switch(fake_env: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = fake_env.parent / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(tf_env, "VENV", blocker / "venv")  # python -m venv cannot make it: a real failure, fast
    monkeypatch.setattr(tf_env, "MARKER", blocker / "venv" / "marker")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)could not create .*venv\.log.*HEADRACE_SKIP_TF=1"):
        tf_env.tf_python()


def test_skipping_is_only_on_request(fake_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADRACE_SKIP_TF", "1")
    with pytest.raises(pytest.skip.Exception, match="HEADRACE_SKIP_TF"):
        tf_env.tf_python()
    monkeypatch.delenv("HEADRACE_SKIP_TF")
    monkeypatch.setenv("HEADRACE_TF_PYTHON", str(fake_env.parent / "nope" / "python"))
    with pytest.raises(pytest.fail.Exception, match="does not exist"):
        tf_env.tf_python()


def test_the_differential_module_has_no_skip_condition() -> None:
    text = (Path(tf_env.__file__).parent / "ops" / "test_tfdata_differential.py").read_text()
    assert "skipif" not in text and "tf_python()" in text
