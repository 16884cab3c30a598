"""The epoch/step loop of ``fit``: steps, checkpoints, evaluation, progress and metrics."""

from __future__ import annotations

import json
import math
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from .._errors import DATA_ERRORS, DataLossError
from .._memory import format_bytes
from ..distribute import ProcessInfo
from ..torch import device_prefetch
from ._deps import import_torch
from .accumulate import AccumulationPlan
from .checkpoint import capture_rng, save_checkpoint
from .interrupt import StopRequest, TrainingInterrupted, signal_name
from .memory import PeakRSS, peak_rss_bytes, release_free_memory, rss_bytes
from .micro_batch import MicroBatchChoice
from .options import FitOptions
from .process_group import process_group_active, sync_buffers
from .progress import MetricsLog, Progress
from .steps import _all_reduce_min, _batches, _call, _evaluate, _train_step

torch = import_torch()



@dataclass
class StepInfo:
    """Passed to ``callback.on_step_end``: the step just finished, its epoch (counted from 1) and the per-rank
    batch it used."""

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


def _checkpoint(*, ckpt_dir: str, model: Any, optimizer: Any, scheduler: Any, prec: Any, step: int, epoch: int,
                data_state: dict[str, Any] | None, info: ProcessInfo, plan: AccumulationPlan, keep: int,
                callbacks: list[Any], progress: dict[str, Any]) -> str | None:
    """Write a checkpoint (all ranks take part); its path on rank 0, None on the others. ``progress``: what
    a resumed run's history and clock go on from (``elapsed_s``, ``history``, and mid-epoch the epoch's
    ``epoch_steps``, ``epoch_loss``, ``epoch_samples``, ``epoch_time_s``), stored as a JSON string."""
    state_json = json.dumps(data_state) if data_state is not None else None
    if info.is_distributed:
        gathered: list[Any] = [None] * info.world_size
        torch.distributed.all_gather_object(gathered, state_json)
    else:
        gathered = [state_json]
    if not info.is_main:
        return None
    payload = {"step": step, "epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
               "scaler": prec.scaler.state_dict() if prec.scaler is not None else None,
               "lr_scheduler": scheduler.state_dict() if scheduler is not None else None,
               "rng": capture_rng(), "data_states": gathered, "world_size": info.world_size,
               "micro_batch_size": plan.micro_batch_size, "progress": json.dumps(progress)}
    path = save_checkpoint(ckpt_dir, payload, keep=keep)
    _call(callbacks, "on_checkpoint", path, step)
    return path


@dataclass
class Run:
    """What ``fit`` set up for the loop: the batch plan, precision, device and ranks, where checkpoints
    and metrics go, the progress display, the data iterators to close, the memory figures, and where a
    resume starts (``step``, ``epoch``, the data iterator's ``data_state``; ``carried``: the resumed
    checkpoint's ``progress``, :func:`_checkpoint`: the history, the clock (``time_s`` in
    ``metrics.jsonl``) and, mid-epoch, the epoch's counts go on from it)."""

    plan: AccumulationPlan
    prec: Any
    device: Any
    info: ProcessInfo
    ckpt_dir: str | None
    metrics: MetricsLog
    bar: Progress
    closers: list[Any]
    callbacks: list[Any]
    base_rss: int
    budget: int | None
    choice: MicroBatchChoice | None = None
    step: int = 0
    epoch: int = 0
    data_state: dict[str, Any] | None = None
    resumed_from: str | None = None
    carried: dict[str, Any] | None = None
    stop: StopRequest | None = None


def _loop(model: Any, train_ds: Any, eval_ds: Any, opts: FitOptions, run: Run) -> FitResult:
    """The loop, from ``run``'s step and epoch, with ``opts`` (``fit``'s arguments)."""
    loss_fn, optimizer, scheduler = opts.loss_fn, opts.optimizer, opts.lr_scheduler
    steps, checkpoint_every, keep, log_every = opts.steps, opts.checkpoint_every, opts.keep_checkpoints, opts.log_every
    plan, prec, device, info, ckpt_dir = run.plan, run.prec, run.device, run.info, run.ckpt_dir
    metrics, bar, closers, callbacks, base_rss, budget = (run.metrics, run.bar, run.closers, run.callbacks,
                                                          run.base_rss, run.budget)
    step, epoch, data_state, stop = run.step, run.epoch, run.data_state, run.stop
    ddp = None
    if process_group_active():  # also one rank under torchrun: the same DDP path as with more
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    model.train()
    max_epochs = opts.max_epochs
    result = FitResult(steps=step, epochs=epoch, micro_batch_size=plan.micro_batch_size,
                       accumulation_steps=plan.accumulation_steps, micro_batch_choice=run.choice,
                       base_rss_bytes=base_rss, memory_budget_bytes=budget, resumed_from=run.resumed_from)
    carried = run.carried or {}
    result.history = list(carried.get("history", []))
    t_start = time.perf_counter() - float(carried.get("elapsed_s", 0.0))  # the run's clock, across resumes
    t_session = time.perf_counter()
    samples_total = 0
    wait_total = 0.0

    def want_state(index: int) -> bool:  # every step: a Ctrl-C checkpoint can come at any step (~20 us each)
        return ckpt_dir is not None

    def save(data_state: Any) -> str | None:
        now = time.perf_counter()
        progress: dict[str, Any] = {"elapsed_s": now - t_start, "history": result.history}
        if data_state is not None:  # mid-epoch
            progress.update(epoch_steps=epoch_steps, epoch_loss=epoch_loss, epoch_samples=epoch_samples,
                            epoch_time_s=now - t_epoch)
        return _checkpoint(ckpt_dir=ckpt_dir, model=model, optimizer=optimizer, scheduler=scheduler,  # type: ignore[arg-type]
                           prec=prec, step=step, epoch=epoch, data_state=data_state, info=info, plan=plan,
                           keep=keep, callbacks=callbacks, progress=progress)

    def stop_requested() -> bool:  # every rank stops at the same step
        return _all_reduce_min(int(stop is None or not stop.requested), device, info) == 0

    def interrupted(data_state: Any) -> TrainingInterrupted:
        path = save(data_state) if ckpt_dir is not None else None
        signum = stop.signum if stop is not None and stop.signum is not None else signal.SIGINT
        how = "interrupted" if signum == signal.SIGINT else f"interrupted ({signal_name(signum)})"
        if path is not None:
            bar.message(f"{how}: checkpoint of step {step} (epoch {epoch + 1}) written to {path}")
        else:
            bar.message(f"{how} after step {step} (epoch {epoch + 1}); no checkpoint_dir, nothing saved")
        return TrainingInterrupted(step, path, signum)

    def stopped_on(error: BaseException | None, data_state: Any) -> BaseException:
        path = save(data_state) if ckpt_dir is not None and step > 0 else None
        if error is None:  # another rank's data error; that rank reports it
            error = DataLossError(f"rank {info.rank}: stopped at step {step}: another rank hit corrupt data")
        where = (f"checkpoint of step {step} (epoch {epoch + 1}) written to {path}: skip such records "
                 "(on_corrupt='skip') or fix the data, then resume from it" if path is not None
                 else f"no checkpoint written (step {step}{'' if ckpt_dir else ', no checkpoint_dir'})")
        bar.message(f"stopped on a data error: {where}")
        error.add_note(where)
        return error

    last_state: Any = None
    ended_early = False

    with PeakRSS() as peak:
        while (max_epochs is None or epoch < max_epochs) and (steps is None or step < steps):
            t_epoch = time.perf_counter()
            epoch_loss, epoch_steps, epoch_samples = 0.0, 0, 0
            fresh_epoch = data_state is None
            if not fresh_epoch and "epoch_steps" in carried:  # resumed mid-epoch: its counts go on
                epoch_loss, epoch_steps = float(carried["epoch_loss"]), int(carried["epoch_steps"])
                epoch_samples = int(carried["epoch_samples"])
                t_epoch -= float(carried["epoch_time_s"])
            source = _batches(train_ds, data_state, want_state, step, closers, epoch)
            data_state = None
            stream = device_prefetch(source, device)
            while steps is None or step < steps:
                t0 = time.perf_counter()
                data_error: BaseException | None = None
                try:
                    item = next(stream, None)
                except DATA_ERRORS as exc:
                    item, data_error = None, exc
                wait = time.perf_counter() - t0
                status = _all_reduce_min(0 if data_error is not None else 1 if item is None else 2, device, info)
                if status == 0:  # a rank hit corrupt data: every rank checkpoints, then stops
                    raise stopped_on(data_error, last_state)
                if status == 1:
                    break
                batch, snap = item  # type: ignore[misc]
                loss = float(_train_step(model, ddp, batch, plan, loss_fn, optimizer, prec))
                if scheduler is not None:
                    scheduler.step()
                if not math.isfinite(loss):
                    raise FloatingPointError(f"loss is {loss} at step {step + 1} (epoch {epoch}); lower the "
                                             "learning rate or use precision='fp32'")
                step += 1
                epoch_steps += 1
                epoch_loss += loss
                epoch_samples += plan.global_batch_size
                samples_total += plan.global_batch_size
                wait_total += wait
                now = time.perf_counter()
                session = max(now - t_session, 1e-9)  # this process's rates; time_s is the run's clock
                sps = samples_total / session
                rss = rss_bytes()
                info_step = StepInfo(step, epoch + 1, loss, batch, sps, wait_total / session, rss)
                _call(callbacks, "on_step_end", info_step)
                bar.update(step, loss, sps, info_step.data_wait_fraction, rss, epoch=epoch + 1)
                if step % log_every == 0 or step == steps:
                    metrics.write({"event": "step", "step": step, "epoch": epoch + 1, "loss": loss,
                                   "samples_per_s": sps, "data_wait_fraction": info_step.data_wait_fraction,
                                   "rss_bytes": rss, "time_s": now - t_start})
                if snap.value is not None:
                    last_state = snap.value
                if stop_requested():
                    raise interrupted(last_state)
                if snap.value is not None and step % checkpoint_every == 0:
                    save(last_state)
            else:
                ended_early = True
            if ddp is not None:
                sync_buffers(model)  # every replica = rank 0's model, BatchNorm statistics included
            data_peak = max((it.memory_stats()["peak_bytes"] for it in closers), default=0)
            for it in closers:
                it.close()
            closers.clear()
            if epoch_steps == 0 and not ended_early and fresh_epoch:
                raise ValueError(f"the dataset has fewer than {plan.per_rank_batch_size} elements per rank "
                                 f"(one batch of global_batch_size={plan.global_batch_size} / "
                                 f"{info.world_size} rank(s)); use a smaller global_batch_size or more data")
            if ended_early:
                break
            record: dict[str, Any] = {"epoch": epoch + 1, "steps": epoch_steps,
                                      "train_loss": epoch_loss / max(epoch_steps, 1),
                                      "time_s": time.perf_counter() - t_epoch}
            record["samples_per_s"] = epoch_samples / max(record["time_s"], 1e-9)
            if eval_ds is not None:
                release_free_memory()
                record.update(_evaluate(model, eval_ds, loss_fn, device, prec, info, plan.micro_batch_size))
            release_free_memory()
            record["data_pipeline_peak_bytes"] = data_peak
            record["rss_bytes"] = rss_bytes()
            record["peak_rss_bytes"] = peak_rss_bytes()
            epoch += 1
            result.history.append(record)
            metrics.write({"event": "epoch", **record})
            _call(callbacks, "on_epoch_end", record)
            bar.message(_epoch_line(record, budget, base_rss))
            if bar.total_steps is None and max_epochs is not None and fresh_epoch:
                bar.set_total(epoch_steps * max_epochs if steps is None else min(steps, epoch_steps * max_epochs))
            if stop_requested() and (max_epochs is None or epoch < max_epochs) and (steps is None or step < steps):
                raise interrupted(None)
        if ckpt_dir is not None and step > result.steps and step % checkpoint_every != 0:
            save(last_state if ended_early else None)
    now = time.perf_counter()
    result.steps = step
    result.epochs = epoch
    result.samples_per_s = samples_total / max(now - t_session, 1e-9)
    result.peak_rss_bytes = peak.peak_bytes
    metrics.write({"event": "end", "steps": step, "epochs": epoch, "samples_per_s": result.samples_per_s,
                   "peak_rss_bytes": peak.peak_bytes, "base_rss_bytes": base_rss,
                   "memory_budget_bytes": budget, "time_s": now - t_start})
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


__all__ = ["FitResult", "StepInfo"]
