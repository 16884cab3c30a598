"""Exporting a model (ONNX, torch.export) with errors that name the layer that failed.

Models are traced with ``torch.export`` (non-strict) and the program handed to ``torch.onnx.export``, so a
model that cannot be traced fails rather than silently falling back to a constant-baking tracer.
While the exporter traces the model, forward hooks keep the stack of modules being run; if tracing
raises, the innermost module on the stack is the layer that could not be exported, and the error names it
(``features.3.conv1 (Conv2d)``) with the fix.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._errors import ExportError
from ..train._deps import import_torch

torch = import_torch()


@contextlib.contextmanager
def module_stack(model: Any) -> Iterator[list[str]]:
    """Yield a list that holds, while ``model`` runs, the names of the modules entered and not yet left."""
    stack: list[str] = []
    names = {id(m): (n or type(m).__name__, type(m).__name__) for n, m in model.named_modules()}
    handles = []

    def enter(module: Any, _args: Any) -> None:
        name, kind = names.get(id(module), ("?", type(module).__name__))
        stack.append(f"{name} ({kind})")

    def leave(module: Any, _args: Any, _out: Any) -> None:
        if stack:
            stack.pop()

    for m in model.modules():
        handles.append(m.register_forward_pre_hook(enter))
        handles.append(m.register_forward_hook(leave))
    try:
        yield stack
    finally:
        for h in handles:
            h.remove()


def _failure(exc: BaseException, stack: list[str], what: str, fix: str) -> ExportError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    where = f" in layer {stack[-1]}" if stack else ""
    return ExportError(f"{what} failed{where}: {type(exc).__name__}: {first}; {fix}")


def _opset(program: Any) -> int | None:
    """The ONNX opset the program needs: the highest of its ``torch.onnx.ops`` calls (``onnx.Attention.opset23``:
    23), or ``None`` (the exporter's default) when it makes none."""
    versions = [int(str(n.target).rpartition(".opset")[2]) for n in program.graph.nodes
                if n.op == "call_function" and str(n.target).startswith("onnx.") and ".opset" in str(n.target)]
    return max(versions, default=None)


def export_onnx(model: Any, example: np.ndarray, path: str) -> None:
    """Export ``model`` (eval mode) to ONNX at ``path`` (one file; weights in ``path.data`` beside it for
    models over 1.5 GiB, ONNX's protobuf limit being 2 GiB), input
    ``"input"`` with a dynamic batch dimension, output ``"output"``; in the exporter's default opset, or in the
    opset its ``torch.onnx.ops`` calls need (the text model's ``Attention``: 23).

    Raises:
        ExportError: the model cannot be exported (names the layer being traced).
    """
    from .model import export_program

    large = sum(p.numel() * p.element_size() for p in model.parameters()) > 1.5 * 2**30
    was_training = model.training
    model.eval()
    fix = ("replace that layer by standard torch ops (no numpy, .item() or Python control flow on tensor "
           "values)")
    try:
        with module_stack(model) as stack, _quiet():
            try:  # torch.export first, so a model it cannot trace fails here (no silent fallback to tracing)
                program = export_program(model, example)
            except Exception as exc:
                raise _failure(exc, list(stack), "ONNX export (torch.export)", fix) from exc
        with _quiet():
            try:
                torch.onnx.export(program, f=path, dynamo=True, input_names=["input"], output_names=["output"],
                                  verbose=False, external_data=large, opset_version=_opset(program))
            except Exception as exc:
                raise _failure(exc, [], "ONNX export (torch.onnx.export)", "the model uses an operator ONNX "
                               "cannot express; quantize with backend='torchao'") from exc
    finally:
        model.train(was_training)
    if not os.path.exists(path):
        raise ExportError(f"ONNX export wrote nothing to {path}")


def onnx_fp32(model: Any, example: np.ndarray) -> Any:
    """``model`` exported to ONNX (:func:`export_onnx`, the same graph the int8 route quantizes) and run
    by ONNX Runtime in fp32: a :class:`~headrace.compress.CompressedModel` (backend ``"onnxruntime"``,
    method ``"fp32"``). Raises :class:`ExportError` if the model cannot be exported."""
    import tempfile

    from .measure import count_macs, count_parameters
    from .model import CompressedModel, input_facts

    with tempfile.TemporaryDirectory(prefix="headrace-onnx-fp32-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        export_onnx(model, example, path)
        with open(path, "rb") as f:
            data = f.read()
    info = {"parameters": count_parameters(model), "macs": count_macs(model, example[:1]), **input_facts(example)}
    return CompressedModel.from_onnx(data, "fp32", example, info)


def export_for_pt2e(model: Any, example: np.ndarray) -> Any:
    """``torch.export.export(model, ...).module()`` for torchao's PT2E flow (dynamic batch dimension).

    Raises:
        ExportError: the model cannot be traced (names the layer).
    """
    from .model import export_program

    was_training = model.training
    model.eval()
    try:
        with module_stack(model) as stack:
            try:
                return export_program(model, example).module()
            except Exception as exc:
                raise _failure(exc, list(stack), "torch.export", "replace that layer by standard torch ops, or "
                               "quantize with backend='onnxruntime'") from exc
    finally:
        model.train(was_training)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporter's progress prints and warnings (errors still raise)."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch._export", "torch.export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


__all__ = ["ExportError", "export_for_pt2e", "export_onnx", "module_stack", "onnx_fp32"]
