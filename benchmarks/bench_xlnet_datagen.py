"""Benchmark: xlnet_pretrain data generation vs the original zihangdai/xlnet data_utils.py.

Settings of the reference run (../shared/DESIGN.md §7): Jane Austen's novels (4.0 MB), seq_len 128,
reuse_len 64, num_predict 21, bsz_per_host 8, 2 cores, bi_data. The original took 14.8 s wall
(including ~2.9 s of TensorFlow import), 530 MiB peak RSS, 68k SentencePiece tokens/s.

What is printed:
- one line per worker count: wall seconds of a fresh process running the whole `generate_data`
  (interpreter start and TF import included, like the reference), corpus tokens/s, peak RSS of the
  largest process;
- a stage breakdown measured in this process on one shard: reading, SentencePiece encoding, record
  sampling (ours, vectorised numpy), and the framework's tf.train.Example writing.

The SentencePiece model is trained once into --work_dir with XLNet's recipe (vocab_size 32000,
hard_vocab_limit off: a 4 MB corpus supports fewer pieces; the size used is printed). Token counts
depend on the vocabulary, so the tokens/s column is "corpus tokens under this model per second".

    python benchmarks/bench_xlnet_datagen.py [--workers 1,2] [--num_shards 2]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
DEFAULT_CORPUS = os.path.join(os.path.dirname(REPO), "shared", "corpora", "en", "jane_austen_novels.txt.gz")
REFERENCE = {"wall_s": 14.8, "tf_import_s": 2.9, "rss_mib": 530, "tokens_per_s": 68_000}
SETTINGS = dict(seq_len=128, reuse_len=64, num_predict=21, bsz_per_host=8, num_core_per_host=2,
                bi_data=True, mask_alpha=6, mask_beta=1)


def _problem(corpus: str, sp_model: str):
    from problems.xlnet_pretrain import XlnetPretrain, XlnetPretrainHParams
    return XlnetPretrain(XlnetPretrainHParams(input_file=corpus, sp_model=sp_model, **SETTINGS))


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mib() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024.0


def child(args: argparse.Namespace) -> None:
    """Run the whole datagen once and print a JSON line."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    problem = _problem(args.corpus, args.sp_model)
    data_dir = os.path.join(args.work_dir, f"data_w{args.workers}")
    shutil.rmtree(data_dir, ignore_errors=True)
    start = time.time()
    cpu = _cpu_seconds(resource.RUSAGE_SELF) + _cpu_seconds(resource.RUSAGE_CHILDREN)
    manifests = problem.generate_data(data_dir, "", num_workers=args.workers, seed=0,
                                      num_shards={"train": args.num_shards})
    seconds = time.time() - start
    cpu = _cpu_seconds(resource.RUSAGE_SELF) + _cpu_seconds(resource.RUSAGE_CHILDREN) - cpu
    print(json.dumps({"seconds_in_process": seconds, "cpu_seconds": cpu,
                      "records": manifests["train"]["num_examples"], "peak_rss_mib": _peak_rss_mib()}))


def stage_breakdown(corpus: str, sp_model: str) -> tuple[int, dict]:
    """Corpus tokens and the CPU seconds of each stage on one shard holding the whole corpus
    (CPU time, not wall: the figures stay meaningful on a machine shared with other work)."""
    import numpy as np

    from framework import records
    from problems import xlnet_pretrain as xp

    problem = _problem(corpus, sp_model)
    times = {}
    t = time.process_time()
    docs = xp.shard_documents([corpus], 0, 1)
    times["read"] = time.process_time() - t
    enc = problem.encoder("")
    t = time.process_time()
    encoded = xp.encode_documents(docs, enc.encode_batch, True)
    times["encode"] = time.process_time() - t
    tokens = int(sum(len(ids) for _, ids, _ in encoded))
    table = problem.start_piece_table("")
    cfg = xp.RecordSettings.from_hparams(problem.hparams)
    t = time.process_time()
    data, sent = xp.pass_stream(encoded, np.random.default_rng(0))
    recs = list(xp.iter_records(data, sent, cfg, table, np.random.default_rng(0)))
    times["records"] = time.process_time() - t
    path = os.path.join(os.path.dirname(sp_model), "stage.tfrecord")
    t = time.process_time()
    records.write_shard(path, recs, shuffle_rng=None, settings_hash="bench")
    times["write"] = time.process_time() - t
    times["num_records"] = len(recs)
    return tokens, times


def ensure_sp_model(corpus: str, work_dir: str, vocab_size: int) -> str:
    path = os.path.join(work_dir, "sp", "spiece.model")
    if not os.path.exists(path):
        from framework.text_encoders import train_sentencepiece
        t = time.time()
        train_sentencepiece(corpus, path[:-len(".model")], vocab_size=vocab_size, hard_vocab_limit=False)
        print(f"trained {path} in {time.time() - t:.1f}s (not part of the figures below)")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    ap.add_argument("--work_dir", default="/tmp/textrain_bench_xlnet")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--num_shards", type=int, default=2)
    ap.add_argument("--vocab_size", type=int, default=32000)
    ap.add_argument("--sp_model", default="")
    ap.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        args.workers = int(args.workers)
        child(args)
        return
    if not os.path.exists(args.corpus):
        sys.exit(f"corpus {args.corpus} is absent (../shared/corpora is not part of the repository)")
    os.makedirs(args.work_dir, exist_ok=True)
    sp_model = args.sp_model or ensure_sp_model(args.corpus, args.work_dir, args.vocab_size)

    tokens, stages = stage_breakdown(args.corpus, sp_model)
    from problems import xlnet_pretrain as xp
    vocab = xp.XlnetPretrain(xp.XlnetPretrainHParams(sp_model=sp_model, **SETTINGS)).encoder("").vocab_size
    print(f"corpus {os.path.basename(args.corpus)}: {tokens} SentencePiece tokens (vocab {vocab}), "
          f"settings {SETTINGS}, {args.num_shards} shards")
    n = stages["num_records"]
    print(f"stages, CPU seconds of one process, whole corpus as one shard ({n} records):")
    for name in ("read", "encode", "records", "write"):
        rate = f"{tokens / stages[name] / 1e3:8.0f}k tokens/s" if stages[name] else ""
        print(f"  {name:8s} {stages[name]:7.2f} s  {rate}  {stages[name] / n * 1e6:6.1f} us/record")

    print(f"{'':24s} {'wall s':>8s} {'tokens/s':>10s} {'peak RSS':>10s} {'records':>8s}")
    print(f"{'original (reference)':24s} {REFERENCE['wall_s']:8.1f} {REFERENCE['tokens_per_s'] / 1e3:9.0f}k "
          f"{REFERENCE['rss_mib']:7.0f} MiB {'':>8s}")
    for workers in [int(w) for w in args.workers.split(",")]:
        cmd = [sys.executable, os.path.abspath(__file__), "--_child", "--workers", str(workers),
               "--corpus", args.corpus, "--work_dir", args.work_dir, "--sp_model", sp_model,
               "--num_shards", str(args.num_shards)]
        start = time.time()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        wall = time.time() - start
        result = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{f'textrain, {workers} worker(s)':24s} {wall:8.1f} {tokens / wall / 1e3:9.0f}k "
              f"{result['peak_rss_mib']:7.0f} MiB {result['records']:8d}   "
              f"(in-process {result['seconds_in_process']:.1f} s: "
              f"{tokens / result['seconds_in_process'] / 1e3:.0f}k tokens/s, "
              f"{tokens / result['seconds_in_process'] / REFERENCE['tokens_per_s']:.1f}x the reference; "
              f"{result['cpu_seconds']:.1f} CPU s: {tokens / result['cpu_seconds'] / 1e3:.0f}k tokens "
              f"per CPU second)")


if __name__ == "__main__":
    main()
