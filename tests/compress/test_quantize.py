"""int8 quantization: outputs agree with fp32, the saved model reloads and predicts identically, and each bad
input (wrong calibration elements, an empty dataset, layers a backend cannot take, a model that fails to
export) raises one clear error naming the batch / layer."""

from __future__ import annotations

from pathlib import Path

import compress_helpers as h
import numpy as np
import pytest
import torch

import headrace as hr
from headrace.compress import CompressedModel, ExportError, evaluate, load, quantize
from headrace.compress.model import state_dict_bytes


@pytest.fixture(scope="module")
def cnn() -> torch.nn.Module:
    return h.trained_cnn()


@pytest.fixture(scope="module")
def int8(cnn: torch.nn.Module) -> CompressedModel:
    return quantize(cnn, h.image_dataset(128, seed=1), num_calibration_batches=4, batch_size=32)


def test_static_int8_agrees_with_fp32_on_the_eval_set(cnn: torch.nn.Module, int8: CompressedModel) -> None:
    x, _ = h.images(512, seed=2)  # eval data, not the calibration data
    with torch.inference_mode():
        fp32 = cnn(torch.from_numpy(x)).numpy()
    q = int8.predict(x)
    assert q.shape == fp32.shape and q.dtype == np.float32
    assert (q.argmax(1) == fp32.argmax(1)).mean() >= 0.98
    assert int8.method == "int8-static" and int8.backend == "onnxruntime"
    assert int8.info["calibration_batches"] == 4
    assert int8.size_bytes < state_dict_bytes(cnn) / 2  # int8 weights (+ scales and a graph, large here)
    report = evaluate(int8, h.image_dataset(256, seed=2), repeats=3, latency_batch_sizes=(1, 4))
    assert report["accuracy"] >= 0.95 and report["examples"] == 256
    assert report["parameters"] == sum(p.numel() for p in cnn.parameters()) and report["macs"] > 0
    assert report["latency_ms_batch1"] > 0 and report["latency_ms_batch4_p90"] >= report["latency_ms_batch4"]


def test_saved_int8_model_reloads_and_predicts_identically(int8: CompressedModel, tmp_path: Path) -> None:
    path = int8.save(tmp_path / "model.onnx")
    assert path.stat().st_size == int8.size_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # no temporary file left
    again = load(path)
    assert again.method == "int8-static" and again.backend == "onnxruntime"
    x, _ = h.images(64, seed=3)
    assert np.array_equal(again.predict(x), int8.predict(x))
    with pytest.raises(ValueError, match=r"\.onnx file"):
        int8.save(tmp_path / "model.pt2")


def test_a_failed_save_leaves_nothing_under_the_name(int8: CompressedModel, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(path: str, meta: dict, example: np.ndarray) -> None:
        Path(path).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(int8._runner, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        int8.save(tmp_path / "model.onnx")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(FileNotFoundError, match="no such directory"):
        int8.save(tmp_path / "missing" / "model.onnx")


def test_predict_rejects_inputs_of_another_shape(int8: CompressedModel) -> None:
    with pytest.raises(ValueError, match=r"uint8 \(N, 16, 16, 3\)"):
        int8.predict(np.zeros((2, 8, 8, 3), np.uint8))


def test_dynamic_quantization_of_a_linear_model() -> None:
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 5))
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=2.0, size=(5, 32))
    labels = rng.integers(0, 5, size=512)
    x = (centers[labels] + rng.normal(size=(512, 32))).astype(np.float32)
    opt = torch.optim.Adam(mlp.parameters(), lr=0.01)
    for _ in range(50):  # a trained classifier (random logits have no margins to keep)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(mlp(torch.from_numpy(x)), torch.from_numpy(labels)).backward()
        opt.step()
    mlp.eval()
    q = quantize(mlp, None, method="dynamic", example_inputs=x[:4])
    with torch.inference_mode():
        want = mlp(torch.from_numpy(x)).numpy()
    assert q.method == "int8-dynamic"
    assert (q.predict(x).argmax(1) == want.argmax(1)).mean() >= 0.98


def test_dynamic_quantization_names_the_layers_it_cannot_take(cnn: torch.nn.Module) -> None:
    conv_only = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    with pytest.raises(ValueError, match=r"has none \(its layers: Conv2d x1, ReLU x1\).*method='static'"):
        quantize(conv_only, h.image_dataset(8, seed=0), method="dynamic")
    with pytest.raises(ValueError, match="backend='onnxruntime'"):
        quantize(cnn, h.image_dataset(8, seed=0), method="dynamic", backend="torchao")


def test_calibration_elements_that_do_not_match_the_model(cnn: torch.nn.Module) -> None:
    vectors = hr.Dataset.from_tensor_slices((np.zeros((8, 5), np.float32), np.zeros(8, np.int64)))
    with pytest.raises(ValueError, match=r"calibration_dataset, batch 0: inputs float32 \(8, 5\) do not match "
                                         r"the model's input \(in layer .*\)"):
        quantize(cnn, vectors, batch_size=8)
    x, y = h.images(8, seed=0)
    mixed = hr.Dataset.from_tensor_slices((x, y)).concatenate(
        hr.Dataset.from_tensor_slices((x[:, :8, :8], y)))
    with pytest.raises(ValueError, match=r"calibration_dataset, batch 2: inputs uint8 \(4, 8, 8, 3\) differ"):
        quantize(cnn, mixed, batch_size=4, num_calibration_batches=4)
    with pytest.raises(ValueError, match="calibration_dataset is empty"):
        quantize(cnn, hr.Dataset.from_tensor_slices((x, y)).take(0))


class NumpyLayer(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(x.detach().numpy() * 2.0)


class Reused(torch.nn.Module):
    """Calls the same ReLU module twice (PT2E quantizers need one module per call)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = torch.nn.Conv2d(3, 4, 3), torch.nn.Conv2d(4, 4, 3)
        self.act = torch.nn.ReLU()
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2).float()
        return self.head(self.act(self.conv2(self.act(self.conv1(x)))).mean((2, 3)))


def test_a_model_that_fails_to_export_names_the_layer() -> None:
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16 * 16 * 3, 8), NumpyLayer(),
                                torch.nn.Linear(8, 3))
    model_f = torch.nn.Sequential(_Float(), model)
    with pytest.raises(ExportError, match=r"ONNX export \(torch.export\) failed in layer 1.2 \(NumpyLayer\)"):
        quantize(model_f, h.image_dataset(8, seed=0), batch_size=8)


class _Float(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float()


def test_torchao_names_a_layer_called_twice() -> None:
    with pytest.raises(ValueError, match=r"backend='torchao' cannot quantize layer act \(ReLU\): it is called 2 "
                                         r"times.*backend='onnxruntime'"):
        quantize(Reused(), h.image_dataset(8, seed=0), backend="torchao", batch_size=8)


@pytest.mark.slow
def test_torchao_static_int8_agrees_and_reloads(cnn: torch.nn.Module, tmp_path: Path) -> None:
    q = quantize(cnn, h.image_dataset(64, seed=1), backend="torchao", num_calibration_batches=2)
    x, _ = h.images(128, seed=2)
    with torch.inference_mode():
        want = cnn(torch.from_numpy(x)).numpy()
    got = q.predict(x)
    assert q.backend == "torchao" and (got.argmax(1) == want.argmax(1)).mean() >= 0.98
    again = load(q.save(tmp_path / "model.pt2"))
    assert again.backend == "torchao" and np.allclose(again.predict(x), got, atol=1e-4)


@pytest.mark.parametrize(("kwargs", "match"), [({"method": "weird"}, "method='weird'"),
                                               ({"backend": "tflite"}, "backend='tflite'"),
                                               ({"num_calibration_batches": 0}, "num_calibration_batches=0")])
def test_bad_arguments(cnn: torch.nn.Module, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        quantize(cnn, h.image_dataset(8, seed=0), **kwargs)


def _optimized_op_types(model_bytes: bytes, tmp_path: Path) -> dict[str, int]:
    """Op types of the graph ONNX Runtime runs (after its optimizations, with the session options the report
    uses), counted."""
    import onnx
    import onnxruntime as ort

    from headrace.compress.model import session_options

    opts = session_options(ort, 1)
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    counts: dict[str, int] = {}
    for node in onnx.load(str(tmp_path / "optimized.onnx")).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def test_int8_resnet_runs_its_convolutions_residual_adds_and_classifier_in_int8(tmp_path: Path) -> None:
    """Every convolution, residual addition and the classifier of a ResNet run as ONNX Runtime's int8 kernels
    (QLinearConv / QLinearAdd / QGemm): no float Conv, Add-of-feature-maps or Gemm is left between a
    DequantizeLinear and a QuantizeLinear (which would cost a conversion each way)."""
    from headrace.train import build_model

    torch.manual_seed(0)
    net = build_model("resnet18", h.CLASSES, width=8, stem_stride=2).eval()
    q = quantize(net, h.image_dataset(64, seed=1), num_calibration_batches=2, batch_size=32)
    ops = _optimized_op_types(q._runner.model_bytes, tmp_path)
    convs = sum(isinstance(m, torch.nn.Conv2d) for m in net.modules())
    assert ops.get("QLinearConv", 0) == convs, ops
    assert ops.get("QLinearAdd", 0) == 8, ops  # one residual addition per BasicBlock
    assert ops.get("QGemm", 0) == 1 and "Conv" not in ops and "Gemm" not in ops, ops
    assert ops.get("QuantizeLinear", 0) <= 2 and ops.get("DequantizeLinear", 0) <= 2, ops  # input, pooling only
    x, _ = h.images(32, seed=2)
    with torch.inference_mode():
        fp32 = net(torch.from_numpy(x)).numpy()
    assert np.corrcoef(q.predict(x).ravel(), fp32.ravel())[0, 1] > 0.9


def test_onnx_sessions_run_optimized_with_the_given_threads_and_no_spinning() -> None:
    import onnxruntime as ort

    from headrace.compress.model import session_options

    opts = session_options(ort, 3)
    assert opts.intra_op_num_threads == 3 and opts.inter_op_num_threads == 1
    assert opts.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert opts.get_session_config_entry("session.inter_op.allow_spinning") == "0"
