"""Worker processes of the process executor start in any environment (issue #21).

Each scenario runs a fresh ``python`` with a minimal environment (``PATH`` and ``PYTHONPATH`` only) and a
working directory of its own, so nothing the test interpreter has imported already (``random``,
``tempfile``, ...) can hide a worker that imports the wrong module. A *shadow* directory holds
``random.py``, ``tempfile.py`` and ``queue.py`` that raise when imported: a user's folder with modules
named like the standard library's.

A ``PYTHONPATH`` entry holding such modules is not a scenario: Python puts ``PYTHONPATH`` before the
standard library, so the parent itself imports them (``import headrace`` imports ``tempfile`` and
``random``) and fails before any worker exists. Workers get the parent's environment unchanged (its
``PYTHONPATH`` included), so a module the parent finds through ``PYTHONPATH`` is found by the workers too.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

import headrace
from headrace._engine.pool import process_child as proc_child
from tests.conftest import REPO

PACKAGE = Path(headrace.__file__).resolve().parent
SHADOWED = ("random", "tempfile", "queue")

_USER_MODULE = textwrap.dedent("""
    def triple(x):
        import queue, random, tempfile  # the standard library's, also in a worker
        return x * 3
""")

_MP_JOB = textwrap.dedent("""
    import traceback

    import headrace as hr
    import userfns

    def run(q):
        try:
            ds = hr.Dataset.range(4).map(userfns.triple, num_parallel_calls=2, executor="process")
            q.put([int(v) for v in ds.as_numpy_iterator()])
        except BaseException:
            q.put(traceback.format_exc())
            raise
""")

# The function is a lambda (pickled by value) calling a function of a user module that the worker can
# import only through the parent's sys.path (pickled by reference).
_PARENT = textwrap.dedent("""
    import json, sys
    if len(sys.argv) > 1:
        sys.path.insert(0, sys.argv[1])
    import headrace as hr
    import userfns
    ds = hr.Dataset.range(6).map(lambda x: userfns.triple(x) + 1, num_parallel_calls=2, executor="process")
    print(json.dumps([int(v) for v in ds.as_numpy_iterator()]))
""")


def _env(*extra_path: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *map(str, extra_path)])}


def _dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``(user, shadow, empty)``: the user's module, modules that shadow the stdlib's, nothing."""
    user, shadow, empty = tmp_path / "user", tmp_path / "shadow", tmp_path / "empty"
    for d in (user, shadow, empty):
        d.mkdir()
    (user / "userfns.py").write_text(_USER_MODULE)
    (user / "mpjob.py").write_text(_MP_JOB)
    for name in SHADOWED:
        (shadow / f"{name}.py").write_text(f"raise ImportError('the user module {name}.py was imported')\n")
    return user, shadow, empty


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


@pytest.mark.parametrize("case", ["another_cwd", "safe_path_in_shadow_cwd", "script_in_shadow_cwd",
                                  "pythonpath"])
def test_a_process_map_works_wherever_the_parent_runs(tmp_path, case):
    """Another working directory (``-c``: the cwd is ``sys.path[0]``); ``python -P``; a script run from a
    directory whose ``random.py`` / ``tempfile.py`` / ``queue.py`` raise (the parent never imports the cwd,
    the workers must not either); the user's module found through ``PYTHONPATH`` instead of ``sys.path``."""
    user, shadow, empty = _dirs(tmp_path)
    (tmp_path / "main.py").write_text(_PARENT)
    cmd, cwd, env = {
        "another_cwd": ([sys.executable, "-c", _PARENT, str(user)], empty, _env()),
        "safe_path_in_shadow_cwd": ([sys.executable, "-P", "-c", _PARENT, str(user)], shadow, _env()),
        "script_in_shadow_cwd": ([sys.executable, str(tmp_path / "main.py"), str(user)], shadow, _env()),
        "pythonpath": ([sys.executable, "-P", "-c", _PARENT], empty, _env(user)),
    }[case]
    out = _run(cmd, cwd, env).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [3 * i + 1 for i in range(6)]


def test_workers_run_with_the_parents_interpreter_flags_and_exit_cleanly(tmp_path):
    """``-O -X dev`` reach the workers (as ``multiprocessing``'s spawn passes them); in development mode a
    worker that ended without closing its socket would print a ``ResourceWarning``."""
    _user, _shadow, empty = _dirs(tmp_path)
    code = ("import sys, headrace as hr\n"
            "ds = hr.Dataset.range(2).map(lambda x: (sys.flags.optimize, int(sys.flags.dev_mode)), "
            "num_parallel_calls=2, executor='process')\n"
            "print([tuple(map(int, v)) for v in ds.as_numpy_iterator()])\n")
    proc = _run([sys.executable, "-O", "-X", "dev", "-c", code], empty, _env())
    assert proc.stdout.strip().splitlines()[-1] == "[(1, 1), (1, 1)]"
    assert "Warning" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("method", multiprocessing.get_all_start_methods())
def test_a_process_map_works_inside_a_multiprocessing_child(tmp_path, method):
    """A process map run by a ``multiprocessing`` child started with ``fork``, ``spawn`` or ``forkserver``
    (the parent imported headrace first)."""
    user, _shadow, empty = _dirs(tmp_path)
    code = textwrap.dedent(f"""
        import multiprocessing as mp, sys
        sys.path.insert(0, sys.argv[1])
        import headrace, mpjob
        ctx = mp.get_context({method!r})
        q = ctx.Queue()
        p = ctx.Process(target=mpjob.run, args=(q,))
        p.start()
        got = q.get(timeout=60)
        print(got)
        p.join(30)
        sys.exit(p.exitcode if isinstance(got, list) else 1)
    """)
    out = _run([sys.executable, "-c", code, str(user)], empty, _env()).stdout
    assert out.strip().splitlines()[-1] == "[0, 3, 6, 9]"


def test_the_worker_command_puts_no_script_directory_or_cwd_on_sys_path(tmp_path):
    """The command a worker is started with (``proc_child.child_command``: the workers of a process map run
    it), pointed at a probe file instead of ``process_child.py``: the probe's directory (there: headrace's
    ``_ops``), the working directory and ``''`` are not on the worker's ``sys.path`` when it starts, and
    the probe's ``main`` gets the fds (its socket, its progress word)."""
    with iter(headrace.Dataset.range(2).map(abs, executor="process")) as it:
        next(it)
        lines = []
        for p in psutil.Process().children():
            try:
                lines.append(p.cmdline())
            except psutil.Error:  # a child another test left, ended meanwhile (a zombie): no command line
                continue
    workers = [line[:-2] for line in lines if proc_child.CHILD_SCRIPT in line]
    assert workers and all(w == proc_child.child_command(0, 0)[:-2] for w in workers), lines
    _user, shadow, _empty = _dirs(tmp_path)
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (probe_dir / "random.py").write_text("raise ImportError('the probe directory is on sys.path')\n")
    (probe_dir / "probe.py").write_text(
        "import json, sys, tempfile\n"
        "def main(fd, progress_fd):\n"
        "    print(json.dumps({'fd': [fd, progress_fd], 'path': sys.path,\n"
        "                      'random': sys.modules['random'].__file__}))\n")
    cmd = proc_child.child_command(7, 8, str(probe_dir / "probe.py"))
    out = json.loads(_run(cmd, shadow, _env()).stdout)
    assert out["fd"] == [7, 8]
    assert "" not in out["path"] and "." not in out["path"]
    starts = [Path(p).resolve() for p in out["path"]]
    for bad in (probe_dir, shadow, PACKAGE):
        assert not [p for p in starts if p == bad or bad in p.parents], (bad, out["path"])
    assert Path(out["random"]).parent not in (probe_dir, shadow)
    real = proc_child.child_command(7, 8)
    assert real[real.index("-c") + 2:] == [proc_child.CHILD_SCRIPT, "7", "8"]
    assert Path(proc_child.CHILD_SCRIPT).resolve().parent == PACKAGE / "_engine" / "pool"


def test_no_module_in_a_runnable_directory_is_named_like_a_stdlib_module():
    """Running a file puts its directory first on ``sys.path``, so a module there named like a standard
    library module shadows it in that process. The rule: in every directory under ``src/headrace`` that a
    process may run a file of -- ``_engine/pool`` (the worker's code lives there) and every directory holding a
    ``__main__.py`` or a module with an ``if __name__ == "__main__"`` block -- no ``.py`` module and no
    package is named in ``sys.stdlib_module_names``. (``headrace.io`` is public API and may keep its name:
    ``src/headrace`` itself holds no file to run.)"""
    runnable = {PACKAGE / "_engine" / "pool"}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__main__.py" or "__name__ == \"__main__\"" in path.read_text(encoding="utf-8"):
            runnable.add(path.parent)
    assert PACKAGE / "cli" in runnable and PACKAGE not in runnable
    clashes = []
    for d in sorted(runnable):
        for entry in d.iterdir():
            name = entry.stem if entry.suffix == ".py" else entry.name if (entry / "__init__.py").exists() else ""
            if name in sys.stdlib_module_names:
                clashes.append(str(entry.relative_to(PACKAGE)))
    assert not clashes, f"rename these modules, they shadow the standard library's: {clashes}"
