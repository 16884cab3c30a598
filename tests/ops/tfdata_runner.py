"""Runs every pipeline of ``tfdata_cases.py`` through TensorFlow's tf.data and writes the results as JSON.

Run by ``test_tfdata_differential.py`` with the Python of a separate virtual environment holding
``tensorflow-cpu`` (TensorFlow never enters headrace's environment): ``python tfdata_runner.py OUT.json``.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np
import tensorflow as tf
import tfdata_cases

tf.get_logger().setLevel("ERROR")
tf.autograph.set_verbosity(0)


class TFOps:
    """The tensor functions the cases use, as tf ops (``tfdata_cases`` module docstring)."""

    fill = staticmethod(tf.fill)
    square = staticmethod(tf.math.square)
    as_string = staticmethod(tf.strings.as_string)

    @staticmethod
    def cast(x, dtype):
        return tf.cast(x, dtype)

    @staticmethod
    def check_numerics(x):
        return tf.debugging.check_numerics(x, "not finite")

    @staticmethod
    def shape0(x):
        return tf.shape(x)[0]

    @staticmethod
    def range(n):
        return tf.range(n)


def main() -> None:
    namespace = {"D": tf.data.Dataset, "S": tf.TensorSpec, "ops": TFOps, "np": np, "AUTOTUNE": tf.data.AUTOTUNE,
                 "tf": tf}
    only = set(sys.argv[2:])
    results = {name: tfdata_cases.run_case(code, namespace)
               for name, code, _ in tfdata_cases.CASES if not only or name in only}
    with open(sys.argv[1], "w") as f:
        json.dump({"tensorflow": tf.__version__, "results": results}, f)


if __name__ == "__main__":
    main()
