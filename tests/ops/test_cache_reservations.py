"""A memory ``cache`` gives back every reservation it takes, also one of 0 bytes (nothing sized yet).

Its first pull reserves ``estimate()``, 0 bytes before any element was sized; an input that then ended or
raised left that reservation open (``if reserved:`` skipped the cancel), so the account counted one
reservation outstanding for ever: it is the count ``reserve`` reads to decide whether a first-sight probe
is pending (the stall breaker waits for it, ``_budget/account.py``).
"""

from __future__ import annotations

import pytest

import headrace as hr


def _boom(x):
    if int(x) == 0:
        raise ValueError("bad first element")
    return x


def _outstanding(it: hr.Iterator) -> dict[str, int]:
    return {a.stage: a.outstanding for a in it._budget.accounts_of(it._ctx.tree)}


@pytest.mark.parametrize("first", ["ends", "raises"])
def test_the_first_pull_s_reservation_is_given_back(first):
    ds = hr.Dataset.range(0) if first == "ends" else hr.Dataset.range(3).map(_boom)
    with iter(ds.cache().with_options(hr.Options(memory_budget="64MiB"))) as it:
        if first == "ends":
            assert list(it) == []
        else:
            with pytest.raises(ValueError, match="bad first element"):
                next(it)
            assert [int(x) for x in it] == [1, 2]
        left = {stage: n for stage, n in _outstanding(it).items() if stage.startswith("cache")}
        assert left and all(n == 0 for n in left.values()), left
