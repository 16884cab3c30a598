"""``CsvDataset`` and ``make_csv_dataset`` against tf.data 2.21 over generated files (``csv_cases.py``): the same
elements in the same order, errors at the same positions (iterating on past each, as ``ignore_errors`` does),
values compared bit for bit. TensorFlow runs once, in its own environment (``tests/tf_env.py``), for all cases."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import headrace as hr
from tests.io import csv_cases
from tests.io.csv_tf_runner import encode, rows_of
from tests.tf_env import tf_python

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.slow]


def build(case: dict[str, Any]) -> hr.Dataset:
    kw = dict(case["kwargs"])
    if case["kind"] == "csv":
        ds = hr.io.CsvDataset(case["files"], csv_cases.hr_defaults(case["defaults"]), **kw)
    else:
        if "column_defaults" in kw:
            kw["column_defaults"] = csv_cases.hr_defaults(kw["column_defaults"])
        ds = hr.io.make_csv_dataset(case["files"], **kw).take(case.get("take", 10**9))
    if "budget" in case:
        ds = ds.with_options(hr.Options(memory_budget=case["budget"]))
    return ds


def run_headrace(case: dict[str, Any]) -> list[Any]:
    try:
        ds = build(case)
        it = iter(ds)
    except Exception as e:
        return [["build-error", type(e).__name__]]
    out: list[Any] = []
    with it:
        while True:
            try:
                el = next(it)
            except StopIteration:
                break
            except Exception:
                out.append(["error"])
                continue
            out.extend(rows_of(el)) if case.get("rows") else out.append(encode(el))
    return sorted(out, key=json.dumps) if case.get("rows") else out


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("csvdiff")
    return (csv_cases.csv_cases(tmp) + csv_cases.edge_cases(tmp) + csv_cases.big_cases(tmp)
            + csv_cases.make_cases(tmp))


@pytest.fixture(scope="module")
def tf_results(cases: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("csvtf")
    (tmp / "cases.json").write_text(json.dumps(cases))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([tf_python(), str(HERE / "csv_tf_runner.py"), str(tmp / "cases.json"),
                           str(tmp / "results.json")], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((tmp / "results.json").read_text())


def test_csv_dataset_matches_tf_data(cases: list[dict[str, Any]], tf_results: dict[str, Any]) -> None:
    failures = []
    for case in cases:
        want = tf_results[case["name"]]
        if case.get("rows"):  # a seeded shuffle: the same rows, in tf.data's order or not
            want = sorted(want, key=json.dumps)
        got = run_headrace(case)
        if got != want:
            first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            ours, theirs = (got[first] if first < len(got) else None), (want[first] if first < len(want) else None)
            failures.append(f"{case['name']} {case['kwargs']} {case.get('defaults')}: {len(got)} elements vs tf's "
                            f"{len(want)}; first difference at {first}: headrace {ours} tf {theirs}")
    assert not failures, "\n".join(failures)
    made = [tf_results[c["name"]] for c in cases if c["kind"] == "make"]
    assert all(r and "build-error" not in json.dumps(r[0]) and ["error"] not in r for r in made)  # real batches
    assert sum(len(v) for v in tf_results.values()) > 20000  # the cases are not empty
    assert sum(v.count(["error"]) for v in tf_results.values()) > 20  # and they hold bad records
