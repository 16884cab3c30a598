"""What a worker process of ``executor="process"`` starts with, as ``multiprocessing``'s spawn gives a child:
the parent's ``sys.argv``, ``sys.path`` and working directory, so a module that reads them at import (scripts
do) imports in the worker as in the parent; unlike spawn, a process group of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import headrace as hr
from tests.conftest import REPO
from tests.engine.pool.proc_fns import times_three

_MODULE = textwrap.dedent("""
    import json
    import os
    import sys

    OFFSET = int(sys.argv[1])  # read at import, as scripts do


    def shift(x):
        return x + OFFSET


    def where(x):
        return json.dumps([os.getcwd(), list(sys.argv)])
""")

_SCRIPT = textwrap.dedent("""
    import json
    import os
    import sys

    import headrace as hr
    from argv_module import shift, where

    ds = hr.Dataset.range(4)
    values = [int(v) for v in ds.map(shift, num_parallel_calls=2, executor="process")]
    [seen] = {bytes(v).decode() for v in ds.map(where, num_parallel_calls=2, executor="process")}
    print(json.dumps({"values": values, "worker": json.loads(seen), "parent": [os.getcwd(), sys.argv]}))
""")


def test_a_worker_sees_the_parents_argv_path_and_working_directory(tmp_path):
    (tmp_path / "argv_module.py").write_text(_MODULE)
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    # argv_module is importable only through the script's directory (sys.path[0] of the parent)
    out = subprocess.run([sys.executable, str(script), "7", "--flag"], capture_output=True, text=True, env=env,
                         cwd=cwd, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["values"] == [7, 8, 9, 10]
    assert result["worker"] == result["parent"] == [str(cwd), [str(script), "7", "--flag"]]


def test_a_worker_is_in_a_process_group_of_its_own():
    # Ctrl-C in a terminal signals the foreground process group: the parent gets it and closes its workers; a
    # worker in the parent's group was killed by it while still importing (a KeyboardInterrupt traceback each)
    with iter(hr.Dataset.range(4).map(times_three, num_parallel_calls=2, executor="process")) as it:
        assert [int(x) for x in it] == [0, 3, 6, 9]
        pids = [pid for r in it._ctx.tree.resources.values() for pid in r.workers.pids()]
        assert pids and all(os.getpgid(pid) == pid != os.getpgrp() for pid in pids), pids
