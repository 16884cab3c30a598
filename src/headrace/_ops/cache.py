"""``Dataset.cache``: keep the elements of the first complete pass, in memory or in a file.

``cache()`` (``filename=""``): the first iterator that reads the input to its end publishes the elements
in memory; later iterators (the next epoch, also inside ``repeat``) read them from there. The cached
bytes are charged to a mandatory account of every iterator that holds them; if they do not fit the
budget, ``MemoryBudgetError`` names the stage and suggests ``cache(filename)``. An iterator closed
before the end publishes nothing (tf.data does the same).

``cache(filename)``: the first complete pass streams elements into ``<filename>.hrcache`` (written under a
temporary name and renamed when complete, so a crash never leaves a file that looks complete); later
passes stream from it. Nothing is held in memory beyond one element. The file is a sequence of pickled
elements (protocol 5) and is only for caches headrace wrote itself: do not point ``filename`` at files
from untrusted sources. Like tf.data, the cache is not invalidated when the input changes: delete the
file. Read by DataLoader workers (``to_torch``), each worker caches its share in a file of its own
(``shard_source``). One writer at a time: the filling pass holds ``<filename>.hrcache.lock`` and a second iterator
that would fill the same file while it runs raises ``FileExistsError`` (tf.data's "concurrent caching
iterator" error); a lock left by a dead process is taken over.

State: the number of elements produced in this pass, with the reader's position (element index, byte
offset) or, while filling, the input's state. A state taken while filling restores into a reader if the
cache has been completed since, and a reader's state restores into a filling pass by skipping that many
input elements; a restored filling pass no longer publishes (its cache would miss the elements before
the restore point).
"""

from __future__ import annotations

import os
import pickle
from typing import IO, Any

from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._engine.stage_support import check_state, stop_flag
from .._memory import WHOLE, Reservation, StageAccount
from .._structure import nbytes
from .._sync import Lock as TimedLock

CACHE_SUFFIX = ".hrcache"


class CacheNode(DatasetNode):
    label = "cache"
    spec_passes = True

    def __init__(self, input_node: DatasetNode, filename: str) -> None:
        super().__init__([input_node])
        if not isinstance(filename, str | os.PathLike):
            raise TypeError(f"cache(filename={filename!r}): expected a path string, or '' for memory")
        self.filename = os.fspath(filename)
        self._memory: list[Any] | None = None
        self._memory_bytes = 0
        self._lock = TimedLock("cache publication")

    @property
    def path(self) -> str:
        return self.filename + CACHE_SUFFIX

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    def shard_source(self, num_shards: int, index: int) -> DatasetNode | None:
        """A share below the cache: each share caches its own elements, a file cache in a file of its own
        (``<filename>-shard-<index>-of-<num_shards>``): two DataLoader workers never fill one file."""
        from .shard import shard_at_source

        name = self.filename and f"{self.filename}-shard-{index:05d}-of-{num_shards:05d}"
        return CacheNode(shard_at_source(self.inputs[0], num_shards, index), name)

    def publish(self, elements: list[Any], total: int) -> None:
        with self._lock:
            if self._memory is None:
                self._memory, self._memory_bytes = elements, total

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        stage = ctx.stage_name(self, f"cache({self.filename or 'memory'})")
        return _CacheIterator(ctx, self, stage)


class _MemoryReader:
    def __init__(self, elements: list[Any]) -> None:
        self._elements = elements
        self._i = 0

    def read(self) -> Any:
        i = self._i
        if i >= len(self._elements):
            raise StopIteration
        self._i = i + 1
        return self._elements[i]

    def position(self) -> dict[str, Any]:
        return {"index": self._i}

    def seek(self, position: dict[str, Any] | None, produced: int) -> None:
        self._i = produced

    def close(self) -> None:
        pass


class _FileReader:
    def __init__(self, path: str) -> None:
        self._path = path
        self._file: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._index = 0

    def read(self) -> Any:
        try:
            x = pickle.load(self._file)
        except EOFError:
            raise StopIteration from None
        except (pickle.UnpicklingError, ValueError) as e:
            raise OSError(f"cache file {self._path} is corrupt at element {self._index} ({e}); delete it to "
                          "rebuild the cache") from e
        self._index += 1
        return x

    def position(self) -> dict[str, Any]:
        return {"index": self._index, "offset": self._file.tell()}

    def seek(self, position: dict[str, Any] | None, produced: int) -> None:
        if position is not None and "offset" in position:
            self._file.seek(int(position["offset"]))
            self._index = int(position["index"])
            return
        self._file.seek(0)
        self._index = 0
        for _ in range(produced):
            self.read()

    def close(self) -> None:
        self._file.close()


class _MemorySink:
    def __init__(self, node: CacheNode, account: StageAccount) -> None:
        self._node = node
        self._account = account
        self._elements: list[Any] = []
        self._total = 0

    def reserve(self, stop: Any) -> Reservation:
        """Room for the next element before it is pulled (a memory cache keeps every element)."""
        return self._account.reserve(self._account.estimate(), stop)

    def write(self, x: Any, reservation: Reservation | None) -> None:
        n = nbytes(x)
        reservation.settle(n)  # type: ignore[union-attr]
        self._total += n
        self._elements.append(x)

    def finish(self) -> None:
        self._node.publish(self._elements, self._total)

    def abandon(self) -> None:
        self._elements = []
        self._account.release(self._total)
        self._total = 0


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (``kill(pid, 0)``); a live process of another user counts as alive.
    Used by the cache's lock files and by ``Dataset.save``'s cleanup of killed writers."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's live process
        return True
    return True


def take_lock(path: str) -> str:
    """Create ``<path>.lock`` (holding this process id) for one writer, as tf.data's cache lockfile.

    Raises ``FileExistsError`` naming the lock file while another writer (in this or a live process)
    holds it; a lock left by a process that no longer runs is taken over.
    """
    lock = path + ".lock"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                with open(lock) as f:
                    pid = int(f.read().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and not pid_alive(pid):
                try:
                    os.remove(lock)
                except FileNotFoundError:
                    pass
                continue
            raise FileExistsError(f"cache({path!r}): another iterator is writing this cache file (lock {lock} "
                                  f"held by process {pid}); tf.data refuses a second concurrent writer too. "
                                  "Finish or close the first iteration before starting another, or delete the "
                                  "lock file if no process uses it") from None
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return lock
    raise FileExistsError(f"cache({path!r}): could not take the lock {lock}; delete it if no process uses it")


class _FileSink:
    def __init__(self, node: CacheNode) -> None:
        self._node = node
        os.makedirs(os.path.dirname(os.path.abspath(node.path)), exist_ok=True)
        self._lock: str | None = take_lock(node.path)
        self._tmp = f"{node.path}.tmp-{os.getpid()}-{id(self)}"
        try:
            self._file: IO[bytes] | None = open(self._tmp, "wb")  # noqa: SIM115 - closed in finish / abandon
        except BaseException:
            self._unlock()
            raise

    def _unlock(self) -> None:
        if self._lock is not None:
            try:
                os.remove(self._lock)
            except FileNotFoundError:
                pass
            self._lock = None

    def reserve(self, stop: Any) -> Reservation | None:
        return None  # nothing is kept in memory: no reservation

    def write(self, x: Any, reservation: Reservation | None) -> None:
        if self._file is not None:
            pickle.dump(x, self._file, protocol=5)

    def finish(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            os.replace(self._tmp, self._node.path)
        self._unlock()

    def abandon(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            os.remove(self._tmp)
        self._unlock()


class _CacheIterator(Stage):
    kind = "cache"
    ctx: IteratorContext

    def __init__(self, ctx: IteratorContext, node: CacheNode, stage: str) -> None:
        super().__init__(ctx)
        self._node = node
        # In memory the cache may hold the whole pass (no bound); through a file it holds one element at a time,
        # so it asks for one: an unbounded demand took every byte of the budget's shares, and an upstream
        # shuffle(100) ran with a buffer of 1 element (and said so) under an 11 GiB budget.
        self._account = ctx.account(stage, 1 if node.filename else None, mandatory=True,
                                    hint="use cache(filename) to cache in a file instead of memory")
        self._account.keeps = not node.filename
        self._reader: _MemoryReader | _FileReader | None = None
        self._source: Stage | None = None
        self._sink: _MemorySink | _FileSink | None = None
        self._produced = 0
        if node.filename and os.path.exists(node.path):
            self._reader = _FileReader(node.path)
        elif not node.filename and node._memory is not None:
            if node._memory_bytes:
                self._account.reserve(node._memory_bytes, stop_flag(ctx), WHOLE).settle(
                    node._memory_bytes, count=max(len(node._memory), 1), unit=False)
            self._reader = _MemoryReader(node._memory)
        else:
            if not ctx.replay.copy:  # a restore's scan copy reads the input only (it would take the file's lock)
                try:
                    self._sink = _FileSink(node) if node.filename else _MemorySink(node, self._account)
                except BaseException:  # another writer holds the file: this iterator never existed
                    self._account.close()
                    raise
            self._source = node.inputs[0].make_iterator(ctx)

    def __next__(self) -> Any:
        if self._reader is not None:
            x = self._reader.read()
        else:
            sink = self._sink
            # (a reservation of 0 bytes, before any element is sized, is a reservation too: given back)
            reservation = sink.reserve(stop_flag(self.ctx)) if sink is not None else None
            try:
                x = self._source.__next__()  # type: ignore[union-attr]
            except StopIteration:
                if reservation is not None:
                    reservation.cancel()
                if sink is not None:
                    sink.finish()
                    self._sink = None
                raise
            except BaseException:
                if reservation is not None:
                    reservation.cancel()
                raise
            if sink is not None:
                sink.write(x, reservation)
        self._produced += 1
        return x

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "filename": self._node.filename, "produced": self._produced,
                "reader": None if self._reader is None else self._reader.position(),
                "input": None if self._source is None else self._source.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, filename=self._node.filename)
        produced = int(state["produced"])
        if self._reader is not None:
            self._reader.seek(state["reader"], produced)
        else:
            if self._sink is not None:
                self._sink.abandon()
                self._sink = None
            if self._source is not None and state["input"] is not None:
                self._source.set_state(state["input"])
            else:
                if self._source is not None:
                    self._source.close()
                self._source = self._node.inputs[0].make_iterator(self.ctx)
                for _ in range(produced):
                    self._source.__next__()
        self._produced = produced

    def _close_self(self) -> None:
        if self._sink is not None:
            self._sink.abandon()
            self._sink = None
        if self._reader is not None:
            self._reader.close()
        self._account.close()

    def _children(self) -> list[Stage]:
        return [self._source] if self._source is not None else []
