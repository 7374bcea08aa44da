"""Benchmark: BERT pretraining data generation, textrain vs google-research/bert's original script, same run.

    nice -n 10 python benchmarks/bench_bert_datagen.py                  # 5 and 20 MB, 1 and 2 workers
    python benchmarks/bench_bert_datagen.py --sizes 4 --workers 1 --original skip --breakdown

Corpora: plain text of N MB made from ../shared/corpora/en/*.txt.gz by `same_run.plain_corpus` (whole
documents, one sentence per line, a blank line between documents; files in sorted order), kept in the work
dir. Settings, the same on both sides: do_lower_case, max_seq_length 128, max_predictions_per_seq 20,
masked_lm_prob 0.15, short_seq_prob 0.1, dupe_factor 5 (--dupe_factor; the original holds every instance of
every pass in memory, so its RSS grows with corpus x dupe_factor: 5 keeps it to a few GB at 20 MB), the same
WordPiece vocab (30522, learned from the corpus by our `prepare`, not timed).

Both sides run through `same_run.run_measured` as fresh processes (both include their imports: the original imports TensorFlow, our datagen on local files does not):
the original is ../shared/originals/bert/create_pretraining_data.py, unchanged, via `same_run.original_cmd`;
ours is `textrain-datagen --problem=bert_pretrain` (`python -m`-style, this checkout), 8 train shards. Printed
per run: wall s, CPU s of the process tree (the per-core measure; a loaded machine distorts it less than
wall time), corpus WordPiece tokens per CPU-second and per wall-second, ours / original for both, instances
written, peak RSS of the process tree [largest process]. The original runs at every size, ours with 1 worker
at every size (peak RSS 5 vs 20 MB: memory must not grow with the corpus) and with each --workers count at the
largest size (scaling). The NSP/length/masking statistics of both outputs are compared at the largest size.

`--breakdown`: CPU seconds of each stage of ours in this process on the smallest corpus (reading +
selecting a shard's documents, tokenizing, pairs + masking, serializing records), summed over the 8 shards.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.lib import same_run  # noqa: E402  (one way to measure a side)
from benchmarks.lib.bert_sides import PREDS, original, ours, record_statistics, settings  # noqa: E402,F401


# ----------------------------------------------------------------------------------------------- #
# the two sides
# ----------------------------------------------------------------------------------------------- #
# ----------------------------------------------------------------------------------------------- #
# what the data looks like
# ----------------------------------------------------------------------------------------------- #
def compare_statistics(args, vocab_file: str, original_file: str, ours_dir: str) -> None:
    from textrain.framework import encoders
    mask_id = encoders.load_wordpiece_vocab(vocab_file)["[MASK]"]
    ours_files = sorted(glob.glob(os.path.join(ours_dir, "bert_pretrain", "*.tfrecord")))
    a = record_statistics([original_file], args.max_seq_length, mask_id)
    b = record_statistics(ours_files, args.max_seq_length, mask_id)
    print(f"\n{'statistics (first 50k records)':32s} {'original':>9s} {'textrain':>9s}")
    for key in a:
        print(f"{key:32s} {a[key]:9.4f} {b[key]:9.4f}")


# ----------------------------------------------------------------------------------------------- #
# inputs
# ----------------------------------------------------------------------------------------------- #
def corpus_tokens(corpus_path: str, vocab_file: str) -> int:
    from textrain.framework import corpus, encoders
    encoder = encoders.WordpieceEncoder(vocab_file)
    return sum(int(encoder.encode_flat(doc)[1].sum()) for doc in corpus.read_documents(corpus_path))


def build_vocab(corpus_path: str, work: str) -> str:
    """Our `prepare` learns the vocab from the corpus (kept in `work`: re-runs reuse it)."""
    from textrain.problems import bert_pretrain as bp
    problem = bp.BertPretrain(bp.BertPretrainHParams(input_file=corpus_path))
    problem.prepare(work, work)
    return problem.vocab_path(work)


def breakdown(args, corpus_path: str, vocab_file: str, num_shards: int) -> None:
    """CPU seconds of each stage of ours over all shards, in this process."""
    from textrain.framework import corpus, generator, records
    from textrain.problems import bert_pretrain as bp
    hp = bp.BertPretrainHParams(input_file=corpus_path, vocab_file=vocab_file, dupe_factor=args.dupe_factor,
                                max_seq_length=args.max_seq_length, max_predictions_per_seq=PREDS)
    problem = bp.BertPretrain(hp)
    encoder = problem.encoder("")
    vocab = bp.Vocabulary.from_encoder(encoder)
    seed = bp.combined_seed(0, hp.random_seed)
    times = dict.fromkeys(("read + select documents", "tokenize", "pairs + masking", "serialize records"), 0.0)
    names = list(times)
    count = 0
    for shard in range(num_shards):
        t0 = time.process_time()
        # As BertPretrain.shard_documents without a datagen run's spill files: every shard reads the corpus.
        docs = list(map(corpus.document_lines, problem.shard_texts("", "train", shard, num_shards)))
        t1 = time.process_time()
        tokenized = list(bp.tokenize_documents(docs, encoder))
        t2 = time.process_time()
        batches = list(bp.generate_instances(tokenized, vocab, hp, generator.shard_rng(seed, "train", shard),
                                             generator.shard_np_rng(seed, "train", shard)))
        t3 = time.process_time()
        for batch in batches:
            records.serialize_batch(batch)
        t4 = time.process_time()
        for name, dt in zip(names, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            times[name] += dt
        count += sum(map(len, batches))
    total = sum(times.values())
    print(f"\nbreakdown of ours on {os.path.basename(corpus_path)}, {num_shards} shards, {count} instances "
          f"(CPU s in this process; the TensorFlow import and file writing not included):")
    for name, dt in times.items():
        print(f"  {name:26s} {dt:7.2f}  ({dt / total:4.0%}; {dt / count * 1e6:5.1f} us/instance)")
    print(f"  {'total':26s} {total:7.2f}")


# ----------------------------------------------------------------------------------------------- #
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5,20", help="corpus sizes in MB (comma-separated)")
    parser.add_argument("--workers", default="1,2", help="ours' worker counts at the largest size")
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--original", choices=["auto", "skip"], default="auto")
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--work_dir", default="", help="keeps corpora and vocabs between runs")
    args = parser.parse_args()
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_bert_datagen.")
    os.makedirs(work, exist_ok=True)
    sizes = sorted(float(x) for x in args.sizes.split(","))
    workers = [int(x) for x in args.workers.split(",")]

    rows = []  # (size, name, result, tokens)
    inputs = {}
    for mb in sizes:
        tag = f"{mb:g}mb"
        corpus_path = same_run.plain_corpus(os.path.join(work, f"plain_{tag}.txt"), mb)
        vocab_file = build_vocab(corpus_path, os.path.join(work, f"vocab_{tag}"))
        tokens = corpus_tokens(corpus_path, vocab_file)
        inputs[mb] = (corpus_path, vocab_file)
        print(f"corpus {corpus_path}: {os.path.getsize(corpus_path) / 1e6:.1f} MB, {tokens:,} WordPiece tokens "
              f"(vocab {vocab_file}); dupe_factor {args.dupe_factor}, max_seq_length {args.max_seq_length}; "
              f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}", flush=True)
        if args.original == "auto":
            out = os.path.join(work, f"original_{tag}.tfrecord")
            rows.append((mb, "original create_pretraining_data.py", original(args, corpus_path, vocab_file, out),
                         tokens))
            print(f"  original done: {rows[-1][2]['cpu']:.1f} CPU s", flush=True)
        for w in (workers if mb == sizes[-1] else [1]):
            result = ours(args, corpus_path, vocab_file, w, os.path.join(work, f"ours_{tag}_w{w}"))
            rows.append((mb, f"textrain, {w} worker{'s' if w > 1 else ''}", result, tokens))
            print(f"  ours ({w} workers) done: {result['cpu']:.1f} CPU s", flush=True)

    print(f"\n{'MB':>4s} {'run':36s} {'wall s':>7s} {'CPU s':>7s} {'tok/CPU-s':>10s} {'tok/wall-s':>10s} "
          f"{'x orig/core':>11s} {'x orig wall':>11s} {'instances':>9s} {'peak RSS MiB':>15s}")
    for mb, name, r, tokens in rows:
        ref = next((x for s, n, x, _ in rows if s == mb and n.startswith("original")), None)
        per_core = f"{ref['cpu'] / r['cpu']:11.2f}" if ref else f"{'-':>11s}"
        per_wall = f"{ref['wall'] / r['wall']:11.2f}" if ref else f"{'-':>11s}"
        print(f"{mb:4g} {name:36s} {r['wall']:7.1f} {r['cpu']:7.1f} {tokens / r['cpu']:10,.0f} "
              f"{tokens / r['wall']:10,.0f} {per_core} {per_wall} {r['instances']:9,d} "
              f"{r['rss_mib']:7,.0f} [{r['rss_single_mib']:,.0f}]")
    print("(wall and CPU include every process's imports: TensorFlow for the original, not for our datagen on local files; 'x orig/core' = original CPU s / ours "
          "CPU s, the per-core ratio; RSS: peak of the process tree [its largest process])")
    if args.original == "auto":
        big = sizes[-1]
        tag = f"{big:g}mb"
        compare_statistics(args, inputs[big][1], os.path.join(work, f"original_{tag}.tfrecord"),
                           os.path.join(work, f"ours_{tag}_w{workers[0]}"))
    if args.breakdown:
        from textrain.problems import bert_pretrain as bp
        breakdown(args, *inputs[sizes[0]], bp.BertPretrain.train_shards)


if __name__ == "__main__":
    main()
