"""Sorted run files: sections per shard, merged back in (key, id) order."""

from __future__ import annotations

import random

import pytest

from headrace.convert.runs import merge_sections, read_section, write_run


def test_runs_merge_into_key_order(tmp_path):
    rng = random.Random(0)
    items = [(rng.randrange(1000), f"id{i}", {"v": ("int64", [i])}) for i in range(200)]
    refs = []
    for part in (items[:70], items[70:150], items[150:]):
        by_shard: dict[int, list] = {}
        for it in part:
            by_shard.setdefault(it[0] % 3, []).append(it)
        refs += write_run(str(tmp_path / "runs"), by_shard)
    assert sum(r[4] for r in refs) == 200
    for shard in range(3):
        mine = [r for r in refs if r[0] == shard]
        merged = list(merge_sections(mine))
        assert merged == sorted((it for it in items if it[0] % 3 == shard), key=lambda t: (t[0], t[1]))


def test_a_cut_short_run_file_is_an_error_naming_it(tmp_path):
    (ref,) = write_run(str(tmp_path), {0: [(1, "a", {}), (2, "b", {})]})
    _, path, start, end, _ = ref
    with open(path, "r+b") as f:
        f.truncate(end - 3)
    with pytest.raises(OSError, match="ends before its section's end"):
        list(read_section(path, start, end))


def test_many_sections_merge_in_levels_with_few_open_files(tmp_path):
    rng = random.Random(1)
    items = [(rng.randrange(10_000), f"id{i}", i) for i in range(300)]
    refs = [ref for i in range(0, 300, 10) for ref in write_run(str(tmp_path / "runs"), {0: items[i:i + 10]})]
    assert len(refs) == 30
    with pytest.raises(ValueError, match="directory="):
        list(merge_sections(refs, fan_in=4))
    merged = list(merge_sections(refs, str(tmp_path / "merge"), fan_in=4))  # 30 -> 8 -> 2 runs
    assert merged == sorted(items, key=lambda t: (t[0], t[1]))
    assert len(list((tmp_path / "merge").iterdir())) == 8 + 2
