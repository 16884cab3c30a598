"""Beam creates empty ``beam-temp*`` folders in the temp directory on every run; keep them in pytest's own
(rotated) temp area instead of leaving hundreds in /tmp."""

from __future__ import annotations

import os
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="package")  # (session scope kept TMPDIR long after: Ray's sockets broke)
def _beam_temp_dirs_under_pytest(tmp_path_factory):
    where = str(tmp_path_factory.mktemp("beam-tmp"))
    old_dir, old_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = where
    os.environ["TMPDIR"] = where  # worker processes of the multi-process runner
    yield
    tempfile.tempdir = old_dir
    if old_env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = old_env
