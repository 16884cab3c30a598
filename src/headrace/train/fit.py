"""``fit()``: train a PyTorch model on a headrace ``Dataset`` inside a memory budget.

One optimizer step consumes one *global batch*. Each rank reads ``global_batch_size / world_size``
elements per step (one batch of its share of the data), splits it into micro-batches that fit in memory,
and accumulates their gradients (see :mod:`headrace.train.accumulate`); under DDP the gradient
all-reduce runs only on the last micro-batch (``no_sync()`` on the others).

Memory budget (CPU): ``memory_budget`` bytes on top of the process's RSS when ``fit`` starts (Python,
torch, the model's parameters). ``data_memory_fraction`` of it is the data pipeline's byte budget
(``Options(memory_budget=...)``); the rest holds the optimizer state, gradients and the activations of one
micro-batch, whose size ``micro_batch_size="auto"`` chooses (:mod:`headrace.train.micro_batch`), aiming at
``1 - CPU_HEADROOM`` of that rest. On CUDA the
micro-batch search measures GPU memory against 90% of the GPU memory this process can still allocate
(within ``gpu_memory_fraction``, :mod:`headrace.train.gpu`), and ``memory_budget`` bounds the host side
(the data pipeline).

Epochs, steps and resume: an epoch is one pass over the (sharded) dataset in whole per-rank batches
(``drop_remainder=True``, so every rank makes the same number of steps; under DDP the ranks also agree
each step that all of them still have data). ``steps`` stops after that many optimizer steps in total,
``epochs`` after that many passes; with neither, one epoch. Epochs are numbered from 1 in everything
``fit`` shows or records (progress, ``history``, ``metrics.jsonl``, ``StepInfo``). A checkpoint records
the data iterator's state after the last batch consumed, so ``resume=True`` continues with the next
unseen element. With an :class:`~headrace.train.elastic.ElasticDataset` the state is the global position in
a global order, so the checkpoint resumes at any world size (:mod:`headrace.train.elastic`); any other
pipeline resumes mid-epoch only at the world size that wrote it.

Ctrl-C (SIGINT) or SIGTERM (a preemption) while training finishes the step in progress, writes a checkpoint
of that point (with a ``checkpoint_dir``), prints where, and raises
:class:`~headrace.train.interrupt.TrainingInterrupted` (a ``KeyboardInterrupt``), in every rank; a second
Ctrl-C stops at once, a second SIGTERM is ignored (:mod:`headrace.train.interrupt`). Corrupt data
(:class:`~headrace.DataLossError`, :class:`~headrace.ImageDecodeError`) stops training the same way: a
checkpoint of the step reached first (every rank), then the error, with a note naming the checkpoint.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from .._errors import StateError
from .._memory import parse_bytes
from .._options import Options
from ..distribute import ProcessInfo, process_info
from ..torch import device_prefetch, element_to_torch
from ._deps import import_torch
from .accumulate import make_plan
from .checkpoint import latest_checkpoint, load_checkpoint, restore_rng
from .elastic import RankBatches, rank_data, resume_data_state
from .gpu import available_gpu_bytes, check_memory_fraction, configure_gpu_memory
from .interrupt import StopRequest, signal_name
from .loop import FitResult, Run, StepInfo, _loop
from .loss import LossFn
from .memory import limit_heap_retention, release_free_memory, rss_bytes
from .micro_batch import MicroBatchChoice, find_micro_batch_size, optimizer_state_bytes
from .options import FitOptions
from .precision import make_precision
from .process_group import start_process_group
from .progress import MetricsLog, Progress
from .steps import _all_reduce_min, _check_element

torch = import_torch()

CPU_HEADROOM = 0.2
"""Share of the CPU training budget the micro-batch search leaves free: over many steps the RSS exceeds
one measured step by heap fragmentation and the pipeline threads' allocator arenas."""


def _default_device(info: ProcessInfo) -> Any:
    if torch.cuda.is_available():
        return torch.device("cuda", info.local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def _data_options(memory_budget: int | str, fraction: float) -> Options:
    """The data pipeline's ``Options(memory_budget=...)``: its share of ``memory_budget``, which its
    warnings name as the user gave it (:func:`headrace._warn.share_options`)."""
    from .._warn import given, share_options

    why = (f"the data pipeline's {fraction:.0%} share (fit(data_memory_fraction={fraction})) of "
           f"memory_budget={given(memory_budget)}; the rest holds the model, its gradients, optimizer state and "
           "activations")
    return share_options(memory_budget, fraction, why, "raise memory_budget")


def _resolve_budget(memory_budget: int | str | None) -> int | None:
    return None if memory_budget is None else parse_bytes(memory_budget, "memory_budget")


def fit(model: Any, dataset: Any, *, loss_fn: LossFn, optimizer: Any,
        global_batch_size: int, micro_batch_size: int | str = "auto", epochs: int | None = None,
        steps: int | None = None, precision: str = "fp32", memory_budget: int | str | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None, checkpoint_every: int = 100,
        resume: bool = False, eval_dataset: Any = None, callbacks: Iterable[Any] = (),
        device: Any = None, shard: bool = True, data_memory_fraction: float = 0.25,
        metrics_path: str | os.PathLike[str] | None = None, progress: bool | None = None,
        log_every: int = 10, keep_checkpoints: int = 2, base_rss_bytes: int | None = None,
        lr_scheduler: Any = None, gpu_memory_fraction: float | None = None,
        dataset_size: int | None = None) -> FitResult:
    """Train ``model`` on ``dataset``; returns a :class:`FitResult`.

    Args:
        model: any ``torch.nn.Module``; moved to ``device`` (wrapped in DDP under torchrun).
        dataset: a headrace ``Dataset`` of *unbatched* elements ``(inputs, targets)`` (nested structures
            of arrays allowed); ``fit`` batches it (``global_batch_size / world_size`` per rank). An
            :class:`~headrace.train.ElasticDataset` (a global order over a random-access source) makes
            the checkpoints resumable at any world size.
        loss_fn: ``loss_fn(model(inputs), targets)`` -> scalar mean loss (e.g. ``nn.CrossEntropyLoss()``);
            with a true ``takes_inputs`` attribute ``loss_fn(outputs, targets, inputs)`` (distillation).
        optimizer: a ``torch.optim.Optimizer`` over ``model``'s parameters.
        global_batch_size: elements per optimizer step, over all ranks (a multiple of the world size).
        micro_batch_size: elements per forward/backward pass, or ``"auto"`` (largest that fits).
        epochs, steps: stop after this many passes / optimizer steps (module docstring).
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (CUDA only; uses a GradScaler).
        memory_budget: bytes (or ``"512MiB"``) above the starting RSS; see the module docstring.
            ``None``: the micro-batch search uses half the available memory and the pipeline keeps the
            dataset's own options. With a budget on CPU, ``fit`` calls
            :func:`headrace.train.memory.limit_heap_retention` (process-wide glibc settings).
        checkpoint_dir: where checkpoints (and, by default, ``metrics.jsonl``) go; None: no checkpoints.
        checkpoint_every: optimizer steps between checkpoints (one more is written at the end).
        resume: continue from the newest checkpoint in ``checkpoint_dir`` if there is one.
        eval_dataset: unbatched ``(inputs, targets)`` elements, evaluated after each epoch (loss;
            accuracy when the model returns ``(N, C)`` logits for integer labels ``(N,)``, or ``(N, S, C)``
            for ``(N, S)`` labels, counting only labels >= 0: :mod:`headrace.train.text`).
        callbacks: objects with any of ``on_step_end(StepInfo)``, ``on_epoch_end(dict)``,
            ``on_checkpoint(path, step)``; a plain callable is called as ``on_step_end``.
        device: default ``cuda:<local rank>`` when CUDA is available, else CPU.
        shard: under torchrun, give each rank ``dataset.shard(world_size, rank)``; pass ``False`` when the
            dataset is already this rank's share (``headrace.distribute.auto_shard``). An
            ``ElasticDataset`` always takes this rank's positions itself.
        data_memory_fraction: share of ``memory_budget`` given to the data pipeline.
        metrics_path: JSON-lines metrics file (default ``<checkpoint_dir>/metrics.jsonl``).
        progress: show a progress bar on stderr (default: when stderr is a terminal).
        log_every: steps between progress updates and ``metrics.jsonl`` step records.
        keep_checkpoints: how many checkpoints to keep.
        base_rss_bytes: the RSS ``memory_budget`` is counted from (default: the RSS when ``fit`` starts).
        lr_scheduler: a ``torch.optim.lr_scheduler`` stepped after every optimizer step; its state is
            part of the checkpoints.
        gpu_memory_fraction: on CUDA, cap this process's GPU allocations at this share of the device's
            memory (``torch.cuda.set_per_process_memory_fraction``; :mod:`headrace.train.gpu`), in
            ``(0, 1]``; ignored on CPU. ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` in the
            environment (or :func:`headrace.train.gpu.configure_gpu_memory`) selects the allocator mode.
        dataset_size: the number of elements in ``dataset`` when its ``cardinality()`` is unknown (e.g.
            records counted beforehand); it only sets the progress display's total steps and ETA.

    Raises:
        ValueError: bad arguments, elements that are not ``(inputs, targets)``, a dataset with fewer
            elements than one per-rank batch.
        MemoryBudgetError: not even a micro-batch of 1 fits the budget.
        StateError: a checkpoint of another model (architecture, number of classes), from another
            pipeline, or one written mid-epoch by a different number of ranks for a pipeline that is not an
            ``ElasticDataset`` (the message names both world sizes and the fix).
        TrainingInterrupted: Ctrl-C or SIGTERM (module docstring); a ``KeyboardInterrupt``.
    """
    opts = FitOptions(loss_fn=loss_fn, optimizer=optimizer, global_batch_size=global_batch_size,
                      micro_batch_size=micro_batch_size, epochs=epochs, steps=steps, precision=precision,
                      memory_budget=memory_budget, checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every,
                      resume=resume, eval_dataset=eval_dataset, callbacks=callbacks, device=device, shard=shard,
                      data_memory_fraction=data_memory_fraction, metrics_path=metrics_path, progress=progress,
                      log_every=log_every, keep_checkpoints=keep_checkpoints, base_rss_bytes=base_rss_bytes,
                      lr_scheduler=lr_scheduler, gpu_memory_fraction=gpu_memory_fraction, dataset_size=dataset_size)
    info = process_info()
    dev = torch.device(device) if device is not None else _default_device(info)
    if gpu_memory_fraction is not None:
        check_memory_fraction(gpu_memory_fraction, "gpu_memory_fraction")
        if dev.type == "cuda":
            configure_gpu_memory(dev, memory_fraction=gpu_memory_fraction)
    owns_group = start_process_group(info, dev)
    info = process_info()
    closers: list[Any] = []
    try:
        return _fit(model, dataset, opts, dev, info, closers)
    finally:
        for it in closers:
            it.close()
        if owns_group:
            torch.distributed.destroy_process_group()


def _fit(model: Any, dataset: Any, opts: FitOptions, device: Any, info: ProcessInfo,
         closers: list[Any]) -> FitResult:
    """Set up (budget, resume, per-rank data, micro-batch) and run ``_loop``; ``closers``: the data
    iterators ``fit`` closes at the end."""
    memory_budget, data_memory_fraction = opts.memory_budget, opts.data_memory_fraction
    global_batch_size, checkpoint_dir = opts.global_batch_size, opts.checkpoint_dir
    optimizer, lr_scheduler, micro_batch_size = opts.optimizer, opts.lr_scheduler, opts.micro_batch_size
    prec = make_precision(opts.precision, device)
    model.to(device)
    budget = _resolve_budget(memory_budget)
    if budget is not None and device.type == "cpu":
        limit_heap_retention()  # RSS then follows live memory, which the budget is about
    release_free_memory()
    base_rss = rss_bytes() if opts.base_rss_bytes is None else int(opts.base_rss_bytes)
    data_budget = int(budget * data_memory_fraction) if budget is not None else None
    if global_batch_size % info.world_size:
        make_plan(global_batch_size, info.world_size, 1)  # raises the explanatory ValueError
    per_rank = global_batch_size // info.world_size
    data_options = _data_options(memory_budget, data_memory_fraction) if memory_budget is not None else None

    main = info.is_main
    ckpt_dir = os.fspath(checkpoint_dir) if checkpoint_dir is not None else None
    metrics = MetricsLog((opts.metrics_path if opts.metrics_path is not None else
                          (os.path.join(ckpt_dir, "metrics.jsonl") if ckpt_dir is not None
                           and "://" not in ckpt_dir else None)) if main else None)

    # ---- resume -------------------------------------------------------------------------------------
    step, epoch, data_state, resumed_from = 0, 0, None, None
    saved_micro: int | None = None
    carried: dict[str, Any] | None = None
    said: list[str] = []
    if opts.resume and ckpt_dir is not None:
        path = latest_checkpoint(ckpt_dir)
        if path is None:
            said.append(f"resume: no checkpoint in {ckpt_dir} yet; starting from step 0")
        else:
            ck = load_checkpoint(path, map_location=device)
            data_state = resume_data_state(ck, path, info, dataset)
            try:
                model.load_state_dict(ck["model"])
            except RuntimeError as exc:  # another architecture or number of classes
                detail = " ".join(str(exc).split())[:300]
                raise StateError(f"{path}: its model state does not fit the model given to fit ({detail}); "
                                 "resume with the model it was trained with, or point checkpoint_dir "
                                 "elsewhere") from exc
            optimizer.load_state_dict(ck["optimizer"])
            if prec.scaler is not None and ck.get("scaler"):
                prec.scaler.load_state_dict(ck["scaler"])
            if lr_scheduler is not None and ck.get("lr_scheduler"):
                lr_scheduler.load_state_dict(ck["lr_scheduler"])
            restore_rng(ck["rng"])
            step, epoch = int(ck["step"]), int(ck["epoch"])
            saved_micro = int(ck["micro_batch_size"])
            carried = json.loads(ck["progress"]) if ck.get("progress") else None
            resumed_from = path
            where = f"in epoch {epoch + 1}" if data_state is not None else f"at the start of epoch {epoch + 1}"
            said.append(f"resumed from step {step} ({where}) of {path}")

    train_ds = rank_data(dataset, info, per_rank, True, opts.shard, data_options, epoch)
    eval_ds = (rank_data(opts.eval_dataset, info, per_rank, False, opts.shard, data_options, 0)
               if opts.eval_dataset is not None else None)
    show = sys.stderr.isatty() if opts.progress is None else bool(opts.progress)
    bar = Progress(show, _total_steps(opts.steps, opts.max_epochs, train_ds, opts.dataset_size, global_batch_size),
                   budget, base_rss, quiet=not main, epochs=opts.max_epochs, plain_every=opts.log_every)
    # Ctrl-C / SIGTERM from here on (setup included: the micro-batch search, a resume's first batches) stop
    # the run at the next step boundary with a checkpoint, never the default way
    with StopRequest(on_request=_stopping_notice(ckpt_dir) if main else None) as stop:
        for text in said:
            bar.message(text)
        try:
            # ---- micro-batch ------------------------------------------------------------------------------
            choice: MicroBatchChoice | None = None
            if micro_batch_size == "auto" and saved_micro is not None:
                micro = saved_micro
            elif micro_batch_size == "auto":
                peek = train_ds.peek() if isinstance(train_ds, RankBatches) else iter(train_ds)
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
                    search_budget = int(0.9 * available_gpu_bytes(device))
                    reserve = optimizer_state_bytes(optimizer)
                else:
                    train_budget = (budget - data_budget if budget is not None and data_budget is not None
                                    else int(__import__("psutil").virtual_memory().available // 2))
                    search_budget = int(train_budget * (1.0 - CPU_HEADROOM))
                    reserve = optimizer_state_bytes(optimizer)
                bar.message("auto micro-batch: measuring a few forward + backward passes...")
                choice = find_micro_batch_size(model, sample, opts.loss_fn, budget_bytes=search_budget, cap=per_rank,
                                               precision=prec, base_rss_bytes=base_rss, reserve_bytes=reserve,
                                               device=device)
                del sample
                micro = _all_reduce_min(choice.size, device, info)
            else:
                micro = int(micro_batch_size)
            plan = make_plan(global_batch_size, info.world_size, micro)
            bar.message(plan.describe() if choice is None else f"auto micro-batch: {plan.describe()}; "
                        f"{choice.describe()}")
            run = Run(plan=plan, prec=prec, device=device, info=info, ckpt_dir=ckpt_dir, metrics=metrics, bar=bar,
                      closers=closers, callbacks=list(opts.callbacks), base_rss=base_rss, budget=budget,
                      choice=choice, step=step, epoch=epoch, data_state=data_state, resumed_from=resumed_from,
                      carried=carried, stop=stop)
            return _loop(model, train_ds, eval_ds, opts, run)
        finally:
            bar.close()


def _total_steps(steps: int | None, max_epochs: int | None, train_ds: Any, dataset_size: int | None,
                 global_batch_size: int) -> int | None:
    """Optimizer steps of the whole run, when known: ``steps``, else epochs x steps per epoch (from the
    per-rank batched dataset's cardinality, or ``dataset_size``)."""
    cardinality = getattr(train_ds, "cardinality", None)  # (an ElasticDataset's: its length)
    per_epoch = int(cardinality()) if cardinality is not None else -2
    if per_epoch < 0 and dataset_size is not None:
        per_epoch = dataset_size // global_batch_size
    by_epochs = max_epochs * per_epoch if max_epochs is not None and per_epoch >= 0 else None
    known = [n for n in (steps, by_epochs) if n is not None]
    return min(known) if known else None


def _stopping_notice(checkpoint_dir: str | None) -> Callable[[int], None]:
    then = "writing a checkpoint" if checkpoint_dir is not None else "without a checkpoint (no checkpoint_dir)"

    def notice(signum: int) -> None:  # in a signal handler: one write to the descriptor, no Python buffer
        name = signal_name(signum)
        again = " (Ctrl-C again to stop at once)" if name == "Ctrl-C" else ""
        os.write(sys.stderr.fileno(), f"\nheadrace: {name}: stopping after this step, {then}{again}\n".encode())

    return notice


__all__ = ["FitResult", "StepInfo", "fit"]
