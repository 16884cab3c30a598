"""``ignore_errors`` (``headrace._ops.ignore_errors``): drops data errors only, says how many, stops at
``max_drop_ratio`` (issue 15, engine review)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import headrace as hr

D = hr.Dataset


def test_ignore_errors_drops_data_errors_only_and_says_so():
    def bad_3(x):
        if x % 3 == 0:
            raise ValueError(f"bad {x}")
        return x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [int(x) for x in D.range(9).map(bad_3).ignore_errors()] == [1, 2, 4, 5, 7, 8]
    msgs = [str(w.message) for w in caught if issubclass(w.category, hr.IgnoredErrorsWarning)]
    assert msgs and "dropped 3 of 9 elements (ValueError x3)" in msgs[0] and "at element 0" in msgs[0]
    oversize = D.range(3).map(lambda x: np.zeros(400_000, np.uint8)).batch(3).ignore_errors()
    with pytest.raises(hr.MemoryBudgetError):
        list(oversize.with_options(hr.Options(memory_budget=1_000_000)))
    with pytest.raises(NameError):
        list(D.range(3).map(lambda x: undefined_name).ignore_errors())  # noqa: F821 - a bug, not bad data
    with pytest.raises(hr.TooManyErrorsError, match=r"\d+ of 100 elements failed"):
        list(D.range(1000).map(bad_3).ignore_errors(max_drop_ratio=0.1))
    with pytest.raises(ValueError, match=r"max_drop_ratio=1\.5"):
        D.range(3).ignore_errors(max_drop_ratio=1.5)


def test_a_restored_iterator_reports_what_the_whole_run_dropped():
    """The counts per type and the first error are part of the state: the warning of a restored iterator names
    them (it said "(); the first: None" before)."""
    def bad_3(x):
        if x % 3 == 0:
            raise ValueError(f"bad {x}")
        return x

    ds = D.range(9).map(bad_3, name="check").ignore_errors()
    it = iter(ds)
    assert [int(next(it)) for _ in range(3)] == [1, 2, 4]
    state = it.get_state()
    it.close()
    restored = iter(ds)
    restored.set_state(state)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [int(x) for x in restored] == [5, 7, 8]
    msgs = [str(w.message) for w in caught if issubclass(w.category, hr.IgnoredErrorsWarning)]
    assert len(msgs) == 1 and "dropped 3 of 9 elements (ValueError x3)" in msgs[0], msgs
    assert "the first: ValueError: bad 0 (in map(check) at element 0)" in msgs[0], msgs
