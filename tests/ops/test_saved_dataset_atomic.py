"""Dataset.save replaces an existing save atomically: writers SIGKILLed at every step of a save (a hook in
the child names each step; the parent kills it there) leave a save that loads as the old dataset or the
new one, complete and element-exact, and the next save removes every leftover."""

from __future__ import annotations

import fcntl
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import headrace as hr
from tests.conftest import REPO, py

CHILD = """
import os, sys, time
import headrace as hr
from headrace._ops import saved_dataset

path, start, target = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def step(name):
    print(name, flush=True)
    if name == target:
        print("AT", flush=True)
        time.sleep(120)

saved_dataset._step = step
hr.Dataset.range(start, start + 12).map(lambda x: (x, x * 2)).save(
    path, shard_func=lambda x, y: x % 3)
print("DONE", flush=True)
"""


def dataset(start: int) -> hr.Dataset:
    return hr.Dataset.range(start, start + 12).map(lambda x: (x, x * 2))


def expected(start: int) -> list:
    """The elements of ``dataset(start)`` saved with shard_func x % 3, in load order (shard by shard)."""
    xs = sorted(range(start, start + 12), key=lambda x: (x % 3, x))
    return [(x, 2 * x) for x in xs]


def save(start: int, path: Path) -> None:
    dataset(start).save(str(path), shard_func=lambda x, y: x % 3)


def load(path: Path) -> list:
    return py(list(hr.Dataset.load(str(path))))


def kill_writer_at(path: Path, start: int, target: str, timeout_s: float = 60.0) -> None:
    """Run a save of ``dataset(start)`` into ``path`` in a child and SIGKILL it at ``target``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(start), target], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line.strip()) for line in proc.stdout], daemon=True)
    reader.start()
    seen = []
    try:
        while True:
            line = lines.get(timeout=timeout_s)
            seen.append(line)
            if line == "AT":
                break
            assert line != "DONE", f"the save finished without reaching step {target!r}: {seen}"
    except queue.Empty:
        raise AssertionError(f"no step {target!r} within {timeout_s} s; saw {seen}; {proc.stderr.read()}") from None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=timeout_s)
        reader.join(timeout=timeout_s)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


STEPS = ["start", "element-0", "element-5", "element-11", "manifest-written", "switched", "cleaned"]
NEW = {"switched", "cleaned"}  # kills from here on find the new save in place


def assert_clean(tmp_path: Path, path: Path) -> None:
    """Only the save's manifest and its one version directory are left, nothing beside ``path``."""
    assert os.listdir(tmp_path) == [path.name]
    names = sorted(os.listdir(path))
    assert len(names) == 2 and names[0] == "dataset.json" and names[1].startswith("v-"), names


@pytest.mark.parametrize("target", STEPS)
def test_a_writer_killed_over_an_old_save_leaves_the_old_or_the_new(tmp_path, target):
    path = tmp_path / "saved"
    save(0, path)
    kill_writer_at(path, 100, target)
    assert load(path) == expected(100 if target in NEW else 0)
    save(200, path)
    assert load(path) == expected(200)
    assert_clean(tmp_path, path)


@pytest.mark.parametrize("target", ["element-5", "manifest-written", "switched"])
def test_a_first_save_killed_leaves_nothing_or_the_new(tmp_path, target):
    path = tmp_path / "saved"
    kill_writer_at(path, 100, target)
    if target in NEW:
        assert load(path) == expected(100)
    else:
        with pytest.raises(FileNotFoundError, match=r"not a dataset written by Dataset\.save"):
            hr.Dataset.load(str(path))
    save(200, path)
    assert load(path) == expected(200)
    assert_clean(tmp_path, path)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=60)
    return proc.pid


def test_saves_in_the_old_layout_load_and_are_replaced(tmp_path):
    """Shards beside dataset.json (saves before versioned directories) load, and a save over them
    removes them and the ``.tmp-<pid>`` / ``.old-<pid>`` siblings that the old save left when killed."""
    path = tmp_path / "saved"
    save(0, path)
    version = next(n for n in os.listdir(path) if n.startswith("v-"))
    for name in os.listdir(path / version):
        if name.startswith("shard-"):
            os.replace(path / version / name, path / name)
    shutil.rmtree(path / version)
    manifest = (path / "dataset.json").read_text().replace(f"{version}/", "")
    (path / "dataset.json").write_text(manifest)
    assert load(path) == expected(0)
    pid = dead_pid()
    for sibling in (f"saved.tmp-{pid}", f"saved.old-{pid}"):
        (tmp_path / sibling).mkdir()
        (tmp_path / sibling / "shard-00000.tfrecord").write_bytes(b"x")
    save(100, path)
    assert load(path) == expected(100)
    assert_clean(tmp_path, path)


def test_a_live_writer_s_version_is_kept(tmp_path):
    """Versions that other saves are writing (their lock held, or no lock file and a live writer) stay;
    one whose lock is free (a finished save's, superseded) goes, and so do dead writers' temporaries."""
    path = tmp_path / "saved"
    save(0, path)
    writing, starting, done = (path / f"v-{os.getpid()}-abcdef0{i}" for i in range(3))
    for d in (writing, starting, done):
        d.mkdir()
    (done / ".lock").touch()
    pid = dead_pid()
    killed = [path / f"v-{pid}-0a", path / f".new-v-{pid}-0b", path / f"dataset.json.tmp-v-{pid}-0c"]
    killed[0].mkdir()
    killed[1].mkdir()
    killed[2].write_text("{}")
    with open(writing / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        save(100, path)
    assert writing.is_dir() and starting.is_dir() and not done.exists()
    assert not any(p.exists() for p in killed)
    assert load(path) == expected(100)


def test_a_failing_pipeline_leaves_the_old_save(tmp_path):
    path = tmp_path / "saved"
    save(0, path)

    def fail(x):
        if x == 105:
            raise ValueError("boom")
        return x, x * 2

    with pytest.raises(ValueError, match="boom"):
        hr.Dataset.range(100, 112).map(fail).save(str(path))
    assert load(path) == expected(0)
    assert_clean(tmp_path, path)


def test_a_manifest_naming_files_outside_the_save_is_refused(tmp_path):
    path = tmp_path / "saved"
    save(0, path)
    manifest = (path / "dataset.json").read_text()
    version = next(n for n in os.listdir(path) if n.startswith("v-"))
    (path / "dataset.json").write_text(manifest.replace(f"{version}/", "../"))
    with pytest.raises(ValueError, match="outside the save directory"):
        hr.Dataset.load(str(path))
