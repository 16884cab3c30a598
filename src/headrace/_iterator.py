"""The iterator handed to users: one per ``iter(dataset)``, owning the stage tree and its threads.

Budget: an iterator of a pipeline with ``Options(memory_budget=...)`` has its own budget; without one it
shares the process budget with every other such iterator (``headrace._memory``).

Build errors: ``iter()`` builds the stage tree, and an ``Exception`` raised while building it (a second
concurrent writer of one ``cache(filename)`` file, a ``from_source`` factory raising, a reader whose file is
missing when it opens it) is not raised there but by the first ``next()``, where tf.data raises it (its
iterators meet such errors in their first ``GetNext``). What the stages built so far opened is closed at once
(their threads told to stop, worker processes stopped, every budget account closed: the budget is left as
before), and the error is kept as it was raised, its message naming the file or stage. Until ``close()``,
``next()``, ``get_state()``, ``set_state()`` and ``explain()`` raise that error again (there is no stage to
iterate, save or explain); ``memory_stats()`` answers (no stage holds anything) and ``close()`` works, after
which these calls raise :class:`~headrace.IteratorClosedError` as on any closed iterator. An interrupt
(``KeyboardInterrupt``) during the build is raised by ``iter()`` itself. Every caller of ``iter()`` inside
headrace (``reduce``, ``get_single_element``, ``save``, ``to_torch``, ``fit``) closes its iterator, so it
raises the error from its own call as before; the engine's own reads (the first element's spec, counting
records for ``len()``) build their stages inside the call that needs them and raise from that call.

Iterations: every ``iter(ds)`` of one Dataset object takes the next iteration number (0, 1, ...), the root
of the *iteration path* that seeds per-iteration randomness (``reshuffle_each_iteration``); ``repeat``
extends it per epoch (``headrace._engine.seeds``). Nothing else of the Dataset changes when it is iterated.

Shutdown design: ``close()`` takes at most about a second, however deep the pipeline: (1) every stage's
stop flag is set and its threads woken (``signal_stop``, never blocks), (2) every thread is joined against
one shared deadline, (3) files and memory accounts are released. A thread still inside user code after the
deadline (a map function that sleeps) is left running as a daemon, reported in a ``ResourceWarning``
naming it and in ``memory_stats()["threads_alive"]``; the stage it reads from is not closed under it.
``close()`` runs on ``with`` exit, on garbage collection (``__del__``; in a moment, from the reaper thread,
where the collecting thread may hold the shared budget's lock: ``headrace._reaper``) and at interpreter exit
(``atexit`` over a weak set of live iterators), and may be called from another thread: a ``next()`` waiting at that
moment raises :class:`~headrace.IteratorClosedError`, as does every later ``next()``/``get_state()``.

Interrupts: a ``KeyboardInterrupt`` (or any other ``BaseException`` that is not an ``Exception``) raised
inside ``next()`` can land between any two bytecodes of the pipeline, so the iterator cannot know which
stages took their element: it closes itself (within about a second) and re-raises. The iterator is then
closed, never half-usable and never hung; restore a state saved before into a new iterator to continue.
Closing itself cannot be cut short by a further interrupt (Ctrl-C pressed again): called from the main thread,
where Python raises them, the teardown runs in a thread of its own (``run_to_the_end``), so every thread,
file and worker process of the iterator ends even when the wait for it is interrupted.
"""

from __future__ import annotations

import atexit
import threading
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any

from . import _reaper
from ._engine import by_value
from ._engine.context import IteratorContext
from ._engine.recipe import abandon_build, as_node
from ._engine.replay import restoring
from ._engine.stage import Stage
from ._engine.stage_support import JOIN_TIMEOUT_S, join_threads, run_to_the_end
from ._engine.tuning.explain import Plan, bottleneck, build_tree
from ._engine.tuning.tuner import Tuner
from ._errors import IteratorClosedError, StateError
from ._malloc import tune_for_pipelines
from ._memory import Cancelled, budget_for, rss_bytes
from ._versioned import check_versioned
from ._warn import PipelineWarnings

if TYPE_CHECKING:
    from types import TracebackType

    from ._dataset import Dataset

STATE_FORMAT = "headrace.iterator"
STATE_VERSION = 2

_LIVE: weakref.WeakSet[Iterator] = weakref.WeakSet()
CLOSE_WAIT_S = 30.0
"""How long ``close()`` waits for its teardown (about a second: threads are joined against JOIN_TIMEOUT_S)."""


class Iterator:
    """Iterates a :class:`~headrace.Dataset`; yields elements as numpy values.

    Methods beyond the iterator protocol:

    - ``get_state() -> dict``: a small JSON-serializable checkpoint of the position in the stream.
    - ``set_state(state)``: continue exactly after the element the state was taken at; raises
      :class:`~headrace.StateError` if the state comes from a different pipeline or settings.
    - ``memory_stats() -> dict``: ``limit_bytes``, ``current_bytes``, ``peak_bytes`` (of the budget this
      iterator uses; ``shared`` says whether that is the process budget), ``overdraft_bytes``,
      ``estimate_miss_bytes``, ``stalls``, ``threads_alive`` (names of threads still running after
      ``close()``), per stage ``current_bytes`` / ``peak_bytes`` / ``cap_bytes`` / ``held_elements`` /
      ``demand_elements``, and the resident memory now: ``rss_bytes`` = ``process_rss_bytes`` (this
      process) + ``worker_rss_bytes`` (its ``map`` worker processes; psutil).
    - ``close()``: stop every thread of the pipeline (within about one second, see the module docstring);
      also on ``with`` exit, garbage collection and interpreter exit; from any thread.

    After ``close()`` (or an interrupt inside ``next()``) ``next()``, ``get_state()`` and ``set_state()``
    raise :class:`~headrace.IteratorClosedError`. An error raised while ``iter()`` built the stages (a second
    writer of one ``cache`` file) is raised by the first ``next()`` instead, as tf.data does, and by every
    call but ``memory_stats()`` and ``close()`` until ``close()`` (see the module docstring).
    """

    def __init__(self, dataset: Dataset, iteration: int | tuple[int, ...] = 0) -> None:
        node = as_node(dataset, f"Iterator(dataset): expected a headrace.Dataset, got {type(dataset).__name__}")
        tune_for_pipelines()
        options = node.options()
        self._budget = budget_for(options.memory_limit())
        path = tuple(int(i) for i in iteration) if isinstance(iteration, tuple) else (int(iteration),)
        self._ctx = IteratorContext(options, self._budget, path)  # (a tuple: a worker of headrace.service)
        self._warnings = PipelineWarnings(node, options, self._budget.limit_bytes)  # the stages warn here
        self._ctx.tree.warnings = self._warnings
        self._closed_by: str | None = None
        self._threads_alive: list[str] = []
        self._root: Stage | None = None
        self._delivered = 0
        self._delivered_at = time.perf_counter()  # when the last element was handed out
        self._next_s = 0.0  # time spent inside next() (the consumer waiting for the pipeline)
        self._started_s = time.monotonic()
        self._tuner: Tuner | None = None
        self._autotune = options.autotune_enabled is not False
        self._build_error: Exception | None = None  # raised by next() & co (module docstring, Build errors)
        self._build_traceback: TracebackType | None = None  # the build's, kept: each raise would add to it
        try:
            self._root = node.make_iterator(self._ctx)
        except Exception as e:
            self._abandon_build()
            self._build_error, self._build_traceback = e, e.__traceback__
            return
        except BaseException:  # an interrupt: raised now
            self._abandon_build()
            raise
        _LIVE.add(self)

    def _abandon_build(self) -> None:
        """``make_iterator`` raised partway: what the stages built so far opened is closed (``abandon_build``)."""
        self._closed_by = "a failed iter()"
        abandon_build(self._ctx)

    def _close_accounts(self) -> None:
        for acc in self._budget.accounts_of(self._ctx.tree):
            acc.close()

    def __iter__(self) -> Iterator:
        return self

    def _check_open(self, what: str) -> Stage:
        root = self._root
        if root is None:
            error = self._build_error
            if error is not None:  # the same error each time, its traceback the build's (not one per call)
                raise error.with_traceback(self._build_traceback)
            raise IteratorClosedError(f"{what} on an iterator closed by {self._closed_by or 'close()'}; create a "
                                      "new one with iter(dataset) (and set_state() a state saved before to go on)")
        return root

    def __next__(self) -> Any:
        root = self._check_open("next()")
        # the stages' warnings, queued wherever they arose (headrace._warn.PipelineWarnings): issued here,
        # before an element is taken, so one the filters make an error loses nothing and leaves the iterator
        # as it was (the next call goes on)
        self._warnings.flush()
        waiting = self._budget.consumers  # (the stall breaker's "the consumer waits"; atomic, no lock)
        waiting.append(1)
        t0 = time.perf_counter()
        try:
            if self._tuner is None and self._autotune and self._ctx.tree.tunings:
                self._start_tuner()  # inside the try: an interrupt landing here closes the iterator too
            x = root.__next__()
            self._delivered += 1
            self._delivered_at = time.perf_counter()
            return x
        except Cancelled:
            if self._ctx.tree.stop.is_set():
                raise IteratorClosedError("next(): the iterator was closed (by close() from another thread) "
                                          "while next() waited for an element") from None
            raise
        except StopIteration:
            self._warnings.flush()  # what the last elements' production said (the end stays the end)
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
            waiting.pop()
            self._next_s += time.perf_counter() - t0

    next = __next__

    def _start_tuner(self) -> None:
        ref = weakref.ref(self)  # the tuner thread must not keep the iterator alive (``__del__`` closes it)

        def delivered() -> tuple[int, float] | None:
            it = ref()
            return None if it is None else (it._delivered, it._delivered_at)

        self._tuner = Tuner(self._ctx, delivered)
        self._tuner.start()

    def explain(self) -> Plan:
        """The running plan: a dict (``print()`` it for the indented text).

        ``tree``: per stage, outermost first (``inputs`` below): ``stage``, ``kind``, ``settings`` and
        ``why`` (AUTOTUNE knobs: the starting rule or the tuner's change), ``workers``, ``window``,
        ``throughput_per_s``, ``shares`` (of the workers' time: ``busy`` computing, waiting on ``input``,
        on ``output`` room, on the memory ``budget``), ``call_ms``, ``bytes`` / ``peak_bytes`` held and
        ``budget_share`` (its share of the budget), ``executor`` for ``map`` (``thread`` / ``process``
        with ``why`` and the measurement behind ``"auto"``, processes, their RSS). ``bottleneck``:
        ``{"stage", "why"}`` (a stage, or ``"consumer"`` when the pipeline keeps up). ``memory``:
        :meth:`memory_stats` figures; ``cpu``: ``budget`` and ``granted`` (cores given to tuned workers);
        ``tuner``: its state, trials, kept changes, ``converged_after_s``; ``throughput_per_s`` (elements
        handed out) and ``consumer_wait_share`` (share of the time spent inside ``next()``).
        """
        root = self._check_open("explain()")
        mem = self.memory_stats()
        elapsed = max(1e-9, time.monotonic() - self._started_s)
        tree = build_tree(root, mem["stages"], mem["limit_bytes"], dict(self._ctx.tree.tunings),
                          dict(self._ctx.tree.resources), self._started_s)
        wait_share = min(1.0, self._next_s / elapsed)
        tuner = self._tuner.report() if self._tuner is not None else None
        granted = tuner["cpu_granted"] if tuner else sum(
            k.value for t in self._ctx.tree.tunings.values() for k in t.knobs.values() if k.compute)
        return Plan(tree=tree, bottleneck=bottleneck(tree, wait_share),
                    memory={k: v for k, v in mem.items() if k != "stages"},
                    cpu={"budget": self._ctx.cpu_budget, "granted": granted}, tuner=tuner,
                    throughput_per_s=round(self._delivered / elapsed, 1), consumer_wait_share=round(wait_share, 3))

    def get_next(self) -> Any:
        """tf.data's spelling of ``next(iterator)``."""
        return self.__next__()

    def get_state(self) -> dict[str, Any]:
        root = self._check_open("get_state()")
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "pipeline": by_value.materialize(root.get_state()),
                "sizes": self._learned_sizes()}

    def set_state(self, state: dict[str, Any]) -> None:
        root = self._check_open("set_state()")
        check_versioned(state, fmt=STATE_FORMAT, version=STATE_VERSION, source="set_state()",
                        what="iterator state", error=StateError,
                        fix="pass the dict returned by Iterator.get_state() of the same headrace version")
        waiting = self._budget.consumers
        waiting.append(1)  # a restore re-reads the input: the stall breaker applies as in next()
        try:
            with restoring(self._ctx.replay):  # (headrace._engine.replay, rule 6)
                self._learn_sizes(state.get("sizes", {}))
                root.set_state(state["pipeline"])
                self._learn_sizes(state.get("sizes", {}))  # and the stages the restore made anew
        finally:
            waiting.pop()

    def _learned_sizes(self) -> dict[str, list[int]]:
        """Per stage that has sized an element: the largest element and reservation its account has learned."""
        out: dict[str, list[int]] = {}
        for acc in self._budget.accounts_of(self._ctx.tree):
            if acc.seen:
                old = out.get(acc.stage, [0, 0])
                out[acc.stage] = [max(old[0], acc.max_element_bytes), max(old[1], acc.max_reserved_bytes)]
        return out

    def _learn_sizes(self, sizes: dict[str, list[int]]) -> None:
        """Teach the stages what the saved run had learned: the budget's shares, and every decision taken from
        them (a shuffle capping its buffer), are then the saved run's, not guesses made while a restored stage
        has produced nothing yet (a restore is a fixed point whatever the budget)."""
        if not isinstance(sizes, dict) or not all(
                isinstance(v, list) and len(v) == 2 and all(isinstance(n, int) and n >= 0 for n in v)
                for v in sizes.values()):
            raise StateError(f"set_state(): state['sizes'] = {str(sizes)[:200]} is not a dict of stage -> [largest "
                             "element, largest reservation] byte counts; pass the dict Iterator.get_state() returned")
        for acc in self._budget.accounts_of(self._ctx.tree):
            if acc.stage in sizes:
                acc.learn_sizes(*sizes[acc.stage])

    def _extra_threads(self) -> list[threading.Thread]:
        """The tuner's thread and the resources' (process start-up) beside the stage tree's."""
        tuner = self._tuner.threads() if self._tuner is not None else []
        return tuner + self._ctx.tree.resource_threads()

    def memory_stats(self) -> dict[str, Any]:
        stats = self._budget.stats(owner=self._ctx.tree)
        root = self._root
        alive = [t.name for t in root.alive_threads()] if root is not None else []
        stats["threads_alive"] = alive or [n for n in self._threads_alive]
        workers = self.worker_rss_bytes()
        own = rss_bytes()
        stats["process_rss_bytes"] = own
        stats["worker_rss_bytes"] = workers
        stats["rss_bytes"] = own + workers
        return stats

    def worker_rss_bytes(self) -> int:
        """The RSS of this iterator's worker processes (the process executor of ``map``), summed."""
        return sum(r.rss_bytes() for r in list(self._ctx.tree.resources.values()) if hasattr(r, "rss_bytes"))

    @property
    def threads_alive(self) -> list[str]:
        """Names of this pipeline's threads still running (after ``close()``: stuck in user code)."""
        return self.memory_stats()["threads_alive"]

    def close(self) -> None:
        self._close("close()")
        self._warnings.flush()  # closed already: a warning made an error here leaves nothing half done

    def _close(self, by: str) -> None:
        root, self._root = self._root, None
        if root is None:
            if self._build_error is not None:  # a failed build: nothing left to close, and now closed
                self._build_error, self._closed_by = None, by
            return
        self._closed_by = by
        # in a thread of its own where an interrupt could land (Ctrl-C, repeated): never half done
        alive = run_to_the_end("close", lambda: self._teardown(root), CLOSE_WAIT_S)
        if alive:
            self._threads_alive = [t.name for t in alive]
            warnings.warn(f"headrace: {len(alive)} pipeline thread(s) still running after close() (inside user "
                          f"code for more than {JOIN_TIMEOUT_S:.0f} s): {', '.join(self._threads_alive)}; they are "
                          "daemon threads and end when that code returns", ResourceWarning, stacklevel=3)

    def _teardown(self, root: Stage) -> list[threading.Thread]:
        """Stop, join and close the stages, the tuner and the worker processes; the threads still alive."""
        self._ctx.tree.stop.set()
        if self._tuner is not None:
            self._tuner.wake()
        root.signal_stop()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        root.join(deadline)
        if self._tuner is not None:
            join_threads(self._tuner.threads(), max(0.0, deadline - time.monotonic()))
        root.close()
        self._ctx.tree.close_resources()  # worker processes: stopped and reaped
        alive = root.alive_threads() + [t for t in self._extra_threads() if t.is_alive()]
        if not alive:  # and the accounts of stages no longer in the tree (a repeat epoch that failed to build)
            self._close_accounts()
        return alive

    def __enter__(self) -> Iterator:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
            return
        self._close("close()")
        try:  # the body's exception goes on; the warnings are still said unless the filters make them errors
            self._warnings.flush()
        except Exception:
            pass

    def __del__(self) -> None:
        # Garbage collection may run this in a thread holding the shared budget's lock: close later, in
        # the reaper, wherever closing here could wait on it (headrace._reaper).
        try:
            if self._root is None:
                return
            if _reaper.may_close_here(self._budget.cv.lock):
                self._close("garbage collection")
                self._warnings.flush()  # e.g. ignore_errors' count of a loop left early (errors: below)
            else:
                _reaper.defer(lambda: self._close("garbage collection"))
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
    _reaper.drain()
