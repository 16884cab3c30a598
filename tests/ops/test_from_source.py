"""``Dataset.from_source`` and the public iterator protocol ``headrace.DatasetIterator``.

The state round trip of a user-written source is in ``test_state_roundtrip.py`` (pipeline ``from_source``);
here: the protocol's other promises and bad input.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import headrace as hr
from headrace._engine.recipe import as_node

D = hr.Dataset


class Lines(hr.DatasetIterator):
    """Lines of a text file; the state is the byte offset of the next line (no buffered data)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._file = open(path, "rb")  # noqa: SIM115 - closed in close()
        self.closed_calls = 0

    def __next__(self) -> bytes:
        line = self._file.readline()
        if not line:
            raise StopIteration
        if line.startswith(b"bad"):
            raise ValueError(f"cannot parse {line!r}")
        return line.rstrip(b"\n")

    def get_state(self) -> dict:
        return {"offset": self._file.tell()}

    def set_state(self, state: dict) -> None:
        self._file.seek(state["offset"])

    def close(self) -> None:
        self.closed_calls += 1
        self._file.close()


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(b"a\nb\nbad line\nc\nd\n")
    return str(path)


def test_user_source_yields_normalized_elements_and_continues_after_an_error(text_file):
    ds = D.from_source(functools.partial(Lines, text_file), name="lines")
    assert ds.cardinality() == hr.UNKNOWN_CARDINALITY
    got, errors = [], []
    with iter(ds) as it:
        while True:
            try:
                got.append(next(it))
            except StopIteration:
                break
            except ValueError as e:
                errors.append(e)
    assert got == [b"a", b"b", b"c", b"d"]
    assert len(errors) == 1 and "in from_source(lines) at element 2" in errors[0].__notes__
    assert list(ds.ignore_errors()) == [b"a", b"b", b"c", b"d"]


def test_user_source_state_checkpoints_positions_and_close_reaches_it(text_file):
    made: list[Lines] = []

    def make() -> Lines:
        made.append(Lines(text_file))
        return made[-1]

    ds = D.from_source(make, name="lines").ignore_errors().batch(2)
    it = iter(ds)
    assert next(it).tolist() == [b"a", b"b"]
    state = json.loads(json.dumps(it.get_state()))
    assert state["pipeline"]["input"]["input"]["state"] == {"offset": 4}  # positions, not data
    it.close()
    it.close()
    assert made[0].closed_calls == 1, "close() is forwarded once"
    with iter(ds) as restored:
        restored.set_state(state)
        assert [b.tolist() for b in restored] == [[b"c", b"d"]]
    other = D.from_source(make, name="other").ignore_errors().batch(2)
    with pytest.raises(hr.StateError, match="name"), iter(other) as it2:
        it2.set_state(state)


def test_any_object_with_the_four_methods_is_a_source():
    class Plain:  # no subclassing: duck typing is enough
        def __init__(self):
            self.i = 0

        def __next__(self):
            if self.i == 3:
                raise StopIteration
            self.i += 1
            return {"x": self.i, "y": 0.5}

        def get_state(self):
            return {"i": self.i}

        def set_state(self, state):
            self.i = state["i"]

        def close(self):
            pass

    out = list(D.from_source(Plain, cardinality=3))
    assert [o["x"] for o in out] == [1, 2, 3]
    assert out[0]["x"].dtype == np.int64 and out[0]["y"].dtype == np.float32  # normalized like map results
    assert len(D.from_source(Plain, cardinality=3)) == 3


def test_an_object_without_the_protocol_is_refused_naming_what_is_missing():
    # refused while iter() builds the stages: raised by the first next(), as tf.data raises build errors
    it = iter(D.from_source(lambda: iter([1, 2])))
    with pytest.raises(TypeError, match=r"list_iterator, which lacks get_state, set_state, close"):
        next(it)

    class NoNext(hr.DatasetIterator):
        pass

    with iter(D.from_source(NoNext)) as it, pytest.raises(TypeError, match="NoNext, which lacks __next__"):
        next(it)


def test_bad_arguments_and_bad_states_are_clear_errors(text_file):
    lines = Lines(text_file)
    with pytest.raises(TypeError, match="not an iterator"):
        D.from_source(lines)  # the iterator itself instead of a factory
    lines.close()
    with pytest.raises(ValueError, match="cardinality=-5"):
        D.from_source(lambda: None, cardinality=-5)
    with pytest.raises(TypeError, match="name=3"):
        D.from_source(lambda: None, name=3)

    class ListState(hr.DatasetIterator):
        def __next__(self):
            return 1

        def get_state(self):
            return [1]

    with iter(D.from_source(ListState)) as it, pytest.raises(TypeError, match="returned list; it must return"):
        it.get_state()


def test_without_get_state_the_source_still_iterates_in_parallel_stages():
    class Count(hr.DatasetIterator):  # no get_state / set_state: iterates, cannot be checkpointed
        def __init__(self):
            super().__init__()
            self.i = 0

        def __next__(self):
            if self.i == 5:
                raise StopIteration
            self.i += 1
            return self.i

    ds = D.from_source(Count).map(lambda x: x * 10, num_parallel_calls=2)
    assert sorted(ds) == [10, 20, 30, 40, 50]
    with iter(D.from_source(Count)) as it, pytest.raises(NotImplementedError, match="Count does not support"):
        it.get_state()


def test_the_facade_and_the_unwrap_helper():
    with pytest.raises(TypeError, match="a Dataset wraps a recipe node"):
        D(42)
    with pytest.raises(TypeError, match=r"expected a headrace\.Dataset, got int"):
        hr.Iterator(7)
    with pytest.raises(TypeError, match="zip"):
        as_node([1], "zip(): not a dataset")
    assert repr(D.range(3).map(len, name="n")) == "<Dataset map(n) element_spec=<known from the first element>>"
