"""Differential suite: every pipeline of ``tfdata_cases.py`` through tf.data and through headrace, compared
element by element (structure, dtype, shape, values), with the element_spec, the cardinality, and where each
raised (when built / while iterating).

TensorFlow runs in a separate virtual environment, in one subprocess for all cases (``tfdata_runner.py``):
``$HEADRACE_TF_PYTHON``, else ``<repo>/.venv-tf/bin/python``, which ``tests/tf_env.py`` creates on first use
with the ``tensorflow-cpu`` pinned in ``tests/tf-requirements.txt`` (``HEADRACE_SKIP_TF=1`` skips instead).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import headrace as hr
from tests.ops import tfdata_cases
from tests.tf_env import tf_python

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


pytestmark = [pytest.mark.slow]


class NumpyOps:
    """The tensor functions of the cases (``tfdata_cases``) as numpy: what a headrace user writes."""

    @staticmethod
    def fill(shape: Any, value: Any) -> np.ndarray:
        return np.full([int(s) for s in shape], value)

    @staticmethod
    def square(x: Any) -> Any:
        return np.square(x)

    @staticmethod
    def cast(x: Any, dtype: str) -> Any:
        return np.asarray(x).astype(dtype)[()]

    @staticmethod
    def as_string(x: Any) -> Any:
        a = np.asarray(x)
        if a.ndim == 0:
            return str(a.item()).encode()
        out = np.empty(a.shape, dtype=object)
        out.reshape(-1)[:] = [str(v).encode() for v in a.reshape(-1).tolist()]
        return out

    @staticmethod
    def check_numerics(x: Any) -> Any:
        if not np.isfinite(x).all():
            raise ValueError(f"not finite: {x}")
        return x

    @staticmethod
    def shape0(x: Any) -> np.int32:
        return np.int32(len(x))

    @staticmethod
    def range(n: Any) -> np.ndarray:
        return np.arange(n)


NAMESPACE = {"D": hr.Dataset, "S": hr.TensorSpec, "ops": NumpyOps, "np": np, "AUTOTUNE": hr.AUTOTUNE}
OPTIONS = {name: opts for name, _, opts in tfdata_cases.CASES}


@pytest.fixture(scope="module")
def tf_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("tfdata") / "results.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([tf_python(), str(HERE / "tfdata_runner.py"), str(out)], env=env, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"the TensorFlow runner failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    got = json.loads(out.read_text())
    assert got["tensorflow"].startswith("2.21"), got["tensorflow"]
    return got["results"]


def _same_values(a: Any, b: Any) -> bool:
    """Encoded elements equal: floats within float32 rounding, everything else exactly."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_values(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_values(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and bool(np.isclose(a, b, rtol=1e-6))
    return a == b


def _kinds(e: Any) -> Any:
    """An encoded element without its values (structure, dtypes, shapes)."""
    if isinstance(e, dict) and "tensor" in e:
        return {"tensor": e["tensor"][:2]}
    if isinstance(e, dict):
        return {k: _kinds(v) for k, v in e.items()}
    if isinstance(e, list):
        return [_kinds(v) for v in e]
    return e


def _int32_as_int64(e: Any) -> Any:
    """tf.data's int32 (from Python int literals) as headrace's int64 (``python_ints`` cases)."""
    if isinstance(e, dict):
        return {k: _int32_as_int64(v) for k, v in e.items()}
    if isinstance(e, list):
        return ["int64" if v == "int32" else _int32_as_int64(v) for v in e]
    return e


def compare(name: str, tf_out: dict[str, Any], hr_out: dict[str, Any]) -> list[str]:
    """The differences between tf.data's and headrace's results for one case (empty: the same)."""
    opts = OPTIONS[name]
    diffs = []
    if tf_out.get("error") != hr_out.get("error"):
        return [f"tf.data: {tf_out.get('error') or 'no error'} ({tf_out.get('type')}: {tf_out.get('message')}); "
                f"headrace: {hr_out.get('error') or 'no error'} ({hr_out.get('type')}: {hr_out.get('message')})"]
    if tf_out.get("error") == "build":
        return []
    if opts.get("spec", True) and tf_out["spec"] != hr_out["spec"]:
        diffs.append(f"element_spec: tf.data {tf_out['spec']} vs headrace {hr_out['spec']}")
    if opts.get("card", True) and tf_out["card"] != hr_out["card"]:
        diffs.append(f"cardinality: tf.data {tf_out['card']} vs headrace {hr_out['card']}")
    a, b = tf_out["elements"], hr_out["elements"]
    if opts.get("python_ints"):
        tf_spec, a = _int32_as_int64(tf_out["spec"]), _int32_as_int64(a)
        if opts.get("spec", True) and tf_spec == hr_out["spec"]:
            diffs = [d for d in diffs if not d.startswith("element_spec")]
    if opts.get("order") == "sorted":
        a, b = sorted(a, key=json.dumps), sorted(b, key=json.dumps)
    if not opts.get("values", True):
        a, b = _kinds(a), _kinds(b)
    if len(a) != len(b):
        diffs.append(f"{len(a)} elements from tf.data, {len(b)} from headrace")
    for i, (x, y) in enumerate(zip(a, b)):
        if not _same_values(x, y):
            diffs.append(f"element {i}: tf.data {json.dumps(x)[:300]} vs headrace {json.dumps(y)[:300]}")
            break
    return diffs


def test_every_pipeline_gives_what_tf_data_gives(tf_results: dict[str, Any]) -> None:
    """All cases in one test (one TensorFlow subprocess); the failure lists every differing case."""
    assert set(tf_results) == set(OPTIONS)
    failures = {}
    for name, code, _ in tfdata_cases.CASES:
        diffs = compare(name, tf_results[name], tfdata_cases.run_case(code, NAMESPACE))
        if diffs:
            failures[name] = diffs
    report = "\n".join(f"{name}:\n    " + "\n    ".join(d) for name, d in failures.items())
    assert not failures, f"{len(failures)} of {len(tfdata_cases.CASES)} pipelines differ from tf.data:\n{report}"


def test_the_comparison_catches_differences() -> None:
    same = tfdata_cases.run_case("D.range(3)", NAMESPACE)
    name = tfdata_cases.CASES[0][0]
    assert compare(name, same, same) == []
    for other in ("D.range(4)", "D.range(3).map(lambda x: x * 1.0)", "D.range(3).filter(lambda x: x >= 0)",
                  "D.range(3).map(lambda x: (x,))", "D.range(3).batch(1)", "D.range(1, 4)", "D.range(3).unbatch()"):
        assert compare(name, same, tfdata_cases.run_case(other, NAMESPACE)), other


if __name__ == "__main__":  # pragma: no cover - a quick report: python -m tests.ops.test_tfdata_differential
    sys.exit(pytest.main([__file__, "-q"]))
