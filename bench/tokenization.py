"""Tokenizing on the pipeline: a batched ``map(headrace.text.Encoder)`` under AUTOTUNE vs one thread.

Target: >= 1.6x one thread on 2 cores. The text is the Python standard library's ``.py`` sources (every Python
installation ships them; nothing is downloaded): a byte-level BPE tokenizer is trained on a part of the lines,
then ``from_tensor_slices(lines).batch(256).map(Encoder(tok), num_parallel_calls=...)`` is drained.

It also measures, rather than assumes, that ``Tokenizer.encode_batch`` releases the GIL: how fast a pure-Python
thread counts while another thread encodes, as a share of its rate alone (``sorted()`` of floats, C code that
keeps the GIL, is the reference near 0%).

``tokenizers`` also parallelises ``encode_batch`` itself over its Rust thread pool; the script sets
``TOKENIZERS_PARALLELISM=false`` so that the pipeline's threads are the only parallelism measured (one thread
is then one core). Run it on a quiet machine: the load average it starts with is printed.

    python bench/tokenization.py [--lines 120000] [--repeats 3]

(Named ``tokenization.py``, not ``tokenize.py``: run as a script, a ``tokenize.py`` beside it would shadow the
standard library's ``tokenize`` module, which ``linecache`` and ``inspect`` import.)
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before tokenizers is imported: the pipeline's threads only

import argparse
import sysconfig
import threading
import time
from pathlib import Path

import numpy as np

import headrace as hr
from headrace._machine import cpu_count, machine_line
from headrace.text import Encoder, train_tokenizer

TARGET = 1.6
BATCH = 256


def stdlib_lines(limit: int) -> list[bytes]:
    """Non-blank lines of the standard library's ``.py`` files, in sorted path order, at most ``limit``."""
    out: list[bytes] = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        for line in path.read_bytes().splitlines():
            if line.strip():
                out.append(line)
                if len(out) >= limit:
                    return out
    return out


def progress_beside(work, seconds: float = 1.0) -> float:
    """How fast a pure-Python counting thread runs while ``work`` runs in a loop on another thread, as a share
    of its rate alone (the median of 3): near 1 when ``work`` releases the GIL on an idle machine (lower on a
    loaded one, where the two threads share what CPU is left), near 0 when ``work`` holds it."""
    def count(stop: threading.Event, out: list[int]) -> None:
        n = 0
        while not stop.is_set():
            n += 1
        out.append(n)

    def rate(busy: bool) -> float:
        stop, out = threading.Event(), []
        counter = threading.Thread(target=count, args=(stop, out))
        t0 = time.perf_counter()
        counter.start()
        while time.perf_counter() - t0 < seconds:
            work() if busy else time.sleep(0.01)
        stop.set()
        counter.join(600)
        return out[0] / (time.perf_counter() - t0)

    return float(np.median([rate(True) / rate(False) for _ in range(3)]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=120_000)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    print(machine_line(), flush=True)
    lines = stdlib_lines(args.lines)
    t0 = time.perf_counter()
    tok = train_tokenizer(hr.Dataset.from_tensor_slices(lines[: len(lines) // 2]), "bpe", args.vocab_size)
    print(f"{len(lines)} stdlib lines ({sum(map(len, lines)) / 2**20:.1f} MiB); byte-level BPE, vocabulary "
          f"{tok.get_vocab_size()}, trained on half of them in {time.perf_counter() - t0:.1f} s")

    texts = [line.decode("utf-8", "replace") for line in lines[:20_000]]
    floats = list(np.random.default_rng(0).random(300_000))
    released = progress_beside(lambda: tok.encode_batch_fast(texts, add_special_tokens=False))
    held = progress_beside(lambda: sorted(floats))  # C code that keeps the GIL: the reference
    print(f"GIL check: a pure-Python thread runs at {released:.0%} of its own rate beside encode_batch, "
          f"{held:.0%} beside sorted() (which holds the GIL); well above the reference: released, near 0%: held")

    encoder = Encoder(tok, eos="[EOS]")
    ds = hr.Dataset.from_tensor_slices(np.array(lines, dtype=object)).batch(BATCH)

    def run(parallel: int) -> tuple[float, float]:
        """(tokens/s, cores this process used on average: its CPU time / wall time)."""
        pipe = ds.map(encoder, num_parallel_calls=parallel).prefetch(2)
        t0, cpu0 = time.perf_counter(), time.process_time()
        tokens = sum(sum(len(ids) for ids in batch) for batch in pipe)
        wall = time.perf_counter() - t0
        return tokens / wall, (time.process_time() - cpu0) / wall

    run(hr.AUTOTUNE)  # warm up
    load = os.getloadavg()[0]
    serial, serial_cores = max(run(1) for _ in range(args.repeats))
    parallel, parallel_cores = max(run(hr.AUTOTUNE) for _ in range(args.repeats))
    speedup = parallel / serial
    print(f"cores: {cpu_count()}, load average at start: {load:.2f}, at end: {os.getloadavg()[0]:.2f}")
    for label, rate, cores in (("1:       ", serial, serial_cores), ("AUTOTUNE:", parallel, parallel_cores)):
        print(f"num_parallel_calls={label} {rate / 1e6:6.2f} M tokens/s, {cores:.2f} cores used, "
              f"{rate / cores / 1e6:5.2f} M tokens per CPU-second")
    print("(cores used below 2: other processes hold the rest; equal tokens per CPU-second: the threads cost "
          "nothing extra, the speed-up is what CPU the machine gives)")
    print(f"speed-up: {speedup:.2f}x; target >= {TARGET}x on 2 cores -> {'MET' if speedup >= TARGET else 'NOT MET'}")


if __name__ == "__main__":
    main()
