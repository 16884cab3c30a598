"""The iterator handed to users: one per ``iter(dataset)``, owning the stage tree and its threads.

Budget: an iterator of a pipeline with ``Options(memory_budget=...)`` has its own budget; without one it
shares the process budget with every other such iterator (``headrace._memory``).

Iterations: every ``iter(ds)`` of one Dataset object takes the next iteration number (0, 1, ...), the root
of the *iteration path* that seeds per-iteration randomness (``reshuffle_each_iteration``); ``repeat``
extends it per epoch (``headrace._ops.seeds``). Nothing else of the Dataset changes when it is iterated.

Shutdown design: ``close()`` takes at most about a second, however deep the pipeline: (1) every stage's
stop flag is set and its threads woken (``signal_stop``, never blocks), (2) every thread is joined against
one shared deadline, (3) files and memory accounts are released. A thread still inside user code after the
deadline (a map function that sleeps) is left running as a daemon, reported in a ``ResourceWarning``
naming it and in ``memory_stats()["threads_alive"]``; the stage it reads from is not closed under it.
``close()`` runs on ``with`` exit, on garbage collection (``__del__``) and at interpreter exit (``atexit``
over a weak set of live iterators), and may be called from another thread: a ``next()`` waiting at that
moment raises :class:`~headrace.IteratorClosedError`, as does every later ``next()``/``get_state()``.

Interrupts: a ``KeyboardInterrupt`` (or any other ``BaseException`` that is not an ``Exception``) raised
inside ``next()`` can land between any two bytecodes of the pipeline, so the iterator cannot know which
stages took their element: it closes itself (within about a second) and re-raises. The iterator is then
closed, never half-usable and never hung; restore a state saved before into a new iterator to continue.
"""

from __future__ import annotations

import atexit
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any

from ._errors import IteratorClosedError, StateError
from ._malloc import tune_for_pipelines
from ._memory import Cancelled, budget_for
from ._ops import by_value
from ._ops.base import JOIN_TIMEOUT_S, DatasetIterator, IteratorContext
from ._ops.node import as_node
from ._versioned import check_versioned

if TYPE_CHECKING:
    from ._dataset import Dataset

STATE_FORMAT = "headrace.iterator"
STATE_VERSION = 2

_LIVE: weakref.WeakSet[Iterator] = weakref.WeakSet()


class Iterator:
    """Iterates a :class:`~headrace.Dataset`; yields elements as numpy values.

    Methods beyond the iterator protocol:

    - ``get_state() -> dict``: a small JSON-serializable checkpoint of the position in the stream.
    - ``set_state(state)``: continue exactly after the element the state was taken at; raises
      :class:`~headrace.StateError` if the state comes from a different pipeline or settings.
    - ``memory_stats() -> dict``: ``limit_bytes``, ``current_bytes``, ``peak_bytes`` (of the budget this
      iterator uses; ``shared`` says whether that is the process budget), ``overdraft_bytes``,
      ``estimate_miss_bytes``, ``stalls``, ``threads_alive`` (names of threads still running after
      ``close()``) and per stage ``current_bytes`` / ``peak_bytes`` / ``cap_bytes`` / ``held_elements`` /
      ``demand_elements``.
    - ``close()``: stop every thread of the pipeline (within about one second, see the module docstring);
      also on ``with`` exit, garbage collection and interpreter exit; from any thread.

    After ``close()`` (or an interrupt inside ``next()``) ``next()``, ``get_state()`` and ``set_state()``
    raise :class:`~headrace.IteratorClosedError`.
    """

    def __init__(self, dataset: Dataset, iteration: int = 0) -> None:
        node = as_node(dataset, f"Iterator(dataset): expected a headrace.Dataset, got {type(dataset).__name__}")
        tune_for_pipelines()
        options = node.options()
        self._budget = budget_for(options.memory_budget_bytes() if options.memory_budget is not None else None)
        self._ctx = IteratorContext(options, self._budget, (int(iteration),))
        self._closed_by: str | None = None
        self._threads_alive: list[str] = []
        self._root: DatasetIterator | None = None
        self._root = node.make_iterator(self._ctx)
        _LIVE.add(self)

    def __iter__(self) -> Iterator:
        return self

    def _check_open(self, what: str) -> DatasetIterator:
        root = self._root
        if root is None:
            raise IteratorClosedError(f"{what} on an iterator closed by {self._closed_by or 'close()'}; create a "
                                      "new one with iter(dataset) (and set_state() a state saved before to go on)")
        return root

    def __next__(self) -> Any:
        root = self._check_open("next()")
        budget = self._budget
        budget.consumer_waiting += 1
        try:
            return root.__next__()
        except Cancelled:
            if self._ctx.stop.is_set():
                raise IteratorClosedError("next(): the iterator was closed (by close() from another thread) "
                                          "while next() waited for an element") from None
            raise
        except StopIteration:
            raise
        except Exception as e:
            interrupt = _interrupt_behind(e)
            if interrupt is None:
                raise
            # Python's own threading code is not interrupt-safe either: an interrupt inside e.g.
            # Thread.start() surfaces as "RuntimeError: release unlocked lock". It is the interrupt.
            self._close(f"{type(interrupt).__name__} inside next()")
            raise interrupt from e
        except BaseException as e:  # KeyboardInterrupt & co: the position is unknown, so close (timed)
            self._close(f"{type(e).__name__} inside next()")
            raise
        finally:
            budget.consumer_waiting -= 1

    next = __next__

    def get_next(self) -> Any:
        """tf.data's spelling of ``next(iterator)``."""
        return self.__next__()

    def get_state(self) -> dict[str, Any]:
        root = self._check_open("get_state()")
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "pipeline": by_value.materialize(root.get_state())}

    def set_state(self, state: dict[str, Any]) -> None:
        root = self._check_open("set_state()")
        check_versioned(state, fmt=STATE_FORMAT, version=STATE_VERSION, source="set_state()",
                        what="iterator state", error=StateError,
                        fix="pass the dict returned by Iterator.get_state() of the same headrace version")
        budget = self._budget
        budget.consumer_waiting += 1  # a restore re-reads the input: the stall breaker applies as in next()
        self._ctx.restoring.set()
        try:
            root.set_state(state["pipeline"])
        finally:
            self._ctx.restoring.clear()
            budget.consumer_waiting -= 1

    def memory_stats(self) -> dict[str, Any]:
        stats = self._budget.stats(owner=self._ctx.owner)
        root = self._root
        alive = [t.name for t in root.alive_threads()] if root is not None else []
        stats["threads_alive"] = alive or [n for n in self._threads_alive]
        return stats

    @property
    def threads_alive(self) -> list[str]:
        """Names of this pipeline's threads still running (after ``close()``: stuck in user code)."""
        return self.memory_stats()["threads_alive"]

    def close(self) -> None:
        self._close("close()")

    def _close(self, by: str) -> None:
        root, self._root = self._root, None
        if root is None:
            return
        self._closed_by = by
        self._ctx.stop.set()
        root.signal_stop()
        root.join(time.monotonic() + JOIN_TIMEOUT_S)
        root.close()
        alive = root.alive_threads()
        if alive:
            self._threads_alive = [t.name for t in alive]
            warnings.warn(f"headrace: {len(alive)} pipeline thread(s) still running after close() (inside user "
                          f"code for more than {JOIN_TIMEOUT_S:.0f} s): {', '.join(self._threads_alive)}; they are "
                          "daemon threads and end when that code returns", ResourceWarning, stacklevel=3)

    def __enter__(self) -> Iterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._close("garbage collection")
        except Exception:  # pragma: no cover - interpreter teardown
            pass


def _interrupt_behind(e: BaseException) -> BaseException | None:
    """The KeyboardInterrupt (or other non-Exception) during whose handling ``e`` was raised, if any."""
    seen = set()
    cause = e.__context__ or e.__cause__
    while cause is not None and id(cause) not in seen:
        if not isinstance(cause, Exception):
            return cause
        seen.add(id(cause))
        cause = cause.__context__ or cause.__cause__
    return None


@atexit.register
def _close_all() -> None:
    for it in list(_LIVE):
        try:
            it._close("interpreter exit")
        except Exception:  # pragma: no cover
            pass
