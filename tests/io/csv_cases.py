"""Generated CSV files and the ``CsvDataset`` / ``make_csv_dataset`` cases over them, shared by the differential
test against tf.data and headrace's own CSV tests: seeded, so a failure names a case that can be made again."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import numpy as np

TYPES = ("int32", "int64", "float32", "float64", "string")
_GOOD = {
    "int32": ["12", "-3", "0", "007", "2147483647", "-2147483648", " 7 ", "+4", '"15"', "\t9"],
    "int64": ["9223372036854775807", "-5", "123456789012", " 8", "+0", '"-1"'],
    "float32": ["1.5", "-2e3", ".5", "5.", "inf", "-Infinity", "nan", "1e40", "0x1A", " 2.25 ", "3.4028235e38",
                "1.00000005960464477539062", "+1e-3", '"6.5"'],
    "float64": ["1.5", "-2.5e-300", "1e400", "NaN", "0x1p3", " 4 ", "3.141592653589793238462643383279502884"],
    "string": ["abc", "with space", " pad ", '"a,b"', '"a""b"', '"two\nlines"', '"cr\r\nlf"', "\xe9t\xe9", '""',
               "x\ty"],
}
_BAD = {
    "int32": ["1.0", "2147483648", "0x10", "x", "- 1", "1 2"],
    "int64": ["9223372036854775808", "1e3", "abc"],
    "float32": ["1.5f", "abc", "1,5", "- 1", "1e", "."],
    "float64": ["1.5d", "e5", "--1"],
    "string": ['a"b', '"x"y', ' "q"'],
}
_TERMS = ("\n", "\r\n", "\r")


def _field(rng: np.random.Generator, t: str, na: str, dirty: bool, delim: str) -> str:
    r = rng.random()
    if r < 0.08:
        return ""
    if r < 0.12 and na:
        return na
    if dirty and r < 0.18:
        return str(rng.choice(_BAD[t]))
    v = str(rng.choice(_GOOD[t]))
    if delim != "," and v == '"a,b"':
        v = f'"a{delim}b"'
    return v


def make_text(rng: np.random.Generator, types: list[str], rows: int, *, na: str = "", dirty: bool = False,
              delim: str = ",", header: bool = False, quote: bool = True, term: str | None = None) -> bytes:
    """A CSV file's bytes: ``rows`` records of ``types``, random terminators (or ``term``), optionally bad rows,
    empty lines and wrong field counts (``dirty``)."""
    lines = []
    if header:
        lines.append(delim.join(f"col{i}" for i in range(len(types))))
    for _ in range(rows):
        fields = [_field(rng, t, na, dirty, delim) for t in types]
        if not quote:
            fields = [f.replace('"', "") if "\n" in f or "\r" in f else f for f in fields]
        if dirty and rng.random() < 0.05:
            fields = fields[:-1] if rng.random() < 0.5 else [*fields, "9"]
        if dirty and rng.random() < 0.03:
            fields = [""]
        lines.append(delim.join(fields))
    out = []
    for line in lines:
        out.append(line + (term if term is not None else str(rng.choice(_TERMS))))
    text = "".join(out)
    if rng.random() < 0.3 and text.endswith("\n") and not text.endswith("\r\n"):
        text = text[:-1]  # no final newline
    return text.encode("utf-8", "surrogateescape")


def write(path: Path, data: bytes, compression: str) -> str:
    if compression == "GZIP":
        data = gzip.compress(data)
    elif compression == "ZLIB":
        data = zlib.compress(data)
    path.write_bytes(data)
    return str(path)


def defaults_spec(rng: np.random.Generator, types: list[str], optional: float) -> list[list[Any]]:
    """JSON-friendly ``record_defaults``: ``[dtype]`` (required) or ``[dtype, value]``."""
    values = {"int32": -1, "int64": 77, "float32": 0.25, "float64": -0.5, "string": "dflt"}
    return [[t, values[t]] if rng.random() < optional else [t] for t in types]


def hr_defaults(spec: list[list[Any]]) -> list[Any]:
    """``defaults_spec`` as headrace's ``record_defaults`` (numpy dtypes, one-element arrays)."""
    out: list[Any] = []
    for d in spec:
        dt = np.dtype(object) if d[0] == "string" else np.dtype(d[0])
        if len(d) == 1:
            out.append(dt.type if dt.kind != "O" else bytes)
        elif dt.kind == "O":
            out.append([d[1].encode()])
        else:
            out.append(np.array([d[1]], dtype=dt))
    return out


def csv_cases(tmp: Path, seed: int = 38) -> list[dict[str, Any]]:
    """The CsvDataset cases: generated files with every option tf.data has (see the differential test)."""
    rng = np.random.default_rng(seed)
    cases: list[dict[str, Any]] = []
    for i in range(36):
        ncols = int(rng.integers(1, 6))
        types = [str(t) for t in rng.choice(TYPES, ncols)]
        dirty = bool(i % 3 == 1)
        delim = "\t" if i % 7 == 3 else ("|" if i % 11 == 5 else ",")
        quote = i % 9 != 4
        na = "NA" if i % 4 == 2 else ""
        header = i % 5 == 0
        comp = ("", "GZIP", "ZLIB")[i % 3] if i % 2 == 0 else ""
        nfiles = 2 if i % 6 == 0 else 1
        files = [write(tmp / f"c{i}_{j}.csv", make_text(rng, types, int(rng.integers(0, 40)), na=na, dirty=dirty,
                                                     delim=delim, header=header, quote=quote), comp)
                 for j in range(nfiles)]
        kwargs: dict[str, Any] = {"header": header, "field_delim": delim, "use_quote_delim": quote, "na_value": na}
        if comp:
            kwargs["compression_type"] = comp
        defaults = defaults_spec(rng, types, 0.3 if dirty else 0.6)
        if ncols >= 3 and i % 4 == 1:  # select a subset of the file's columns
            keep = sorted(rng.choice(ncols, 2, replace=False).tolist())
            kwargs["select_cols"] = keep
            defaults = [defaults[k] for k in keep]
        elif ncols >= 3 and i % 4 == 3:
            drop = sorted(rng.choice(ncols, 1).tolist())
            kwargs["exclude_cols"] = drop
            defaults = [d for k, d in enumerate(defaults) if k not in drop]
        cases.append({"name": f"gen{i}", "kind": "csv", "files": files, "defaults": defaults, "kwargs": kwargs})
    return cases


EDGES: list[tuple[bytes, list[list[Any]], dict[str, Any]]] = [
    (b"1,2\n\n3,4\n", [["int32"], ["int32", 0]], {}),
    (b"a\n\nb\n", [["string", "d"]], {}),
    (b"a,1\n\n", [["string"], ["int32"]], {}),
    (b"", [["int32"]], {}),
    (b"", [["int32"]], {"header": True}),
    (b"h\n", [["int32"]], {"header": True}),
    (b'"a\nb",c\n"x""y",z', [["string"], ["string"]], {"header": True}),
    (b'"abc,1\n', [["string"], ["int32"]], {}),
    (b'"ab"c,1\n2,3\n', [["string"], ["int32"]], {}),
    (b'ab"c,1\n2,3\n', [["string"], ["int32"]], {}),
    (b'\xef\xbb\xbfa,1\n', [["string"], ["int32"]], {}),
    (b'\xff\xfe,1\r\n\x00z,2', [["string"], ["int32"]], {}),
    (b"a,\n", [["string"], ["int32", 4]], {}),
    (b"1,2,3\n4,5\n6\n", [["int32"], ["int32"]], {"select_cols": [0, 1]}),
    (b"1,2,3\n4,5\n6,7,8,9\n", [["int32"], ["int32"]], {"exclude_cols": [2]}),
    (b'"NA",NA,\n', [["string", "d"], ["int32", 5], ["float32", 1.5]], {"na_value": "NA"}),
    (b'x"y,"z"\n', [["string"], ["string"]], {"use_quote_delim": False}),
    (b"a\rb\r\nc\n\rd", [["string", "e"]], {}),
]


def edge_cases(tmp: Path) -> list[dict[str, Any]]:
    out = []
    for i, (data, defaults, kwargs) in enumerate(EDGES):
        path = write(tmp / f"edge{i}.csv", data, "")
        out.append({"name": f"edge{i}", "kind": "csv", "files": [path], "defaults": defaults, "kwargs": kwargs})
    return out


def big_cases(tmp: Path, seed: int = 7) -> list[dict[str, Any]]:
    """Files of many chunks (read under a small budget): clean, with quotes across chunk ends, with bad rows."""
    rng = np.random.default_rng(seed)
    types = ["int32", "float64", "string", "int64"]
    out = []
    for i, (comp, dirty) in enumerate((("", False), ("GZIP", True), ("ZLIB", False), ("", True))):
        data = make_text(rng, types, 6000, dirty=dirty, term="\n" if i % 2 == 0 else "\r\n")
        path = write(tmp / f"big{i}.csv", data, comp)
        kwargs = {"compression_type": comp} if comp else {}
        out.append({"name": f"big{i}", "kind": "csv", "files": [path], "kwargs": kwargs, "budget": 2 << 20,
                    "defaults": [["int32", 0], ["float64", 0.0], ["string", ""], ["int64", 0]]})
    return out


def make_cases(tmp: Path, seed: int = 11) -> list[dict[str, Any]]:
    """``make_csv_dataset`` cases: headers, inferred types, a label, several files, compression, epochs."""
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    names = ["id", "score", "big", "tag", "y"]

    def table(n: int, comp: str, j: int) -> str:
        lines = [",".join(names)]
        for _ in range(n):
            lines.append(",".join([str(int(rng.integers(-50, 50))), f"{rng.random():.4f}" if rng.random() > 0.1 else "",
                                   str(int(rng.integers(2**40))), str(rng.choice(["a", "b c", '"d,e"', "NA"])),
                                   str(int(rng.integers(0, 2)))]))
        return write(tmp / f"m{j}.csv{'.gz' if comp else ''}", ("\n".join(lines) + "\n").encode(), comp)

    plain = [table(int(rng.integers(10, 30)), "", j) for j in range(3)]
    gz = [table(20, "GZIP", 10 + j) for j in range(2)]
    base = {"batch_size": 7, "label_name": "y", "shuffle": False, "num_epochs": 1}
    out.append({"name": "make_infer", "kind": "make", "files": plain, "kwargs": dict(base)})
    out.append({"name": "make_na", "kind": "make", "files": plain, "kwargs": {**base, "na_value": "NA"}})
    out.append({"name": "make_parallel", "kind": "make", "files": plain,
                "kwargs": {**base, "num_parallel_reads": 2, "select_columns": ["score", "id", "y"],
                           "column_defaults": [["int32"], ["float32", 0.5], ["int64", 0]]}})
    out.append({"name": "make_epochs", "kind": "make", "files": plain, "take": 12,
                "kwargs": {**base, "num_epochs": None, "batch_size": 10}})
    out.append({"name": "make_gzip", "kind": "make", "files": gz,
                "kwargs": {**base, "compression_type": "GZIP", "label_name": None}})
    out.append({"name": "make_shuffled", "kind": "make", "files": plain, "rows": True,
                "kwargs": {**base, "shuffle": True, "shuffle_seed": 5, "shuffle_buffer_size": 16}})
    return out
