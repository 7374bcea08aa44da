"""Benchmark: xlnet_pretrain datagen vs zihangdai/xlnet's data_utils.py, same run, corpus and settings.

    python benchmarks/bench_xlnet_datagen.py                  # 20 MB: original, ours 1 and 2 workers, ours on 5 MB
    python benchmarks/bench_xlnet_datagen.py --mb=3 --small_mb=0 --workers=1 --original=skip --stages
    git archive 13ae266 | tar -x -C /tmp/before               # the code before the speed work ...
    python benchmarks/bench_xlnet_datagen.py --mb=3 --only_stages --stages_repo=/tmp/before --profile

One run builds a plain corpus of at least --mb MB from ../shared/corpora/en (`same_run.plain_corpus`: whole
documents of every file, in name order), trains ONE SentencePiece model on it with XLNet's recipe (vocab 32000,
not timed, reused by later runs) and runs, each as a fresh process measured by `same_run.run_measured`:
- the original, unchanged (`same_run.original_cmd("xlnet/data_utils.py", ...)`), one process (it parallelises
  over input files only, and there is one);
- ours through the real CLI, `python -m framework.datagen --problem=xlnet_pretrain ...`, with 1 worker, then 2
  (--workers), default shard count (8);
- ours with 1 worker on a --small_mb corpus (the first --small_mb MB of the same documents), to show that the
  peak memory does not grow with the corpus.
Settings on both sides: seq_len 128, reuse_len 64, num_predict 21, bsz_per_host 8, one core per host (the
original forces num_core_per_host=1 when not on TPU), bi_data, mask_alpha 6, mask_beta 1, cased, use_eod.

Printed per run: wall s, CPU s of the process tree (the per-core measure; a shared machine distorts it less
than wall time), corpus tokens per CPU-second and per wall-second and their ratio to the original's, peak RSS
of the tree [of its largest process], records written, and the load average before and after (the machine is
shared: wall figures are only comparable within one run). "Corpus tokens" are the SentencePiece ids of the
corpus's non-blank lines under the model (the same for both sides: --check_ids compares our ids with the
original's `encode_ids(sp, preprocess_text(line))` line by line on the whole corpus).

--stages times, in a child process over a checkout (--stages_repo, default this one) on the --mb corpus with
8 shards, the parts of a datagen run in CPU seconds: read + encode, records (A/B split, masks), serialize
(framework/records.serialize_samples) and the TFRecord write; --profile adds a cProfile (CPU-time clock) of the
whole `generate_data` with the top functions. The stage code uses only functions that exist since before the
speed work, so the same command profiles the code before it (see the third command above).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from benchmarks.lib import same_run  # noqa: E402  (one way to measure a side)
from benchmarks.lib.xlnet_sides import SETTINGS, record_statistics, run_original, run_ours  # noqa: E402,F401


# ----------------------------------------------------------------------------------------------- #
# corpus, model, tokens
# ----------------------------------------------------------------------------------------------- #
def small_corpus(big: str, out: str, mb: float) -> str:
    """The first documents of `big` up to `mb` MB (cut at a blank line)."""
    if not os.path.exists(out):
        target = int(mb * 1e6)
        with open(big, "rb") as src, open(out + ".tmp", "wb") as dst:
            written = 0
            for line in src:
                dst.write(line)
                written += len(line)
                if written >= target and not line.strip():
                    break
        os.replace(out + ".tmp", out)
    return out


def sentencepiece_model(corpus: str, work: str, vocab_size: int) -> str:
    prefix = os.path.join(work, f"spiece_{os.path.basename(corpus).rsplit('.', 1)[0]}_{vocab_size}")
    if not os.path.exists(prefix + ".model"):
        from textrain.framework.encoders import train_sentencepiece
        start = time.time()
        train_sentencepiece(corpus, prefix, vocab_size=vocab_size, hard_vocab_limit=False)
        print(f"trained {prefix}.model in {time.time() - start:.0f} s (not part of the figures)")
    return prefix + ".model"


def corpus_tokens(corpus: str, sp_model: str) -> int:
    from textrain.framework import encoders
    encoder = encoders.SentencePieceEncoder(sp_model, uncased=SETTINGS["uncased"])
    total, lines = 0, []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                lines.append(line.strip())
            if len(lines) == 50_000:
                total += int(encoder.encode_batch_flat(lines)[1].sum())
                lines = []
    return total + int(encoder.encode_batch_flat(lines)[1].sum())


def check_ids(corpus: str, sp_model: str) -> str:
    """Our ids vs the original's prepro_utils (imported from ../shared/originals, unchanged), every line."""
    import sentencepiece as spm

    from textrain.framework import encoders
    sys.path.insert(0, os.path.join(same_run.ORIGINALS, "xlnet"))
    import prepro_utils  # noqa: E402  (the original's, read-only)
    sp = spm.SentencePieceProcessor()
    sp.Load(sp_model)
    encoder = encoders.SentencePieceEncoder(sp_model, uncased=SETTINGS["uncased"])
    with open(corpus, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    ours = encoder.encode_batch(lines)
    differ = [i for i, line in enumerate(lines) if ours[i] != prepro_utils.encode_ids(
        sp, prepro_utils.preprocess_text(line, lower=SETTINGS["uncased"]))]
    return (f"ids identical to the original's encode_ids(preprocess_text(line)) on all {len(lines):,} lines"
            if not differ else f"ids DIFFER on {len(differ)} of {len(lines)} lines, first: {lines[differ[0]][:80]!r}")


# ----------------------------------------------------------------------------------------------- #
# the two sides
# ----------------------------------------------------------------------------------------------- #
# ----------------------------------------------------------------------------------------------- #
# where the time goes
# ----------------------------------------------------------------------------------------------- #
_STAGES = r'''
import json, os, sys, time, cProfile, pstats, io, shutil
repo, corpus, sp_model, settings, profile, work = sys.argv[1:7]
sys.path.insert(0, repo)
settings = json.loads(settings)
import numpy as np
import tensorflow as tf
from textrain.framework import records
from textrain.framework.generator import shard_np_rng
from textrain.problems import xlnet_pretrain as xp
hp = xp.XlnetPretrainHParams(input_file=corpus, sp_model=sp_model, **settings)
problem = xp.XlnetPretrain(hp)
T = time.process_time
out = dict.fromkeys(["read + encode", "records (A/B, masks)", "serialize (records.py)", "TFRecord write"], 0.0)
start = T()
table, cfg = problem.start_piece_table(""), xp.XlnetRecordSettings.from_hparams(hp)
out["setup"] = T() - start
tokens = count = 0
for shard in range(8):
    t = T(); encoded = problem.shard_stream_documents("", "train", shard, 8); out["read + encode"] += T() - t
    tokens += sum(len(ids) for ids, _ in encoded)
    t = T()
    rng = shard_np_rng(0, "train/pass-0", shard)
    data, sent = xp.join_streams(encoded)
    batched = hasattr(records, "SampleBatch")  # what generate_shard yields: record batches, or dicts before
    if batched:
        samples = [records.SampleBatch(c) for c in xp.iter_record_batches(data, sent, cfg, table, rng)]
    else:
        samples = list(xp.iter_records(data, sent, cfg, table, rng))
    out["records (A/B, masks)"] += T() - t
    t = T(); blobs = []
    if batched:
        for batch in samples:
            blobs += records.serialize_batch(batch)[0]
    else:
        for i in range(0, len(samples), 512):
            blobs += records.serialize_samples(samples[i:i + 512])[0]
    out["serialize (records.py)"] += T() - t
    t = T()
    with tf.io.TFRecordWriter(os.path.join(work, "stage.tfrecord")) as w:
        for b in blobs:
            w.write(b)
    out["TFRecord write"] += T() - t
    count += len(blobs)
result = {"stages": out, "tokens": tokens, "records": count}
if profile == "1":
    data_dir = os.path.join(work, "profile")
    shutil.rmtree(data_dir, ignore_errors=True)
    problem = xp.XlnetPretrain(hp)
    prof = cProfile.Profile(T)
    t = T(); prof.enable()
    problem.generate_data(data_dir, "", num_workers=1, seed=0)
    prof.disable()
    result["generate_data_cpu"] = T() - t
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
    result["profile"] = s.getvalue()
print("STAGES " + json.dumps(result))
'''


def stages(repo: str, corpus: str, sp_model: str, work: str, profile: bool) -> dict:
    cmd = [sys.executable, "-c", _STAGES, repo, corpus, sp_model, json.dumps(SETTINGS), "1" if profile else "0",
           work]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=repo,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")).stdout
    return json.loads(out.split("STAGES ", 1)[1])


def print_stages(repo: str, result: dict) -> None:
    s, tokens = result["stages"], result["tokens"]
    total = sum(s.values())
    print(f"\nstages of {repo} (CPU s, one process, 8 shards, {result['records']:,} records, {tokens:,} tokens):")
    for name, sec in s.items():
        print(f"  {name:26s} {sec:6.2f} s  {sec / total:5.1%}  {sec / tokens * 1e6:6.3f} us/token")
    print(f"  {'total':26s} {total:6.2f} s          {total / tokens * 1e6:6.3f} us/token  (+ interpreter and "
          f"TensorFlow import in a real run)")
    if "profile" in result:
        print(f"cProfile of generate_data (CPU clock; {result['generate_data_cpu']:.2f} s with the profiler on, "
              f"which inflates Python-call-heavy code):")
        lines = result["profile"].strip().splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("ncalls"))
        for ln in lines[start:]:
            print("  " + ln.replace(REPO + "/", "").replace(repo.rstrip("/") + "/", ""))


# ----------------------------------------------------------------------------------------------- #
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20, help="corpus size (MB) of the comparison")
    ap.add_argument("--small_mb", type=float, default=5, help="second corpus for the memory check (0: none)")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--vocab_size", type=int, default=32000)
    ap.add_argument("--work_dir", default="/tmp/textrain_bench_xlnet")
    ap.add_argument("--original", choices=["auto", "skip"], default="auto")
    ap.add_argument("--check_ids", action="store_true", help="compare our ids with the original's, every line")
    ap.add_argument("--stages", action="store_true", help="also time the stages (see the docstring)")
    ap.add_argument("--only_stages", action="store_true", help="only the stages (no runs)")
    ap.add_argument("--stages_repo", default=REPO, help="checkout whose stages are timed")
    ap.add_argument("--profile", action="store_true", help="with the stages: a cProfile of generate_data")
    args = ap.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    corpus = same_run.plain_corpus(os.path.join(args.work_dir, f"corpus_{args.mb:g}mb.txt"), args.mb)
    sp_model = sentencepiece_model(corpus, args.work_dir, args.vocab_size)
    mb = os.path.getsize(corpus) / 1e6

    if args.stages or args.only_stages:
        print_stages(args.stages_repo, stages(args.stages_repo, corpus, sp_model, args.work_dir, args.profile))
        if args.only_stages:
            return

    tokens = corpus_tokens(corpus, sp_model)
    print(f"\ncorpus {corpus} ({mb:.1f} MB): {tokens:,} SentencePiece tokens (model {sp_model}); {os.cpu_count()} "
          f"cores, machine shared with other work (load average {os.getloadavg()[0]:.1f}); settings {SETTINGS}")
    if args.check_ids:
        print(check_ids(corpus, sp_model))

    rows = []
    if args.original == "auto":
        rows.append(("original data_utils.py, 1 process", mb, tokens, run_original(corpus, sp_model, args.work_dir)))
    for w in [int(x) for x in args.workers.split(",")]:
        rows.append((f"textrain, {w} worker{'s' if w > 1 else ''}", mb, tokens,
                     run_ours(corpus, sp_model, args.work_dir, w, f"{args.mb:g}mb")))
    if args.small_mb:
        small = small_corpus(corpus, os.path.join(args.work_dir, f"corpus_{args.small_mb:g}mb_of_{args.mb:g}.txt"),
                             args.small_mb)
        rows.append((f"textrain, 1 worker, {args.small_mb:g} MB", os.path.getsize(small) / 1e6,
                     corpus_tokens(small, sp_model), run_ours(small, sp_model, args.work_dir, 1,
                                                              f"{args.small_mb:g}mb")))

    base = rows[0][3] if args.original == "auto" else None
    print(f"\n{'run':36s} {'MB':>5s} {'wall s':>7s} {'CPU s':>7s} {'tok/CPU-s':>10s} {'x orig':>6s} "
          f"{'tok/wall-s':>10s} {'x orig':>6s} {'peak RSS MiB':>16s} {'records':>8s} {'load':>9s}")
    for name, size, n, r in rows:
        cpu_rate, wall_rate = n / r["cpu"], n / r["wall"]
        x_cpu = f"{cpu_rate / (tokens / base['cpu']):6.2f}" if base else "     -"
        x_wall = f"{wall_rate / (tokens / base['wall']):6.2f}" if base else "     -"
        print(f"{name:36s} {size:5.1f} {r['wall']:7.1f} {r['cpu']:7.1f} {cpu_rate:10,.0f} {x_cpu} {wall_rate:10,.0f} "
              f"{x_wall} {r['rss_mib']:7.0f} [{r['rss_single_mib']:5.0f}] {r['records']:8,d} "
              f"{r['load'][0]:4.1f}>{r['load'][1]:4.1f}")
    print("(x orig: ours / the original's rate on the same corpus in this run; CPU s: the whole process tree, "
          "interpreter and imports included on both sides (the original imports TensorFlow; our datagen on "
          "local files does not); RSS: the tree [its largest process])")
    ours = {int(name.split(", ")[1].split()[0]): r for name, _, _, r in rows
            if name.startswith("textrain") and "MB" not in name}
    if 1 in ours and 2 in ours:
        print(f"2 workers vs 1: wall {ours[1]['wall'] / ours[2]['wall']:.2f}x faster, CPU {ours[2]['cpu']:.1f} vs "
              f"{ours[1]['cpu']:.1f} s (a fork server and a corpus scan per worker); wall speed-up needs idle "
              f"cores: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores now")
    if args.small_mb and 1 in ours:
        print(f"peak RSS, 1 worker: {rows[-1][3]['rss_mib']:.0f} MiB on {rows[-1][1]:.1f} MB vs "
              f"{ours[1]['rss_mib']:.0f} MiB on {mb:.1f} MB")
    if base:
        a, b = record_statistics(base["files"]), record_statistics(ours[min(ours)]["files"])
        print(f"\n{'record statistics':32s} {'original':>9s} {'textrain':>9s}")
        for key in a:
            print(f"{key:32s} {a[key]:9.3f} {b[key]:9.3f}")


if __name__ == "__main__":
    main()
