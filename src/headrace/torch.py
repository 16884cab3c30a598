"""PyTorch adapter: a headrace ``Dataset`` as a ``torch.utils.data.IterableDataset``, and device prefetch.

``to_torch(ds)`` yields each element with its numpy leaves as ``torch.Tensor`` (``torch.from_numpy``,
sharing memory, when the array is writable and of a dtype torch has; read-only arrays are copied once so
that in-place ops on the tensor cannot write into a buffer headrace still owns). ``bytes`` leaves and
object arrays stay as they are. Inside a ``DataLoader(num_workers=k)`` worker ``i`` reads share ``i`` of
``k``, taken at the source (``headrace._ops.shard.shard_at_source``: whole files when there are at least
``k``, else records; every map, batch, shuffle above it runs on that share only), so the workers read and
decode disjoint shares that together are the whole dataset (order across workers is the DataLoader's
round-robin, not ``ds``'s); and each worker's iterators get ``1/k`` of the memory budget. Every epoch
reshuffles (``shuffle`` draws a new order per ``iter()``, as tf.data's ``reshuffle_each_iteration``), with or
without workers, persistent or not, for every start method (fork, spawn, forkserver): epoch ``e`` runs the
iteration path ``(e,)`` in every worker, so a seed gives the same sequence of epoch orders run to run (see
:class:`TorchIterableDataset` and ``set_epoch``).

Checkpoints: ``to_torch(ds)`` implements the ``Stateful`` protocol (``state_dict()`` / ``load_state_dict()``)
that ``torchdata.stateful_dataloader.StatefulDataLoader`` calls on an ``IterableDataset``'s iterator (in the
main process or in each worker, right after each batch it fetches) and Lightning calls on a train iterable:
each ``iter()`` returns a :class:`TorchEpochIterator`, whose state is the epoch, the worker share and
headrace's own iterator state (``Iterator.get_state()``, small JSON), so a restored loader yields exactly the
rest of the stream (nothing replayed or skipped) and the epochs after it reshuffle as an uninterrupted run's.
The dataset's own ``state_dict()`` is the position of its latest ``iter()`` in this process (see
:meth:`TorchIterableDataset.state_dict`). For Lightning's one-batch-ahead fetching see
``headrace.lightning.ExactlyOnce``.

``device_prefetch(batches, device)`` copies batches to ``device`` ahead of use: on CUDA from pinned memory
with ``non_blocking=True`` on a side stream, ``buffer_size`` batches in flight; on CPU it passes batches
through unchanged.

Requires torch (``pip install 'headrace[torch]'``).
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ._deps import require
from ._errors import IteratorClosedError, StateError
from ._memory import budget_share
from ._structure import map_structure
from ._sync import InFlight
from ._versioned import check_versioned

if TYPE_CHECKING:  # torch's real types for mypy; at run time it comes through require() (a clear error)
    import torch
    from torch.utils.data import IterableDataset, get_worker_info

    from ._dataset import Dataset
else:
    torch = require("torch", "headrace.torch")
    _torch_data = require("torch.utils.data", "headrace.torch")
    IterableDataset, get_worker_info = _torch_data.IterableDataset, _torch_data.get_worker_info

_TORCH_DTYPES = {np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64,
                                        np.float16, np.float32, np.float64, np.complex64, np.complex128,
                                        np.uint16, np.uint32, np.uint64)}


def _leaf_to_tensor(x: Any) -> Any:
    if isinstance(x, np.generic) and not isinstance(x, np.bytes_ | np.str_):
        x = np.asarray(x)
    if isinstance(x, np.ndarray) and x.dtype in _TORCH_DTYPES:
        if not x.flags.writeable or (not x.flags.c_contiguous and not x.flags.f_contiguous):
            x = np.array(x, copy=True)
        return torch.from_numpy(x)
    return x


def element_to_torch(element: Any) -> Any:
    """The element with every numeric numpy leaf as a ``torch.Tensor`` (same shape and dtype).

    >>> hr.torch.element_to_torch((np.zeros((2, 3), np.float32), b"id"))  # (tensor of shape (2, 3), b'id')

    Args:
        element: a structure (tuple / dict / leaf) of numpy arrays and scalars, ``bytes``, strings.

    Returns:
        The same structure; writable arrays share memory with the tensor (``torch.from_numpy``); read-only or
        non-contiguous ones are copied. ``bytes``, strings and object arrays are returned unchanged.
    """
    return map_structure(_leaf_to_tensor, element)


MAX_WORKERS = 1024
"""Most ``DataLoader`` workers one ``to_torch`` dataset counts epochs for (one int64 slot each)."""


POSITION_FORMAT = "headrace.torch.position"
POSITION_VERSION = 1


def _slot(info: Any) -> int:
    """The epoch-count slot of this process: 0 for the main process, ``1 + id`` for DataLoader worker ``id``."""
    if info is None:
        return 0
    if info.id >= MAX_WORKERS:
        raise ValueError(f"to_torch: DataLoader worker {info.id} of {info.num_workers}: at most "
                         f"{MAX_WORKERS} workers are supported; use num_workers <= {MAX_WORKERS}")
    return 1 + info.id


def _worker(info: Any) -> list[int]:
    """``[id, num_workers]`` of this process's share; the main process and a single worker read the same."""
    return [0, 1] if info is None else [info.id, max(1, info.num_workers)]


def _position_state(epoch: int, worker: list[int], position: dict[str, Any] | None, *, done: bool
                    ) -> dict[str, Any]:
    return {"format": POSITION_FORMAT, "version": POSITION_VERSION, "epoch": epoch, "worker": worker,
            "done": done, "position": position}


def _check_position(state: Any, source: str) -> dict[str, Any]:
    check_versioned(state, fmt=POSITION_FORMAT, version=POSITION_VERSION, source=source, what="to_torch state",
                    error=StateError, fix="pass a dict returned by state_dict() of a to_torch dataset or of its "
                    "iterator, from the same headrace version")
    epoch = state.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise StateError(f"{source}: the state's epoch is {epoch!r}; expected an int >= 0 (pass the dict "
                         "state_dict() returned, unchanged)")
    return state


_POSITION_LOST = "closed by an interrupt inside next() (its position is unknown)"
_CLOSED_MID_NEXT = "closed by close() while next() was producing an element (its position is unknown)"


class TorchEpochIterator:
    """One epoch of a :class:`TorchIterableDataset` in one process: what its ``iter()`` returns.

    >>> it = iter(hr.torch.to_torch(ds)); x = next(it); state = it.state_dict()

    Yields the elements as :func:`element_to_torch` makes them. Implements the ``Stateful`` protocol that
    ``torchdata.stateful_dataloader.StatefulDataLoader`` calls on the iterator of an ``IterableDataset`` (in
    its worker processes, right after each batch it fetches): :meth:`state_dict` is exact after every element
    (the position of headrace's own iterator, ``Iterator.get_state()``, plus the epoch and the worker share),
    and :meth:`load_state_dict` makes this iterator yield exactly the rest. The headrace iterator is built at
    the first ``next()`` (a restore never reads what it will skip) under the worker's share of the memory
    budget, and closed when the epoch ends, by :meth:`close` and on garbage collection.

    Raises:
        IteratorClosedError: ``next()`` / ``state_dict()`` after :meth:`close` or an interrupted ``next()``.
        StateError: :meth:`load_state_dict` of a state that is not one, or of another worker share.
    """

    def __init__(self, dataset: Dataset, epoch: int, share: int, worker: list[int], epochs: torch.Tensor,
                 slot: int) -> None:
        self._dataset, self._epoch, self._share, self._worker = dataset, epoch, share, worker
        self._epochs, self._slot = epochs, slot
        self._it: Any = None  # the headrace Iterator, from the first next()
        self._position: dict[str, Any] | None = None  # a restored headrace state, applied by the first next()
        self._done = False
        self._closed: str | None = None  # why next() raises IteratorClosedError (close(); load_state_dict reopens)
        self._in_next = InFlight("to_torch iterator next()")  # close() from another thread waits for it

    def __iter__(self) -> TorchEpochIterator:
        return self

    def __next__(self) -> Any:
        self._in_next.begin(self._check_open)
        try:
            return self._next_element()
        finally:
            self._in_next.end()

    def _check_open(self) -> None:
        if self._done:
            raise StopIteration
        if self._closed is not None:
            raise IteratorClosedError(f"next() on a to_torch iterator {self._closed}; load_state_dict() a state "
                                      "saved before to go on, or make a new one with iter(to_torch(ds))")

    def _next_element(self) -> Any:
        with budget_share(self._share):
            if self._it is None:
                self._it = self._build()
            try:
                element = next(self._it)
            except StopIteration:
                self._done = True
                self._release()
                raise
        return element_to_torch(element)

    def _build(self) -> Any:
        from ._iterator import Iterator as HeadraceIterator

        it = HeadraceIterator(self._dataset, iteration=self._epoch)
        if self._position is not None:
            try:
                it.set_state(self._position)
            except BaseException:
                it.close()
                raise
        return it

    @property
    def epoch(self) -> int:
        """The epoch (iteration path ``(epoch,)``) this iterator runs."""
        return self._epoch

    def state_dict(self) -> dict[str, Any]:
        """The position after the last element yielded.

        Returns:
            dict: ``{"format", "version", "epoch", "worker": [id, num_workers], "done", "position"}``,
            ``position`` being headrace's ``Iterator.get_state()`` (``None`` before the first element); a small
            JSON-serializable dict.

        Raises:
            IteratorClosedError: after :meth:`close` or an interrupted ``next()`` (the position is unknown).
        """
        if self._closed in (_POSITION_LOST, _CLOSED_MID_NEXT):
            raise IteratorClosedError(f"state_dict() on a to_torch iterator {self._closed}; use a state saved "
                                      "before")
        position = self._position if self._it is None or self._done else self._it.get_state()
        return _position_state(self._epoch, list(self._worker), None if self._done else position, done=self._done)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly after the element ``state`` was taken at.

        Its epoch first (the next ``iter()`` in this process runs the one after it), then its position in it.

        Args:
            state: a dict :meth:`state_dict` returned.

        Raises:
            StateError: not such a state, or taken in another worker share (``worker`` differs: a different
                ``num_workers``); from another pipeline: raised by the next ``next()``.
        """
        _check_position(state, "to_torch iterator load_state_dict()")
        if list(state["worker"]) != list(self._worker):
            raise StateError(f"to_torch iterator load_state_dict(): the state was taken in DataLoader worker "
                             f"{state['worker']} ([id, num_workers]) and this iterator runs in worker "
                             f"{self._worker}; restore with the same num_workers as when it was saved")
        self._release()
        self._closed = None
        self._epoch, self._position, self._done = int(state["epoch"]), state["position"], bool(state["done"])
        self._epochs[self._slot] = self._epoch + 1

    def close(self) -> None:
        """Stop the headrace iterator's threads (idempotent, from any thread). ``next()`` then raises
        ``IteratorClosedError`` (never the epoch again from its start); ``state_dict()`` is still the position
        after the last element yielded, and ``load_state_dict()`` reopens the iterator at a state.

        Called while another thread is inside ``next()``, it first waits (up to 10 s) for that ``next()`` to
        hand out its element, so the position kept is the one after it; past that wait it stops the iterator
        under the ``next()`` (which then raises ``IteratorClosedError``) and ``state_dict()`` raises
        ``IteratorClosedError`` (the position is unknown: use a state saved before).
        """
        if self._closed is None:
            self._in_next.settle(self._keep_position)
        self._release()

    def _keep_position(self, settled: bool) -> None:
        """close()'s position: after the last element handed out (``settled``: no next() is in progress)."""
        if self._closed is not None:  # (a second close() got here first)
            return
        self._closed = "closed by close()" if settled else _CLOSED_MID_NEXT
        it = self._it
        if settled and it is not None and not self._done:
            try:
                self._position = it.get_state()
            except IteratorClosedError:  # an interrupt inside next() closed it: the position is unknown
                self._closed = _POSITION_LOST

    def _release(self) -> None:
        it, self._it = self._it, None
        if it is not None:
            it.close()

    def __del__(self) -> None:
        # Only the reference goes: the headrace iterator's own collection closes it, in this thread or (where
        # this thread may hold the budget's lock) in the reaper's (headrace._reaper); a close() here could
        # wait on that lock.
        self.__dict__.pop("_it", None)


class TorchIterableDataset(IterableDataset):
    """A headrace ``Dataset`` seen as a ``torch.utils.data.IterableDataset`` (see :func:`to_torch`).

    Epochs: every ``iter()`` (one per epoch of a ``DataLoader``) runs the next iteration of the dataset, so
    ``shuffle`` and the other per-iteration random stages draw a new, reproducible order each epoch, as
    iterating ``ds`` itself (or tf.data) does: epoch ``e`` uses the iteration path ``(e,)``
    (``headrace._engine.seeds``) in the main process (``num_workers=0``) and in every worker alike. The
    count lives in a shared-memory int64 tensor, one slot for the main process and one per worker id, so
    it survives non-persistent workers (a fresh copy of this object each epoch), fork, spawn and
    forkserver. :meth:`set_epoch` sets it explicitly.

    Pickling (spawn/forkserver workers): the recipe goes with ``cloudpickle`` (lambdas included); the
    epoch tensor is shared, not copied, and so is a state given to :meth:`load_state_dict` not yet used.

    Checkpoints: ``iter()`` returns a :class:`TorchEpochIterator` (``state_dict()`` / ``load_state_dict()``,
    what ``StatefulDataLoader`` saves and restores); :meth:`state_dict` / :meth:`load_state_dict` here are the
    same position seen from the dataset (this process's latest ``iter()``; the next one).

    >>> loader = DataLoader(hr.torch.TorchIterableDataset(ds.batch(32)), batch_size=None, num_workers=2)

    Args:
        dataset, shard_by_worker, num_workers: as :func:`to_torch`'s (which checks them; the usual way to make one).

    Raises:
        ValueError: ``iter()`` in a ``DataLoader`` whose ``num_workers`` differs from ``num_workers``;
            :meth:`set_epoch` of an epoch that is not an int >= 0.
        StateError: ``iter()`` in a worker after :meth:`load_state_dict` of another worker's state.
    """

    def __init__(self, dataset: Dataset, *, shard_by_worker: bool = True, num_workers: int | None = None) -> None:
        super().__init__()
        self.dataset = dataset
        self.shard_by_worker = shard_by_worker
        self.num_workers = num_workers
        self._epochs = torch.zeros(1 + MAX_WORKERS, dtype=torch.int64).share_memory_()
        self._len: int | None = None
        self._pending: dict[str, Any] | None = None  # load_state_dict(): for the next iter()
        self._current: weakref.ref[TorchEpochIterator] | None = None  # this process's latest iter()

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` (in the main process and every worker, persistent or not) run epoch ``epoch``.

        The ones after it run ``epoch + 1``, ... Calling it before every epoch with the epoch number (the HF
        datasets / Accelerate convention) gives the same orders as not calling it at all; call it to resume at an
        epoch or to keep workers of DataLoaders with different ``num_workers`` in step.

        Args:
            epoch: an int >= 0 (0 is the first epoch).

        Raises:
            ValueError: ``epoch`` is not an int >= 0.
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer) or epoch < 0:
            raise ValueError(f"set_epoch({epoch!r}): the epoch must be an int >= 0 (0 is the first epoch)")
        self._epochs.fill_(int(epoch))

    def _worker_dataset(self, info: Any) -> Dataset:
        actual = 0 if info is None else info.num_workers
        if self.num_workers is not None and max(actual, 1) != max(self.num_workers, 1):  # 0 and 1: one reader
            raise ValueError(f"to_torch(num_workers={self.num_workers}) runs in a DataLoader with num_workers="
                             f"{actual}; pass the DataLoader's num_workers to to_torch (len() uses it)")
        if info is None or info.num_workers == 1:
            return self.dataset
        from ._dataset import Dataset
        from ._ops.shard import shard_at_source

        if not self.shard_by_worker:
            return self.dataset
        return Dataset(shard_at_source(self.dataset._node, info.num_workers, info.id))

    def _next_epoch(self, info: Any) -> int:
        """This process's epoch number, counted on (each worker id has its own slot: no races)."""
        slot = _slot(info)
        epoch = int(self._epochs[slot])
        self._epochs[slot] = epoch + 1
        return epoch

    def __iter__(self) -> TorchEpochIterator:
        # Counted here, not inside the iterator: a worker whose iterator is never advanced (its epoch was
        # cut short) still counts the epoch, so all workers stay on the same iteration path.
        info = get_worker_info()
        slot = _slot(info)
        worker = _worker(info)
        pending, self._pending = self._pending, None
        if pending is not None and pending["worker"] != worker:
            raise StateError(f"to_torch: load_state_dict() got the state of DataLoader worker {pending['worker']} "
                             f"([id, num_workers]), but iter() runs in worker {worker}; load a state into the "
                             "DataLoader (StatefulDataLoader.load_state_dict), not into its dataset, when it has "
                             "workers")
        epoch = self._next_epoch(info)
        share = 1 if info is None else max(1, info.num_workers)  # the workers split the memory budget
        it = TorchEpochIterator(self._worker_dataset(info), epoch, share, worker, self._epochs, slot)
        if pending is not None:
            it.load_state_dict(pending)
        self._current = weakref.ref(it)
        return it

    def state_dict(self) -> dict[str, Any]:
        """The position of this process's latest ``iter()`` (before the first: the start of the next one's epoch).

        ``DataLoader(num_workers=0)`` iterates in this process, so this is the loader's position, read one
        batch ahead when something (Lightning) prefetches; with workers each worker process has its own: use
        ``torchdata.stateful_dataloader.StatefulDataLoader``, which gathers them.

        Returns:
            dict: as :meth:`TorchEpochIterator.state_dict`: a small JSON-serializable dict.
        """
        current = self._current() if self._current is not None else None
        if current is not None:
            return current.state_dict()
        info = get_worker_info()
        return _position_state(int(self._epochs[_slot(info)]), _worker(info), None, done=False)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next ``iter()`` here continues exactly after ``state``'s element (its epoch's rest, then the next ones).

        Args:
            state: a dict from :meth:`state_dict` or :meth:`TorchEpochIterator.state_dict`.

        Raises:
            StateError: ``state`` is not such a state, or comes from another pipeline (raised by the first
                ``next()``), or from another worker (raised by ``iter()``).
        """
        self._pending = _check_position(state, "TorchIterableDataset.load_state_dict()")
        self._epochs[_slot(get_worker_info())] = int(state["epoch"])

    def __reduce__(self) -> tuple[Any, ...]:
        # The recipe (lambdas included) goes by value with cloudpickle, without the Dataset's own iteration
        # counter; the epoch tensor goes through the caller's pickler (torch.multiprocessing: shared memory).
        import cloudpickle

        state = {k: v for k, v in vars(self.dataset).items() if k != "_iterations"}
        recipe = cloudpickle.dumps((type(self.dataset), state))
        return (_rebuild, (recipe, self.shard_by_worker, self.num_workers, self._epochs, self._pending))

    def __len__(self) -> int:
        """The number of elements one epoch yields (``DataLoader(batch_size=None)``), counted once and kept.

        Exact wherever the count is knowable without running the pipeline: ``cardinality()``, and beyond it
        what indexes and record headers tell (``TFRecordDataset``, ``interleave`` of them; see
        ``headrace._engine.counted_cardinality``). With ``to_torch(..., num_workers=k)`` it is what the ``k``
        workers yield together: each batches its own share, so with ``batch`` after the shard point the count can exceed
        the dataset's (``range(10).batch(4)``: 3 batches, 4 with 2 workers); ``shard_by_worker=False``: ``k``
        times the dataset's.

        Raises:
            TypeError: infinite (``repeat()`` without a count), or unknown: the message names the op that
                makes the count unknown (e.g. ``filter``) and what to do.
        """
        if self._len is None:
            self._len = _count_epoch(self.dataset, self.num_workers or 1, self.shard_by_worker)
        return self._len


def _rebuild(recipe: bytes, shard_by_worker: bool, num_workers: int | None, epochs: torch.Tensor,
             pending: dict[str, Any] | None = None) -> TorchIterableDataset:
    """Unpickles a :class:`TorchIterableDataset` (see its ``__reduce__``)."""
    import cloudpickle

    cls, state = cloudpickle.loads(recipe)
    dataset = cls.__new__(cls)
    dataset.__dict__.update(state)
    out = TorchIterableDataset.__new__(TorchIterableDataset)
    IterableDataset.__init__(out)
    out.dataset, out.shard_by_worker, out.num_workers, out._epochs = dataset, shard_by_worker, num_workers, epochs
    out._len, out._pending, out._current = None, pending, None
    return out


_UNKNOWN_WHY = {
    "filter": "it keeps a number of elements known only by running its predicate",
    "TFRecordDataset": "with on_corrupt='skip' the good records are known only by reading them",
    "from_generator": "a generator's length is known only by running it",
    "from_source": "declare it with from_source(..., cardinality=n)",
    "unbatch": "the batch sizes are known only from the data",
    "ignore_errors": "the elements that fail are known only by running the pipeline",
    "interleave": "the count of a dataset its map_func makes is unknown",
    "flat_map": "the count of a dataset its map_func makes is unknown",
}


def _count_epoch(dataset: Dataset, workers: int, shard_by_worker: bool) -> int:
    """The elements one epoch yields over ``workers`` DataLoader workers (see ``TorchIterableDataset.__len__``)."""
    from ._engine.counted_cardinality import counting, unknown_cause
    from ._ops.shard import shard_at_source
    from ._options import INFINITE_CARDINALITY

    node = dataset._node
    parts = [shard_at_source(node, workers, i) if shard_by_worker else node for i in range(workers)]
    with counting():
        counts = [p.cardinality() for p in parts]
        if INFINITE_CARDINALITY in counts:
            raise TypeError("len(to_torch(ds)): the dataset is infinite (repeat() without a count); it has no "
                            "len(): pass repeat(n) a count, or iterate without len()")
        if min(counts) < 0:
            cause = next(c for c in map(unknown_cause, parts) if c is not None)
            why = _UNKNOWN_WHY.get(cause.label.split("(")[0], "how many elements it gives depends on the data")
            raise TypeError(f"len(to_torch(ds)): the number of elements is unknown without running the "
                            f"pipeline: {cause.label} makes it unknown ({why}). Count one epoch "
                            "(n = sum(1 for _ in ds)) and use n, or iterate without len()")
    return sum(counts)


def to_torch(dataset: Dataset, *, shard_by_worker: bool = True, num_workers: int | None = None
             ) -> TorchIterableDataset:
    """``dataset`` as a ``torch.utils.data.IterableDataset`` yielding tensors.

    >>> loader = DataLoader(hr.torch.to_torch(ds.batch(32), num_workers=2), batch_size=None, num_workers=2)

    Args:
        dataset: any headrace ``Dataset``; batch it in headrace (``.batch(n)``) and pass
            ``batch_size=None`` to the ``DataLoader`` to keep headrace's batching and memory budget.
        shard_by_worker: inside ``DataLoader(num_workers=k)`` worker ``i`` reads share ``i`` of ``k``,
            sharded at the source (disjoint, together complete; see the module docstring). ``False``: every
            worker reads everything.
        num_workers: the ``num_workers`` of the ``DataLoader`` it goes into, for ``len()`` only (the count of
            what the workers yield together, see :meth:`TorchIterableDataset.__len__`); ``None`` (default):
            ``len()`` counts one iteration without workers. Iterating it with another number of workers
            (``0`` and ``1`` count as the same) raises ``ValueError``.

    Returns:
        An ``IterableDataset``; ``len()`` works when ``dataset`` has a known cardinality. It pickles (the
        recipe with cloudpickle, lambdas included), so ``DataLoader(multiprocessing_context="spawn")`` and
        ``"forkserver"`` work; ``set_epoch(e)`` picks the epoch the next ``iter()`` runs; ``state_dict()`` /
        ``load_state_dict()`` (on it and on its iterators) make ``StatefulDataLoader`` restores exact.

    Raises:
        TypeError: ``dataset`` is not a headrace ``Dataset``.
        ValueError: ``num_workers`` is not ``None`` or an int in ``[0, MAX_WORKERS]``.
    """
    from ._dataset import Dataset

    if not isinstance(dataset, Dataset):
        raise TypeError(f"to_torch(dataset): expected a headrace.Dataset, got {type(dataset).__name__}")
    if num_workers is not None and (isinstance(num_workers, bool) or not isinstance(num_workers, int)
                                    or not 0 <= num_workers <= MAX_WORKERS):
        raise ValueError(f"to_torch(num_workers={num_workers!r}): expected None or the DataLoader's num_workers, "
                         f"an int in [0, {MAX_WORKERS}]")
    return TorchIterableDataset(dataset, shard_by_worker=shard_by_worker, num_workers=num_workers)


def _to_device(element: Any, device: torch.device, pin: bool) -> Any:
    def move(x: Any) -> Any:
        if isinstance(x, np.ndarray | np.generic):
            x = _leaf_to_tensor(x)
        if isinstance(x, torch.Tensor):
            if pin and not x.is_pinned():
                x = x.pin_memory()
            return x.to(device, non_blocking=pin)
        return x

    return map_structure(move, element)


def _record_stream(element: Any, stream: Any) -> None:
    def rec(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_cuda:
            x.record_stream(stream)
        return x

    map_structure(rec, element)


def device_prefetch(iterable: Iterable[Any], device: str | torch.device, buffer_size: int = 2
                    ) -> Iterator[Any]:
    """Yield the elements of ``iterable`` with their tensors (and numpy arrays) on ``device``.

    >>> for x, y in hr.torch.device_prefetch(DataLoader(hr.torch.to_torch(ds), batch_size=None), "cuda"): ...

    On CUDA the host tensors are pinned and copied with ``non_blocking=True`` on a side stream, keeping
    up to ``buffer_size`` elements in flight so the copy of the next batch overlaps compute on this one.
    On any other device the elements pass through (numpy leaves become tensors, then ``.to(device)``,
    a no-op on CPU).

    Args:
        iterable: elements (structures of tensors / numpy arrays), e.g. a ``DataLoader``.
        device: a ``torch.device`` or its name (``"cuda:0"``, ``"cpu"``).
        buffer_size: elements in flight on CUDA (an int >= 1).

    Returns:
        An iterator of the elements, their tensors on ``device`` (other leaves unchanged).

    Raises:
        ValueError: ``buffer_size < 1``.
    """
    if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
        raise ValueError(f"device_prefetch(buffer_size={buffer_size!r}) must be an int >= 1")
    device = torch.device(device)
    if device.type != "cuda":
        for element in iterable:
            yield _to_device(element, device, pin=False)
        return
    stream = torch.cuda.Stream(device=device)
    queue: collections.deque[Any] = collections.deque()
    source = iter(iterable)
    exhausted = False
    while True:
        while not exhausted and len(queue) < buffer_size:
            try:
                element = next(source)
            except StopIteration:
                exhausted = True
                break
            with torch.cuda.stream(stream):
                moved = _to_device(element, device, pin=True)
                ready = torch.cuda.Event()
                ready.record(stream)
            queue.append((moved, ready))
        if not queue:
            return
        element, ready = queue.popleft()
        torch.cuda.current_stream(device).wait_event(ready)
        _record_stream(element, torch.cuda.current_stream(device))
        yield element


__all__ = ["TorchEpochIterator", "TorchIterableDataset", "device_prefetch", "element_to_torch", "to_torch"]
