"""Seeds for random stages (``shuffle``, ``sample_from_datasets``, ``from_random_access``, ``list_files``).

The recipe is immutable: a node keeps the seed it was built with (``seed=None`` draws one from OS entropy
when the node is built) and never changes. What varies per iteration comes from the iterator tree: the
*iteration path* in its context (``IteratorContext.iteration``): ``(i,)`` for the ``i``-th ``iter()`` of a
Dataset object, extended by the epoch number inside each enclosing ``repeat``. A stage that reshuffles per
iteration draws from ``SeedSequence([seed, *path])``, so every epoch has a new, reproducible order, as
tf.data's ``reshuffle_each_iteration`` gives.

On restore the iteration path and seed come from the state: a stage built with an explicit seed refuses a
state with another seed (``StateError``); a stage built with ``seed=None`` adopts the saved one (its own
iterator only; the node is not touched).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._errors import StateError


def fresh_seed() -> int:
    """A random 63-bit seed from OS entropy (used when the user gives ``seed=None``)."""
    return int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> np.uint64(1))


def iteration_seed(seed: int, iteration: int | Sequence[int]) -> int:
    """A 63-bit seed for one iteration (path), derived from the dataset seed (numpy ``SeedSequence``)."""
    path = [iteration] if isinstance(iteration, int) else list(iteration)
    return int(np.random.SeedSequence([seed, *path]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def check_seed(what: str, state: dict[str, Any], seed: int, seed_given: bool) -> int:
    """The seed a restored iterator uses: the node's (must equal the state's) or, for ``seed=None``, the
    state's."""
    saved = int(state["seed"])
    if seed_given and saved != seed:
        raise StateError(f"state mismatch in {what}: seed={saved} in the state but seed={seed} in this "
                         "pipeline; restore into a pipeline built with the same seed (or seed=None to adopt "
                         "the saved one)")
    return saved


def seeded_bits(seed: int, iteration: Sequence[int], draws: int) -> np.random.PCG64:
    """The PCG64 stream of one iteration (:func:`iteration_seed`), advanced past ``draws`` values without
    drawing them (a restore costs nothing however far the stream went)."""
    bits = np.random.PCG64(iteration_seed(seed, tuple(iteration)))
    if draws:
        bits.advance(draws)
    return bits
