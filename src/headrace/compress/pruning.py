"""``prune``: remove channels (structured) or weights (unstructured), optionally fine-tune with ``fit``.

- Structured (default): torch-pruning's DepGraph finds every group of coupled layers (a conv, its
  BatchNorm, the next conv's input channels, residual additions that tie channels together) and removes
  ``amount`` of each group's channels, least important first (L1 norm of the weights,
  ``MagnitudeImportance(p=1)``). The dense model really shrinks: fewer parameters, fewer MACs, faster on
  any hardware. The layers that produce the model's output are left whole (their outputs are the classes).
- Unstructured: ``torch.nn.utils.prune.global_unstructured`` with ``L1Unstructured`` zeroes the
  ``amount`` fraction of smallest-magnitude weights over all Conv/Linear layers together, then
  ``prune.remove`` makes it permanent. The dense model keeps its size and speed; only a compressed or
  sparse file is smaller: ``info["compressed_size_bytes"]`` is the state dict compressed with zlib (level
  6), ``info["sparsity"]`` the zero fraction of those weights.

``finetune`` (a dict) trains the pruned model with :func:`headrace.train.fit`: ``{"dataset": ds,
"global_batch_size": 64, "epochs": 1, ...}`` (any ``fit`` keyword; default optimizer SGD, lr 0.01,
momentum 0.9, weight decay 5e-4, or ``"lr"``; default loss cross-entropy). Unstructured masks stay applied
while fine-tuning, so the pruned weights stay zero.
"""

from __future__ import annotations

import copy
import io
import zlib
from typing import Any

import numpy as np

from ..train._deps import import_torch
from ._data import as_array
from ._deps import require
from .model import CompressedModel

torch = import_torch()


def _check_amount(amount: Any) -> float:
    if isinstance(amount, bool) or not isinstance(amount, int | float) or not 0.0 < float(amount) < 1.0:
        raise ValueError(f"amount={amount!r} must be a fraction in (0, 1), e.g. 0.5 to remove half of the "
                         "channels (structured) or weights (unstructured)")
    return float(amount)


def _output_layers(model: Any, x: Any) -> list[Any]:
    """The modules whose output tensor is the model's output (left unpruned)."""
    outputs: dict[int, Any] = {}
    handles = [m.register_forward_hook(lambda mod, _a, out: outputs.__setitem__(id(out), mod))
               for m in model.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            out = model(x)
    finally:
        for h in handles:
            h.remove()
    found = [outputs[id(o)] for o in (out if isinstance(out, tuple | list) else [out]) if id(o) in outputs]
    return [m for m in found if isinstance(m, torch.nn.Linear | torch.nn.modules.conv._ConvNd)]


def _prune_structured(model: Any, amount: float, x: Any) -> None:
    tp = require("torch_pruning", "structured pruning")
    ignored = _output_layers(model, x)
    pruner = tp.pruner.MetaPruner(model, x, importance=tp.importance.MagnitudeImportance(p=1),
                                  pruning_ratio=amount, ignored_layers=ignored)
    pruner.step()


def _mask_unstructured(model: Any, amount: float) -> list[tuple[Any, str]]:
    """Apply global L1 masks (``weight = weight_orig * weight_mask``; training keeps the zeros)."""
    from torch.nn.utils import prune as tprune

    targets = [(m, "weight") for m in model.modules()
               if isinstance(m, torch.nn.Linear | torch.nn.modules.conv._ConvNd)]
    if not targets:
        raise ValueError("unstructured pruning prunes Conv/Linear weights and this model has none")
    tprune.global_unstructured(targets, pruning_method=tprune.L1Unstructured, amount=amount)
    return targets


def _make_permanent(model: Any, targets: list[tuple[Any, str]]) -> dict[str, Any]:
    """``prune.remove`` every mask; the zero fraction and the zlib-compressed state dict's size."""
    from torch.nn.utils import prune as tprune

    for m, name in targets:
        tprune.remove(m, name)
    zeros = sum(int((m.weight == 0).sum()) for m, _ in targets)
    total = sum(m.weight.numel() for m, _ in targets)
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return {"sparsity": zeros / total, "compressed_size_bytes": len(zlib.compress(buf.getvalue(), 6))}


def prune(model: Any, *, amount: float, structured: bool = True, example_inputs: Any,
          finetune: dict[str, Any] | None = None, inplace: bool = False) -> CompressedModel:
    """Prune ``model`` (module docstring); returns a :class:`CompressedModel` (torch backend).

    Args:
        model: a ``torch.nn.Module``; copied first unless ``inplace=True``.
        amount: fraction in (0, 1): of each layer group's channels (structured) or of all Conv/Linear
            weights (unstructured).
        structured: channel pruning with torch-pruning (True) or global L1 weight pruning (False).
        example_inputs: one input batch (numpy or tensor, e.g. ``uint8 (1, 96, 96, 3)``) to trace the model.
        finetune: ``None`` or keyword arguments of :func:`headrace.train.fit` plus ``"dataset"``.
        inplace: prune ``model`` itself instead of a copy.

    Raises:
        ValueError: ``amount`` outside (0, 1); a model without Conv/Linear layers (unstructured);
            ``finetune`` without ``"dataset"`` / ``"global_batch_size"``.
        ImportError: torch-pruning missing (``pip install 'headrace[compress]'``).
    """
    amount = _check_amount(amount)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if finetune is not None and ("dataset" not in finetune or "global_batch_size" not in finetune):
        raise ValueError("finetune needs at least {'dataset': <headrace Dataset of (inputs, label)>, "
                         "'global_batch_size': N} (plus any headrace.train.fit keyword)")
    example = np.ascontiguousarray(as_array(example_inputs, "example_inputs"))
    net = model if inplace else copy.deepcopy(model)
    was_training = net.training
    net.eval()
    x = torch.from_numpy(example[:1])
    info: dict[str, Any] = {"amount": amount}
    targets = []
    if structured:
        _prune_structured(net, amount, x)
    else:
        targets = _mask_unstructured(net, amount)
    net.train(was_training)
    fit_result = _finetune(net, finetune) if finetune is not None else None  # masks stay on while training
    if not structured:
        info |= _make_permanent(net, targets)
    return CompressedModel.from_module(net.eval(), f"pruned-{'structured' if structured else 'unstructured'}",
                                       example, info, fit_result=fit_result)


IMPORTANCES = ("l2", "l1")


def _importance(name: str) -> Any:
    tp = require("torch_pruning", "structured pruning")
    if name not in IMPORTANCES:
        raise ValueError(f"importance={name!r}: choose l2 (the L2 norm of each group of coupled channels, "
                         "torch-pruning's GroupMagnitudeImportance(p=2)) or l1")
    return tp.importance.GroupMagnitudeImportance(p=2 if name == "l2" else 1)


def _check_target(macs_target: Any, steps: Any) -> float:
    if isinstance(macs_target, bool) or not isinstance(macs_target, int | float) or not 0.0 < macs_target < 1.0:
        raise ValueError(f"macs_target={macs_target!r} must be a fraction in (0, 1) of the model's MACs to keep, "
                         "e.g. 0.5 for at most half (--prune-macs 0.5)")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 20:
        raise ValueError(f"steps={steps!r} must be an int in 1..20 (pruning rounds, each followed by fine-tuning)")
    return float(macs_target)


def prune_to_macs(model: Any, *, macs_target: float, example_inputs: Any, steps: int = 2, importance: str = "l2",
                  finetune: Any = None, inplace: bool = False) -> CompressedModel:
    """Iterative structured pruning to a MACs target: ``steps`` rounds, round ``k`` removing the least
    important channel groups (torch-pruning DepGraph, ``importance``; 2% of each group's channels at a time)
    until the MACs are at most ``macs_target ** (k / steps)`` of the original's, then calling
    ``finetune(model, k, steps)`` (e.g. a few epochs of training; the last call is the final fine-tune).

    Args:
        model: a ``torch.nn.Module``; copied first unless ``inplace=True``.
        macs_target: fraction in (0, 1) of the original MACs (per element) to keep at most.
        example_inputs: one input batch (numpy or tensor, e.g. ``uint8 (1, 96, 96, 3)``) to trace the model.
        steps: pruning rounds (1..20); more rounds with fine-tuning between them lose less accuracy.
        importance: ``"l2"`` (default) or ``"l1"``: the norm of each group of coupled channels' weights.
        finetune: ``None`` or a callable ``finetune(model, round, rounds)`` -> JSON-able facts (or None).

    Returns:
        a :class:`CompressedModel` (torch backend, method ``"pruned-structured"``); ``info``: ``macs_target``,
        ``macs_ratio`` (reached), ``channel_ratio``, ``steps``, ``importance``, ``finetune`` (the callable's
        facts per round).

    Raises:
        ValueError: ``macs_target`` outside (0, 1), ``steps`` outside 1..20, an unknown ``importance``, or a
            model that cannot be pruned that far (names the MACs reached).
        ImportError: torch-pruning missing (``pip install 'headrace[compress]'``).
    """
    from .measure import count_macs

    tp = require("torch_pruning", "structured pruning")
    target = _check_target(macs_target, steps)
    imp = _importance(importance)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    example = np.ascontiguousarray(as_array(example_inputs, "example_inputs"))
    net = model if inplace else copy.deepcopy(model)
    net.eval()
    x = torch.from_numpy(example[:1])
    base = count_macs(net, example)
    fine_steps = 48  # 2% of each group's channels per pruner step
    pruner = tp.pruner.MetaPruner(net, x, importance=imp, pruning_ratio=0.96, iterative_steps=fine_steps,
                                  ignored_layers=_output_layers(net, x))
    macs, done, rounds = base, 0, []
    for k in range(1, steps + 1):
        goal = base * target ** (k / steps)
        while macs > goal and done < fine_steps:
            net.eval()
            pruner.step()
            done += 1
            macs = count_macs(net, example)
        if macs > base * target ** (k / steps) * 1.0001:
            raise ValueError(f"pruning stopped at {macs / base:.1%} of the MACs, above the target {target:.0%}: "
                             "the prunable layers are too few; raise --prune-macs")
        facts = finetune(net, k, steps) if finetune is not None else None
        rounds.append({"round": k, "macs_ratio": round(macs / base, 4), **(facts or {})})
    info = {"macs_target": target, "macs_ratio": round(macs / base, 4),
            "channel_ratio": round(0.96 * done / fine_steps, 4), "steps": steps, "importance": importance,
            "rounds": rounds}
    return CompressedModel.from_module(net.eval(), "pruned-structured", example, info)


def default_optimizer(model: Any, lr: float) -> Any:
    """SGD with Nesterov momentum 0.9 and weight decay 5e-4 (what ``headrace train`` uses)."""
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4)


def _finetune(model: Any, options: dict[str, Any]) -> Any:
    from ..train import fit

    kwargs = dict(options)
    dataset = kwargs.pop("dataset")
    kwargs.setdefault("loss_fn", torch.nn.CrossEntropyLoss())
    lr = kwargs.pop("lr", 0.01)
    if "optimizer" not in kwargs:
        kwargs["optimizer"] = default_optimizer(model, lr)
    return fit(model, dataset, **kwargs)


__all__ = ["IMPORTANCES", "default_optimizer", "prune", "prune_to_macs"]
