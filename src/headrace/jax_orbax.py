"""An Orbax checkpoint handler for headrace iterators (``headrace.jax``'s :class:`~headrace.jax.JaxIterator`, or
any ``headrace.Iterator``): the iterator's ``get_state()`` saved in the same checkpoint as the model, one small
JSON file per process, as Grain's ``PyGrainCheckpointHandler`` does.

With Orbax installed (``pip install orbax-checkpoint``), :class:`CheckpointSave` and :class:`CheckpointRestore`
are Orbax ``CheckpointArgs`` registered with :class:`CheckpointHandler`, so they go into a ``Composite`` beside the
model's arguments::

    mngr = ocp.CheckpointManager(path)
    mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(params), data=CheckpointSave(it)))
    mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(params), data=CheckpointRestore(it)))

``restore`` calls ``it.set_state`` on the iterator given (a fresh one of the same pipeline): it continues with
exactly the rest. The file is ``process_<index>-of-<count>.json`` (``jax.process_index()`` /
``jax.process_count()``): each process restores its own share; a checkpoint written by another number of
processes raises ``StateError`` naming both counts.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ._deps import require
from ._errors import StateError

jax = require("jax", "headrace.jax")


def _state_file(directory: Any) -> Path:
    return Path(str(directory)) / f"process_{jax.process_index()}-of-{jax.process_count()}.json"


class CheckpointHandler:
    """Orbax's ``CheckpointHandler`` interface for a headrace iterator's state (see the module docstring)."""

    def save(self, directory: Any, item: Any = None, args: Any = None) -> None:
        """Write ``(item or args.item).get_state()`` as JSON into ``directory`` (this process's file)."""
        it = item if item is not None else args.item
        _state_file(directory).write_text(json.dumps(it.get_state()))

    def restore(self, directory: Any, item: Any = None, args: Any = None) -> Any:
        """``set_state`` the iterator given (``item`` or ``args.item``) from this process's file; returns it.

        Raises:
            StateError: no file for this process (a checkpoint of another process count: the counts named).
        """
        it = item if item is not None else args.item
        path = _state_file(directory)
        if not path.exists():
            found = sorted(p.name for p in Path(str(directory)).glob("process_*.json"))
            raise StateError(f"headrace Orbax checkpoint {directory}: no state for process {jax.process_index()} of "
                             f"{jax.process_count()} ({path.name}); it holds {found or 'no iterator state'}: restore "
                             "with the process count that saved it")
        it.set_state(json.loads(path.read_text()))
        return it

    def structure(self, directory: Any) -> None:
        return None

    def metadata(self, directory: Any) -> None:
        return None

    def finalize(self, directory: Any) -> None:
        pass

    def close(self) -> None:
        pass

    @classmethod
    def typestr(cls) -> str:
        return f"{cls.__module__}.{cls.__qualname__}"


try:  # registered with Orbax's args API when Orbax is installed
    import orbax.checkpoint as ocp

    @ocp.args.register_with_handler(CheckpointHandler, for_save=True)
    @dataclasses.dataclass
    class CheckpointSave(ocp.args.CheckpointArgs):
        """Save ``item``'s state (a headrace iterator) in an Orbax checkpoint."""

        item: Any

    @ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
    @dataclasses.dataclass
    class CheckpointRestore(ocp.args.CheckpointArgs):
        """Restore ``item`` (a fresh iterator of the same pipeline) from an Orbax checkpoint."""

        item: Any

    ORBAX = True
except ImportError:  # no Orbax: the handler alone; the args name what to install
    ORBAX = False

    def __getattr__(name: str) -> Any:
        if name in ("CheckpointSave", "CheckpointRestore"):
            raise ImportError(f"headrace.jax_orbax.{name} needs Orbax: pip install orbax-checkpoint")
        raise AttributeError(f"module 'headrace.jax_orbax' has no attribute {name!r}")

__all__ = ["ORBAX", "CheckpointHandler", "CheckpointRestore", "CheckpointSave"]
