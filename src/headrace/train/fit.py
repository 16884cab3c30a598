"""``fit()``: train a PyTorch model on a headrace ``Dataset`` inside a memory budget.

One optimizer step consumes one *global batch*. Each rank reads ``global_batch_size / world_size``
elements per step (one batch of its share of the data), splits it into micro-batches that fit in memory,
and accumulates their gradients (see :mod:`headrace.train.accumulate`); under DDP the gradient
all-reduce runs only on the last micro-batch (``no_sync()`` on the others).

Memory budget (CPU): ``memory_budget`` bytes on top of the process's RSS when ``fit`` starts (Python,
torch, the model's parameters). ``data_memory_fraction`` of it is the data pipeline's byte budget
(``Options(memory_budget=...)``); the rest holds the optimizer state, gradients and the activations of one
micro-batch, whose size ``micro_batch_size="auto"`` chooses (:mod:`headrace.train.micro_batch`). On CUDA the
micro-batch search measures GPU memory against 90% of the free GPU memory, and ``memory_budget`` bounds
the host side (the data pipeline).

Epochs, steps and resume: an epoch is one pass over the (sharded) dataset in whole per-rank batches
(``drop_remainder=True``, so every rank makes the same number of steps; under DDP the ranks also agree
each step that all of them still have data). ``steps`` stops after that many optimizer steps in total,
``epochs`` after that many passes; with neither, one epoch. A checkpoint records the data iterator's
state after the last batch consumed, so ``resume=True`` continues with the next unseen element.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .._memory import format_bytes, parse_bytes
from .._options import Options
from ..distribute import ProcessInfo, process_info
from ..torch import device_prefetch, element_to_torch
from ._deps import import_torch
from .accumulate import AccumulationPlan, make_plan, split_batch
from .checkpoint import capture_rng, latest_checkpoint, load_checkpoint, restore_rng, save_checkpoint
from .memory import PeakRSS, peak_rss_bytes, release_free_memory, rss_bytes
from .micro_batch import MicroBatchChoice, find_micro_batch_size, optimizer_state_bytes
from .precision import make_precision
from .progress import MetricsLog, Progress

torch = import_torch()


@dataclass
class StepInfo:
    """Passed to ``callback.on_step_end``: the step just finished and the per-rank batch it used."""

    step: int
    epoch: int
    loss: float
    batch: Any
    samples_per_s: float
    data_wait_fraction: float
    rss_bytes: int


@dataclass
class FitResult:
    """What ``fit`` returns: steps done, per-epoch history, the batch plan and memory figures."""

    steps: int
    epochs: int
    history: list[dict[str, Any]] = field(default_factory=list)
    micro_batch_size: int = 0
    accumulation_steps: int = 0
    micro_batch_choice: MicroBatchChoice | None = None
    samples_per_s: float = 0.0
    peak_rss_bytes: int = 0
    base_rss_bytes: int = 0
    memory_budget_bytes: int | None = None
    resumed_from: str | None = None


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


def _init_distributed(info: ProcessInfo, device: Any) -> bool:
    """Start the process group if torchrun launched us and nobody did; True if we started it."""
    dist = torch.distributed
    if not info.is_distributed or dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    import datetime

    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=300))
    return True


def _default_device(info: ProcessInfo) -> Any:
    if torch.cuda.is_available():
        return torch.device("cuda", info.local_rank % torch.cuda.device_count())
    return torch.device("cpu")


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
             first_index: int, closers: list[Any]) -> Iterator[tuple[Any, _Opaque]]:
    """Per-rank batches as tensors, each with the iterator state taken right after it (when wanted)."""
    it = iter(dataset)
    closers.append(it)
    if state is not None:
        it.set_state(state)
    index = first_index
    for element in it:
        index += 1
        snap = it.get_state() if want_state(index) else None
        yield element_to_torch(element), _Opaque(snap)


def _evaluate(model: Any, dataset: Any, loss_fn: Callable[[Any, Any], Any], device: Any, precision: Any,
              info: ProcessInfo) -> dict[str, float]:
    """Mean loss and (for class logits) accuracy over ``dataset`` (batches), summed over ranks."""
    was_training = model.training
    model.eval()
    loss_sum = correct = count = 0.0
    it = iter(dataset)
    try:
        with torch.no_grad():
            for batch in device_prefetch((element_to_torch(b) for b in it), device):
                x, y = _check_element(batch)
                with precision.autocast():
                    out = model(x)
                    loss = loss_fn(out, y)
                n = int(y.shape[0])
                loss_sum += float(loss) * n
                count += n
                if out.ndim == 2 and y.ndim == 1 and not torch.is_floating_point(y):
                    correct += float((out.argmax(1) == y).sum())
    finally:
        it.close()
        model.train(was_training)
    loss_sum, correct, count = _all_reduce_sum([loss_sum, correct, count], device, info)
    if count == 0:
        raise ValueError("eval_dataset is empty (or smaller than one batch on some rank); it must yield "
                         "at least one element per rank")
    return {"eval_loss": loss_sum / count, "eval_accuracy": correct / count}


def _resolve_budget(memory_budget: int | str | None) -> int | None:
    return None if memory_budget is None else parse_bytes(memory_budget, "memory_budget")


def _validate(global_batch_size: int, micro_batch_size: int | str, epochs: int | None, steps: int | None,
              checkpoint_every: int, data_memory_fraction: float, resume: bool,
              checkpoint_dir: Any) -> None:
    if micro_batch_size != "auto" and (isinstance(micro_batch_size, bool)
                                       or not isinstance(micro_batch_size, int) or micro_batch_size < 1):
        raise ValueError(f"micro_batch_size={micro_batch_size!r} must be 'auto' or an int >= 1")
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int) or global_batch_size < 1:
        raise ValueError(f"global_batch_size={global_batch_size!r} must be an int >= 1")
    for name, v in (("epochs", epochs), ("steps", steps)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name}={v!r} must be an int >= 1 or None")
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError(f"checkpoint_every={checkpoint_every!r} must be an int >= 1 (optimizer steps)")
    if not 0.0 < data_memory_fraction < 1.0:
        raise ValueError(f"data_memory_fraction={data_memory_fraction!r} must be in (0, 1)")
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs checkpoint_dir (where the checkpoints are)")


def fit(model: Any, dataset: Any, *, loss_fn: Callable[[Any, Any], Any], optimizer: Any,
        global_batch_size: int, micro_batch_size: int | str = "auto", epochs: int | None = None,
        steps: int | None = None, precision: str = "fp32", memory_budget: int | str | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None, checkpoint_every: int = 100,
        resume: bool = False, eval_dataset: Any = None, callbacks: Iterable[Any] = (),
        device: Any = None, shard: bool = True, data_memory_fraction: float = 0.25,
        metrics_path: str | os.PathLike[str] | None = None, progress: bool | None = None,
        log_every: int = 10, keep_checkpoints: int = 2) -> FitResult:
    """Train ``model`` on ``dataset``; returns a :class:`FitResult`.

    Args:
        model: any ``torch.nn.Module``; moved to ``device`` (wrapped in DDP under torchrun).
        dataset: a headrace ``Dataset`` of *unbatched* elements ``(inputs, targets)`` (nested structures
            of arrays allowed); ``fit`` batches it (``global_batch_size / world_size`` per rank).
        loss_fn: ``loss_fn(model(inputs), targets)`` -> scalar mean loss (e.g. ``nn.CrossEntropyLoss()``).
        optimizer: a ``torch.optim.Optimizer`` over ``model``'s parameters.
        global_batch_size: elements per optimizer step, over all ranks (a multiple of the world size).
        micro_batch_size: elements per forward/backward pass, or ``"auto"`` (largest that fits).
        epochs, steps: stop after this many passes / optimizer steps (module docstring).
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (CUDA only; uses a GradScaler).
        memory_budget: bytes (or ``"512MiB"``) above the starting RSS; see the module docstring.
            ``None``: the micro-batch search uses half the available memory and the pipeline keeps the
            dataset's own options.
        checkpoint_dir: where checkpoints (and, by default, ``metrics.jsonl``) go; None: no checkpoints.
        checkpoint_every: optimizer steps between checkpoints (one more is written at the end).
        resume: continue from the newest checkpoint in ``checkpoint_dir`` if there is one.
        eval_dataset: unbatched ``(inputs, targets)`` elements, evaluated after each epoch (loss;
            accuracy when the model returns ``(N, C)`` logits for integer labels).
        callbacks: objects with any of ``on_step_end(StepInfo)``, ``on_epoch_end(dict)``,
            ``on_checkpoint(path, step)``; a plain callable is called as ``on_step_end``.
        device: default ``cuda:<local rank>`` when CUDA is available, else CPU.
        shard: under torchrun, give each rank ``dataset.shard(world_size, rank)``; pass ``False`` when the
            dataset is already this rank's share (``headrace.distribute.auto_shard``).
        data_memory_fraction: share of ``memory_budget`` given to the data pipeline.
        metrics_path: JSON-lines metrics file (default ``<checkpoint_dir>/metrics.jsonl``).
        progress: show a progress bar on stderr (default: when stderr is a terminal).
        log_every: steps between progress updates and ``metrics.jsonl`` step records.
        keep_checkpoints: how many checkpoints to keep.

    Raises:
        ValueError: bad arguments, elements that are not ``(inputs, targets)``, a dataset with fewer
            elements than one per-rank batch.
        MemoryBudgetError: not even a micro-batch of 1 fits the budget.
        StateError: a checkpoint from another pipeline or world size.
    """
    _validate(global_batch_size, micro_batch_size, epochs, steps, checkpoint_every, data_memory_fraction,
              resume, checkpoint_dir)
    import sys

    info = process_info()
    dev = torch.device(device) if device is not None else _default_device(info)
    owns_group = _init_distributed(info, dev)
    info = process_info()
    closers: list[Any] = []
    try:
        return _fit(**locals() | {"device": dev, "info": info, "closers": closers,
                                  "show": bool(sys.stderr.isatty()) if progress is None else progress})
    finally:
        for it in closers:
            it.close()
        if owns_group:
            torch.distributed.destroy_process_group()


def _fit(*, model: Any, dataset: Any, loss_fn: Callable[[Any, Any], Any], optimizer: Any,
         global_batch_size: int, micro_batch_size: int | str, epochs: int | None, steps: int | None,
         precision: str, memory_budget: int | str | None, checkpoint_dir: Any, checkpoint_every: int,
         resume: bool, eval_dataset: Any, callbacks: Iterable[Any], device: Any, shard: bool,
         data_memory_fraction: float, metrics_path: Any, log_every: int, keep_checkpoints: int,
         info: ProcessInfo, closers: list[Any], show: bool, **_: Any) -> FitResult:
    callbacks = list(callbacks)
    prec = make_precision(precision, device)
    model.to(device)
    release_free_memory()
    base_rss = rss_bytes()
    budget = _resolve_budget(memory_budget)
    data_budget = int(budget * data_memory_fraction) if budget is not None else None
    if global_batch_size % info.world_size:
        make_plan(global_batch_size, info.world_size, 1)  # raises the explanatory ValueError
    per_rank = global_batch_size // info.world_size

    def prepare(ds: Any, drop_remainder: bool) -> Any:
        if info.is_distributed and shard:
            ds = ds.shard(info.world_size, info.rank)
        ds = ds.batch(per_rank, drop_remainder=drop_remainder)
        if data_budget is not None:
            ds = ds.with_options(Options(memory_budget=data_budget))
        return ds

    train_ds = prepare(dataset, True)
    eval_ds = prepare(eval_dataset, False) if eval_dataset is not None else None

    main = info.is_main
    ckpt_dir = os.fspath(checkpoint_dir) if checkpoint_dir is not None else None
    metrics = MetricsLog((metrics_path if metrics_path is not None else
                          (os.path.join(ckpt_dir, "metrics.jsonl") if ckpt_dir is not None
                           and "://" not in ckpt_dir else None)) if main else None)

    # ---- resume -------------------------------------------------------------------------------------
    step, epoch, data_state, resumed_from = 0, 0, None, None
    saved_micro: int | None = None
    if resume and ckpt_dir is not None:
        path = latest_checkpoint(ckpt_dir)
        if path is not None:
            ck = load_checkpoint(path, map_location=device)
            if ck["world_size"] != info.world_size:
                from .._errors import StateError

                raise StateError(f"{path} was written by {ck['world_size']} rank(s), this run has "
                                 f"{info.world_size}; resume with the same world size")
            model.load_state_dict(ck["model"])
            optimizer.load_state_dict(ck["optimizer"])
            if prec.scaler is not None and ck.get("scaler"):
                prec.scaler.load_state_dict(ck["scaler"])
            restore_rng(ck["rng"])
            step, epoch = int(ck["step"]), int(ck["epoch"])
            raw_state = ck["data_states"][info.rank]
            data_state = json.loads(raw_state) if raw_state is not None else None
            saved_micro = int(ck["micro_batch_size"])
            resumed_from = path

    bar = Progress(show and main, steps, budget, base_rss)
    try:
        # ---- micro-batch ------------------------------------------------------------------------------
        choice: MicroBatchChoice | None = None
        if micro_batch_size == "auto" and saved_micro is not None:
            micro = saved_micro
        elif micro_batch_size == "auto":
            peek = iter(train_ds)
            try:
                first = next(peek, None)
            finally:
                peek.close()
            if first is None:
                raise ValueError(f"the dataset has fewer than {per_rank} elements (one per-rank batch of "
                                 f"global_batch_size={global_batch_size} / {info.world_size} rank(s)) on "
                                 f"rank {info.rank}; use a smaller global_batch_size or more data")
            sample = device_prefetch([element_to_torch(_check_element(first))], device).__next__()
            del first
            if device.type == "cuda":
                free, _total = torch.cuda.mem_get_info(device)
                search_budget = int(0.9 * free)
                reserve = optimizer_state_bytes(optimizer)
            else:
                search_budget = (budget - data_budget if budget is not None    # type: ignore[operator]
                                 else int(__import__("psutil").virtual_memory().available // 2))
                reserve = optimizer_state_bytes(optimizer)
            choice = find_micro_batch_size(model, sample, loss_fn, budget_bytes=search_budget, cap=per_rank,
                                           precision=prec, base_rss_bytes=base_rss, reserve_bytes=reserve,
                                           device=device)
            del sample
            micro = _all_reduce_min(choice.size, device, info)
            bar.message(f"auto micro-batch: {choice.describe()}")
        else:
            micro = int(micro_batch_size)
        plan = make_plan(global_batch_size, info.world_size, micro)
        bar.message(plan.describe())
        if main and not show:
            print(f"headrace.fit: {plan.describe()}"
                  + (f"; auto {choice.describe()}" if choice is not None else ""), flush=True)
        return _loop(model=model, train_ds=train_ds, eval_ds=eval_ds, loss_fn=loss_fn, optimizer=optimizer,
                     plan=plan, prec=prec, device=device, info=info, epochs=epochs, steps=steps,
                     step=step, epoch=epoch, data_state=data_state, ckpt_dir=ckpt_dir,
                     checkpoint_every=checkpoint_every, keep=keep_checkpoints, callbacks=callbacks,
                     metrics=metrics, bar=bar, log_every=log_every, closers=closers, choice=choice,
                     base_rss=base_rss, budget=budget, resumed_from=resumed_from)
    finally:
        bar.close()


def _checkpoint(*, ckpt_dir: str, model: Any, optimizer: Any, prec: Any, step: int, epoch: int,
                data_state: dict[str, Any] | None, info: ProcessInfo, plan: AccumulationPlan, keep: int,
                callbacks: list[Any]) -> None:
    state_json = json.dumps(data_state) if data_state is not None else None
    if info.is_distributed:
        gathered: list[Any] = [None] * info.world_size
        torch.distributed.all_gather_object(gathered, state_json)
    else:
        gathered = [state_json]
    if not info.is_main:
        return
    payload = {"step": step, "epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
               "scaler": prec.scaler.state_dict() if prec.scaler is not None else None,
               "rng": capture_rng(), "data_states": gathered, "world_size": info.world_size,
               "micro_batch_size": plan.micro_batch_size}
    path = save_checkpoint(ckpt_dir, payload, keep=keep)
    _call(callbacks, "on_checkpoint", path, step)


def _train_step(model: Any, ddp: Any, batch: Any, plan: AccumulationPlan, loss_fn: Callable[[Any, Any], Any],
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
                loss = loss_fn((ddp or model)(x), y) * (n / total)
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


def _loop(*, model: Any, train_ds: Any, eval_ds: Any, loss_fn: Callable[[Any, Any], Any], optimizer: Any,
          plan: AccumulationPlan, prec: Any, device: Any, info: ProcessInfo, epochs: int | None,
          steps: int | None, step: int, epoch: int, data_state: dict[str, Any] | None, ckpt_dir: str | None,
          checkpoint_every: int, keep: int, callbacks: list[Any], metrics: MetricsLog, bar: Progress,
          log_every: int, closers: list[Any], choice: MicroBatchChoice | None, base_rss: int,
          budget: int | None, resumed_from: str | None) -> FitResult:
    ddp = None
    if info.is_distributed:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    model.train()
    max_epochs = epochs if epochs is not None else (None if steps is not None else 1)
    result = FitResult(steps=step, epochs=epoch, micro_batch_size=plan.micro_batch_size,
                       accumulation_steps=plan.accumulation_steps, micro_batch_choice=choice,
                       base_rss_bytes=base_rss, memory_budget_bytes=budget, resumed_from=resumed_from)
    t_start = time.perf_counter()
    samples_total = 0
    wait_total = 0.0

    def want_state(index: int) -> bool:
        return ckpt_dir is not None and (index % checkpoint_every == 0 or index == steps)

    last_state: Any = None
    ended_early = False

    with PeakRSS() as peak:
        while (max_epochs is None or epoch < max_epochs) and (steps is None or step < steps):
            t_epoch = time.perf_counter()
            epoch_loss, epoch_steps, epoch_samples = 0.0, 0, 0
            fresh_epoch = data_state is None
            source = _batches(train_ds, data_state, want_state, step, closers)
            data_state = None
            stream = device_prefetch(source, device)
            while steps is None or step < steps:
                t0 = time.perf_counter()
                item = next(stream, None)
                wait = time.perf_counter() - t0
                if _all_reduce_min(int(item is not None), device, info) == 0:
                    break
                batch, snap = item  # type: ignore[misc]
                loss = float(_train_step(model, ddp, batch, plan, loss_fn, optimizer, prec))
                if not math.isfinite(loss):
                    raise FloatingPointError(f"loss is {loss} at step {step + 1} (epoch {epoch}); lower the "
                                             "learning rate or use precision='fp32'")
                step += 1
                epoch_steps += 1
                epoch_loss += loss
                epoch_samples += plan.global_batch_size
                samples_total += plan.global_batch_size
                wait_total += wait
                elapsed = time.perf_counter() - t_start
                sps = samples_total / max(elapsed, 1e-9)
                rss = rss_bytes()
                info_step = StepInfo(step, epoch, loss, batch, sps, wait_total / max(elapsed, 1e-9), rss)
                _call(callbacks, "on_step_end", info_step)
                if step % log_every == 0 or step == steps:
                    bar.update(step, loss, sps, info_step.data_wait_fraction, rss)
                    metrics.write({"event": "step", "step": step, "epoch": epoch, "loss": loss,
                                   "samples_per_s": sps, "data_wait_fraction": info_step.data_wait_fraction,
                                   "rss_bytes": rss, "time_s": elapsed})
                if snap.value is not None:
                    last_state = snap.value
                if snap.value is not None and step % checkpoint_every == 0:
                    _checkpoint(ckpt_dir=ckpt_dir, model=model, optimizer=optimizer, prec=prec,  # type: ignore[arg-type]
                                step=step, epoch=epoch, data_state=last_state, info=info, plan=plan,
                                keep=keep, callbacks=callbacks)
            else:
                ended_early = True
            for it in closers:
                it.close()
            closers.clear()
            if epoch_steps == 0 and not ended_early and fresh_epoch:
                raise ValueError(f"the dataset has fewer than {plan.per_rank_batch_size} elements per rank "
                                 f"(one batch of global_batch_size={plan.global_batch_size} / "
                                 f"{info.world_size} rank(s)); use a smaller global_batch_size or more data")
            if ended_early:
                break
            record: dict[str, Any] = {"epoch": epoch, "steps": epoch_steps,
                                      "train_loss": epoch_loss / max(epoch_steps, 1),
                                      "time_s": time.perf_counter() - t_epoch}
            record["samples_per_s"] = epoch_samples / max(record["time_s"], 1e-9)
            if eval_ds is not None:
                record.update(_evaluate(model, eval_ds, loss_fn, device, prec, info))
            record["rss_bytes"] = rss_bytes()
            record["peak_rss_bytes"] = peak_rss_bytes()
            epoch += 1
            result.history.append(record)
            metrics.write({"event": "epoch", **record})
            _call(callbacks, "on_epoch_end", record)
            bar.message(_epoch_line(record, budget, base_rss))
        if ckpt_dir is not None and step > result.steps and step % checkpoint_every != 0:
            _checkpoint(ckpt_dir=ckpt_dir, model=model, optimizer=optimizer, prec=prec, step=step,
                        epoch=epoch, data_state=last_state if ended_early else None, info=info, plan=plan,
                        keep=keep, callbacks=callbacks)
    elapsed = time.perf_counter() - t_start
    result.steps = step
    result.epochs = epoch
    result.samples_per_s = samples_total / max(elapsed, 1e-9)
    result.peak_rss_bytes = peak.peak_bytes
    metrics.write({"event": "end", "steps": step, "epochs": epoch, "samples_per_s": result.samples_per_s,
                   "peak_rss_bytes": peak.peak_bytes, "base_rss_bytes": base_rss,
                   "memory_budget_bytes": budget, "time_s": elapsed})
    bar.message(f"done: {step} steps, {epoch} epoch(s), {result.samples_per_s:,.1f} samples/s, peak RSS "
                f"{format_bytes(peak.peak_bytes)}" + (f" (base {format_bytes(base_rss)} + budget "
                                                       f"{format_bytes(budget)})" if budget else ""))
    return result


def _epoch_line(record: dict[str, Any], budget: int | None, base_rss: int) -> str:
    parts = [f"epoch {record['epoch']}: train loss {record['train_loss']:.4f}"]
    if "eval_accuracy" in record:
        parts.append(f"eval loss {record['eval_loss']:.4f}, accuracy {100 * record['eval_accuracy']:.1f}%")
    parts.append(f"{record['samples_per_s']:,.1f} samples/s")
    mem = f"peak RSS {format_bytes(record['peak_rss_bytes'])}"
    if budget is not None:
        mem += f" (base {format_bytes(base_rss)} + budget {format_bytes(budget)})"
    parts.append(mem)
    return ", ".join(parts)


__all__ = ["FitResult", "StepInfo", "fit"]
