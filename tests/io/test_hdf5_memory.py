"""HDF5Dataset under a memory budget, in a child process whose RSS is sampled from outside (psutil).

h5py decompresses a filtered chunk whole to read any row of it. Those buffers are charged before each read
(issue #22: 64 MiB gzip chunks under a 6 MiB budget grew RSS by 71 MiB while 4 MiB were tracked; now a
clear ``MemoryBudgetError`` before anything is read), as what h5py holds: the decoded chunk and its stored
copy (sweep seeds 86 and 272: charged as twice the decoded chunk, a well-compressed chunk took the whole budget
and the stages above stalled and overdrew), and a read that does not fit beside the others is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from rss_child import cap, reader_child, run_child

MiB = 1024**2
ROW = 512 * 1024  # 64 Ki int64 per row

_CHILD = reader_child('HDF5Dataset', 'HDF5Dataset(path, "x", batch_size=batch_size)', 'el')


def _write(path: Path, rows: int, chunk_rows: int, row: int = ROW, noise: bool = False) -> str:
    """``rows`` rows of ``row`` bytes in gzip chunks of ``chunk_rows`` rows: a ramp (compresses well, decodes
    whole), or random (``noise``: stored as large as decoded)."""
    with h5py.File(path, "w") as f:
        data = (np.random.default_rng(0).integers(0, 2**62, (rows, row // 8)) if noise else
                np.broadcast_to(np.arange(row // 8, dtype=np.int64), (rows, row // 8)))
        f.create_dataset("x", data=data, chunks=(chunk_rows, row // 8), compression="gzip", compression_opts=1)
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("h5-mem")
    return {"big": _write(d / "big.h5", 192, 192), "fits": _write(d / "fits.h5", 48, 8),
            "packed": _write(d / "packed.h5", 64, 64, 64 * 1024),
            "noise": _write(d / "noise.h5", 62, 62, 64 * 1024, noise=True)}


def test_a_chunk_larger_than_the_budget_is_refused_before_it_is_read(files: dict[str, str]) -> None:
    budget = 6 * MiB  # one chunk: 192 rows of 512 KiB, 96 MiB decoded
    out, growth = run_child(_CHILD, files["big"], str(budget), json.dumps(None))
    assert out["error"] is not None, f"no MemoryBudgetError; RSS grew by {growth / MiB:.0f} MiB"
    for part in ("big.h5", "'x'", "chunk shape (192, 65536)", "96.0 MiB decoded", "6.0 MiB", "chunks=(",
                 "memory_budget="):
        assert part in out["error"], (part, out["error"])
    assert out["rows"] == 0
    assert growth <= cap(budget), f"RSS grew by {growth / MiB:.0f} MiB > cap {cap(budget) / MiB:.0f} MiB"


@pytest.mark.parametrize("batch_size", [None, 4])
def test_a_chunk_that_fits_is_charged_while_it_is_read(files: dict[str, str], batch_size: int | None) -> None:
    budget = 32 * MiB  # a chunk: 8 rows of 512 KiB, 4 MiB decoded, held with its stored copy
    out, growth = run_child(_CHILD, files["fits"], str(budget), json.dumps(batch_size))
    assert out["error"] is None and out["rows"] == 48, out
    assert out["buffers"] >= 4 * MiB, f"h5py's chunk buffers not charged: {out}"
    assert out["peak"] <= budget and out["overdraft"] == 0, out
    assert growth <= cap(budget), f"RSS grew by {growth / MiB:.0f} MiB > cap {cap(budget) / MiB:.0f} MiB"



_PREFETCHED = reader_child('HDF5Dataset', 'HDF5Dataset(path, "x").prefetch(2)', 'el')


def test_a_well_compressed_chunk_is_charged_as_decoded_plus_stored_and_leaves_room_above(
        files: dict[str, str]) -> None:
    """64 rows of 64 KiB in one gzip chunk (4 MiB decoded, a few KiB stored) under 8 MiB, a prefetch above:
    charged as twice the decoded chunk (8 MiB, the whole budget), every read stalled 1 s and overdrew."""
    budget = 8 * MiB
    out, growth = run_child(_PREFETCHED, files["packed"], str(budget), json.dumps(None))
    assert out["error"] is None and out["rows"] == 64, out
    assert 4 * MiB <= out["buffers"] < 5 * MiB, f"charged {out['buffers'] / MiB:.2f} MiB, not 4 MiB + stored"
    assert out["peak"] <= budget and out["overdraft"] == 0, out
    assert growth <= cap(budget), f"RSS grew by {growth / MiB:.0f} MiB > cap {cap(budget) / MiB:.0f} MiB"


def test_a_read_that_does_not_fit_beside_the_rows_it_returns_is_refused_before_anything_is_read(
        files: dict[str, str]) -> None:
    """62 rows of 64 KiB of noise in one gzip chunk: 3.9 MiB decoded + 3.9 MiB stored fit 8 MiB alone, not with
    the 512 KiB of rows the read returns (the reader overdrew at every read instead)."""
    budget = 8 * MiB
    out, growth = run_child(_PREFETCHED, files["noise"], str(budget), json.dumps(None))
    assert out["error"] is not None, f"no MemoryBudgetError: {out}"
    for part in ("noise.h5", "'x'", "chunk shape (62, 8192)", "beside the 512.0 KiB of rows it returns",
                 "8.0 MiB (8388608 bytes)", "a budget of at least 8.", "chunks=("):
        assert part in out["error"], (part, out["error"])
    assert out["rows"] == 0
    assert growth <= cap(budget), f"RSS grew by {growth / MiB:.0f} MiB > cap {cap(budget) / MiB:.0f} MiB"


def test_a_read_whose_room_the_stages_waiting_for_it_hold_is_refused_not_overdrawn(files: dict[str, str]) -> None:
    """The 4 MiB chunk (decoded + stored: 4.8 MiB) under 8 MiB below a batch(56) of 64 KiB rows: the batch
    holds 3.5 MiB waiting for rows that need the chunk read again (the stall breaker overdrew 24 MB, 31 stalls)."""
    budget = 8 * MiB
    child = reader_child('HDF5Dataset', 'HDF5Dataset(path, "x").batch(56)', 'el')
    out, growth = run_child(child, files["packed"], str(budget), json.dumps(56))
    assert out["error"] is not None, f"no MemoryBudgetError: {out}"
    for part in ("packed.h5", "chunk shape (64, 8192)", "held by buffers that wait for this read",
                 "batch(56) assembly=", "8.0 MiB (8388608 bytes)", "a budget of at least 8."):
        assert part in out["error"], (part, out["error"])
    assert growth <= cap(budget), f"RSS grew by {growth / MiB:.0f} MiB > cap {cap(budget) / MiB:.0f} MiB"


def test_the_chunk_cache_is_off(files: dict[str, str]) -> None:
    """h5py's default cache keeps up to 1 MiB of decoded chunks per dataset between reads, uncharged."""
    from headrace.io import hdf5

    f, _ = hdf5._open(files["fits"])
    try:
        assert f["x"].id.get_access_plist().get_chunk_cache()[1] == 0
    finally:
        f.close()
