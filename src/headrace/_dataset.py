"""``Dataset``: the immutable, lazy recipe. Each method returns a new Dataset; nothing runs until iteration.

The methods keep tf.data's names, arguments, defaults and results (``tf.data.Dataset``). ``Dataset`` is a
thin facade over one :class:`~headrace._engine.recipe.DatasetNode`: each method validates what only the facade
knows, builds the node of one module in ``headrace._ops`` and wraps it. Iterating (``iter(ds)``) builds a
fresh tree of iterators with its own threads, buffers and memory budget (:class:`headrace.Iterator`).

Layers (imports point down only): ``_dataset`` -> ``_iterator`` and ``_ops/*`` -> ``_engine/recipe`` ->
``_engine/stage`` (``_engine/context``, ``_engine/stage_support``, ``_engine/source_protocol``); the io
readers (``headrace.io``) sit above, as ``Dataset`` subclasses.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ._engine.recipe import DatasetNode, node_of, set_wrapper, stage_label
from ._iterator import Iterator
from ._ops.batch import BatchNode
from ._ops.bucket import bucket_node
from ._ops.cache import CacheNode
from ._ops.concatenate import ConcatenateNode
from ._ops.counter import CounterNode
from ._ops.enumerate import enumerate_node
from ._ops.filter import FilterNode
from ._ops.from_source import SourceNode
from ._ops.group_by_window import GroupByWindowNode
from ._ops.ignore_errors import IgnoreErrorsNode
from ._ops.in_memory import GeneratorNode, RangeNode, TensorSlicesNode, TensorsNode
from ._ops.interleave import InterleaveNode
from ._ops.list_files import list_files
from ._ops.map import MapNode
from ._ops.pack import PackNode
from ._ops.padded_batch import PaddedBatchNode
from ._ops.prefetch import PrefetchNode
from ._ops.ragged_batch import RaggedBatchNode
from ._ops.random_access import RandomAccessNode
from ._ops.random_ints import RandomNode
from ._ops.reduce import reduce_dataset, single_element
from ._ops.rejection_resample import RejectionResampleNode
from ._ops.repeat import RepeatNode
from ._ops.sample import ChooseNode, SampleNode
from ._ops.scan import ScanNode
from ._ops.shard import ShardNode
from ._ops.shuffle import ShuffleNode
from ._ops.skip import SkipNode
from ._ops.take import TakeNode
from ._ops.take_while import TakeWhileNode
from ._ops.unbatch import UnbatchNode
from ._ops.unique import UniqueNode
from ._ops.window import WindowNode
from ._ops.with_options import OptionsNode
from ._ops.zip import ZipNode
from ._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Options
from .io import files as _files
from .io import saved_dataset


def _wrap(node: DatasetNode, name: str | None = None) -> Dataset:
    """A plain ``Dataset`` holding ``node`` (transformations of a reader are plain Datasets), named by the
    user's ``name=`` (tf.data's argument of every method; ``DatasetNode.named``)."""
    return Dataset(node.named(name))


class Dataset:
    """A lazy, streaming dataset with ``tf.data.Dataset``'s API and results (see docs/migration.md).

    A ``Dataset`` holds one recipe node (``headrace._ops``); build datasets with the static methods
    (``Dataset.range``, ``from_tensor_slices``, ``from_source``, ...) or the readers in ``headrace.io``.
    Subclasses (the readers) call ``super().__init__(node)`` and may list node attributes to expose in
    ``_node_attributes``.
    """

    _node_attributes: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, node: DatasetNode) -> None:
        if not isinstance(node, DatasetNode):
            raise TypeError(f"Dataset({type(node).__name__}): a Dataset wraps a recipe node; build one with "
                            "Dataset.range / from_tensor_slices / from_generator / from_source or a reader "
                            "in headrace.io")
        self._node = node

    def __getattr__(self, name: str) -> Any:
        if name in type(self)._node_attributes:
            return getattr(self.__dict__["_node"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        spec = self._node.static_spec()
        shown = "<known from the first element>" if spec is None else repr(spec)
        return f"<{type(self).__name__} {self._node.label} element_spec={shown}>"

    @property
    def element_spec(self) -> Any:
        """The structure of :class:`headrace.TensorSpec` (``NoneTensorSpec``, ``RaggedTensorSpec``,
        ``DatasetSpec``) that describes every element, inferred as tf.data infers it (``headrace._spec``):
        from the sources and ``output_signature``, through every transformation (``None`` in a shape is a
        dimension whose size varies). Where nothing static says it (a generator without
        ``output_signature``, a function that cannot be traced) it is read from the first element, which
        runs the pipeline up to it. Raises ``ValueError`` when that pipeline produces no element."""
        return self._node.element_spec()

    def cardinality(self) -> int:
        """Number of elements, or ``INFINITE_CARDINALITY`` (-1) / ``UNKNOWN_CARDINALITY`` (-2)."""
        return self._node.cardinality()

    # ---- iteration ------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator:
        counter = self.__dict__.get("_iterations")
        if counter is None:
            counter = self.__dict__["_iterations"] = itertools.count()
        return Iterator(self, iteration=next(counter))

    def as_numpy_iterator(self) -> Iterator:
        """An iterator of numpy values (every headrace iterator already yields numpy)."""
        return iter(self)

    def __len__(self) -> int:
        n = self.cardinality()
        if n == INFINITE_CARDINALITY:
            raise TypeError("The dataset is infinite (repeat() without a count); it has no len()")
        if n == UNKNOWN_CARDINALITY:
            raise TypeError("The dataset length is unknown (e.g. after filter()); iterate to count it")
        return n

    def __bool__(self) -> bool:
        return True

    def options(self) -> Options:
        """The options of this pipeline: inputs' options merged, this node's on top."""
        return self._node.options()

    def with_options(self, options: Options, name: str | None = None) -> Dataset:
        """Attach ``Options``; fields it sets override the same fields set upstream."""
        return _wrap(OptionsNode(self._node, options), name)

    def apply(self, transformation_func: Callable[[Dataset], Dataset]) -> Dataset:
        """``transformation_func(self)``, which must return a Dataset."""
        out = transformation_func(self)
        if not isinstance(out, Dataset):
            raise TypeError(f"apply({transformation_func!r}) returned {type(out).__name__}; the function must "
                            "take a Dataset and return a Dataset")
        return out

    # ---- sources ----------------------------------------------------------------------------------
    @staticmethod
    def range(*args: int, output_type: Any = None, name: str | None = None, dtype: Any = None) -> Dataset:
        """``range(stop)``, ``range(start, stop[, step])`` as int64 scalars (or ``output_type``, tf.data's
        keyword; ``dtype`` is an alias). Arguments are integers (numpy integers and 0-d arrays too)."""
        if output_type is not None and dtype is not None:
            raise TypeError("range(): pass output_type (tf.data's name) or dtype, not both")
        return _wrap(RangeNode(*args, dtype=output_type if output_type is not None else dtype), name)

    @staticmethod
    def from_tensors(tensors: Any, name: str | None = None) -> Dataset:
        """A dataset of exactly one element, ``tensors`` (lists become arrays)."""

        return _wrap(TensorsNode(tensors), name)

    @staticmethod
    def from_tensor_slices(tensors: Any, name: str | None = None) -> Dataset:
        """One element per row: slices along axis 0 of every leaf of ``tensors``.

        ``tensors`` is a nested structure of arrays (lists are tensors: ``[1, 2]`` -> int64 array, Python
        floats -> float32, str -> bytes). A leaf of shape ``(N, *s)`` yields elements of shape ``s``.
        Raises ``ValueError`` if a leaf is a scalar, if the leaves disagree in ``N``, or for ragged lists.
        """

        return _wrap(TensorSlicesNode(tensors), name)

    @staticmethod
    def from_generator(generator: Callable[..., Any], output_types: Any = None, output_shapes: Any = None,
                       args: Sequence[Any] | None = None, output_signature: Any = None,
                       name: str | None = None) -> Dataset:
        """Elements from ``generator(*args)``, a callable returning an iterable (called per iteration).

        ``output_signature``: a structure of :class:`headrace.TensorSpec` (shape with ``None`` wildcards,
        dtype); every element is converted to it and checked (``ValueError`` names the element on a shape
        mismatch). Without it, elements are normalized like ``map`` outputs. Restoring a state re-runs the
        generator and skips the elements already produced.
        """

        return _wrap(GeneratorNode(generator, output_types=output_types, output_shapes=output_shapes,
                                   args=args, output_signature=output_signature), name)

    @staticmethod
    def list_files(file_pattern: str | Sequence[str], shuffle: bool | None = None, seed: int | None = None,
                   name: str | None = None) -> Dataset:
        """File names (``bytes``) matching glob pattern(s); sorted, then shuffled unless ``shuffle=False``."""

        return _wrap(list_files(file_pattern, shuffle=shuffle, seed=seed, fs=_files), name)

    @staticmethod
    def zip(*args: Any, datasets: Any = None, name: str | None = None) -> Dataset:
        """Elements of several datasets side by side, in the structure they are given in: ``zip(a, b)`` and
        ``zip((a, b))`` yield tuples, ``zip({"x": a})`` dicts, and ``zip(a)`` ``a``'s elements as they are
        (tf.data's rule); ``datasets=`` (tf.data's keyword) takes the structure as one argument. A ``list`` of
        datasets raises ``TypeError``, as in tf.data (use a tuple)."""

        if datasets is not None:
            if args:
                raise TypeError("zip(): pass the datasets as positional arguments or as datasets=, not both")
            return _wrap(ZipNode(datasets), name)
        if len(args) == 1:
            return _wrap(ZipNode(args[0]), name)
        return _wrap(ZipNode(tuple(args)), name)

    @staticmethod
    def sample_from_datasets(datasets: Sequence[Dataset], weights: Sequence[float] | Dataset | None = None,
                             seed: int | None = None, stop_on_empty_dataset: bool = False,
                             rerandomize_each_iteration: bool | None = None) -> Dataset:
        """Interleave ``datasets`` at random, element by element, with probabilities ``weights``.

        ``weights``: float weights, one per dataset (normalized; 0 never reads that dataset; all 0 gives an
        empty dataset), or a Dataset of such vectors (one per draw). Integer weights raise ``TypeError``,
        incompatible element specs ``TypeError`` (both as tf.data). ``rerandomize_each_iteration=True``
        draws anew in each iteration; otherwise every iteration repeats the same draws.
        """
        if node_of(weights) is None and len(datasets) == 1:
            if weights is not None:
                SampleNode(datasets, weights, seed, stop_on_empty_dataset, rerandomize_each_iteration)  # checks
            return datasets[0]  # tf.data returns the one dataset itself
        return _wrap(SampleNode(datasets, weights, seed, stop_on_empty_dataset, rerandomize_each_iteration))

    @staticmethod
    def choose_from_datasets(datasets: Sequence[Dataset], choice_dataset: Dataset,
                             stop_on_empty_dataset: bool = True) -> Dataset:
        """Element ``i`` comes from ``datasets[choice_dataset[i]]``."""

        return _wrap(ChooseNode(datasets, choice_dataset, stop_on_empty_dataset))

    @staticmethod
    def from_random_access(source: Any, shuffle: bool = False, seed: int | None = None,
                           reshuffle_each_iteration: bool = True, num_shards: int = 1,
                           index: int = 0, start: int = 0) -> Dataset:
        """Elements ``source[i]`` of a random-access source (``len()`` and ``[i]``); see the module."""

        return _wrap(RandomAccessNode(source, shuffle=shuffle, seed=seed,
                                      reshuffle_each_iteration=reshuffle_each_iteration,
                                      num_shards=num_shards, index=index, start=start))

    @staticmethod
    def counter(start: int = 0, step: int = 1, dtype: Any = "int64", name: str | None = None) -> Dataset:
        """``start, start + step, ...`` forever (int64 scalars, or ``dtype``); cardinality infinite."""
        return _wrap(CounterNode(start, step, dtype), name)

    @staticmethod
    def random(seed: int | None = None, rerandomize_each_iteration: bool | None = None,
               name: str | None = None) -> Dataset:
        """Pseudorandom int64 scalars in ``[0, 2**32)``, forever (tf.data's values are 32-bit too; the
        sequence is not TensorFlow's). Every iteration repeats the sequence unless
        ``rerandomize_each_iteration=True``; ``seed`` makes it reproducible across runs."""
        return _wrap(RandomNode(seed, rerandomize_each_iteration), name)

    @staticmethod
    def from_source(make_iterator: Callable[[], Any], *, cardinality: int = UNKNOWN_CARDINALITY,
                    name: str | None = None) -> Dataset:
        """Elements from iterators written by users: a new data source without touching headrace's internals.

        Args:
            make_iterator: called with no arguments for every iteration (each ``iter(ds)``, each ``repeat``
                epoch); returns a :class:`headrace.DatasetIterator` (usually the subclass itself, or a
                ``functools.partial`` of it). See that class for the protocol: ``__next__``, ``get_state``,
                ``set_state``, ``close``.
            cardinality: the number of elements if known, else ``UNKNOWN_CARDINALITY`` (-2) or
                ``INFINITE_CARDINALITY`` (-1).
            name: stage name in error notes and states (default: ``make_iterator``'s name).

        Elements are normalized like ``map`` results; errors from ``__next__`` get the note
        ``in from_source(<name>) at element <i>``; the iterator's own state is saved inside the pipeline's.
        Raises ``TypeError`` if ``make_iterator`` is not callable, and on iteration if it returns an object
        lacking a method of the protocol (the message names the missing methods).
        """
        return _wrap(SourceNode(make_iterator, cardinality, name))

    # ---- transformations ------------------------------------------------------------------------------
    def map(self, map_func: Callable[..., Any], num_parallel_calls: int | None = None,
            deterministic: bool | None = None, name: str | None = None, *,
            output_signature: Any = None, executor: str | None = None) -> Dataset:
        """Apply ``map_func`` to each element (a tuple element is unpacked into positional arguments).

        Args:
            map_func: element -> new element (any structure of numpy values / Python scalars / bytes).
            num_parallel_calls: ``None`` runs in the consumer's thread; an int >= 1 or ``AUTOTUNE`` (the
                CPU count, then tuned) runs that many workers.
            deterministic: ``False`` yields results as they finish; ``None`` uses ``Options.deterministic``
                (default ``True``: input order).
            name: stage name used in error notes and ``memory_stats()`` (default: the function's name).
            output_signature: (headrace's addition) a structure of ``TensorSpec`` the results are converted
                to and checked against; it is the element spec. Without it the spec is traced from
                ``map_func`` on spec-shaped examples (zeros), or read from the first element.
            executor: headrace's addition: where the function runs: ``"thread"`` (functions that release
                the GIL), ``"process"`` (worker processes, for functions that hold it; the function must
                pickle with cloudpickle) or ``"auto"`` (measured on the first calls). ``None``:
                ``Options(map_executor)``, else ``"auto"`` for ``AUTOTUNE`` and ``"thread"`` otherwise.

        A list returned at the top level becomes a tuple (tf.data's rule); lists inside are tensors.
        Errors raised by ``map_func`` reach ``next()`` with the note ``in map(<name>) at element <i>``
        (from a worker process: the same exception type, the worker's traceback as ``__cause__``); the
        iterator then continues with the next element. A worker process that dies raises
        ``headrace.WorkerError`` naming the element and the signal.
        """

        return _wrap(MapNode(self._node, map_func, num_parallel_calls, deterministic, name, output_signature,
                             executor), name)

    def filter(self, predicate: Callable[..., Any], name: str | None = None) -> Dataset:
        """Keep the elements for which ``predicate`` returns a true scalar bool."""

        return _wrap(FilterNode(self._node, predicate, name), name)

    def flat_map(self, map_func: Callable[..., Dataset], name: str | None = None) -> Dataset:
        """``map_func`` returns a Dataset per element; their elements are concatenated."""

        return _wrap(InterleaveNode(self._node, map_func, cycle_length=1, block_length=1, num_parallel_calls=None,
                                    deterministic=None, name=name, kind="flat_map"), name)

    def interleave(self, map_func: Callable[..., Dataset], cycle_length: int | None = None,
                   block_length: int | None = None, num_parallel_calls: int | None = None,
                   deterministic: bool | None = None, name: str | None = None) -> Dataset:
        """Read ``cycle_length`` datasets made by ``map_func`` round-robin, ``block_length`` at a time.

        ``map_func(element)`` must return a Dataset (e.g. ``hr.io.TFRecordDataset``). ``cycle_length``
        defaults to ``AUTOTUNE`` (the CPU count), ``block_length`` to 1. With ``num_parallel_calls`` every open
        dataset is read ahead on its own thread; the order stays tf.data's unless ``deterministic=False``.
        Raises ``TypeError`` if ``map_func`` returns something other than a Dataset.
        """

        return _wrap(InterleaveNode(self._node, map_func, cycle_length, block_length, num_parallel_calls,
                                    deterministic, name), name)

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool | None = None, name: str | None = None) -> Dataset:
        """Uniform sampling from a buffer of ``buffer_size`` elements (tf.data's shuffle).

        ``seed`` makes the order reproducible; ``reshuffle_each_iteration`` (default ``True``) draws a new
        order for every iterator (each epoch). The buffer is charged to the memory budget and shrinks, with
        one ``MemoryBudgetWarning``, when it cannot fit. Raises ``ValueError`` for ``buffer_size < 1``.
        """

        return _wrap(ShuffleNode(self._node, buffer_size, seed, reshuffle_each_iteration), name)

    def batch(self, batch_size: int, drop_remainder: bool = False, num_parallel_calls: int | None = None,
              deterministic: bool | None = None, name: str | None = None) -> Dataset:
        """Stack ``batch_size`` consecutive elements along a new axis 0.

        Each leaf of shape ``s`` becomes ``(batch_size, *s)`` (the last batch may be smaller unless
        ``drop_remainder``); scalars become 1-D arrays, ``bytes`` leaves object arrays of bytes. Raises
        ``ValueError`` naming the component and shapes when elements differ in shape (use ``padded_batch``)
        and ``MemoryBudgetError`` when one batch alone exceeds the memory budget.
        """

        return _wrap(BatchNode(self._node, batch_size, drop_remainder, num_parallel_calls, deterministic), name)

    def padded_batch(self, batch_size: int, padded_shapes: Any = None, padding_values: Any = None,
                     drop_remainder: bool = False, name: str | None = None) -> Dataset:
        """Like ``batch``, padding each component to ``padded_shapes`` (default: the batch's max)."""

        return _wrap(PaddedBatchNode(self._node, batch_size, padded_shapes, padding_values, drop_remainder), name)

    def unbatch(self, name: str | None = None) -> Dataset:
        """Split each element along axis 0 into that many elements."""

        return _wrap(UnbatchNode(self._node), name)

    def prefetch(self, buffer_size: int | None, name: str | None = None) -> Dataset:
        """Produce up to ``buffer_size`` elements ahead in a background thread.

        ``AUTOTUNE`` (or ``None``, as tf.data) picks 4 elements, shrunk silently to the stage's share of the
        memory budget; ``0`` disables prefetching.
        """

        return _wrap(PrefetchNode(self._node, buffer_size), name)

    def repeat(self, count: int | None = None, name: str | None = None) -> Dataset:
        """Repeat ``count`` times (``None`` or any negative count: forever)."""

        return _wrap(RepeatNode(self._node, count), name)

    def take(self, count: int, name: str | None = None) -> Dataset:
        """At most the first ``count`` elements (any negative count: all)."""

        return _wrap(TakeNode(self._node, count), name)

    def skip(self, count: int, name: str | None = None) -> Dataset:
        """All but the first ``count`` elements (any negative count: skip all)."""

        return _wrap(SkipNode(self._node, count), name)

    def shard(self, num_shards: int, index: int, name: str | None = None) -> Dataset:
        """Every ``num_shards``-th element starting at ``index``."""

        return _wrap(ShardNode(self._node, num_shards, index), name)

    def enumerate(self, start: int = 0, name: str | None = None) -> Dataset:
        """``(np.int64 index, element)`` pairs, counting from ``start``."""

        return _wrap(enumerate_node(self._node, start), name)

    def take_while(self, predicate: Callable[..., Any], name: str | None = None) -> Dataset:
        """Elements up to (not including) the first for which ``predicate`` is false."""

        return _wrap(TakeWhileNode(self._node, predicate), name)

    def concatenate(self, dataset: Dataset, name: str | None = None) -> Dataset:
        """This dataset's elements, then ``dataset``'s (structures must match)."""

        return _wrap(ConcatenateNode(self._node, dataset), name)

    def cache(self, filename: str = "", name: str | None = None) -> Dataset:
        """Cache elements in memory (``""``) or in the file ``<filename>.hrcache``, filled by the first
        complete pass (written atomically). The in-memory cache is charged to the memory budget and raises
        ``MemoryBudgetError`` if it cannot fit (use a file cache then)."""

        return _wrap(CacheNode(self._node, filename), name)

    def scan(self, initial_state: Any, scan_func: Callable[..., Any], name: str | None = None) -> Dataset:
        """A running state: ``scan_func(state, element) -> (new_state, output)`` yields the outputs.

        The state keeps its structure and dtypes (``TypeError`` otherwise); it is saved by value in
        iterator states and charged to the memory budget.
        """
        return _wrap(ScanNode(self._node, initial_state, scan_func, name), name)

    def reduce(self, initial_state: Any, reduce_func: Callable[[Any, Any], Any], name: str | None = None) -> Any:
        """``reduce_func(state, element)`` over every element, from ``initial_state``; returns the final
        state (numpy values). Raises ``ValueError`` for an infinite dataset, ``TypeError`` if the state
        changes structure or dtype."""
        return reduce_dataset(self, initial_state, reduce_func, stage_label("reduce", name))

    def get_single_element(self, name: str | None = None) -> Any:
        """The dataset's only element; ``ValueError`` if it is empty or has more than one."""
        return single_element(self, stage_label("get_single_element", name, ""))

    def window(self, size: int, shift: int | None = None, stride: int = 1, drop_remainder: bool = False,
               name: str | None = None) -> Dataset:
        """A dataset of windows (each a Dataset): window ``k`` holds the elements at ``k * shift + j *
        stride``, ``j < size``; incomplete windows at the end are kept unless ``drop_remainder``. Use
        ``flat_map(lambda w: w.batch(size))`` to get arrays. Raises ``ValueError`` for sizes < 1."""
        return _wrap(WindowNode(self._node, size, shift, stride, drop_remainder), name)

    def group_by_window(self, key_func: Callable[..., Any], reduce_func: Callable[[Any, Dataset], Dataset],
                        window_size: int | None = None, window_size_func: Callable[[Any], Any] | None = None,
                        name: str | None = None) -> Dataset:
        """Group elements by ``key_func(element)`` (an integer); each full window (``window_size`` or
        ``window_size_func(key)`` elements) becomes ``reduce_func(key, window_dataset)``, whose elements are
        yielded; remaining windows are flushed at the end in ascending key order (tf.data's order)."""
        return _wrap(GroupByWindowNode(self._node, key_func, reduce_func, window_size, window_size_func, name), name)

    def bucket_by_sequence_length(self, element_length_func: Callable[..., Any], bucket_boundaries: Sequence[int],
                                  bucket_batch_sizes: Sequence[int], padded_shapes: Any = None,
                                  padding_values: Any = None, pad_to_bucket_boundary: bool = False,
                                  no_padding: bool = False, drop_remainder: bool = False,
                                  name: str | None = None) -> Dataset:
        """Batch elements of similar length together: bucket ``i`` holds lengths in
        ``[bucket_boundaries[i-1], bucket_boundaries[i])`` and is padded-batched by ``bucket_batch_sizes[i]``
        (tf.data's ``group_by_window`` + ``padded_batch`` construction). Raises ``ValueError`` for
        boundaries that do not increase or a wrong number of batch sizes."""
        node = bucket_node(self._node, element_length_func, bucket_boundaries, bucket_batch_sizes, padded_shapes,
                           padding_values, pad_to_bucket_boundary, no_padding, drop_remainder)
        return _wrap(node, name)

    def ragged_batch(self, batch_size: int, drop_remainder: bool = False, row_splits_dtype: Any = "int64",
                     name: str | None = None) -> Dataset:
        """``batch`` for elements of different shapes: components with an unknown dimension become object
        arrays of rows (``RaggedTensorSpec``), fully known ones dense arrays (tf.data's rule)."""
        return _wrap(RaggedBatchNode(self._node, batch_size, drop_remainder, row_splits_dtype), name)

    def rebatch(self, batch_size: int, drop_remainder: bool = False, name: str | None = None) -> Dataset:
        """Re-batch batched elements to ``batch_size`` rows (``unbatch().batch(batch_size, drop_remainder)``,
        as tf.data's ``rebatch`` with one size). A list of sizes (tf.data's distribution form) raises
        ``TypeError``: use one size."""
        if isinstance(batch_size, list | tuple):
            raise TypeError(f"rebatch(batch_size={batch_size!r}): headrace takes one batch size; a list of "
                            "sizes (tf.data's form for distribution strategies) is not supported")
        return self.unbatch().batch(batch_size, drop_remainder, name=name)

    def pack(self, sequence_length: int, num_packing_bins: int | None = None, padding_value: Any = 0,
             truncate: bool = True, name: str | None = None) -> Dataset:
        """Pack 1-D sequences (or tuples / dicts of 1-D arrays of one length) into rows of ``sequence_length``
        tokens by first fit over ``num_packing_bins`` open rows (default 16; Grain's ``FirstFitPackIterDataset``):
        when a sequence fits no open row and all are open, they are handed out in the order they opened.
        Same input, same rows. See docs/how-to/packing.md.

        Example: ``[1, 2, 3], [4, 5], [6]`` with ``pack(4, num_packing_bins=2)`` gives ``([1, 2, 3, 6], [1, 1,
        1, 2], [0, 1, 2, 0])`` and ``([4, 5, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0])``.

        Args:
            sequence_length: tokens per row (>= 1).
            num_packing_bins: rows filled at once (>= 1); ``num_packing_bins + 2`` rows are charged to the budget.
            padding_value: one scalar, or one per component (default 0).
            truncate: a longer sequence keeps its first ``sequence_length`` tokens; ``False`` raises instead.

        Returns:
            ``(packed, segment_ids, positions)``, each in the input's structure with components of shape
            ``[sequence_length]``: packed keeps the dtypes; segment_ids (int32) number a row's sequences from 1,
            0 on padding; positions (int32) count from 0 in each sequence. An empty sequence takes no room and
            no id. ``explain()`` reports the packing efficiency. Cardinality unknown.

        Raises:
            ValueError: a size < 1, a component that is not 1-D, components of different lengths, or a sequence
                longer than a row with ``truncate=False`` (naming the stage, element and component).
            TypeError: a non-integer size or a non-numeric component.
            MemoryBudgetError: the budget cannot hold the rows.
        """
        return _wrap(PackNode(self._node, "first_fit", sequence_length, num_packing_bins, padding_value, truncate),
                     name)

    def concat_then_split(self, sequence_length: int, separator: Any = None, padding_value: Any = 0,
                          drop_remainder: bool = False, name: str | None = None) -> Dataset:
        """Join sequences end to end, each followed by ``separator`` (if given), and cut the stream into rows of
        ``sequence_length`` tokens (Grain's ``ConcatThenSplitIterDataset``); only the last row is padded
        (``drop_remainder`` drops it). Rows as :meth:`pack` gives them; a sequence cut by a row's end goes on
        as a new segment of the next row. Example: ``[1, 2, 3], [4, 5]`` with ``concat_then_split(3,
        separator=9)`` gives ``[1, 2, 3], [9, 4, 5], [9, 0, 0]``. Raises as :meth:`pack`."""
        return _wrap(PackNode(self._node, "concat", sequence_length, separator=separator,
                              padding_value=padding_value, drop_remainder=drop_remainder), name)

    def unique(self, name: str | None = None) -> Dataset:
        """Each distinct element once, in order of first appearance (int32 / int64 / string scalars, as
        tf.data; ``TypeError`` otherwise). The values seen are charged to the memory budget."""
        return _wrap(UniqueNode(self._node), name)

    def rejection_resample(self, class_func: Callable[..., Any], target_dist: Sequence[float],
                           initial_dist: Sequence[float] | None = None, seed: int | None = None,
                           name: str | None = None) -> Dataset:
        """Keep elements by rejection so their classes (``class_func(element)``, integers) follow
        ``target_dist``; yields ``(class, element)`` pairs, as tf.data. ``initial_dist=None`` estimates the
        input's class distribution online. Raises ``ValueError`` for distributions that do not sum to a
        positive value or a class outside ``[0, len(target_dist))``."""
        return _wrap(RejectionResampleNode(self._node, class_func, target_dist, initial_dist, seed), name)

    def save(self, path: str, compression: str | None = None, shard_func: Callable[..., Any] | None = None,
             checkpoint_args: Any = None, name: str | None = None) -> None:
        """Write the dataset to the directory ``path`` in headrace's documented format
        (``headrace/io/saved_dataset.py``: TFRecord shards of ``.npy``-encoded components and a JSON
        metadata file with the element_spec), streaming, atomically (a save already at ``path`` is replaced
        in one step when the new one is complete: a kill at any moment leaves the old or the new dataset).
        ``compression``: None, "GZIP" or "ZLIB"; ``shard_func(element)``: the shard file index (default 0).
        ``checkpoint_args`` (tf.data's periodic save checkpoints) raises ``TypeError``."""
        if checkpoint_args is not None:
            raise TypeError("save(checkpoint_args=...): headrace writes a save in one go; a failed save leaves "
                            "nothing under path, so run it again")
        saved_dataset.save(self, path, compression, shard_func, stage_label("save", name))

    @staticmethod
    def load(path: str, element_spec: Any = None, compression: str | None = None, reader_func: Any = None,
             wait: bool = False) -> Dataset:
        """A dataset written by ``save``, with its saved element_spec and cardinality (see ``save``)."""
        if wait:
            raise TypeError("load(wait=True): headrace loads completed saves only (a save appears when complete)")
        return _wrap(saved_dataset.load(path, element_spec, compression, reader_func))

    def ignore_errors(self, log_warning: bool = False, name: str | None = None, *,
                      max_drop_ratio: float | None = None) -> Dataset:
        """Drop elements whose production raised a data error (logging each if ``log_warning``).

        Data errors (corrupt records, undecodable images, exceptions of user functions) are dropped and
        counted; one ``IgnoredErrorsWarning`` at the end gives the counts. headrace's configuration and
        budget errors and Python errors that mean the code is wrong (``NameError``, ``ImportError``, ...)
        are re-raised. ``max_drop_ratio`` (0 <= r < 1; headrace's addition): raise ``TooManyErrorsError``
        once more than that fraction of at least 100 elements failed.
        """

        return _wrap(IgnoreErrorsNode(self._node, log_warning, max_drop_ratio), name)


set_wrapper(_wrap)
