"""``DatasetNode``: one immutable step of a pipeline's recipe, and the one place that unwraps a ``Dataset``.

A pipeline is a tree of nodes (``inputs`` point to the nodes it reads from). A node holds the arguments of
its transformation, validated when it is built; it knows its ``cardinality()``, its own options and its
element spec, and ``make_iterator(ctx)`` builds a fresh iterator tree for one iteration
(stages: ``headrace._engine.stage``).

Element specs (``headrace._spec``) are inferred as tf.data infers them: each node derives its spec from
its inputs' (``compute_spec``): sources know theirs, ``batch`` adds a dimension, ``map`` traces its function
on spec-shaped examples (``trace``). ``static_spec()`` never reads data (it is what construction-time
checks use: ``concatenate`` of incompatible datasets raises when it is built); ``element_spec()`` also
falls back to the first element a node produces where nothing static is known (a generator without
``output_signature``, a function that cannot be traced).

``headrace.Dataset`` (``headrace._dataset``) is a thin facade holding one node: its methods build nodes
from the modules of ``headrace._ops`` (one module per transformation) and wrap them. Nodes never import
the facade; where a user hands a node a Dataset (``zip``, ``concatenate``, the function of ``interleave``,
``TFRecordDataset(filenames=<Dataset>)``), :func:`as_node` unwraps it by duck typing (the facade's
``_node`` attribute).
"""

from __future__ import annotations

import contextlib
import copy
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .._memory import budget_for
from .._options import UNKNOWN_CARDINALITY, Options
from .._spec import NotTraceable, example, relax, spec_of
from .._warn import PipelineWarnings
from .context import IteratorContext
from .stage import Stage
from .stage_support import JOIN_TIMEOUT_S, check_state


class _Unset:
    """The "not computed yet" marker of the spec memos; one object, also after pickling (a node sent to a
    spawned DataLoader worker compares its memos with ``is _UNSET``)."""

    def __reduce__(self) -> str:
        return "_UNSET"

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()
SpecOf = Callable[["DatasetNode"], Any]


class DatasetNode:
    """Base class of every transformation and source (see the module docstring).

    Subclasses set ``label`` (a readable name for errors, stage names and ``repr``), call
    ``super().__init__(inputs)`` and implement ``make_iterator``; they override ``cardinality`` when it
    is known and ``own_options`` when they attach options.

    ``named(name)`` gives the stage the user's ``name=`` (tf.data's argument of every method): the label
    becomes ``kind(name)`` (``batch(train_batch)``), and so the stage's name in errors, ``explain()``,
    ``memory_stats()`` and the tuner (``IteratorContext.stage_name``); a stage that has no name of its own
    gets it as its iterator's ``stage`` (what ``explain()`` shows).
    """

    label = "dataset"
    given_name: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        make = cls.__dict__.get("make_iterator")
        if make is not None and not getattr(make, "_names_stage", False):
            cls.make_iterator = _naming(make)  # type: ignore[method-assign,assignment]

    def named(self, name: str | None) -> DatasetNode:
        """This node with the user's ``name=`` (``None``: unchanged); see the class docstring."""
        if name is None:
            return self
        self.label = stage_label(self.label.partition("(")[0], name)
        self.given_name = name
        return self

    def __init__(self, inputs: Sequence[DatasetNode] = ()) -> None:
        for i, node in enumerate(inputs):
            if not isinstance(node, DatasetNode):
                raise TypeError(f"{type(self).__name__}: input {i} is {type(node).__name__}, expected a "
                                "DatasetNode (unwrap a Dataset with headrace._engine.recipe.as_node)")
        self.inputs: tuple[DatasetNode, ...] = tuple(inputs)
        self._static_spec: Any = _UNSET
        self._element_spec: Any = _UNSET

    def make_iterator(self, ctx: IteratorContext) -> Stage:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not implement make_iterator")

    def cardinality(self) -> int:
        """Number of elements, or ``INFINITE_CARDINALITY`` (-1) / ``UNKNOWN_CARDINALITY`` (-2)."""
        return UNKNOWN_CARDINALITY

    def own_options(self) -> Options | None:
        """Options this node attaches (``with_options``); ``None`` for most nodes."""
        return None

    def options(self) -> Options:
        """The inputs' options merged (in order), this node's own on top."""
        merged = Options()
        for node in self.inputs:
            merged = merged.merge(node.options())
        return merged.merge(self.own_options())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label}>"

    # ---- element specs (see the module docstring) ---------------------------------------------------------
    spec_passes = False
    """True for transformations whose elements are their input's (take, filter, shuffle, prefetch ...)."""

    def compute_spec(self, spec_of: SpecOf) -> Any:
        """This node's element spec from its inputs' (``spec_of(input)``, ``None`` when unknown); ``None``
        when it cannot be known without producing an element. Transformations override it."""
        return spec_of(self.inputs[0]) if self.spec_passes else None

    def spec_consulted(self) -> Any:
        """The static spec if something has asked for it (a downstream check, ``element_spec``), else None."""
        return None if self._static_spec is _UNSET else self._static_spec

    def static_spec(self) -> Any:
        """The element spec as far as it is known without reading any data (``None``: unknown)."""
        if self._static_spec is _UNSET:
            self._static_spec = self.compute_spec(lambda node: node.static_spec())
        return self._static_spec

    def element_spec(self) -> Any:
        """The element spec; where nothing static says it, the spec of the first element this node produces.

        Raises ``ValueError`` when it cannot be known (the node produces no element), or the error the first
        element raised.
        """
        if self._element_spec is _UNSET:
            spec = self.static_spec()
            if spec is None:
                spec = self.compute_spec(lambda node: node.element_spec())
            if spec is None:
                spec = self._first_element_spec()
            self._element_spec = spec
        return self._element_spec

    @contextlib.contextmanager
    def one_iteration(self) -> Iterator[Stage]:
        """An iterator over one iteration (path ``(0,)``) of this node, with its own context and the budget
        its options give; on exit it is stopped, joined (``JOIN_TIMEOUT_S``) and closed, its worker processes
        ended and (no thread left in user code) its budget accounts closed, as ``Iterator.close()`` does. For
        the engine's own reads (the first element's spec, counting), not for users' iteration."""
        options = self.options()
        ctx = IteratorContext(options, budget_for(options.memory_limit()), (0,))
        ctx.tree.warnings = PipelineWarnings(self, options, ctx.budget.limit_bytes)
        try:
            it = self.make_iterator(ctx)
        except BaseException:
            abandon_build(ctx)
            raise
        try:
            yield it
        finally:
            ctx.tree.stop.set()
            it.signal_stop()
            it.join(time.monotonic() + JOIN_TIMEOUT_S)
            it.close()
            ctx.tree.close_resources()  # worker processes: stopped and reaped, not left to the collector
            if not it.alive_threads():
                for acc in ctx.budget.accounts_of(ctx.tree):
                    acc.close()
        ctx.tree.warnings.flush()  # in the caller's thread, the read done (headrace._warn.PipelineWarnings)

    def _first_element_spec(self) -> Any:
        with self.one_iteration() as it:
            try:
                x = it.__next__()
            except StopIteration:
                raise ValueError(f"element_spec of {self.label}: nothing says what its elements are (no "
                                 "output_signature, a function that cannot be traced) and it produced no element "
                                 "to read it from; pass output_signature=") from None
            except Exception as e:
                e.add_note(f"while reading the first element of {self.label} for its element_spec (pass "
                           "output_signature= to give it)")
                raise
        return spec_of(x)

    # ---- sharding at the source (``headrace._ops.shard.shard_at_source``) --------------------------------
    shard_passes = False
    """True for transformations that keep a partition a partition when a shard moves below them (each shard
    transformed on its own is a disjoint part of the whole): map, filter, batch, shuffle, prefetch, repeat..."""

    def with_inputs(self, inputs: Sequence[DatasetNode]) -> DatasetNode:
        """A copy of this node reading ``inputs`` instead (the recipe itself is never changed)."""
        clone = copy.copy(self)
        clone.inputs = tuple(inputs)
        return clone

    def shard_source(self, num_shards: int, index: int) -> DatasetNode | None:
        """This node reading only its share ``index`` of ``num_shards`` from its source (files or records);
        ``None`` when it cannot (the caller then shards above it)."""
        return None


def abandon_build(ctx: IteratorContext) -> None:
    """``make_iterator(ctx)`` raised partway: the stages built before it are unreachable, so what they opened
    is closed here - their threads told to stop, worker processes stopped, and every budget account of the
    context closed (a shared process budget would otherwise keep them, and every later pipeline's share would
    stay smaller for the life of the process). Used by ``iter()`` (``headrace._iterator``) and
    :meth:`DatasetNode.one_iteration`."""
    ctx.tree.stop.set()
    ctx.tree.close_resources()
    for acc in ctx.budget.accounts_of(ctx.tree):
        acc.close()


def stage_label(kind: str, name: str | None, default: str | None = None) -> str:
    """``kind(name)`` for the user's ``name=`` (``kind(default)`` / ``kind`` without it); ``TypeError`` for a
    name that is not a non-empty str."""
    if name is None:
        return kind if default is None else f"{kind}({default})"
    if not isinstance(name, str) or not name:
        raise TypeError(f"{kind}(name={name!r}): name must be a non-empty str (the stage's name in errors, "
                        "explain() and memory_stats()) or None")
    return f"{kind}({name})"


_MakeIterator = Callable[[Any, IteratorContext], Stage]


def _naming(make: _MakeIterator) -> _MakeIterator:
    """``make_iterator`` that gives a named node's iterator the stage name where the stage has none."""

    def make_iterator(self: DatasetNode, ctx: IteratorContext) -> Stage:
        it = make(self, ctx)
        if self.given_name is not None and getattr(it, "stage", None) is None \
                and getattr(it, "_stage", None) is None:
            it.stage = ctx.stage_name(self, self.label)  # type: ignore[attr-defined]
        return it

    make_iterator._names_stage = True  # type: ignore[attr-defined]
    make_iterator.__doc__ = make.__doc__
    return make_iterator


class ElementsNode(DatasetNode):
    """A dataset over elements already in memory, with a known spec: the windows of ``window`` and
    ``group_by_window`` (a ``headrace.Dataset`` per window, as tf.data yields one), and the example
    dataset :func:`trace` gives a function of windows. State: the index of the next element (the elements
    belong to the stage that made the window)."""

    label = "window"

    def __init__(self, elements: list[Any], spec: Any) -> None:
        super().__init__()
        self.elements = elements
        self.spec = spec

    def cardinality(self) -> int:
        return len(self.elements)

    def compute_spec(self, spec_of: SpecOf) -> Any:
        return self.spec

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _ElementsIterator(ctx, self.elements)


class _ElementsIterator(Stage):
    kind = "window_elements"

    def __init__(self, ctx: IteratorContext, elements: list[Any]) -> None:
        super().__init__(ctx)
        self._elements = elements
        self._i = 0

    def __next__(self) -> Any:
        i = self._i
        if i >= len(self._elements):
            raise StopIteration
        self._i = i + 1
        return self._elements[i]

    def skip_ahead(self, n: int) -> None:
        self._i = min(len(self._elements), self._i + n)

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "length": len(self._elements), "next": self._i}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, length=len(self._elements))
        self._i = int(state["next"])


def trace(call: Callable[[Any], Any], input_spec: Any, to_spec: Callable[[Any], Any] = spec_of) -> Any:
    """The spec of ``call(x)`` for spec-shaped examples ``x`` of ``input_spec`` (``_spec.example``);
    ``None`` when that is not safe to say: an unknown input spec or rank, a function that raises on the
    example, or outputs whose structure or dtypes differ between examples.

    Like tf.data, which traces a function once when the dataset is built, this calls the function when the
    spec is asked for, twice: on examples filled with 1 (strings of 17 bytes) and unknown dimensions of size 2,
    then filled with 2 (34 bytes) and sizes 3; what differs between the two results (a size that depends on a
    value, ``np.arange(x)``) becomes unknown. A function whose output shapes depend on values in ways two
    examples do not show is caught when its elements arrive (``map`` checks them against a traced spec that was
    used). Warnings and floating-point errors are silenced while it runs.
    """
    if input_spec is None:
        return None
    specs = []
    for size, fill in ((2, 1), (3, 2)):
        try:
            x = example(input_spec, size, fill, lambda s: wrap(ElementsNode([], s)))
        except NotTraceable:
            return None
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                specs.append(to_spec(call(x)))
        except Exception:
            return None
    out = specs[0]
    for s in specs[1:]:
        out = None if out is None or s is None else relax(out, s)
    return out


def node_of(obj: Any) -> DatasetNode | None:
    """The node of a ``headrace.Dataset`` (or ``obj`` itself if it is a node); ``None`` for anything else."""
    if isinstance(obj, DatasetNode):
        return obj
    node = getattr(obj, "_node", None)
    return node if isinstance(node, DatasetNode) else None


def as_node(obj: Any, error: str) -> DatasetNode:
    """``node_of(obj)``, raising ``TypeError(error)`` when ``obj`` is not a Dataset."""
    node = node_of(obj)
    if node is None:
        raise TypeError(error)
    return node


_wrapper: list[Callable[[DatasetNode], Any]] = []


def set_wrapper(wrap: Callable[[DatasetNode], Any]) -> None:
    """Registered by the facade (``headrace._dataset``): how a node becomes a ``headrace.Dataset``, for
    stages whose elements are datasets (``window``, ``group_by_window``) without importing the facade."""
    _wrapper[:] = [wrap]


def wrap(node: DatasetNode) -> Any:
    """``node`` as a ``headrace.Dataset`` (see :func:`set_wrapper`)."""
    return _wrapper[0](node)
