"""``headrace.service.distribute``'s arguments, without a Ray cluster: bad values raise naming the allowed ones;
``import headrace`` does not import ray; without ray, distribute() names ``pip install 'headrace[ray]'``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

import headrace as hr
from headrace.service import ADDRESS_FORMS, PROCESSING_MODES, distribute
from tests.conftest import REPO

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="distribute() imports ray")


@pytest.mark.parametrize("mode", ["distributed", "epoch", "", None, "DISTRIBUTED_EPOCH"])
def test_a_bad_processing_mode_names_the_allowed_ones(mode):
    with pytest.raises(ValueError, match=r"distributed_epoch.*parallel_epochs"):
        distribute(mode, "local")
    assert PROCESSING_MODES == ("distributed_epoch", "parallel_epochs")


@pytest.mark.parametrize("service", ["", "localhost", "grpc://x:1", "host:port", 6379, None, "ray://"])
def test_a_bad_service_address_names_the_forms(service):
    with pytest.raises(ValueError, match=r"'local'.*'auto'.*HOST:PORT.*ray://") as e:
        distribute("distributed_epoch", service)
    assert repr(service) in str(e.value)
    assert len(ADDRESS_FORMS) == 4


@needs_ray
@pytest.mark.parametrize("service", ["local", "auto", "127.0.0.1:6379", "ray://head.example:10001", "[::1]:6379"])
def test_the_address_forms_are_accepted(service):
    assert callable(distribute("parallel_epochs", service))


@pytest.mark.parametrize("kwargs, match", [
    ({"num_workers": 0}, "num_workers"), ({"num_workers": 1.5}, "num_workers"),
    ({"memory_budget": "lots"}, "memory_budget"), ({"timeout_s": 0}, "timeout_s"),
    ({"chunk_bytes": 0}, "chunk_bytes"), ({"job_name": ""}, "job_name"), ({"job_name": "a b"}, "job_name"),
    ({"job_name": 7}, "job_name"), ({"start_timeout_s": -1}, "start_timeout_s"),
    ({"start_timeout_s": "10"}, "start_timeout_s"),
])
def test_bad_numbers_raise_naming_the_argument(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        distribute("distributed_epoch", "local", **kwargs)


@needs_ray
def test_a_source_that_cannot_be_split_fails_when_applied_not_when_iterated():
    ds = hr.Dataset.from_generator(lambda: iter(range(3)), output_signature=hr.TensorSpec((), "int64"))
    with pytest.raises(ValueError, match=r"from_generator.*parallel_epochs"):
        ds.apply(distribute("distributed_epoch", "local"))
    out = ds.apply(distribute("parallel_epochs", "local", num_workers=2))
    assert out.cardinality() == hr.UNKNOWN_CARDINALITY and out.element_spec == ds.element_spec
    assert hr.Dataset.range(5).apply(distribute("parallel_epochs", "local", num_workers=3)).cardinality() == 15
    assert hr.Dataset.range(5).apply(distribute("distributed_epoch", "local")).cardinality() == 5


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})


def test_import_headrace_does_not_import_ray():
    r = _run("import sys, headrace, headrace.service; print('ray' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_without_ray_distribute_names_the_extra():
    r = _run("import sys; sys.modules['ray'] = None\n"  # ray hidden: unimportable
             "import headrace as hr\nfrom headrace.service import distribute\n"
             "try:\n    distribute('distributed_epoch', 'local')\nexcept ImportError as e:\n    print(e)\n")
    assert r.returncode == 0, r.stderr
    assert "pip install 'headrace[ray]'" in r.stdout


def test_headrace_train_service_checks_the_address_before_reading_data(tmp_path):
    from typer.testing import CliRunner

    from headrace.cli import app

    r = CliRunner().invoke(app, ["train", str(tmp_path / "missing"), "--service", "not an address"])
    assert r.exit_code == 1, r.output
    assert "--service 'not an address'" in r.output and "ray://HOST:PORT" in r.output
    assert "--service ADDRESS" in " ".join(CliRunner().invoke(app, ["train", "--help"]).output.split())
