"""Knowledge distillation (Hinton, Vinyals and Dean 2015, "Distilling the Knowledge in a Neural Network").

The loss of a student with logits ``z_s`` against a teacher's ``z_t`` and hard labels ``y``::

    L = alpha * T^2 * KL(softmax(z_t / T) || softmax(z_s / T))  +  (1 - alpha) * CE(z_s, y)

KL and CE are means over the batch (KL summed over classes: ``kl_div(..., reduction="batchmean")``);
``T^2`` keeps the soft term's gradients on the scale of the hard term's as ``T`` changes.

:class:`DistillationLoss` is a loss for :func:`headrace.train.fit` with ``takes_inputs = True``: ``fit``
hands it each micro-batch's inputs, the teacher runs on them under ``torch.inference_mode()`` (in eval mode,
inside the run's autocast), and everything else is ``fit``'s: gradient accumulation, mixed precision, DDP
(only the student is wrapped and synchronized), the memory budget (the teacher's forward runs inside the
micro-batch search, so its activations are measured; :func:`distill` also counts the teacher's weights
against ``memory_budget``) and exact resume (the teacher is fixed, so a resumed run computes the same
losses; the checkpoints hold only the student).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ..train._deps import import_torch
from ._data import first_inputs
from .model import CompressedModel
from .pruning import default_optimizer

torch = import_torch()
F = torch.nn.functional


def _check_kd(temperature: Any, alpha: Any) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature > 0:
        raise ValueError(f"temperature={temperature!r} must be a number > 0 (Hinton et al. use 2-20; 4 is common)")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha={alpha!r} must be in [0, 1]: the weight of the soft (teacher) term")


def kd_loss(student_logits: Any, teacher_logits: Any, targets: Any, *, temperature: float = 4.0,
            alpha: float = 0.9) -> Any:
    """The distillation loss above (a scalar tensor, computed in float32).

    Args:
        student_logits, teacher_logits: float tensors ``(N, C)``, or ``(N, S, C)``: ``S`` predictions per
            element (the segments of a packed text row, :mod:`headrace.train.text`).
        targets: int64 class labels ``(N,)`` (or ``(N, S)``); a label < 0 marks a slot without a prediction
            to learn, left out of both terms (the means are over the labelled slots).
        temperature: ``T`` > 0.
        alpha: weight of the soft term, in [0, 1].
    """
    _check_kd(temperature, alpha)
    classes = student_logits.shape[-1]
    s, t = student_logits.float().reshape(-1, classes), teacher_logits.float().reshape(-1, classes)
    y = targets.reshape(-1).long()
    labelled = y >= 0
    if not bool(labelled.all()):
        s, t, y = s[labelled], t[labelled], y[labelled]
    soft = F.kl_div(F.log_softmax(s / temperature, dim=1), F.log_softmax(t / temperature, dim=1),
                    reduction="batchmean", log_target=True)
    hard = F.cross_entropy(s, y)
    return alpha * temperature * temperature * soft + (1.0 - alpha) * hard


class DistillationLoss:
    """``fit`` loss: ``kd_loss(student(x), teacher(x), y)`` (module docstring). ``takes_inputs = True``.

    The teacher is put in eval mode and moved to the inputs' device on first use; its parameters are
    frozen (``requires_grad_(False)``).

    ``cache_bytes`` > 0 keeps the teacher's logits of each input element seen (keyed by a BLAKE2b hash of
    the element's bytes) up to that many bytes of logits, so later epochs over the same (not randomly
    augmented) elements skip the teacher's forward pass. Cached logits were computed in another batch, so
    they may differ from a fresh forward pass in the last bits: leave it 0 where a resumed run must
    reproduce the uninterrupted one bit for bit. ``cache_hits`` / ``cache_misses`` count elements.
    """

    takes_inputs = True

    def __init__(self, teacher: Any, *, temperature: float = 4.0, alpha: float = 0.9, cache_bytes: int = 0) -> None:
        _check_kd(temperature, alpha)
        if not isinstance(teacher, torch.nn.Module):
            raise TypeError(f"teacher must be a torch.nn.Module, got {type(teacher).__name__}")
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise ValueError(f"cache_bytes={cache_bytes!r} must be an int >= 0 (0: no teacher-logit cache)")
        self.teacher = teacher.eval().requires_grad_(False)
        self.temperature = float(temperature)
        self.alpha = float(alpha)
        self.cache_bytes = cache_bytes
        self._cache: dict[bytes, Any] = {}
        self._cached_bytes = 0
        self.cache_hits = self.cache_misses = 0

    def _forward(self, inputs: Any) -> Any:
        device = inputs.device if hasattr(inputs, "device") else None
        if device is not None and next(self.teacher.parameters()).device != device:
            self.teacher.to(device)
        with torch.inference_mode():
            out = self.teacher(inputs)
        return out.clone()  # a normal tensor: inference tensors cannot be saved for backward

    def teacher_logits(self, inputs: Any) -> Any:
        """The teacher's logits ``(N, C)`` for ``inputs`` (from the cache where it has them)."""
        if not self.cache_bytes:
            return self._forward(inputs)
        rows = np.ascontiguousarray(inputs.detach().cpu().numpy())
        keys = [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in rows]
        missing = [i for i, k in enumerate(keys) if k not in self._cache]
        self.cache_misses += len(missing)
        self.cache_hits += len(keys) - len(missing)
        fresh: Any = self._forward(inputs[missing]) if missing else None  # (indexed only where missing is not empty)
        for j, i in enumerate(missing):
            if self._cached_bytes >= self.cache_bytes:
                break
            self._cache[keys[i]] = fresh[j].detach().cpu()
            self._cached_bytes += fresh[j].numel() * fresh[j].element_size() + len(keys[i])
        fresh_of = dict(zip(missing, range(len(missing))))
        out = [fresh[fresh_of[i]] if i in fresh_of else self._cache[k] for i, k in enumerate(keys)]
        return torch.stack([t.to(inputs.device) for t in out])

    def __call__(self, outputs: Any, targets: Any, inputs: Any) -> Any:
        return kd_loss(outputs, self.teacher_logits(inputs), targets, temperature=self.temperature,
                       alpha=self.alpha)


def parameter_bytes(model: Any) -> int:
    """Bytes of a module's parameters and buffers."""
    return int(sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()]))


def distill(teacher: Any, student: Any, dataset: Any, *, temperature: float = 4.0, alpha: float = 0.9,
            validation: Any = None, patience: int = 2, cosine: bool = False, cache_bytes: int = 0,
            **fit_kwargs: Any) -> CompressedModel:
    """Train ``student`` to imitate ``teacher`` on ``dataset`` with :func:`headrace.train.fit`.

    Args:
        teacher: a trained ``torch.nn.Module`` (not modified; run in eval mode, no gradients).
        student: the ``torch.nn.Module`` to train (trained in place).
        dataset: headrace ``Dataset`` of unbatched ``(inputs, int label)`` elements (the training data).
        temperature, alpha: ``T`` and the soft-term weight of the loss (module docstring).
        validation: a headrace ``Dataset`` held out from the *training* data: early stopping on its
            accuracy (best weights kept; :mod:`headrace.compress._training`). Implies ``cosine``.
        patience: epochs without a better held-out accuracy before stopping.
        cosine: SGD with a cosine learning-rate schedule over ``epochs`` (5% warm-up) peaking at ``lr``.
        cache_bytes: teacher-logit cache (:class:`DistillationLoss`), 0: none.
        **fit_kwargs: any :func:`headrace.train.fit` keyword except ``loss_fn``; ``global_batch_size`` is
            required; ``optimizer`` defaults to SGD (Nesterov momentum 0.9, weight decay 5e-4) with
            ``lr`` (default 0.05). With ``memory_budget`` and no ``base_rss_bytes``, the teacher's weights
            count against the budget (the base RSS is taken as the RSS now minus their bytes).

    Returns:
        the student as a :class:`CompressedModel` (torch backend, method ``"distilled"``); its
        ``fit_result`` is ``fit``'s :class:`~headrace.train.FitResult`.

    Raises:
        ValueError: ``temperature`` <= 0, ``alpha`` outside [0, 1], a ``loss_fn`` keyword, or any error of
            ``fit`` (bad sizes, an empty dataset, ...).
    """
    from ..train import fit
    from ..train.memory import release_free_memory, rss_bytes

    if "loss_fn" in fit_kwargs:
        raise ValueError("distill() builds its own loss (DistillationLoss); do not pass loss_fn")
    if not isinstance(student, torch.nn.Module):
        raise TypeError(f"student must be a torch.nn.Module, got {type(student).__name__}")
    loss = DistillationLoss(teacher, temperature=temperature, alpha=alpha, cache_bytes=cache_bytes)
    lr = fit_kwargs.pop("lr", 0.05)
    if fit_kwargs.get("memory_budget") is not None and fit_kwargs.get("base_rss_bytes") is None:
        release_free_memory()
        fit_kwargs["base_rss_bytes"] = max(0, rss_bytes() - parameter_bytes(teacher))
    seen = _FirstInput()
    fit_kwargs["callbacks"] = [*fit_kwargs.get("callbacks", ()), seen]
    info: dict[str, Any] = {"teacher_parameters": int(sum(p.numel() for p in teacher.parameters())),
                            "temperature": float(temperature), "alpha": float(alpha)}
    if cosine or validation is not None:
        from ._training import train

        run = train(student, dataset, loss_fn=loss, epochs=fit_kwargs.pop("epochs", 1), lr=lr,
                    validation=validation, patience=patience, **fit_kwargs)
        result = run.pop("fit_result")
        info |= run
    else:
        if "optimizer" not in fit_kwargs:
            fit_kwargs["optimizer"] = default_optimizer(student, lr)
        result = fit(student, dataset, loss_fn=loss, **fit_kwargs)
    example = seen.value if seen.value is not None else first_inputs(dataset)
    return CompressedModel.from_module(student.eval(), "distilled", example, info, fit_result=result)


def student_for_params(arch: str, num_classes: int, max_params: int) -> tuple[Any, int]:
    """The widest ``arch`` (``"small-cnn"`` or ``"resnet18"``, :func:`headrace.train.build_model`) whose
    parameter count is at most ``max_params``: ``(module, width)``, found by bisection over the width.

    Raises:
        ValueError: an unknown ``arch``, or ``max_params`` below the narrowest model's count (names both).
    """
    from ..train.models import build_model

    if arch not in ("small-cnn", "resnet18"):
        raise ValueError(f"student architecture {arch!r}: choose small-cnn or resnet18 (width-scaled to the "
                         "--student-params target)")

    def params(width: int) -> int:
        return sum(p.numel() for p in build_model(arch, num_classes, width=width).parameters())

    lo, hi = 2, 512
    if params(lo) > max_params:
        raise ValueError(f"--student-params: the narrowest {arch} (width {lo}) has {params(lo):,} parameters, "
                         f"more than the target {max_params:,}; raise the target")
    while lo < hi:  # largest width with params(width) <= max_params
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if params(mid) <= max_params else (lo, mid - 1)
    return build_model(arch, num_classes, width=lo), lo


class _FirstInput:
    """A ``fit`` callback keeping one input element of the first step (numpy, batch of one)."""

    def __init__(self) -> None:
        self.value: Any = None

    def on_step_end(self, info: Any) -> None:
        if self.value is None:
            inputs = info.batch[0] if isinstance(info.batch, tuple | list) else info.batch
            if hasattr(inputs, "detach"):
                self.value = inputs[:1].detach().cpu().numpy()


__all__ = ["DistillationLoss", "distill", "kd_loss", "parameter_bytes", "student_for_params"]
