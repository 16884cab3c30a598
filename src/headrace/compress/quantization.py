"""``quantize``: int8 post-training quantization of a PyTorch model, calibrated on a headrace ``Dataset``.

Routes (``torch.ao.quantization`` is deprecated and not used):

- ``method="static", backend="onnxruntime"`` (default): ``torch.onnx.export`` (dynamo exporter) ->
  ``onnxruntime.quantization.quant_pre_process`` (shape inference, Conv+BatchNorm folding) ->
  ``quantize_static``: QDQ format, int8 weights per output channel, uint8 activations (ONNX Runtime's
  recommended U8S8 on x86), min/max calibration over ``num_calibration_batches`` batches. The data reader
  pulls one batch at a time from the dataset and the calibrator keeps only each batch's per-tensor
  minima and maxima (ReduceMin / ReduceMax outputs), so calibration never holds the data set.
- ``method="static", backend="torchao"``: ``torch.export`` -> torchao PT2E ``prepare_pt2e`` with
  ``X86InductorQuantizer`` (its default config: per-channel int8 weights, uint8 activations) ->
  calibration -> ``convert_pt2e``; runs compiled by TorchInductor with freezing (oneDNN int8 kernels),
  compiled on the first ``predict`` (tens of seconds).
- ``method="dynamic", backend="onnxruntime"``: ``quantize_dynamic`` of the MatMul / Gemm (``nn.Linear``),
  attention and LSTM layers (int8 weights, activations quantized per batch at run time) and of the Gather of a
  weight table (``nn.Embedding``: int8 table, dequantized rows): for Linear-, attention- and embedding-heavy
  models such as Transformers; no calibration data needed (``calibration_dataset`` may be ``None``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..train._deps import import_torch
from ._data import iter_batches
from ._deps import require
from ._export import export_for_pt2e, export_onnx, module_stack
from .measure import count_macs, count_parameters
from .model import CompressedModel, input_facts

torch = import_torch()

METHODS = ("static", "dynamic")
BACKENDS = ("onnxruntime", "torchao")
DYNAMIC_LAYERS = ("Linear", "LSTM", "GRU", "MultiheadAttention", "Bilinear")


def _validate(method: str, backend: str, num_calibration_batches: int, batch_size: int) -> None:
    if method not in METHODS:
        raise ValueError(f"method={method!r}: choose 'static' (CNNs; calibrated) or 'dynamic' (Linear / "
                         "attention / LSTM layers)")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: choose one of {', '.join(BACKENDS)}")
    if method == "dynamic" and backend != "onnxruntime":
        raise ValueError(f"method='dynamic' runs on ONNX Runtime (quantize_dynamic); backend={backend!r} is "
                         "not supported for it: use backend='onnxruntime'")
    for name, v in (("num_calibration_batches", num_calibration_batches), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} must be an int >= 1")


def _layer_census(model: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in model.modules():
        if not list(m.children()):
            counts[type(m).__name__] = counts.get(type(m).__name__, 0) + 1
    return counts


def _check_dynamic_layers(model: Any) -> None:
    census = _layer_census(model)
    if not any(name in census for name in DYNAMIC_LAYERS):
        found = ", ".join(f"{k} x{v}" for k, v in sorted(census.items())) or "none"
        raise ValueError(f"dynamic quantization quantizes {', '.join(DYNAMIC_LAYERS)} layers and this model has "
                         f"none (its layers: {found}); use method='static' with calibration data for "
                         "convolutional models")


def _check_runs(model: Any, x: np.ndarray, index: int) -> None:
    """Run the fp32 model on a calibration batch; a failure names the batch, its shape and the layer."""
    with torch.inference_mode(), module_stack(model) as stack:
        try:
            model(torch.from_numpy(x))
        except Exception as exc:
            where = f" (in layer {stack[-1]})" if stack else ""
            raise ValueError(f"calibration_dataset, batch {index}: inputs {x.dtype} {tuple(x.shape)} do not "
                             f"match the model's input{where}: {type(exc).__name__}: "
                             f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}; map the "
                             "dataset to the inputs the model was trained on") from exc


class _Calibration:
    """Up to ``limit`` input batches from a dataset, checked for a constant element shape and dtype."""

    def __init__(self, dataset: Any, batch_size: int, limit: int, progress: Any = None) -> None:
        self.batches = iter_batches(dataset, batch_size, "calibration_dataset")
        self.limit = limit
        self.count = 0
        self.first: np.ndarray | None = None
        self.progress = progress

    def next_batch(self) -> np.ndarray | None:
        if self.count >= self.limit:
            self.close()
            return None
        item = next(self.batches, None)
        if item is None:
            if self.count == 0:
                raise ValueError("calibration_dataset is empty: it yielded no elements; pass a few hundred "
                                 "representative inputs (e.g. evaluation shards)")
            return None
        x = item[0]
        if self.first is None:
            self.first = x
        elif x.shape[1:] != self.first.shape[1:] or x.dtype != self.first.dtype:
            self.close()
            raise ValueError(f"calibration_dataset, batch {self.count}: inputs {x.dtype} {tuple(x.shape)} differ "
                             f"from the first batch's {self.first.dtype} {tuple(self.first.shape)}; every element "
                             "must have the model's input shape and dtype")
        self.count += 1
        if self.progress is not None:
            self.progress(self.count, self.limit)
        return x

    def first_batch(self) -> np.ndarray:
        """The first batch: ``next_batch`` raises ``ValueError`` on an empty dataset, and ``limit`` is at least 1
        (``_validate``)."""
        x = self.next_batch()
        if x is None:
            raise ValueError(f"calibration_dataset: no batch taken (a limit of {self.limit} batches); calibrate with "
                             "num_calibration_batches >= 1")
        return x

    def close(self) -> None:
        self.batches.close()


def quantize(model: Any, calibration_dataset: Any, *, method: str = "static", backend: str = "onnxruntime",
             num_calibration_batches: int = 8, batch_size: int = 32, per_channel: bool = True,
             example_inputs: Any = None, progress: Any = None) -> CompressedModel:
    """int8 post-training quantization (see the module docstring for each route).

    Args:
        model: a ``torch.nn.Module`` taking one input tensor (not modified).
        calibration_dataset: a headrace ``Dataset`` of unbatched ``(inputs, target)`` or ``inputs``
            elements, e.g. the evaluation shards; read one batch at a time. ``None`` only for
            ``method="dynamic"`` with ``example_inputs``.
        method: ``"static"`` (activations calibrated; CNNs) or ``"dynamic"`` (Linear/attention/LSTM).
        backend: ``"onnxruntime"`` or ``"torchao"`` (static only).
        num_calibration_batches: batches of ``batch_size`` elements used to calibrate.
        per_channel: int8 weights per output channel (ONNX Runtime; torchao's x86 config always is).
        example_inputs: one input batch (numpy / tensor) for ``method="dynamic"`` without a dataset.
        progress: ``progress(done, total)`` called after each calibration batch.

    Returns:
        a :class:`CompressedModel` (``backend`` as asked, ``method`` ``"int8-static"`` /
        ``"int8-dynamic"``; ``info``: parameters, MACs, calibration batches, route).

    Raises:
        ValueError: bad arguments; an empty calibration dataset; elements that do not match the model's
            input (names the batch, its shape and dtype, and the layer that failed); ``method="dynamic"`` on
            a model without Linear/attention/LSTM layers (names the layers it has).
        ExportError (a ValueError): the model cannot be exported (names the layer).
        ImportError: onnxruntime / onnx / torchao missing (``pip install 'headrace[compress]'``).
    """
    _validate(method, backend, num_calibration_batches, batch_size)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if method == "dynamic":
        _check_dynamic_layers(model)
    was_training = model.training
    model.eval()
    try:
        if calibration_dataset is None:
            if method == "static" or example_inputs is None:
                raise ValueError("calibration_dataset is None: static quantization needs calibration data "
                                 "(dynamic quantization needs example_inputs instead)")
            calib = None
            first = np.ascontiguousarray(example_inputs.numpy() if hasattr(example_inputs, "numpy")
                                         else example_inputs)
        else:
            calib = _Calibration(calibration_dataset, batch_size,
                                 num_calibration_batches if method == "static" else 1, progress)
            first = calib.first_batch()
        _check_runs(model, first, 0)
        info = {"parameters": count_parameters(model), "macs": count_macs(model, first[:1]), **input_facts(first)}
        if backend == "torchao":
            return _quantize_torchao(model, calib, first, info)  # type: ignore[arg-type]
        return _quantize_ort(model, calib, first, info, method, per_channel)
    finally:
        model.train(was_training)


def _ort_reader(calib: _Calibration, first: np.ndarray, input_name: str) -> Any:
    qz = require("onnxruntime.quantization", "quantization with ONNX Runtime")

    base: Any = qz.CalibrationDataReader  # (a class of a module loaded at run time: a value to mypy)

    class Reader(base):
        def __init__(self) -> None:
            self.pending: np.ndarray | None = first

        def get_next(self) -> dict[str, np.ndarray] | None:
            x, self.pending = (self.pending, None) if self.pending is not None else (calib.next_batch(), None)
            return None if x is None else {input_name: x}

    return Reader()


def _quantize_ort(model: Any, calib: _Calibration | None, first: np.ndarray, info: dict[str, Any], method: str,
                  per_channel: bool) -> CompressedModel:
    qz = require("onnxruntime.quantization", "quantization with ONNX Runtime")
    onnx = require("onnx", "quantization with ONNX Runtime")
    quant_pre_process = require("onnxruntime.quantization.shape_inference",
                                "quantization with ONNX Runtime").quant_pre_process

    with tempfile.TemporaryDirectory(prefix="headrace-quantize-") as tmp:
        fp32, pre, out = (os.path.join(tmp, n) for n in ("model.onnx", "pre.onnx", "int8.onnx"))
        export_onnx(model, first, fp32)
        with _quiet_ort():
            quant_pre_process(fp32, pre)
        if method == "static":
            assert calib is not None
            try:
                qz.quantize_static(pre, out, _ort_reader(calib, first, "input"), quant_format=qz.QuantFormat.QDQ,
                                   per_channel=per_channel, activation_type=qz.QuantType.QUInt8,
                                   weight_type=qz.QuantType.QInt8, calibrate_method=qz.CalibrationMethod.MinMax)
            finally:
                calib.close()
            info |= {"calibration_batches": calib.count, "calibration_elements_per_batch": int(first.shape[0])}
        else:
            if calib is not None:
                calib.close()
            qz.quantize_dynamic(pre, out, weight_type=qz.QuantType.QInt8, per_channel=per_channel,
                                op_types_to_quantize=["MatMul", "Gemm", "Attention", "LSTM", "Gather"])
        proto = onnx.load(out)
    method_name = f"int8-{method}"
    info |= {"route": f"onnxruntime quantize_{method} (QDQ, {'per-channel' if per_channel else 'per-tensor'} "
                      "int8 weights" + (", uint8 activations)" if method == "static" else ")")}
    meta = {"format": "headrace.compress", "version": 1, "backend": "onnxruntime", "method": method_name,
            "info": info}
    import json

    del proto.metadata_props[:]
    entry = proto.metadata_props.add()
    entry.key, entry.value = "headrace", json.dumps(meta)
    return CompressedModel.from_onnx(proto.SerializeToString(), method_name, first, info)


@contextlib.contextmanager
def _quiet_ort() -> Iterator[None]:
    import logging

    lg = logging.getLogger()
    level = lg.level
    lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        lg.setLevel(level)


def _check_pt2e_module_reuse(model: Any, example: np.ndarray) -> None:
    """torchao's PT2E quantizers match patterns by module call: a module called twice in one forward
    makes one partition with two outputs, which they reject. Find such a module and name it."""
    calls: dict[str, int] = {}
    names = {id(m): n for n, m in model.named_modules()}
    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(lambda mod, _a, _o: calls.__setitem__(names[id(mod)],
                                                                               calls.get(names[id(mod)], 0) + 1))
               for m in leaves]
    try:
        with torch.inference_mode():
            model(torch.from_numpy(example[:1]))
    finally:
        for h in handles:
            h.remove()
    reused = [(n, c) for n, c in calls.items() if c > 1]
    if reused:
        name, count = reused[0]
        kind = type(dict(model.named_modules())[name]).__name__
        raise ValueError(f"backend='torchao' cannot quantize layer {name} ({kind}): it is called {count} times in "
                         "one forward pass, and the PT2E quantizer needs one module per call; give each call its "
                         "own module or use backend='onnxruntime'")


def _drop_unused_tensors(graph_module: Any) -> None:
    """Delete the parameters and buffers no graph node reads: ``convert_pt2e`` leaves the fp32 weights
    beside their int8 copies, which would otherwise be saved too."""
    used = {n.target for n in graph_module.graph.nodes if n.op == "get_attr"}
    names = [n for n, _ in graph_module.named_parameters()] + [n for n, _ in graph_module.named_buffers()]
    for name in names:
        if name not in used:
            owner_name, _, attr = name.rpartition(".")
            owner = graph_module.get_submodule(owner_name) if owner_name else graph_module
            delattr(owner, attr)


def _quantize_torchao(model: Any, calib: _Calibration, first: np.ndarray, info: dict[str, Any]) -> CompressedModel:
    pt2e = require("torchao.quantization.pt2e.quantize_pt2e", "quantization with torchao (PT2E)")
    convert_pt2e, prepare_pt2e = pt2e.convert_pt2e, pt2e.prepare_pt2e
    xiq = require("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer", "quantization with torchao (PT2E)")

    _check_pt2e_module_reuse(model, first)
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    graph = export_for_pt2e(model, first)
    try:
        prepared = prepare_pt2e(graph, quantizer)
    except Exception as exc:
        raise ValueError(f"torchao's X86InductorQuantizer cannot annotate this model ({type(exc).__name__}: {exc});"
                         " use backend='onnxruntime'") from exc
    try:
        with torch.no_grad():
            x: np.ndarray | None = first
            while x is not None:
                prepared(torch.from_numpy(x))
                x = calib.next_batch()
    finally:
        calib.close()
    converted = convert_pt2e(prepared)
    _drop_unused_tensors(converted)
    info |= {"calibration_batches": calib.count, "calibration_elements_per_batch": int(first.shape[0]),
             "route": "torchao PT2E X86InductorQuantizer (per-channel int8 weights, uint8 activations), "
                      "TorchInductor with freezing"}
    return CompressedModel.from_pt2e(converted, "int8-static", first, info)


__all__ = ["BACKENDS", "METHODS", "quantize"]
