"""Runs in TensorFlow's environment (``tests/tf_env.py``): the CSV cases of ``test_csv_differential.py`` through
``tf.data.experimental.CsvDataset`` / ``make_csv_dataset``; writes every case's elements (values as hex of their
bytes, with dtypes) or ``["error"]`` markers where iterating raised, as JSON.

    python csv_tf_runner.py cases.json results.json
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

tf = None  # TensorFlow, imported by main() (headrace's tests import the encoders above it without it)


def leaf(x):
    """One value as ``[dtype, hex of its bytes, shape]`` (strings: the hex of each)."""
    a = x.numpy() if hasattr(x, "numpy") else x
    if isinstance(a, bytes):
        return ["string", [a.hex()], []]
    a = np.asarray(a)
    if a.dtype == object:
        return ["string", [bytes(v).hex() for v in a.reshape(-1).tolist()], list(a.shape)]
    return [a.dtype.name, np.ascontiguousarray(a).tobytes().hex(), list(a.shape)]


def encode(el):
    if isinstance(el, dict):
        return {"dict": [[k, encode(v)] for k, v in el.items()]}
    if isinstance(el, tuple | list):
        return [encode(v) for v in el]
    return leaf(el)


def rows_of(el):
    """A batch ``(features, label)`` as its rows, each ``[[name, value]..., label]``."""
    features, label = el
    n = int(label.shape[0])
    return [[[k, leaf(v[i])] for k, v in features.items()] + [leaf(label[i])] for i in range(n)]


def defaults(spec):
    out = []
    for d in spec:
        if len(d) == 1:
            out.append(tf.as_dtype(d[0]))
        else:
            out.append(tf.constant([d[1].encode() if d[0] == "string" else d[1]], dtype=tf.as_dtype(d[0])))
    return out


def build(case):
    kw = dict(case["kwargs"])
    if case["kind"] == "csv":
        return tf.data.experimental.CsvDataset(case["files"], defaults(case["defaults"]), **kw)
    if "column_defaults" in kw:
        kw["column_defaults"] = defaults(kw["column_defaults"])
    ds = tf.data.experimental.make_csv_dataset(case["files"], **kw)
    return ds.take(case.get("take", 10**9))


def run(case):
    try:
        ds = build(case)
    except Exception as e:
        return [["build-error", type(e).__name__]]
    out = []
    it = iter(ds)
    while len(out) < 100000:
        try:
            el = next(it)
        except StopIteration:
            break
        except tf.errors.OutOfRangeError:
            break
        except Exception:
            out.append(["error"])
            continue
        if case.get("rows"):
            out.extend(rows_of(el))
        else:
            out.append(encode(el))
    return out


def main() -> None:
    global tf
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow

    tf = tensorflow
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    results = {c["name"]: run(c) for c in cases}
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
