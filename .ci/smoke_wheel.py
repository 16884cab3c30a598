"""Smoke test of an installed (not editable) headrace wheel with every extra, run by ``.ci/run`` from a
directory outside the clone, once plainly and once under ``python -P --quick``.

It checks what the unit tests cannot see from the source tree: that the installed package is complete (every
extra's module imports from site-packages), that worker processes start from it (``map(executor="process")``),
that ``to_torch`` works under ``DataLoader(num_workers=2)`` with the fork and spawn start methods and
reshuffles every epoch (also under forkserver), that the adapters run from the wheel (``to_torch``'s state
restored in a fresh dataset, ``headrace.lightning``, ``to_jax``, ``headrace.keras``'s ``adapt`` in a ``fit`` on the
torch backend, in a process of its own), that the text and CSV readers (``TextLineDataset``,
``FixedLengthRecordDataset``, ``CsvDataset``, ``make_csv_dataset``) and ``Dataset.pack`` work on small generated
files and the readers in DataLoader workers started by spawn and forkserver, that ``headrace.service`` runs on
local Ray workers and restores exactly, and that the ``headrace`` console script runs. Exits non-zero naming
the first failure.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

QUICK = "--quick" in sys.argv


def check(what: str, ok: bool, detail: object = "") -> None:
    if not ok:
        sys.exit(f"smoke_wheel: FAILED: {what} {detail}")
    print(f"ok  {what}", flush=True)


def installed_package() -> None:
    import headrace

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    where = Path(headrace.__file__).resolve()
    check("headrace is imported from the installed wheel", site in where.parents, f"({where}, not under {site})")


def process_map() -> None:
    import headrace as hr

    got = list(hr.Dataset.range(8).map(lambda x: x * 3, num_parallel_calls=2, executor="process")
               .as_numpy_iterator())
    check("map(executor='process') runs worker processes", got == [x * 3 for x in range(8)], got)


def extras(tmp: Path) -> None:
    import h5py
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    import headrace as hr
    from headrace import image

    with hr.io.TFRecordWriter(str(tmp / "a.tfrecord")) as w:
        for i in range(5):
            w.write(b"record-%d" % i)
    got = list(hr.io.TFRecordDataset(str(tmp / "a.tfrecord")).as_numpy_iterator())
    check("TFRecord write / read", got == [b"record-%d" % i for i in range(5)], got)

    pq.write_table(pa.table({"x": list(range(6))}), tmp / "a.parquet")
    got = [int(e["x"]) for e in hr.io.ParquetDataset(str(tmp / "a.parquet")).as_numpy_iterator()]
    check("headrace[parquet]", got == list(range(6)), got)
    got = [b["x"].tolist() for b in hr.io.ParquetDataset(str(tmp / "a.parquet")).map(lambda r: r).batch(4)]
    check("headrace[parquet] rows -> map -> batch (rows in runs)", got == [[0, 1, 2, 3], [4, 5]], got)

    with h5py.File(tmp / "a.h5", "w") as f:
        f["x"] = np.arange(6)
    got = [int(e) for e in hr.io.HDF5Dataset(str(tmp / "a.h5"), "x").as_numpy_iterator()]
    check("headrace[hdf5]", got == list(range(6)), got)

    buf = io.BytesIO()
    Image.fromarray(np.full((32, 48, 3), 128, np.uint8)).save(buf, format="JPEG")
    pixels = image.decode_and_resize(buf.getvalue(), (16, 16))
    check("headrace[image] decode_and_resize", pixels.shape == (16, 16, 3) and pixels.dtype == np.uint8, pixels.shape)

    import headrace.compress
    import headrace.convert
    import headrace.train  # noqa: F401

    check("headrace.train / compress / convert import", True)


def text_and_csv(tmp: Path) -> None:
    """The text and CSV readers and ``pack`` from the wheel, on small generated files."""
    import gzip

    import numpy as np

    import headrace as hr

    (tmp / "a.txt").write_bytes(b"one\r\ntwo\n\nlast")
    (tmp / "b.txt.gz").write_bytes(gzip.compress(b"gz 1\ngz 2\n"))
    paths = [str(tmp / "a.txt"), str(tmp / "b.txt.gz")]
    got = list(hr.io.TextLineDataset(paths, compression_type="AUTO").as_numpy_iterator())
    check("TextLineDataset (plain, CRLF, GZIP by extension)", got == [b"one", b"two", b"", b"last", b"gz 1", b"gz 2"],
          got)
    got = [b.tolist() for b in hr.io.TextLineDataset(paths, compression_type="AUTO", num_parallel_reads=2).batch(4)]
    check("TextLineDataset(num_parallel_reads=2) -> batch", got == [[b"one", b"gz 1", b"two", b"gz 2"],
                                                                  [b"", b"last"]], got)

    (tmp / "r.bin").write_bytes(b"HEAD" + b"".join(bytes([i]) * 3 for i in range(4)) + b"FT")
    got = list(hr.io.FixedLengthRecordDataset(str(tmp / "r.bin"), 3, header_bytes=4, footer_bytes=2)
               .as_numpy_iterator())
    check("FixedLengthRecordDataset (header, footer)", got == [bytes([i]) * 3 for i in range(4)], got)

    (tmp / "t.csv").write_bytes(b'id,score,name\n1,0.5,"a, b"\n2,,c\n3,1.5,"say ""hi"""\n')
    ds = hr.io.CsvDataset(str(tmp / "t.csv"), [np.int32, [9.0], bytes], header=True)
    got = [(int(i), float(s), n) for i, s, n in ds.as_numpy_iterator()]
    check("CsvDataset (quotes, a default, a header)", got == [(1, 0.5, b"a, b"), (2, 9.0, b"c"),
                                                              (3, 1.5, b'say "hi"')], got)
    batches = list(hr.io.make_csv_dataset(str(tmp / "t.csv"), batch_size=2, label_name="id", shuffle=False,
                                          num_epochs=1))
    got = [(sorted(f), f["score"].tolist(), y.tolist()) for f, y in batches]
    check("make_csv_dataset (inferred types, a label)", got == [(["name", "score"], [0.5, 0.0], [1, 2]),
                                                                (["name", "score"], [1.5], [3])], got)

    seqs = hr.Dataset.from_generator(lambda: iter([np.array([1, 2, 3]), np.array([4, 5]), np.array([6])]),
                                     output_signature=hr.TensorSpec([None], np.int64))
    got = [tuple(a.tolist() for a in row) for row in seqs.pack(4, num_packing_bins=2)]
    check("Dataset.pack", got == [([1, 2, 3, 6], [1, 1, 1, 2], [0, 1, 2, 0]), ([4, 5, 0, 0], [1, 1, 0, 0],
                                                                            [0, 1, 0, 0])], got)


def readers_in_workers(tmp: Path, context: str) -> None:
    """TextLineDataset and CsvDataset pickled into DataLoader workers started by ``context``: each reads its
    share of the files, together every element once."""
    import numpy as np
    from torch.utils.data import DataLoader

    import headrace as hr
    from headrace.torch import to_torch

    texts, tables = [], []
    for f in range(2):
        (tmp / f"w{f}.txt").write_bytes(b"".join(b"%d\n" % (f * 50 + i) for i in range(50)))
        (tmp / f"w{f}.csv").write_bytes(b"".join(b"%d,x\n" % (f * 50 + i) for i in range(50)))
        texts.append(str(tmp / f"w{f}.txt"))
        tables.append(str(tmp / f"w{f}.csv"))
    for what, ds in (("TextLineDataset", hr.io.TextLineDataset(texts).map(lambda line: np.int64(line))),
                     ("CsvDataset", hr.io.CsvDataset(tables, [np.int64, bytes]).map(lambda i, _: i))):
        got = sorted(int(x) for x in DataLoader(to_torch(ds), batch_size=None, num_workers=2,
                                                multiprocessing_context=context))
        check(f"{what} under DataLoader(num_workers=2, {context}): every element once", got == list(range(100)),
              got)


def dataloader_epochs(context: str) -> None:
    import torch
    from torch.utils.data import DataLoader

    import headrace as hr
    from headrace.torch import to_torch

    ds = hr.Dataset.range(40).shuffle(40, seed=7).map(lambda x: x + 1000)
    loader = DataLoader(to_torch(ds), batch_size=None, num_workers=2, multiprocessing_context=context)
    epochs = [[int(x) for x in loader] for _ in range(3)]
    check(f"to_torch under DataLoader(num_workers=2, {context}): every epoch complete",
          all(sorted(e) == list(range(1000, 1040)) for e in epochs), epochs)
    check(f"to_torch under DataLoader(num_workers=2, {context}): epochs reshuffled",
          len({tuple(e) for e in epochs}) == 3, epochs)
    del torch


def adapters() -> None:
    import json

    import numpy as np

    import headrace as hr
    from headrace.torch import to_torch

    ds = hr.Dataset.range(20).shuffle(20, seed=3)
    first = to_torch(ds)
    it = iter(first)
    head = [int(next(it)) for _ in range(7)]
    second = to_torch(ds)
    second.load_state_dict(json.loads(json.dumps(it.state_dict())))
    rest = [int(x) for x in second]
    check("to_torch: state_dict -> a fresh dataset -> exactly the rest", sorted(head + rest) == list(range(20)),
          (head, rest))

    from headrace.lightning import ExactlyOnce

    check("headrace.lightning.ExactlyOnce", ExactlyOnce() is not None)

    from headrace.jax import to_jax

    with to_jax(hr.Dataset.range(12).batch(4)) as batches:
        got = [np.asarray(b).tolist() for b in batches]
    check("headrace.jax.to_jax", got == [list(range(i, i + 4)) for i in (0, 4, 8)], got)

    code = ("import numpy as np, keras, headrace as hr\n"
            "from headrace.keras import adapt\n"
            "x = np.random.default_rng(0).normal(size=(64, 4)).astype('float32')\n"
            "ds = hr.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype('int64'))).batch(16)\n"
            "m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation='softmax')])\n"
            "m.compile('adam', 'sparse_categorical_crossentropy')\n"
            "h = m.fit(adapt(ds), epochs=2, verbose=0)\n"
            "assert len(h.history['loss']) == 2, h.history\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KERAS_BACKEND": "torch"})
    check("headrace.keras: fit(adapt(ds)) on the torch backend", proc.returncode == 0, proc.stderr[-2000:])


SERVICE = """
import json, headrace as hr
from headrace.service import distribute, service_report

def make():
    return hr.Dataset.range(500).map(lambda x: x * x).shuffle(50).apply(
        distribute("distributed_epoch", "local", num_workers=2, timeout_s=120))

it = iter(make())
head = [int(next(it)) for _ in range(100)]
state = json.loads(json.dumps(it.get_state()))
it.close()
it = iter(make())
it.set_state(state)
rest = [int(x) for x in it]
workers = service_report(it)[0]["worker_reports"]
it.close()
assert sorted(head + rest) == [x * x for x in range(500)], (len(head), len(rest))
assert workers and sum(w["elements"] for w in workers) >= len(rest), workers  # made by the Ray workers
print("service ok")
"""


def service() -> None:
    """``headrace.service.distribute`` on a local Ray started by the wheel's own ``ray`` extra (a process of its
    own): the Ray workers load headrace from the installed wheel, and a state restored in a fresh pipeline
    yields exactly the rest of the epoch."""
    proc = subprocess.run([sys.executable, "-c", SERVICE], capture_output=True, text=True, timeout=300)
    check("headrace.service: a restored distributed epoch on local Ray workers is exact",
          proc.returncode == 0 and "service ok" in proc.stdout, proc.stderr[-2000:])


def console_script() -> None:
    exe = Path(sys.executable).with_name("headrace")
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    check("the headrace console script runs", proc.returncode == 0 and "convert" in proc.stdout,
          proc.stderr[-1000:])


def main() -> None:
    t0 = time.perf_counter()
    check("run outside the clone", not (Path.cwd() / "pyproject.toml").exists(), os.getcwd())
    installed_package()
    process_map()
    if not QUICK:
        with tempfile.TemporaryDirectory() as tmp:
            extras(Path(tmp))
            text_and_csv(Path(tmp))
            for context in ("spawn", "forkserver"):
                readers_in_workers(Path(tmp), context)
        for context in ("fork", "spawn", "forkserver"):
            dataloader_epochs(context)
        adapters()
        service()
        console_script()
    print(f"smoke_wheel: all passed in {time.perf_counter() - t0:.1f} s ({'quick' if QUICK else 'full'})")


if __name__ == "__main__":
    main()
