"""PyTorch adapter: a headrace ``Dataset`` as a ``torch.utils.data.IterableDataset``, and device prefetch.

``to_torch(ds)`` yields each element with its numpy leaves as ``torch.Tensor`` (``torch.from_numpy``,
sharing memory, when the array is writable and of a dtype torch has; read-only arrays are copied once so
that in-place ops on the tensor cannot write into a buffer headrace still owns). ``bytes`` leaves and
object arrays stay as they are. Inside a ``DataLoader(num_workers=k)`` worker ``i`` reads share ``i`` of
``k``, taken at the source (``headrace._ops.shard.shard_at_source``: whole files when there are at least
``k``, else records; every map, batch, shuffle above it runs on that share only), so the workers read and
decode disjoint shares that together are the whole dataset (order across workers is the DataLoader's
round-robin, not ``ds``'s); and each worker's iterators get ``1/k`` of the memory budget.

``device_prefetch(batches, device)`` copies batches to ``device`` ahead of use: on CUDA from pinned memory
with ``non_blocking=True`` on a side stream, ``buffer_size`` batches in flight; on CPU it passes batches
through unchanged.

Requires torch (``pip install 'headrace[torch]'``).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ._deps import require
from ._structure import map_structure

torch = require("torch", "headrace.torch")
_torch_data = require("torch.utils.data", "headrace.torch")
IterableDataset = _torch_data.IterableDataset
get_worker_info = _torch_data.get_worker_info

if TYPE_CHECKING:
    from ._dataset import Dataset

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

    Writable arrays share memory with the tensor (``torch.from_numpy``); read-only ones are copied.
    ``bytes``, strings and object arrays are returned unchanged.
    """
    return map_structure(_leaf_to_tensor, element)


class TorchIterableDataset(IterableDataset):
    """A headrace ``Dataset`` seen as a ``torch.utils.data.IterableDataset`` (see :func:`to_torch`)."""

    def __init__(self, dataset: Dataset, *, shard_by_worker: bool = True) -> None:
        super().__init__()
        self.dataset = dataset
        self.shard_by_worker = shard_by_worker

    def _worker_dataset(self) -> Dataset:
        info = get_worker_info()
        if info is None or info.num_workers == 1:
            return self.dataset
        from . import _memory
        from ._dataset import Dataset
        from ._ops.shard import shard_at_source

        _memory.set_process_share(info.num_workers)  # the workers split the memory budget
        if not self.shard_by_worker:
            return self.dataset
        return Dataset(shard_at_source(self.dataset._node, info.num_workers, info.id))

    def __iter__(self) -> Iterator[Any]:
        it = iter(self._worker_dataset())
        try:
            for element in it:
                yield element_to_torch(element)
        finally:
            it.close()

    def __len__(self) -> int:
        return len(self.dataset)


def to_torch(dataset: Dataset, *, shard_by_worker: bool = True) -> TorchIterableDataset:
    """``dataset`` as a ``torch.utils.data.IterableDataset`` yielding tensors.

    Args:
        dataset: any headrace ``Dataset``; batch it in headrace (``.batch(n)``) and pass
            ``batch_size=None`` to the ``DataLoader`` to keep headrace's batching and memory budget.
        shard_by_worker: inside ``DataLoader(num_workers=k)`` worker ``i`` reads share ``i`` of ``k``,
            sharded at the source (disjoint, together complete; see the module docstring). ``False``: every
            worker reads everything.

    Returns:
        An ``IterableDataset``; ``len()`` works when ``dataset`` has a known cardinality.
    """
    from ._dataset import Dataset

    if not isinstance(dataset, Dataset):
        raise TypeError(f"to_torch(dataset): expected a headrace.Dataset, got {type(dataset).__name__}")
    return TorchIterableDataset(dataset, shard_by_worker=shard_by_worker)


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

    On CUDA the host tensors are pinned and copied with ``non_blocking=True`` on a side stream, keeping
    up to ``buffer_size`` elements in flight so the copy of the next batch overlaps compute on this one.
    On any other device the elements pass through (numpy leaves become tensors, then ``.to(device)``,
    a no-op on CPU).

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


__all__ = ["TorchIterableDataset", "device_prefetch", "element_to_torch", "to_torch"]
