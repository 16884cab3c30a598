"""One training step, one evaluation pass, and the batch stream with data-iterator states (for ``fit``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._dataset import Dataset
from .._iterator import Iterator as HeadraceIterator
from ..distribute import ProcessInfo
from ..torch import device_prefetch, element_to_torch
from ._deps import import_torch
from .accumulate import AccumulationPlan, batch_size_of, split_batch
from .loss import LossFn, compute_loss

torch = import_torch()


class _Opaque:
    """Carries a data-iterator state through ``device_prefetch`` untouched (a leaf, not a structure)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _call(callbacks: Iterable[Any], method: str, *args: Any) -> None:
    for cb in callbacks:
        fn = getattr(cb, method, None)
        if fn is None and method == "on_step_end" and callable(cb):
            fn = cb
        if fn is not None:
            fn(*args)


def _check_element(batch: Any) -> tuple[Any, Any]:
    if not isinstance(batch, tuple | list) or len(batch) != 2:
        from .._structure import describe

        raise ValueError(f"fit() needs elements (inputs, targets); the dataset yields {describe(batch)}. "
                         "Map it to a 2-tuple, e.g. ds.map(lambda ex: (ex['image'], ex['label']))")
    return batch[0], batch[1]


def _all_reduce_min(value: int, device: Any, info: ProcessInfo) -> int:
    if not info.is_distributed:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MIN)
    return int(t.item())


def _all_reduce_sum(values: list[float], device: Any, info: ProcessInfo) -> list[float]:
    if not info.is_distributed:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return [float(v) for v in t.tolist()]


def _batches(dataset: Any, state: dict[str, Any] | None, want_state: Callable[[int], bool],
             first_index: int, closers: list[Any], epoch: int = 0) -> Iterator[tuple[Any, _Opaque]]:
    """Per-rank batches as tensors, each with the iterator state taken right after it (when wanted).

    The iterator of epoch ``e`` is iteration ``e`` of the dataset (its per-epoch shuffle seeds), so a run
    resumed in a new process shuffles its later epochs as the uninterrupted run did."""
    it = HeadraceIterator(dataset, iteration=epoch) if isinstance(dataset, Dataset) else iter(dataset)
    closers.append(it)
    if state is not None:
        it.set_state(state)
    index = first_index
    for element in it:
        index += 1
        snap = it.get_state() if want_state(index) else None
        yield element_to_torch(element), _Opaque(snap)


def _evaluate(model: Any, dataset: Any, loss_fn: LossFn, device: Any, precision: Any,
              info: ProcessInfo, micro: int) -> dict[str, float]:
    """Mean loss and (for class logits) accuracy over ``dataset`` (batches, run ``micro`` elements at a
    time so evaluation fits where training did), summed over ranks."""
    was_training = model.training
    model.eval()
    loss_sum = correct = count = graded = 0.0
    it = iter(dataset)
    try:
        with torch.no_grad():
            for batch in device_prefetch((element_to_torch(b) for b in it), device):
                size = batch_size_of(batch)
                for chunk in split_batch(batch, [min(micro, size - i) for i in range(0, size, micro)]):
                    x, y = _check_element(chunk)
                    with precision.autocast():
                        out = model(x)
                        loss = compute_loss(loss_fn, out, y, x)
                    n = int(y.shape[0])
                    loss_sum += float(loss) * n
                    count += n
                    if out.ndim == y.ndim + 1 and y.ndim >= 1 and not torch.is_floating_point(y):
                        labelled = y >= 0  # per-segment targets mark unused slots < 0 (headrace.train.text)
                        correct += float(((out.argmax(-1) == y) & labelled).sum())
                        graded += float(labelled.sum())
    finally:
        it.close()
        model.train(was_training)
    loss_sum, correct, count, graded = _all_reduce_sum([loss_sum, correct, count, graded], device, info)
    if count == 0:
        raise ValueError("eval_dataset is empty (or smaller than one batch on some rank); it must yield "
                         "at least one element per rank")
    return {"eval_loss": loss_sum / count, "eval_accuracy": correct / graded if graded else 0.0}


def _train_step(model: Any, ddp: Any, batch: Any, plan: AccumulationPlan, loss_fn: LossFn,
                optimizer: Any, prec: Any) -> Any:
    chunks = split_batch(batch, plan.micro_sizes)
    total = plan.per_rank_batch_size
    loss_sum = torch.zeros((), device=next(iter(model.parameters())).device)
    for i, chunk in enumerate(chunks):
        x, y = _check_element(chunk)
        n = plan.micro_sizes[i]
        last = i == len(chunks) - 1
        sync = contextlib.nullcontext() if ddp is None or last else ddp.no_sync()
        with sync:
            with prec.autocast():
                loss = compute_loss(loss_fn, (ddp or model)(x), y, x) * (n / total)
            if prec.scaler is not None:
                prec.scaler.scale(loss).backward()
            else:
                loss.backward()
        loss_sum += loss.detach().float()
    if prec.scaler is not None:
        prec.scaler.step(optimizer)
        prec.scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum
