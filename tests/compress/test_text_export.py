"""The text model's exported graph: one fused Attention operator per layer with the eager model's outputs, and
every Linear run as an int8 kernel after dynamic quantization (no silent fp32 fallback)."""

from __future__ import annotations

import collections
import os
import tempfile

import numpy as np
import pytest
import torch

from headrace.compress import quantize
from headrace.compress._export import onnx_fp32
from headrace.compress.model import session_options
from headrace.train.text import PackedTextClassifier, attention_bias, onnx_attention, segment_attention_mask

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

LENGTH, SLOTS, LAYERS = 32, 6, 2


def _model() -> PackedTextClassifier:
    torch.manual_seed(0)
    return PackedTextClassifier(50, 3, sequence_length=LENGTH, max_segments=SLOTS, d_model=32, num_heads=2,
                                num_layers=LAYERS).eval()


def _rows(batch: int = 4) -> np.ndarray:
    """Rows of 3 segments of different lengths and trailing padding (segment 0)."""
    rng = np.random.default_rng(0)
    seg = np.zeros(LENGTH, np.int32)
    seg[:7], seg[7:19], seg[19:27] = 1, 2, 3
    pos = np.zeros(LENGTH, np.int32)
    for s in (1, 2, 3):
        pos[seg == s] = np.arange((seg == s).sum())
    tokens = np.where(seg > 0, rng.integers(1, 50, (batch, LENGTH)), 0)
    return np.stack([tokens, np.broadcast_to(seg, tokens.shape), np.broadcast_to(pos, tokens.shape)], 1).astype(
        np.int32)


def _ops(proto_bytes: bytes, optimized: bool) -> collections.Counter[str]:
    """Operator counts of a serialized ONNX model, or of the graph ONNX Runtime runs after its optimizations."""
    if not optimized:
        return collections.Counter(n.op_type for n in onnx.load_from_string(proto_bytes).graph.node)
    with tempfile.TemporaryDirectory() as tmp:
        options = session_options(ort, 1)
        options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(proto_bytes, options, providers=["CPUExecutionProvider"])
        return collections.Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)


def _bytes(compressed: object) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        compressed.save(path)  # type: ignore[attr-defined]
        with open(path, "rb") as f:
            return f.read()


def test_onnx_attention_with_the_bias_equals_sdpa_with_the_segment_mask() -> None:
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, LENGTH, 16) for _ in range(3))
    allowed = segment_attention_mask(torch.from_numpy(_rows(2)[:, 1]))
    heads = [t.view(2, LENGTH, 2, 8).transpose(1, 2) for t in (q, k, v)]
    sdpa = torch.nn.functional.scaled_dot_product_attention(*heads, attn_mask=allowed[:, None])
    ours = onnx_attention()(q, k, v, attention_bias(allowed), q_num_heads=2, kv_num_heads=2)[0]
    torch.testing.assert_close(ours, sdpa.transpose(1, 2).reshape(2, LENGTH, 16), rtol=0, atol=1e-5)


def test_the_exported_graph_has_one_fused_attention_per_layer_and_matches_the_eager_model() -> None:
    model, rows = _model(), _rows()
    fp32 = onnx_fp32(model, rows)
    with torch.no_grad():
        eager = model(torch.from_numpy(rows)).numpy()
    np.testing.assert_allclose(fp32.predict(rows), eager, rtol=0, atol=1e-5)
    ops = _ops(_bytes(fp32), optimized=True)
    assert ops["Attention"] == LAYERS  # ONNX Runtime runs each layer's attention as one kernel
    assert not {"Softmax", "Transpose", "IsNaN"} & set(ops)  # nothing left of the unfused attention
    assert ops["Where"] == 1  # the mask bias, computed once for every layer


def test_dynamic_int8_runs_every_linear_as_an_int8_kernel() -> None:
    model, rows = _model(), _rows()
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    q = quantize(model, None, method="dynamic", example_inputs=rows)
    raw = onnx.load_from_string(_bytes(q))
    weights = {t.name for t in raw.graph.initializer}
    assert [n.name for n in raw.graph.node if n.op_type in ("MatMul", "Gemm") and set(n.input) & weights] == []
    assert _ops(_bytes(q), optimized=False)["MatMulInteger"] == linears
    optimized = _ops(_bytes(q), optimized=True)
    assert optimized["DynamicQuantizeMatMul"] == linears and optimized["Attention"] == LAYERS
    with torch.no_grad():
        eager = model(torch.from_numpy(rows)).numpy()
    assert (q.predict(rows).argmax(-1) == eager.argmax(-1)).mean() >= 0.9
