"""``CompressedModel``: a compressed model that predicts, reports its size and saves itself atomically.

Backends (what runs the model):

- ``"torch"``: a ``torch.nn.Module`` (pruned, distilled or fp32). ``size_bytes`` is the size of its
  ``torch.save(model.state_dict())`` file (what a PyTorch user ships). ``save(path)`` writes a
  ``torch.export`` archive (``.pt2``: graph and weights, loadable without the model's Python class).
- ``"onnxruntime"``: an ONNX model (int8 QDQ from :func:`headrace.compress.quantize`) run by ONNX Runtime on
  the CPU. ``size_bytes`` is the ``.onnx`` file's size; ``save(path)`` writes that file.
- ``"torchao"``: a PT2E-quantized graph (torchao, ``X86InductorQuantizer``) compiled by TorchInductor on
  first use. ``size_bytes`` and ``save(path)``: its ``torch.export`` archive (``.pt2``).

Every file carries a small JSON description (backend, method, parameters, MACs, ...): the ONNX model's
``metadata_props["headrace"]`` or the ``.pt2`` archive's extra file ``headrace.json``.
:func:`load` reads either back. ``save`` writes ``path.tmp-<pid>`` and renames it: a failure leaves nothing
under ``path`` (the temporary file is ``.<name>.tmp-<pid><suffix>`` beside it).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..train._deps import import_torch
from ._data import as_array

torch = import_torch()

METADATA_KEY = "headrace"
EXTRA_FILE = "headrace.json"
FORMAT = "headrace.compress"
BACKENDS = ("torch", "onnxruntime", "torchao")


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], object]) -> None:
    """Call ``write(tmp)`` then rename ``tmp`` to ``path``; on any error remove ``tmp`` and re-raise."""
    path = os.fspath(path)
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.tmp-{os.getpid()}{os.path.splitext(name)[1]}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def state_dict_bytes(model: Any) -> int:
    """Bytes of ``torch.save(model.state_dict())``."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.tell()


def batch_dim() -> Any:
    """The dynamic batch dimension used for every export (``torch.export.Dim``)."""
    return torch.export.Dim("batch", min=1, max=65536)


def export_program(module: Any, example: np.ndarray) -> Any:
    """``torch.export.export`` of ``module`` with a dynamic batch dimension (example: one batch, >= 2)."""
    x = torch.from_numpy(np.ascontiguousarray(example))
    if x.shape[0] < 2:
        x = x.repeat(2, *([1] * (x.ndim - 1)))
    return torch.export.export(module, (x,), dynamic_shapes=({0: batch_dim()},))


class _TorchRunner:
    backend = "torch"

    def __init__(self, module: Any) -> None:
        try:
            module.eval()
        except NotImplementedError:  # a torch.export module: already in eval mode
            pass
        self.module = module

    def predict(self, x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return self.module(torch.from_numpy(x)).float().numpy()

    def size_bytes(self) -> int:
        return state_dict_bytes(self.module)

    def save(self, path: str, meta: dict[str, Any], example: np.ndarray) -> None:
        program = export_program(self.module, example)
        torch.export.save(program, path, extra_files={EXTRA_FILE: json.dumps(meta)})

    def set_threads(self, threads: int) -> None:
        pass


ORT_SESSION_SETTINGS = "ORT_ENABLE_ALL graph optimizations, 1 inter-op thread, thread-pool spinning off"


def session_options(ort: Any, threads: int) -> Any:
    """The ONNX Runtime session options every ONNX row (fp32 and int8 alike) runs with: all graph
    optimizations (``ORT_ENABLE_ALL``: constant folding, Conv+BatchNorm/Add/Relu fusion, the NCHWc layout
    for fp32 and NHWC for int8 convolutions), ``threads`` intra-op threads, one inter-op thread, and
    thread-pool spinning off: an idle ONNX Runtime worker otherwise spins for a while after each call,
    taking a core from whatever runs next (another session, PyTorch, the data pipeline); on a 2-core
    machine that halved the measured speed of the int8 model (many short kernels) more than the fp32 one."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return opts


class _OrtRunner:
    backend = "onnxruntime"

    def __init__(self, model_bytes: bytes, threads: int | None = None) -> None:
        self.model_bytes = model_bytes
        self.threads = threads or torch.get_num_threads()
        self._session: Any = None

    def session(self) -> Any:
        if self._session is None:
            from ._deps import require

            ort = require("onnxruntime", "running an ONNX model")
            self._session = ort.InferenceSession(self.model_bytes, session_options(ort, self.threads),
                                                 providers=["CPUExecutionProvider"])
        return self._session

    def predict(self, x: np.ndarray) -> np.ndarray:
        s = self.session()
        return s.run(None, {s.get_inputs()[0].name: x})[0]

    def size_bytes(self) -> int:
        return len(self.model_bytes)

    def save(self, path: str, meta: dict[str, Any], example: np.ndarray) -> None:
        with open(path, "wb") as f:
            f.write(self.model_bytes)

    def set_threads(self, threads: int) -> None:
        if threads != self.threads:
            self.threads, self._session = threads, None


class _AoRunner:
    backend = "torchao"

    def __init__(self, graph_module: Any, example: np.ndarray) -> None:
        self.graph_module = graph_module
        self._program_bytes: bytes | None = None
        self._example = example
        self._compiled: Any = None

    def predict(self, x: np.ndarray) -> np.ndarray:
        import torch._inductor.config as inductor_config

        if self._compiled is None:
            self._compiled = torch.compile(self.graph_module, dynamic=True)
        with torch.no_grad(), inductor_config.patch(freezing=True):
            return self._compiled(torch.from_numpy(x)).float().numpy()

    def program_bytes(self, meta: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        torch.export.save(export_program(self.graph_module, self._example), buf,
                          extra_files={EXTRA_FILE: json.dumps(meta)})
        return buf.getvalue()

    def size_bytes(self) -> int:
        if self._program_bytes is None:
            self._program_bytes = self.program_bytes({})
        return len(self._program_bytes)

    def save(self, path: str, meta: dict[str, Any], example: np.ndarray) -> None:
        with open(path, "wb") as f:
            f.write(self.program_bytes(meta))

    def set_threads(self, threads: int) -> None:
        pass


class CompressedModel:
    """A model after :func:`~headrace.compress.quantize`, :func:`~headrace.compress.prune` or
    :func:`~headrace.compress.distill` (or an fp32 model wrapped for comparison).

    Attributes:
        backend: ``"torch"``, ``"onnxruntime"`` or ``"torchao"`` (module docstring).
        method: what was done, e.g. ``"fp32"``, ``"int8-static"``, ``"int8-dynamic"``,
            ``"pruned-structured"``, ``"pruned-unstructured"``, ``"distilled"``.
        info: JSON-able facts: ``parameters``, ``macs`` (per element), ``input_shape``/``input_dtype`` (one
            element), and per method e.g. ``sparsity``, ``compressed_size_bytes``, ``calibration_batches``.
        model: the ``torch.nn.Module`` for the torch backend (else ``None``).
        fit_result: the :class:`headrace.train.FitResult` of fine-tuning / distillation, if any.
    """

    def __init__(self, runner: Any, method: str, info: dict[str, Any], example: np.ndarray,
                 fit_result: Any = None) -> None:
        self._runner = runner
        self.method = method
        self.info = dict(info)
        self._example = np.ascontiguousarray(example)
        self.fit_result = fit_result

    @classmethod
    def from_module(cls, module: Any, method: str, example: np.ndarray, info: dict[str, Any] | None = None,
                    fit_result: Any = None) -> CompressedModel:
        """Wrap a ``torch.nn.Module`` (torch backend); ``example``: one input batch (numpy)."""
        from .measure import count_macs, count_parameters

        facts = {"parameters": count_parameters(module), "macs": count_macs(module, example[:1]),
                 **input_facts(example), **(info or {})}
        return cls(_TorchRunner(module), method, facts, example, fit_result)

    @classmethod
    def from_onnx(cls, model_bytes: bytes, method: str, example: np.ndarray, info: dict[str, Any]) -> CompressedModel:
        """Wrap a serialized ONNX model (onnxruntime backend)."""
        return cls(_OrtRunner(model_bytes), method, info, example)

    @classmethod
    def from_pt2e(cls, graph_module: Any, method: str, example: np.ndarray, info: dict[str, Any]) -> CompressedModel:
        """Wrap a torchao PT2E-converted graph module (torchao backend)."""
        return cls(_AoRunner(graph_module, example), method, info, example)

    @property
    def backend(self) -> str:
        return self._runner.backend

    @property
    def model(self) -> Any:
        return self._runner.module if isinstance(self._runner, _TorchRunner) else None

    @property
    def size_bytes(self) -> int:
        """Bytes on disk (module docstring: state dict for torch, ``.onnx`` file, ``.pt2`` archive)."""
        return self._runner.size_bytes()

    @property
    def example_input(self) -> np.ndarray:
        """One input batch the model was built with (numpy)."""
        return self._example

    def set_threads(self, threads: int) -> None:
        """Intra-op threads of the ONNX Runtime session (torch backends use ``torch.set_num_threads``)."""
        self._runner.set_threads(int(threads))

    def predict(self, batch: Any) -> np.ndarray:
        """Outputs (float32 numpy, e.g. logits ``(N, classes)``) for one batch of inputs.

        ``batch``: a numpy array or tensor shaped like the model's input, e.g. ``uint8 (N, 96, 96, 3)``,
        or an ``(inputs, targets)`` pair (the targets are ignored). Raises ``ValueError`` when its element
        shape or dtype differs from the model's (``info["input_shape"]`` / ``["input_dtype"]``).
        """
        from ._data import split_element

        inputs, _ = split_element(batch)
        x = np.ascontiguousarray(as_array(inputs, "predict"))
        want_shape, want_dtype = self.info.get("input_shape"), self.info.get("input_dtype")
        if want_shape is not None and (list(x.shape[1:]) != list(want_shape) or str(x.dtype) != want_dtype):
            raise ValueError(f"predict: a batch of {x.dtype} {tuple(x.shape)} does not match the model's input "
                             f"{want_dtype} (N, {', '.join(map(str, want_shape))}); resize or cast the inputs")
        return np.asarray(self._runner.predict(x), dtype=np.float32)

    def metadata(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": 1, "backend": self.backend, "method": self.method, "info": self.info}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the model to ``path`` (``.onnx`` for onnxruntime, ``.pt2`` otherwise; module docstring),
        atomically. Returns the path. Raises ``OSError`` if the directory does not exist or is not
        writable, ``ValueError`` if the suffix does not match the backend."""
        path = Path(path)
        want = ".onnx" if self.backend == "onnxruntime" else ".pt2"
        if path.suffix != want:
            raise ValueError(f"{path}: a {self.backend} model is saved as a {want} file; use {path.with_suffix(want)}")
        if not path.parent.is_dir():
            raise FileNotFoundError(f"{path.parent}: no such directory to save {path.name} in")
        atomic_write(path, lambda tmp: self._runner.save(tmp, self.metadata(), self._example))
        return path

    def __repr__(self) -> str:
        return (f"CompressedModel(method={self.method!r}, backend={self.backend!r}, "
                f"size_bytes={self.size_bytes}, parameters={self.info.get('parameters')})")


def input_facts(example: np.ndarray) -> dict[str, Any]:
    """``input_shape`` (one element) and ``input_dtype`` of an input batch."""
    return {"input_shape": list(example.shape[1:]), "input_dtype": str(example.dtype)}


def _example_from_info(info: dict[str, Any]) -> np.ndarray:
    return np.zeros([2, *info["input_shape"]], dtype=np.dtype(info["input_dtype"]))


def load(path: str | os.PathLike[str]) -> CompressedModel:
    """Read a model written by :meth:`CompressedModel.save` (``.onnx`` or ``.pt2``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a model saved by headrace.compress (names the file).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".onnx":
        from ._deps import require

        onnx = require("onnx", "loading an ONNX model")
        data = path.read_bytes()
        proto = onnx.load_from_string(data)
        props = {p.key: p.value for p in proto.metadata_props}
        meta = _check_meta(props.get(METADATA_KEY), path)
        return CompressedModel.from_onnx(data, meta["method"], _example_from_info(meta["info"]), meta["info"])
    extra = {EXTRA_FILE: ""}
    try:
        program = torch.export.load(str(path), extra_files=extra)
    except Exception as exc:
        raise ValueError(f"{path}: not a torch.export archive saved by headrace.compress ({exc})") from exc
    meta = _check_meta(extra[EXTRA_FILE] or None, path)
    example = _example_from_info(meta["info"])
    if meta["backend"] == "torchao":
        return CompressedModel.from_pt2e(program.module(), meta["method"], example, meta["info"])
    return CompressedModel(_TorchRunner(program.module()), meta["method"], meta["info"], example)


def _check_meta(text: str | None, path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(text) if text else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("backend") not in BACKENDS:
        raise ValueError(f"{path}: not a model saved by headrace.compress (no '{FORMAT}' description in it); "
                         "save models with CompressedModel.save")
    return meta


__all__ = ["CompressedModel", "atomic_write", "load", "state_dict_bytes"]
