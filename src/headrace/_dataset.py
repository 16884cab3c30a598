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
from ._ops import saved_dataset
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


def _wrap(node: DatasetNode, name: str | None = None) -> Dataset:
    """A plain ``Dataset`` holding ``node`` (transformations of a reader are plain Datasets), named by the
    user's ``name=`` (tf.data's argument of every method; ``DatasetNode.named``)."""
    return Dataset(node.named(name))


class Dataset:
    """A lazy, streaming dataset with ``tf.data.Dataset``'s API and results (see docs/migration.md).

    A ``Dataset`` holds one recipe node (``headrace._ops``); build datasets with the static methods
    (``Dataset.range``, ``from_tensor_slices``, ``from_source``, ...) or the readers in ``headrace.io``.
    Subclasses (the readers) call ``super().__init__(node)`` and may list node attributes to expose in
    ``_node_attributes``. The methods' examples assume ``import headrace as hr`` and ``import numpy as np``.
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
        """The structure of :class:`headrace.TensorSpec` that describes every element.

        >>> hr.Dataset.range(3).batch(2).element_spec  # TensorSpec(shape=(None,), dtype=int64, name=None)

        Inferred as tf.data infers it (``headrace._spec``): from the sources and ``output_signature``, through every
        transformation. Where nothing static says it (a generator without ``output_signature``, a function that cannot
        be traced) it is read from the first element, which runs the pipeline up to it.

        Returns:
            A structure (tuple / dict / leaf) of ``TensorSpec`` (``NoneTensorSpec``, ``RaggedTensorSpec``,
            ``DatasetSpec``); ``None`` in a shape is a dimension whose size varies.

        Raises:
            ValueError: the spec must be read from the first element and the pipeline produces none."""
        return self._node.element_spec()

    def cardinality(self) -> int:
        """The number of elements, if known without iterating.

        >>> hr.Dataset.range(10).batch(3).cardinality()  # 4

        Returns:
            int: the count, or ``INFINITE_CARDINALITY`` (-1) / ``UNKNOWN_CARDINALITY`` (-2)."""
        return self._node.cardinality()

    # ---- iteration ------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator:
        counter = self.__dict__.get("_iterations")
        if counter is None:
            counter = self.__dict__["_iterations"] = itertools.count()
        return Iterator(self, iteration=next(counter))

    def as_numpy_iterator(self) -> Iterator:
        """An iterator of numpy values (every headrace iterator already yields numpy).

        >>> [int(x) for x in hr.Dataset.range(3).as_numpy_iterator()]  # [0, 1, 2]

        Returns:
            headrace.Iterator: as ``iter(self)``."""
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
        """The options of this pipeline: the inputs' options merged, this node's on top.

        >>> hr.Dataset.range(3).options().deterministic  # None (unset: True)

        Returns:
            headrace.Options: the merged options."""
        return self._node.options()

    def with_options(self, options: Options, name: str | None = None) -> Dataset:
        """Attach ``Options``; fields it sets override the same fields set upstream.

        >>> ds = hr.Dataset.range(3).with_options(hr.Options(deterministic=False))

        Args:
            options: a :class:`headrace.Options`.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the same elements, with the options attached.

        Raises:
            TypeError: ``options`` is not a ``headrace.Options``."""
        return _wrap(OptionsNode(self._node, options), name)

    def apply(self, transformation_func: Callable[[Dataset], Dataset]) -> Dataset:
        """``transformation_func(self)``, which must return a Dataset (tf.data's ``apply``).

        >>> ds = hr.Dataset.range(6).apply(lambda d: d.batch(2))

        Args:
            transformation_func: ``Dataset -> Dataset``.

        Returns:
            Dataset: what ``transformation_func`` returned.

        Raises:
            TypeError: ``transformation_func`` returned something other than a Dataset."""
        out = transformation_func(self)
        if not isinstance(out, Dataset):
            raise TypeError(f"apply({transformation_func!r}) returned {type(out).__name__}; the function must "
                            "take a Dataset and return a Dataset")
        return out

    # ---- sources ----------------------------------------------------------------------------------
    @staticmethod
    def range(*args: int, output_type: Any = None, name: str | None = None, dtype: Any = None) -> Dataset:
        """Integers ``range(stop)`` or ``range(start, stop[, step])``, as tf.data's ``range``.

        >>> ds = hr.Dataset.range(2, 8, 2)  # 2, 4, 6

        Args:
            *args: ``stop``, or ``start, stop[, step]``: integers (numpy integers and 0-d arrays too); step != 0.
            output_type: the dtype of the elements (tf.data's keyword; default int64).
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).
            dtype: an alias of ``output_type``.

        Returns:
            Dataset: scalars of shape ``()`` and dtype int64 (or ``output_type``).

        Raises:
            TypeError: both ``output_type`` and ``dtype``, not 1 to 3 arguments, or a non-integer argument.
            ValueError: ``step`` is 0."""
        if output_type is not None and dtype is not None:
            raise TypeError("range(): pass output_type (tf.data's name) or dtype, not both")
        return _wrap(RangeNode(*args, dtype=output_type if output_type is not None else dtype), name)

    @staticmethod
    def from_tensors(tensors: Any, name: str | None = None) -> Dataset:
        """A dataset of exactly one element, ``tensors`` (lists become arrays).

        >>> ds = hr.Dataset.from_tensors(([1, 2], "a"))  # one element: (array([1, 2]), b"a")

        Args:
            tensors: a nested structure (tuple / dict) of arrays, Python scalars, lists, str or bytes.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: one element, the structure given; cardinality 1.

        Raises:
            ValueError: a ragged list (rows of different lengths) among ``tensors``."""
        return _wrap(TensorsNode(tensors), name)

    @staticmethod
    def from_tensor_slices(tensors: Any, name: str | None = None) -> Dataset:
        """One element per row: slices along axis 0 of every leaf of ``tensors``.

        >>> ds = hr.Dataset.from_tensor_slices({"x": np.zeros((4, 3)), "y": [0, 1, 0, 1]})  # 4 elements

        Args:
            tensors: a nested structure of arrays (lists are tensors: ``[1, 2]`` -> int64 array, Python floats ->
                float32, str -> bytes). Every leaf has the same size ``N`` in axis 0.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: ``N`` elements; a leaf of shape ``(N, *s)`` yields elements of shape ``s``.

        Raises:
            ValueError: a leaf is a scalar, the leaves disagree in ``N``, the structure has no tensors, or a
                ragged list."""
        return _wrap(TensorSlicesNode(tensors), name)

    @staticmethod
    def from_generator(generator: Callable[..., Any], output_types: Any = None, output_shapes: Any = None,
                       args: Sequence[Any] | None = None, output_signature: Any = None,
                       name: str | None = None) -> Dataset:
        """Elements from ``generator(*args)``, a callable returning an iterable (called per iteration).

        >>> ds = hr.Dataset.from_generator(lambda: iter(range(3)), output_signature=hr.TensorSpec((), "int64"))

        Restoring a state re-runs the generator and skips the elements already produced.

        Args:
            generator: a callable returning an iterable (not an iterator object: it is called per iteration).
            output_types: tf.data's older form: a structure of dtypes (a tuple, not a list).
            output_shapes: shapes for ``output_types`` (lists or tuples, ``None`` for an unknown dimension).
            args: positional arguments for ``generator``.
            output_signature: a structure of :class:`headrace.TensorSpec` (shape with ``None`` wildcards, dtype);
                every element is converted to it and checked. Without it, elements are normalized like ``map`` outputs.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the generator's elements; cardinality unknown.

        Raises:
            TypeError: ``generator`` is not callable, ``output_types`` is a list, both ``output_signature`` and
                ``output_types``/``output_shapes``, or ``output_shapes`` without ``output_types``.
            ValueError: ``output_shapes`` does not have the structure of ``output_types``; on iteration, an element
                that does not match ``output_signature`` (naming the element)."""
        return _wrap(GeneratorNode(generator, output_types=output_types, output_shapes=output_shapes,
                                   args=args, output_signature=output_signature), name)

    @staticmethod
    def list_files(file_pattern: str | Sequence[str], shuffle: bool | None = None, seed: int | None = None,
                   name: str | None = None) -> Dataset:
        """File names matching glob pattern(s) (local paths or fsspec URLs), as tf.data's ``list_files``.

        >>> ds = hr.Dataset.list_files("data/train-*.tfrecord", shuffle=False)

        Args:
            file_pattern: a glob, or a list of globs.
            shuffle: ``None`` or ``True`` (tf.data's default) shuffles the sorted names; ``False`` keeps them sorted.
            seed: the shuffle's seed (reproducible order).
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: ``bytes`` scalars, the matched names sorted, then shuffled unless ``shuffle=False``.

        Raises:
            TypeError: ``file_pattern`` is a Dataset (pass str or a list of str).
            ValueError: no pattern given.
            FileNotFoundError: no file matches."""
        return _wrap(list_files(file_pattern, shuffle=shuffle, seed=seed), name)

    @staticmethod
    def zip(*args: Any, datasets: Any = None, name: str | None = None) -> Dataset:
        """Elements of several datasets side by side, in the structure they are given in (tf.data's ``zip``).

        >>> ds = hr.Dataset.zip(hr.Dataset.range(3), hr.Dataset.range(3, 6))  # (0, 3), (1, 4), (2, 5)

        ``zip(a, b)`` and ``zip((a, b))`` yield tuples, ``zip({"x": a})`` dicts, and ``zip(a)`` ``a``'s elements as they
        are (tf.data's rule). The result ends with the shortest input.

        Args:
            *args: the datasets, or one structure (tuple / dict) of datasets.
            datasets: tf.data's keyword: the structure as one argument.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: elements in the structure of the inputs.

        Raises:
            TypeError: both ``*args`` and ``datasets=``, or a ``list`` of datasets (as in tf.data: use a tuple).
            ValueError: no dataset."""
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

        >>> ds = hr.Dataset.sample_from_datasets([a, b], weights=[0.75, 0.25], seed=1)

        Args:
            datasets: the datasets, all with compatible element specs (one dataset is returned as it is).
            weights: float weights, one per dataset (normalized; 0 never reads that dataset; all 0 gives an empty
                dataset), or a Dataset of such vectors (one per draw). Default: uniform.
            seed: the draws' seed.
            stop_on_empty_dataset: end when any dataset ends (tf.data's argument); default: go on with the others.
            rerandomize_each_iteration: ``True`` draws anew in each iteration; otherwise every iteration repeats the
                same draws.

        Returns:
            Dataset: the sampled elements.

        Raises:
            TypeError: integer weights, incompatible element specs (both as tf.data).
            ValueError: no dataset, a weight count that differs from the dataset count, or weights that are not
                finite and >= 0."""
        if node_of(weights) is None and len(datasets) == 1:
            if weights is not None:
                SampleNode(datasets, weights, seed, stop_on_empty_dataset, rerandomize_each_iteration)  # checks
            return datasets[0]  # tf.data returns the one dataset itself
        return _wrap(SampleNode(datasets, weights, seed, stop_on_empty_dataset, rerandomize_each_iteration))

    @staticmethod
    def choose_from_datasets(datasets: Sequence[Dataset], choice_dataset: Dataset,
                             stop_on_empty_dataset: bool = True) -> Dataset:
        """Element ``i`` comes from ``datasets[choice_dataset[i]]`` (tf.data's ``choose_from_datasets``).

        >>> ds = hr.Dataset.choose_from_datasets([a, b], hr.Dataset.range(2).repeat(3))  # a, b, a, b, a, b

        Args:
            datasets: the datasets, with compatible element specs.
            choice_dataset: int64 scalars in ``[0, len(datasets))``.
            stop_on_empty_dataset: a choice of an exhausted dataset ends iteration (default ``True``, tf.data's);
                ``False`` skips that choice.

        Returns:
            Dataset: the chosen elements.

        Raises:
            TypeError: incompatible element specs, or ``choice_dataset`` does not yield int64 scalars.
            ValueError: no dataset; on iteration, a choice outside ``[0, len(datasets))``."""
        return _wrap(ChooseNode(datasets, choice_dataset, stop_on_empty_dataset))

    @staticmethod
    def from_random_access(source: Any, shuffle: bool = False, seed: int | None = None,
                           reshuffle_each_iteration: bool = True, num_shards: int = 1,
                           index: int = 0, start: int = 0) -> Dataset:
        """Elements ``source[i]`` of a random-access source, with a global shuffle in O(1) memory.

        >>> ds = hr.Dataset.from_random_access(records, shuffle=True, seed=7, num_shards=world, index=rank)

        See ``headrace/_ops/random_access.py`` for the permutation and the sharding rule.

        Args:
            source: an object with ``len()`` and ``[i]``.
            shuffle: visit the source in a pseudo-random permutation of ``range(len(source))``.
            seed: the permutation's seed (needed with ``shuffle=True`` and ``num_shards > 1``).
            reshuffle_each_iteration: a new permutation for every iterator (epoch).
            num_shards: ranks sharing the source (>= 1).
            index: this rank, ``0 <= index < num_shards``; it takes positions ``start + index + k * num_shards``.
            start: skip the first ``start`` positions of the global order (``0 <= start <= len(source)``).

        Returns:
            Dataset: the elements of this shard; nothing is buffered or charged to the memory budget.

        Raises:
            TypeError: ``source`` lacks ``len()`` or ``[i]``; a non-integer argument.
            ValueError: ``index`` out of range, ``start`` beyond the source, or ``shuffle=True`` with
                ``num_shards > 1`` and no ``seed``."""
        return _wrap(RandomAccessNode(source, shuffle=shuffle, seed=seed,
                                      reshuffle_each_iteration=reshuffle_each_iteration,
                                      num_shards=num_shards, index=index, start=start))

    @staticmethod
    def counter(start: int = 0, step: int = 1, dtype: Any = "int64", name: str | None = None) -> Dataset:
        """``start, start + step, ...`` forever (tf.data's ``counter``).

        >>> ds = hr.Dataset.counter(10, 5).take(3)  # 10, 15, 20

        Args:
            start: the first value (an integer).
            step: the increment (an integer, != 0).
            dtype: the dtype of the elements (default int64).
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: scalars of ``dtype``; cardinality infinite.

        Raises:
            TypeError: a non-integer ``start`` or ``step``.
            ValueError: ``step`` is 0."""
        return _wrap(CounterNode(start, step, dtype), name)

    @staticmethod
    def random(seed: int | None = None, rerandomize_each_iteration: bool | None = None,
               name: str | None = None) -> Dataset:
        """Pseudorandom int64 scalars in ``[0, 2**32)``, forever (tf.data's ``random``).

        >>> ds = hr.Dataset.random(seed=4).take(2)

        tf.data's values are 32-bit too; the sequence is not TensorFlow's.

        Args:
            seed: makes the sequence reproducible across runs.
            rerandomize_each_iteration: ``True`` draws a new sequence per iteration; otherwise every iteration
                repeats it.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: int64 scalars; cardinality infinite.

        Raises:
            TypeError: a ``seed`` that is not None or an integer."""
        return _wrap(RandomNode(seed, rerandomize_each_iteration), name)

    @staticmethod
    def from_source(make_iterator: Callable[[], Any], *, cardinality: int = UNKNOWN_CARDINALITY,
                    name: str | None = None) -> Dataset:
        """Elements from iterators written by users: a new data source without touching headrace's internals.

        >>> ds = hr.Dataset.from_source(functools.partial(MyIterator, path), cardinality=100)

        Elements are normalized like ``map`` results; errors from ``__next__`` get the note ``in from_source(<name>) at
        element <i>``; the iterator's own state is saved inside the pipeline's.

        Args:
            make_iterator: called with no arguments for every iteration (each ``iter(ds)``, each ``repeat``
                epoch); returns a :class:`headrace.DatasetIterator` (usually the subclass itself, or a
                ``functools.partial`` of it). See that class for the protocol: ``__next__``, ``get_state``,
                ``set_state``, ``close``.
            cardinality: the number of elements if known, else ``UNKNOWN_CARDINALITY`` (-2) or
                ``INFINITE_CARDINALITY`` (-1).
            name: stage name in error notes and states (default: ``make_iterator``'s name).

        Returns:
            Dataset: the iterators' elements.

        Raises:
            TypeError: ``make_iterator`` is not callable; on iteration, it returns an object lacking a method of the
                protocol (the message names the missing methods)."""
        return _wrap(SourceNode(make_iterator, cardinality, name))

    # ---- transformations ------------------------------------------------------------------------------
    def map(self, map_func: Callable[..., Any], num_parallel_calls: int | None = None,
            deterministic: bool | None = None, name: str | None = None, *,
            output_signature: Any = None, executor: str | None = None) -> Dataset:
        """Apply ``map_func`` to each element (tf.data's ``map``; a tuple element is unpacked into arguments).

        >>> ds = hr.Dataset.range(4).map(lambda x: x * 2, num_parallel_calls=hr.AUTOTUNE)  # 0, 2, 4, 6

        A list returned at the top level becomes a tuple (tf.data's rule); lists inside are tensors.

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

        Returns:
            Dataset: the results, one per element.

        Raises:
            TypeError: ``map_func`` is not callable; a non-integer ``num_parallel_calls``.
            ValueError: ``num_parallel_calls`` < 1 other than ``AUTOTUNE``.
            WorkerError: on iteration, a worker process died (naming the element and the signal).
            Exception: on iteration, what ``map_func`` raised reaches ``next()`` with the note ``in map(<name>) at
                element <i>`` (from a worker process: the same exception type, the worker's traceback as
                ``__cause__``); the iterator then continues with the next element."""
        return _wrap(MapNode(self._node, map_func, num_parallel_calls, deterministic, name, output_signature,
                             executor), name)

    def filter(self, predicate: Callable[..., Any], name: str | None = None) -> Dataset:
        """Keep the elements for which ``predicate`` returns a true scalar bool (tf.data's ``filter``).

        >>> ds = hr.Dataset.range(6).filter(lambda x: x % 2 == 0)  # 0, 2, 4

        Args:
            predicate: ``element -> bool`` (a Python bool or a 0-d bool array; a tuple element is unpacked).
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the kept elements, same element spec; cardinality unknown.

        Raises:
            TypeError: ``predicate`` is not callable; on iteration, it returns anything but a scalar bool."""
        return _wrap(FilterNode(self._node, predicate, name), name)

    def flat_map(self, map_func: Callable[..., Dataset], name: str | None = None) -> Dataset:
        """``map_func`` returns a Dataset per element; their elements are concatenated (tf.data's ``flat_map``).

        >>> ds = hr.Dataset.range(3).flat_map(lambda x: hr.Dataset.range(x))  # 0, 0, 1

        Args:
            map_func: ``element -> Dataset``.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the elements of every returned dataset, in order.

        Raises:
            TypeError: ``map_func`` is not callable; on iteration, it returns something other than a Dataset."""
        return _wrap(InterleaveNode(self._node, map_func, cycle_length=1, block_length=1, num_parallel_calls=None,
                                    deterministic=None, name=name, kind="flat_map"), name)

    def interleave(self, map_func: Callable[..., Dataset], cycle_length: int | None = None,
                   block_length: int | None = None, num_parallel_calls: int | None = None,
                   deterministic: bool | None = None, name: str | None = None) -> Dataset:
        """Read ``cycle_length`` datasets made by ``map_func`` round-robin, ``block_length`` at a time.

        >>> ds = hr.Dataset.list_files("*.tfrecord").interleave(hr.io.TFRecordDataset, cycle_length=4)

        tf.data's ``interleave``. With ``num_parallel_calls`` every open dataset is read ahead on its own thread; the
        order stays tf.data's unless ``deterministic=False``.

        Args:
            map_func: ``element -> Dataset`` (e.g. ``hr.io.TFRecordDataset``).
            cycle_length: datasets open at once (>= 1, or ``AUTOTUNE``, the default: the CPU count).
            block_length: consecutive elements taken from one dataset (>= 1, default 1).
            num_parallel_calls: ``None`` (sequential), an int >= 1 or ``AUTOTUNE``.
            deterministic: ``False`` passes over a dataset that has nothing ready; ``None`` uses ``Options``.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the interleaved elements.

        Raises:
            TypeError: a non-integer argument; on iteration, ``map_func`` returns something other than a Dataset.
            ValueError: ``cycle_length``, ``block_length`` or ``num_parallel_calls`` < 1 (other than ``AUTOTUNE``)."""
        return _wrap(InterleaveNode(self._node, map_func, cycle_length, block_length, num_parallel_calls,
                                    deterministic, name), name)

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool | None = None, name: str | None = None) -> Dataset:
        """Uniform sampling from a buffer of ``buffer_size`` elements (tf.data's ``shuffle``).

        >>> ds = hr.Dataset.range(100).shuffle(1000, seed=42)

        Args:
            buffer_size: elements in the buffer (>= 1); charged to the memory budget, it shrinks, with one
                ``MemoryBudgetWarning``, when it cannot fit.
            seed: makes the order reproducible.
            reshuffle_each_iteration: ``True`` (default) draws a new order for every iterator (each epoch).
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the same elements in a random order.

        Raises:
            TypeError: a non-integer ``buffer_size`` or ``seed``.
            ValueError: ``buffer_size < 1``."""
        return _wrap(ShuffleNode(self._node, buffer_size, seed, reshuffle_each_iteration), name)

    def batch(self, batch_size: int, drop_remainder: bool = False, num_parallel_calls: int | None = None,
              deterministic: bool | None = None, name: str | None = None) -> Dataset:
        """Stack ``batch_size`` consecutive elements along a new axis 0 (tf.data's ``batch``).

        >>> ds = hr.Dataset.range(5).batch(2)  # [0 1], [2 3], [4]

        Args:
            batch_size: elements per batch (>= 1).
            drop_remainder: drop a last batch smaller than ``batch_size`` (the shape's dimension 0 is then known).
            num_parallel_calls: ``None``, an int >= 1 or ``AUTOTUNE``: batches stacked in worker threads.
            deterministic: ``False`` yields batches as they finish; ``None`` uses ``Options``.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: each leaf of shape ``s`` becomes ``(batch_size, *s)`` (the last batch may be smaller unless
            ``drop_remainder``); scalars become 1-D arrays, ``bytes`` leaves object arrays of bytes.

        Raises:
            TypeError: a non-integer ``batch_size``.
            ValueError: ``batch_size < 1``; on iteration, elements that differ in shape (naming the component and
                shapes; use ``padded_batch``).
            MemoryBudgetError: one batch alone exceeds the memory budget."""
        return _wrap(BatchNode(self._node, batch_size, drop_remainder, num_parallel_calls, deterministic), name)

    def padded_batch(self, batch_size: int, padded_shapes: Any = None, padding_values: Any = None,
                     drop_remainder: bool = False, name: str | None = None) -> Dataset:
        """Like ``batch``, padding each component to ``padded_shapes`` (default: the batch's max).

        >>> ds = hr.Dataset.range(1, 4).map(lambda n: np.ones(n)).padded_batch(2)  # shapes (2, 2), (1, 3)

        Args:
            batch_size: elements per batch (>= 1).
            padded_shapes: a shape per component (``None`` / -1 dimensions pad to the batch's max); needed for a
                component of unknown rank.
            padding_values: a scalar per component (default 0, ``b""`` for strings).
            drop_remainder: drop a last batch smaller than ``batch_size``.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: components of shape ``(batch_size, *padded_shape)``, the dtypes kept.

        Raises:
            TypeError: a non-integer ``batch_size``; a component that is not a tensor.
            ValueError: ``batch_size < 1``; ``padded_shapes`` / ``padding_values`` that do not match the components,
                a padded shape smaller than the component, or no ``padded_shapes`` for a component of unknown rank."""
        return _wrap(PaddedBatchNode(self._node, batch_size, padded_shapes, padding_values, drop_remainder), name)

    def unbatch(self, name: str | None = None) -> Dataset:
        """Split each element along axis 0 into that many elements (tf.data's ``unbatch``).

        >>> ds = hr.Dataset.range(6).batch(4).unbatch()  # 0, 1, ..., 5

        Args:
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: components of shape ``s`` from components of shape ``(N, *s)``.

        Raises:
            ValueError: a scalar component (nothing to split), as tf.data."""
        return _wrap(UnbatchNode(self._node), name)

    def prefetch(self, buffer_size: int | None, name: str | None = None) -> Dataset:
        """Produce up to ``buffer_size`` elements ahead in a background thread (tf.data's ``prefetch``).

        >>> ds = hr.Dataset.range(100).map(f).prefetch(hr.AUTOTUNE)

        Args:
            buffer_size: elements ahead (>= 0); ``AUTOTUNE`` (or ``None``, as tf.data) picks 4 elements, shrunk
                silently to the stage's share of the memory budget; ``0`` disables prefetching.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the same elements.

        Raises:
            TypeError: a non-integer ``buffer_size``.
            ValueError: ``buffer_size`` < 0 other than ``AUTOTUNE``."""
        return _wrap(PrefetchNode(self._node, buffer_size), name)

    def repeat(self, count: int | None = None, name: str | None = None) -> Dataset:
        """Repeat the dataset ``count`` times (tf.data's ``repeat``).

        >>> ds = hr.Dataset.range(2).repeat(2)  # 0, 1, 0, 1

        Args:
            count: repetitions; ``None`` or any negative count: forever.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the elements ``count`` times; each repetition is a new iteration (a new shuffle order).

        Raises:
            TypeError: a non-integer ``count``."""
        return _wrap(RepeatNode(self._node, count), name)

    def take(self, count: int, name: str | None = None) -> Dataset:
        """At most the first ``count`` elements (tf.data's ``take``).

        >>> ds = hr.Dataset.range(10).take(3)  # 0, 1, 2

        Args:
            count: elements to keep; any negative count: all.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the first ``count`` elements.

        Raises:
            TypeError: a non-integer ``count``."""
        return _wrap(TakeNode(self._node, count), name)

    def skip(self, count: int, name: str | None = None) -> Dataset:
        """All but the first ``count`` elements (tf.data's ``skip``).

        >>> ds = hr.Dataset.range(5).skip(3)  # 3, 4

        Args:
            count: elements to drop; any negative count: skip all.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the elements after the first ``count``.

        Raises:
            TypeError: a non-integer ``count``."""
        return _wrap(SkipNode(self._node, count), name)

    def shard(self, num_shards: int, index: int, name: str | None = None) -> Dataset:
        """Every ``num_shards``-th element starting at ``index`` (tf.data's ``shard``).

        >>> ds = hr.Dataset.range(10).shard(num_shards=3, index=1)  # 1, 4, 7

        Args:
            num_shards: the number of shards, e.g. the world size (>= 1).
            index: this shard, e.g. the rank (``0 <= index < num_shards``).
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the elements at positions ``index + k * num_shards``.

        Raises:
            TypeError: a non-integer argument.
            ValueError: ``num_shards < 1`` or ``index`` outside ``[0, num_shards)``."""
        return _wrap(ShardNode(self._node, num_shards, index), name)

    def enumerate(self, start: int = 0, name: str | None = None) -> Dataset:
        """``(index, element)`` pairs, counting from ``start`` (tf.data's ``enumerate``).

        >>> ds = hr.Dataset.from_tensor_slices([7, 8]).enumerate(1)  # (1, 7), (2, 8)

        Args:
            start: the first index (an integer).
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: pairs ``(np.int64 index, element)``.

        Raises:
            TypeError: a non-integer ``start``."""
        return _wrap(enumerate_node(self._node, start), name)

    def take_while(self, predicate: Callable[..., Any], name: str | None = None) -> Dataset:
        """Elements up to (not including) the first for which ``predicate`` is false (tf.data's ``take_while``).

        >>> ds = hr.Dataset.range(10).take_while(lambda x: x < 3)  # 0, 1, 2

        Args:
            predicate: ``element -> bool`` (a scalar bool).
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the leading elements for which ``predicate`` holds.

        Raises:
            TypeError: ``predicate`` is not callable."""
        return _wrap(TakeWhileNode(self._node, predicate), name)

    def concatenate(self, dataset: Dataset, name: str | None = None) -> Dataset:
        """This dataset's elements, then ``dataset``'s (tf.data's ``concatenate``).

        >>> ds = hr.Dataset.range(2).concatenate(hr.Dataset.range(5, 7))  # 0, 1, 5, 6

        Args:
            dataset: a Dataset whose element structure and dtypes match this one's.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: both datasets' elements; shapes that differ become unknown dimensions.

        Raises:
            TypeError: incompatible element specs (naming both)."""
        return _wrap(ConcatenateNode(self._node, dataset), name)

    def cache(self, filename: str = "", name: str | None = None) -> Dataset:
        """Cache elements in memory or in a file, filled by the first complete pass (tf.data's ``cache``).

        >>> ds = hr.Dataset.list_files("*.jpg").map(decode).cache("/tmp/decoded")

        Args:
            filename: ``""`` caches in memory; otherwise the cache is the file ``<filename>.hrcache``, written
                atomically.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the same elements; later passes read the cache.

        Raises:
            TypeError: ``filename`` is not a string.
            MemoryBudgetError: the in-memory cache (charged to the memory budget) cannot fit; use a file cache.
            FileExistsError: another iterator is writing the same cache file.
            OSError: the cache file is corrupt (naming the element; delete it)."""
        return _wrap(CacheNode(self._node, filename), name)

    def scan(self, initial_state: Any, scan_func: Callable[..., Any], name: str | None = None) -> Dataset:
        """A running state: ``scan_func(state, element) -> (new_state, output)`` yields the outputs.

        >>> ds = hr.Dataset.range(4).scan(np.int64(0), lambda s, x: (s + x, s + x))  # 0, 1, 3, 6

        Args:
            initial_state: a structure of arrays / scalars; saved by value in iterator states and charged to the
                memory budget.
            scan_func: ``(state, element) -> (new_state, output)``; ``new_state`` keeps the state's structure and
                dtypes.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the outputs.

        Raises:
            TypeError: ``scan_func`` is not callable; on iteration, it does not return a pair, or the state changes
                structure or dtype."""
        return _wrap(ScanNode(self._node, initial_state, scan_func, name), name)

    def reduce(self, initial_state: Any, reduce_func: Callable[[Any, Any], Any], name: str | None = None) -> Any:
        """``reduce_func(state, element)`` over every element, from ``initial_state`` (tf.data's ``reduce``).

        >>> hr.Dataset.range(5).reduce(np.int64(0), lambda s, x: s + x)  # np.int64(10)

        Args:
            initial_state: a structure of arrays / scalars.
            reduce_func: ``(state, element) -> new_state`` of the same structure and dtypes.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            The final state (numpy values).

        Raises:
            TypeError: ``reduce_func`` is not callable, or the state changes structure or dtype.
            ValueError: the dataset is infinite."""
        return reduce_dataset(self, initial_state, reduce_func, stage_label("reduce", name))

    def get_single_element(self, name: str | None = None) -> Any:
        """The dataset's only element (tf.data's ``get_single_element``).

        >>> hr.Dataset.from_tensors([1, 2]).get_single_element()  # array([1, 2])

        Args:
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            The element (numpy values).

        Raises:
            ValueError: the dataset is empty or has more than one element."""
        return single_element(self, stage_label("get_single_element", name, ""))

    def window(self, size: int, shift: int | None = None, stride: int = 1, drop_remainder: bool = False,
               name: str | None = None) -> Dataset:
        """A dataset of windows, each a Dataset (tf.data's ``window``).

        >>> ds = hr.Dataset.range(5).window(2, drop_remainder=True).flat_map(lambda w: w.batch(2))  # [0 1], [2 3]

        Window ``k`` holds the elements at ``k * shift + j * stride``, ``j < size``.

        Args:
            size: elements per window (>= 1).
            shift: the step between windows' starts (>= 1; default ``size``).
            stride: the step between a window's elements (>= 1).
            drop_remainder: drop incomplete windows at the end (kept by default).
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: Datasets (``DatasetSpec``); use ``flat_map(lambda w: w.batch(size))`` to get arrays.

        Raises:
            TypeError: a non-integer size.
            ValueError: a size, shift or stride < 1."""
        return _wrap(WindowNode(self._node, size, shift, stride, drop_remainder), name)

    def group_by_window(self, key_func: Callable[..., Any], reduce_func: Callable[[Any, Dataset], Dataset],
                        window_size: int | None = None, window_size_func: Callable[[Any], Any] | None = None,
                        name: str | None = None) -> Dataset:
        """Group elements by key into windows, each reduced to a Dataset (tf.data's ``group_by_window``).

        >>> ds = hr.Dataset.range(10).group_by_window(lambda x: x % 2, lambda k, w: w.batch(5), window_size=5)

        Remaining windows are flushed at the end in ascending key order (tf.data's order).

        Args:
            key_func: ``element -> integer`` key.
            reduce_func: ``(key, window_dataset) -> Dataset``, whose elements are yielded.
            window_size: elements per window (>= 1); give this or ``window_size_func``.
            window_size_func: ``key -> window size``.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the elements of the reduced windows.

        Raises:
            TypeError: a function that is not callable; on iteration, a key that is not an integer scalar or a
                ``reduce_func`` result that is not a Dataset.
            ValueError: both or neither of ``window_size`` and ``window_size_func``; ``window_size < 1``."""
        return _wrap(GroupByWindowNode(self._node, key_func, reduce_func, window_size, window_size_func, name), name)

    def bucket_by_sequence_length(self, element_length_func: Callable[..., Any], bucket_boundaries: Sequence[int],
                                  bucket_batch_sizes: Sequence[int], padded_shapes: Any = None,
                                  padding_values: Any = None, pad_to_bucket_boundary: bool = False,
                                  no_padding: bool = False, drop_remainder: bool = False,
                                  name: str | None = None) -> Dataset:
        """Batch elements of similar length together (tf.data's ``bucket_by_sequence_length``).

        >>> ds = seqs.bucket_by_sequence_length(lambda s: len(s), [10, 20], [32, 16, 8])

        Bucket ``i`` holds lengths in ``[bucket_boundaries[i-1], bucket_boundaries[i])`` and is padded-batched by
        ``bucket_batch_sizes[i]`` (tf.data's ``group_by_window`` + ``padded_batch`` construction).

        Args:
            element_length_func: ``element -> integer`` length.
            bucket_boundaries: strictly increasing integer upper bounds.
            bucket_batch_sizes: ``len(bucket_boundaries) + 1`` batch sizes (>= 1).
            padded_shapes: as ``padded_batch``'s.
            padding_values: as ``padded_batch``'s.
            pad_to_bucket_boundary: pad dimension 0 to the bucket's boundary minus 1.
            no_padding: ``batch`` instead of ``padded_batch``.
            drop_remainder: drop each bucket's last smaller batch.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: padded batches, one bucket's elements each.

        Raises:
            TypeError: ``element_length_func`` is not callable; a non-integer boundary or size.
            ValueError: boundaries that do not increase, a wrong number of batch sizes, a batch size < 1; with
                ``pad_to_bucket_boundary``, an element whose length is >= the last boundary."""
        node = bucket_node(self._node, element_length_func, bucket_boundaries, bucket_batch_sizes, padded_shapes,
                           padding_values, pad_to_bucket_boundary, no_padding, drop_remainder)
        return _wrap(node, name)

    def ragged_batch(self, batch_size: int, drop_remainder: bool = False, row_splits_dtype: Any = "int64",
                     name: str | None = None) -> Dataset:
        """``batch`` for elements of different shapes (tf.data's ``ragged_batch``).

        >>> ds = hr.Dataset.range(1, 4).map(lambda n: np.ones(n)).ragged_batch(3)

        Args:
            batch_size: elements per batch (>= 1).
            drop_remainder: drop a last batch smaller than ``batch_size``.
            row_splits_dtype: int32 or int64 (tf.data's argument).
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: components with an unknown dimension become object arrays of rows (``RaggedTensorSpec``), fully
            known ones dense arrays (tf.data's rule).

        Raises:
            TypeError: a non-integer ``batch_size``, or ``row_splits_dtype`` other than int32 / int64.
            ValueError: ``batch_size < 1``; on iteration, a component whose shape the spec did not foresee."""
        return _wrap(RaggedBatchNode(self._node, batch_size, drop_remainder, row_splits_dtype), name)

    def rebatch(self, batch_size: int, drop_remainder: bool = False, name: str | None = None) -> Dataset:
        """Re-batch batched elements to ``batch_size`` rows (tf.data's ``rebatch`` with one size).

        >>> ds = hr.Dataset.range(10).batch(4).rebatch(5)  # [0..4], [5..9]

        Args:
            batch_size: rows per batch (>= 1), as ``unbatch().batch(batch_size, drop_remainder)``.
            drop_remainder: drop a last batch smaller than ``batch_size``.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: batches of ``batch_size`` rows.

        Raises:
            TypeError: a list of sizes (tf.data's distribution form): use one size.
            ValueError: ``batch_size < 1``, or scalar components (nothing to unbatch)."""
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

        >>> ds = tokens.pack(4, num_packing_bins=2)  # (packed, segment_ids, positions) rows of 4 tokens

        Example: ``[1, 2, 3], [4, 5], [6]`` with ``pack(4, num_packing_bins=2)`` gives ``([1, 2, 3, 6], [1, 1,
        1, 2], [0, 1, 2, 0])`` and ``([4, 5, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0])``.

        Args:
            sequence_length: tokens per row (>= 1).
            num_packing_bins: rows filled at once (>= 1); ``num_packing_bins + 2`` rows are charged to the budget.
            padding_value: one scalar, or one per component (default 0).
            truncate: a longer sequence keeps its first ``sequence_length`` tokens; ``False`` raises instead.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

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
        """Join sequences end to end and cut the stream into rows of ``sequence_length`` tokens.

        >>> ds = seqs.concat_then_split(3, separator=9)  # [1, 2, 3], [4, 5] -> [1, 2, 3], [9, 4, 5], [9, 0, 0]

        Grain's ``ConcatThenSplitIterDataset``: each sequence is followed by ``separator`` (if given); only the last row
        is padded. A sequence cut by a row's end goes on as a new segment of the next row.

        Args:
            sequence_length: tokens per row (>= 1).
            separator: a token after every sequence (default: none).
            padding_value: one scalar, or one per component (default 0).
            drop_remainder: drop the last, padded row.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: ``(packed, segment_ids, positions)`` rows, as :meth:`pack` gives them.

        Raises:
            ValueError: as :meth:`pack`.
            TypeError: as :meth:`pack`.
            MemoryBudgetError: as :meth:`pack`."""
        return _wrap(PackNode(self._node, "concat", sequence_length, separator=separator,
                              padding_value=padding_value, drop_remainder=drop_remainder), name)

    def unique(self, name: str | None = None) -> Dataset:
        """Each distinct element once, in order of first appearance (tf.data's ``unique``).

        >>> ds = hr.Dataset.from_tensor_slices([1, 2, 1, 3]).unique()  # 1, 2, 3

        Args:
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: the distinct elements; the values seen are charged to the memory budget.

        Raises:
            TypeError: elements other than int32 / int64 / string scalars (as tf.data)."""
        return _wrap(UniqueNode(self._node), name)

    def rejection_resample(self, class_func: Callable[..., Any], target_dist: Sequence[float],
                           initial_dist: Sequence[float] | None = None, seed: int | None = None,
                           name: str | None = None) -> Dataset:
        """Keep elements by rejection so their classes follow ``target_dist`` (tf.data's ``rejection_resample``).

        >>> ds = labeled.rejection_resample(lambda x, y: y, target_dist=[0.5, 0.5], seed=1)

        Args:
            class_func: ``element -> integer class`` in ``[0, len(target_dist))``.
            target_dist: probabilities per class (finite, >= 0, summing to a positive value).
            initial_dist: the input's class distribution; ``None`` estimates it online.
            seed: the rejection draws' seed.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Returns:
            Dataset: ``(class, element)`` pairs, as tf.data.

        Raises:
            TypeError: ``class_func`` is not callable.
            ValueError: distributions of the wrong length, not finite, negative or summing to 0; a class with target
                probability > 0 and initial probability 0; on iteration, a class outside ``[0, len(target_dist))``."""
        return _wrap(RejectionResampleNode(self._node, class_func, target_dist, initial_dist, seed), name)

    def save(self, path: str, compression: str | None = None, shard_func: Callable[..., Any] | None = None,
             checkpoint_args: Any = None, name: str | None = None) -> None:
        """Write the dataset to the directory ``path`` in headrace's documented format (tf.data's ``save``).

        >>> hr.Dataset.range(10).save("/tmp/saved", compression="GZIP")

        The format (``headrace/_ops/saved_dataset.py``): TFRecord shards of ``.npy``-encoded components and a JSON
        metadata file with the element_spec. Streaming and atomic: a save already at ``path`` is replaced in one
        step when the new one is complete (a kill at any moment leaves the old or the new dataset).

        Args:
            path: a local directory, created if missing.
            compression: None, "GZIP" or "ZLIB".
            shard_func: ``element -> int``, the shard file index (>= 0; default 0).
            checkpoint_args: tf.data's periodic save checkpoints; not supported.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).

        Raises:
            TypeError: ``checkpoint_args`` is given, ``shard_func`` is not callable, or a component the format
                cannot hold (ragged, dataset). What the pipeline raises stops the save (``path`` is left as it was).
            ValueError: an unknown ``compression``, or a negative shard index."""
        if checkpoint_args is not None:
            raise TypeError("save(checkpoint_args=...): headrace writes a save in one go; a failed save leaves "
                            "nothing under path, so run it again")
        saved_dataset.save(self, path, compression, shard_func, stage_label("save", name))

    @staticmethod
    def load(path: str, element_spec: Any = None, compression: str | None = None, reader_func: Any = None,
             wait: bool = False) -> Dataset:
        """A dataset written by ``save``, with its saved element_spec and cardinality (tf.data's ``load``).

        >>> ds = hr.Dataset.load("/tmp/saved")

        Args:
            path: the directory ``save`` wrote.
            element_spec: the expected spec (default: the saved one); it must be compatible with it.
            compression: as given to ``save`` (default: the saved one); it must match it.
            reader_func: tf.data's ``reader_func``; not supported: shards are read in shard order (reorder with
                ``interleave`` / ``shuffle`` after loading).
            wait: tf.data's wait for a save in progress; not supported (a save appears when complete).

        Returns:
            Dataset: the saved elements.

        Raises:
            TypeError: ``wait=True`` or a ``reader_func``.
            FileNotFoundError: ``path`` holds no saved dataset.
            ValueError: another format / version, or an ``element_spec`` or ``compression`` that contradicts the
                saved one."""
        if wait:
            raise TypeError("load(wait=True): headrace loads completed saves only (a save appears when complete)")
        return _wrap(saved_dataset.load(path, element_spec, compression, reader_func))

    def ignore_errors(self, log_warning: bool = False, name: str | None = None, *,
                      max_drop_ratio: float | None = None) -> Dataset:
        """Drop elements whose production raised a data error (tf.data's ``ignore_errors``).

        >>> ds = hr.io.TFRecordDataset(files).map(parse).ignore_errors(max_drop_ratio=0.01)

        Data errors (corrupt records, undecodable images, exceptions of user functions) are dropped and counted; one
        ``IgnoredErrorsWarning`` at the end gives the counts. headrace's configuration and budget errors and Python
        errors that mean the code is wrong (``NameError``, ``ImportError``, ...) are re-raised.

        Args:
            log_warning: log each dropped error.
            name: the stage's name in error notes, states and ``memory_stats()`` (tf.data's ``name``).
            max_drop_ratio: (headrace's addition) ``0 <= r < 1``: raise once more than that fraction of at least 100
                elements failed.

        Returns:
            Dataset: the elements that were produced without error.

        Raises:
            ValueError: ``max_drop_ratio`` outside ``[0, 1)``.
            TooManyErrorsError: on iteration, more than ``max_drop_ratio`` of the elements failed."""
        return _wrap(IgnoreErrorsNode(self._node, log_warning, max_drop_ratio), name)


set_wrapper(_wrap)
