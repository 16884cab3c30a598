"""The models the CLI and the demo train: ``small-cnn`` and ``resnet18`` (defined here, no torchvision).

Both take images as float tensors of shape ``(N, 3, H, W)`` (channels first, any ``H, W >= 8``) or
``(N, H, W, 3)`` (channels last, as headrace's image pipelines yield them; detected by the last axis
being 3 and the second not) and return logits ``(N, num_classes)``.

- ``small-cnn``: 4 conv-BN-ReLU blocks (32-64-128-256 channels, stride 2) + global average pool + linear.
- ``resnet18``: ResNet-18 (He et al. 2016, BasicBlock x [2, 2, 2, 2]) with a 3x3 stride-1 stem and no
  max-pool, suited to 32-128 px images; ``width`` scales the channels (64 -> 64-128-256-512).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._deps import import_torch

if TYPE_CHECKING:  # (the real module, for its types; at run time it comes through import_torch)
    import torch
    from torch import nn
else:
    torch = import_torch()
    nn = torch.nn

MODEL_NAMES = ("resnet18", "small-cnn")


def _conv_bn(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class _ChannelsFirst(nn.Module):
    """Accept NHWC input (headrace's image layout) as well as NCHW."""

    def forward(self, x: Any) -> Any:
        if x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
            x = x.permute(0, 3, 1, 2)
        if not torch.is_floating_point(x):
            x = x.float().div_(255.0)
        return x


class SmallCNN(nn.Module):
    """Four stride-2 conv blocks, global average pool, linear classifier."""

    def __init__(self, num_classes: int, in_channels: int = 3, width: int = 32) -> None:
        super().__init__()
        w = width
        self.features = nn.Sequential(_ChannelsFirst(), _conv_bn(in_channels, w, 2), _conv_bn(w, 2 * w, 2),
                                      _conv_bn(2 * w, 4 * w, 2), _conv_bn(4 * w, 8 * w, 2),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classifier = nn.Linear(8 * w, num_classes)

    def forward(self, x: Any) -> Any:
        return self.classifier(self.features(x))


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 conv) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.relu_out = nn.ReLU(inplace=True)  # one module per call: PT2E quantizers match modules by call
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x: Any) -> Any:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu_out(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 for small images: 3x3 stem (stride ``stem_stride``), 4 stages of 2 BasicBlocks."""

    def __init__(self, num_classes: int, in_channels: int = 3, width: int = 64, stem_stride: int = 1) -> None:
        super().__init__()
        widths = [width, 2 * width, 4 * width, 8 * width]
        layers: list[nn.Module] = [_ChannelsFirst(), _conv_bn(in_channels, width, stem_stride)]
        cin = width
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers += [BasicBlock(cin, w, stride), BasicBlock(w, w, 1)]
            cin = w
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(cin, num_classes)

    def forward(self, x: Any) -> Any:
        return self.classifier(self.features(x))


def build_model(name: str, num_classes: int, **kwargs: Any) -> nn.Module:
    """A fresh model by name: ``"resnet18"`` or ``"small-cnn"`` (keyword arguments go to its class).

    ``"resnet18"`` defaults to the small variant the CLI and the demo train: ``width=32, stem_stride=2``
    (2.8 M parameters, ~0.33 GFLOPs per 96x96 image); pass ``width=64, stem_stride=1`` for the full one.

    Raises:
        ValueError: an unknown name (the message lists the known ones) or ``num_classes < 1``.
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes={num_classes!r} must be an int >= 1")
    if name == "resnet18":
        return ResNet18(num_classes, **({"width": 32, "stem_stride": 2} | kwargs))
    if name == "small-cnn":
        return SmallCNN(num_classes, **kwargs)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)} (or pass any "
                     "torch.nn.Module to headrace.train.fit)")


__all__ = ["MODEL_NAMES", "BasicBlock", "ResNet18", "SmallCNN", "build_model"]
