"""The one way headrace imports an optional dependency: :func:`require`, which raises
:class:`~headrace.MissingDependencyError` (an ``ImportError``) naming the extra that installs it
(``pip install 'headrace[hdf5]'``) instead of a bare ``ModuleNotFoundError``.

``EXTRAS`` maps each optional top-level module to the ``pyproject.toml`` extra that provides it (a test keeps
the two in step).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from ._errors import MissingDependencyError

EXTRAS: dict[str, tuple[str, str]] = {
    # module: (extra, the distribution pip installs)
    "h5py": ("hdf5", "h5py"),
    "pyarrow": ("parquet", "pyarrow"),
    "torch": ("torch", "PyTorch"),
    "lightning": ("lightning", "Lightning"),
    "simplejpeg": ("image", "simplejpeg"),
    "cv2": ("image", "opencv-python-headless"),
    "PIL": ("image", "pillow"),
    "s3fs": ("s3", "s3fs"),
    "matplotlib": ("cli", "matplotlib"),
    "skimage": ("cli", "scikit-image"),
    "apache_beam": ("beam", "Apache Beam"),
    "onnxruntime": ("compress", "onnxruntime"),
    "onnx": ("compress", "onnx"),
    "onnxscript": ("compress", "onnxscript"),
    "torch_pruning": ("compress", "torch-pruning"),
    "torchao": ("compress", "torchao"),
    "keras": ("keras", "Keras 3"),
    "jax": ("jax", "JAX"),
    "ray": ("ray", "Ray"),
    "tokenizers": ("text", "Hugging Face tokenizers"),
}


def install_hint(module: str) -> str:
    """``pip install 'headrace[EXTRA]'`` for ``module`` (a dotted name: its top-level package counts).

    Raises:
        KeyError: ``module`` is not an optional dependency of headrace (a bug: add it to ``EXTRAS``).
    """
    return f"pip install 'headrace[{EXTRAS[module.partition('.')[0]][0]}]'"


def require(module: str, purpose: str, extra: str | None = None) -> ModuleType:
    """``importlib.import_module(module)`` (from ``sys.modules`` when already imported: cheap on hot paths; a
    module another thread is still importing is waited for, not returned half made: threads that decode their
    first images at once met ``partially initialized module 'cv2' has no attribute 'resize'``).

    Args:
        module: the dotted module name, e.g. ``"pyarrow.parquet"``; its top-level package must be in
            ``EXTRAS``.
        purpose: what needs it, for the message, e.g. ``"HDF5Dataset"``.
        extra: the extra to name when the caller's is not ``EXTRAS``' (matplotlib is in ``cli`` and
            ``compress``: ``headrace.compress`` names ``compress``).

    Raises:
        MissingDependencyError: the module cannot be imported; names ``purpose``, the distribution, the
            import error and the ``pip install 'headrace[EXTRA]'`` that adds it (``.name``: the top-level
            module, ``.extra``: the extra).
    """
    found = sys.modules.get(module)
    # (a module another thread is still importing is in sys.modules half made: import_module waits for it)
    if found is not None and not getattr(getattr(found, "__spec__", None), "_initializing", False):
        return found
    top = module.partition(".")[0]
    default, dist = EXTRAS[top]
    extra = extra or default
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        err = MissingDependencyError(
            f"{purpose} needs {dist} ({top}), which is not installed or fails to import ({exc}); install it "
            f"with: pip install 'headrace[{extra}]'", name=top)
        err.extra = extra
        raise err from exc


__all__ = ["EXTRAS", "install_hint", "require"]
