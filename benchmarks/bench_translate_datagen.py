"""Datagen throughput of translate_enzh_sub8k: MB/s of raw parallel text with 1 and 2 workers.

    python benchmarks/bench_translate_datagen.py [--pairs 96094]

Reads ../shared/corpora/parallel (says so and exits 0 when absent). The vocabulary is built once and
timed on its own (the separate step); each worker count then regenerates the shards from scratch into a
fresh data_dir that reuses the vocabulary. Reference: tensor2tensor's generator runs one process.
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from textrain.problems.translate import TranslateEnzhSub8k  # noqa: E402

CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "shared", "corpora", "parallel")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=0, help="use the first N pairs (0: all)")
    args = ap.parse_args()
    if not os.path.isdir(CORPUS):
        print(f"{CORPUS} is absent: nothing to measure")
        return
    work = tempfile.mkdtemp()
    tmp_dir = os.path.join(work, "raw")
    os.makedirs(tmp_dir)
    raw_bytes = 0
    for lang in ("en", "zh"):
        with gzip.open(os.path.join(CORPUS, f"train.{lang}.gz"), "rb") as f, \
                open(os.path.join(tmp_dir, f"train.{lang}"), "wb") as out:
            for i, line in enumerate(f):
                if args.pairs and i >= args.pairs:
                    break
                out.write(line)
                raw_bytes += len(line)
    mb = raw_bytes / 1e6
    problem = TranslateEnzhSub8k()
    vocab_dir = os.path.join(work, "vocab")
    t = time.time()
    problem.prepare(vocab_dir, tmp_dir)
    print(f"vocabulary (both sides, ~8k each): {time.time() - t:.1f}s")
    for workers in (1, 2):
        data_dir = os.path.join(work, f"w{workers}")
        shutil.copytree(vocab_dir, data_dir)
        t = time.time()
        m = problem.generate_data(data_dir, tmp_dir, num_workers=workers, seed=0)
        dt = time.time() - t
        n = sum(x["num_examples"] for x in m.values())
        print(f"workers={workers}: {n} pairs, {mb:.1f} MB raw in {dt:.1f}s = {mb / dt:.2f} MB/s "
              f"({n / dt:.0f} pairs/s)")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
