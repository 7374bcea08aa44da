"""Benchmark: BERT pretraining data generation, textrain vs google-research/bert's original script.

    python benchmarks/bench_bert_datagen.py                      # Jane Austen, dupe 5, L128, 1 and 2 workers
    python benchmarks/bench_bert_datagen.py --workers=1 --original=skip --breakdown

Setting of ../shared/DESIGN.md §7: ../shared/corpora/en/jane_austen_novels.txt.gz (4.0 MB), dupe_factor 5,
max_seq_length 128, max_predictions_per_seq 20. Both sides use the same WordPiece vocab (built once from the
corpus by our `prepare`, not timed) and run as fresh processes, so both walls include the TensorFlow import.

Reported per run: wall seconds, corpus WordPiece tokens per second (corpus tokens / wall, the DESIGN's
measure), CPU seconds of the whole process tree and tokens per CPU-second (the per-core measure; it is
less distorted than wall time on a shared, loaded machine), instances written, and peak RSS (sum over the process tree,
sampled every 20 ms from /proc; the largest single process in brackets). The original is
`python -m bert.create_pretraining_data` from PyPI `bert-tensorflow` (tf.compat.v1); when it is not
installed the DESIGN figure (13.6 s, 66k tokens/s, 663 MiB) is quoted instead.

`--breakdown` also times, in this process (CPU seconds), the problem's own work per shard (reading +
tokenizing, pairs + masking) and the records writer's work (dict -> tf.train.Example -> bytes), to show
where a datagen run spends its time.
"""
from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DEFAULT_CORPUS = os.path.join(os.path.dirname(REPO), "shared", "corpora", "en", "jane_austen_novels.txt.gz")
DESIGN_ORIGINAL = dict(wall=13.6, tokens_per_s=66e3, rss_mib=663)
from benchmarks.same_run import PeakRss, run_measured  # noqa: E402  (one way to measure a side)


# ----------------------------------------------------------------------------------------------- #
# the two sides
# ----------------------------------------------------------------------------------------------- #
def ours(args, vocab_file: str, workers: int, work: str) -> dict:
    data_dir = os.path.join(work, f"ours_w{workers}")
    shutil.rmtree(data_dir, ignore_errors=True)
    code = ("import sys; import problems.bert_pretrain; from framework import datagen; "
            "sys.argv[0] = 'textrain-datagen'; datagen.run()")
    cmd = [sys.executable, "-c", code, "--problem=bert_pretrain", f"--data_dir={data_dir}",
           f"--input_file={args.corpus}", f"--vocab_file={vocab_file}", f"--num_workers={workers}",
           f"--dupe_factor={args.dupe_factor}", f"--max_seq_length={args.max_seq_length}",
           "--max_predictions_per_seq=20", "--masked_lm_prob=0.15", "--short_seq_prob=0.1"]
    if args.num_shards:
        cmd.append(f"--num_shards={args.num_shards}")
    result = run_measured(cmd)
    from framework import records
    manifest = records.read_json(os.path.join(data_dir, "bert_pretrain", "bert_pretrain-train.manifest.json"))
    result.update(instances=manifest["num_examples"], processes=workers)
    return result


def original(args, vocab_file: str, work: str) -> dict | None:
    try:
        import bert.create_pretraining_data  # noqa: F401  (PyPI bert-tensorflow)
    except Exception as e:  # noqa: BLE001 - any import failure means "not runnable here"
        print(f"original not runnable ({type(e).__name__}: {e}); quoting DESIGN.md §7")
        return None
    text = os.path.join(work, "corpus.txt")  # the original reads plain text only
    if not os.path.exists(text):
        with gzip.open(args.corpus, "rb") as src, open(text, "wb") as dst:
            shutil.copyfileobj(src, dst)
    out = os.path.join(work, "original.tfrecord")
    cmd = [sys.executable, "-m", "bert.create_pretraining_data", f"--input_file={text}",
           f"--output_file={out}", f"--vocab_file={vocab_file}", "--do_lower_case=True",
           f"--max_seq_length={args.max_seq_length}", "--max_predictions_per_seq=20",
           "--masked_lm_prob=0.15", "--random_seed=12345", f"--dupe_factor={args.dupe_factor}",
           "--short_seq_prob=0.1"]
    result = run_measured(cmd)
    import tensorflow as tf
    result.update(instances=sum(1 for _ in tf.data.TFRecordDataset(out)), processes=1)
    return result


def record_statistics(files: list[str], max_seq_length: int, mask_id: int) -> dict[str, float]:
    """What the data looks like: NSP balance, lengths, masked share and the 80/10/10 split."""
    import numpy as np
    import tensorflow as tf
    spec = {"input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([20], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([20], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([20], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
    ds = tf.data.TFRecordDataset(files).map(lambda r: tf.io.parse_single_example(r, spec)).batch(1 << 20)
    d = {k: v.numpy() for k, v in next(iter(ds)).items()}
    n, w = d["input_mask"].sum(1), d["masked_lm_weights"] > 0
    now = d["input_ids"][np.nonzero(w)[0], d["masked_lm_positions"][w]]
    label = d["masked_lm_ids"][w]
    return {"random next (NSP label 1)": d["next_sentence_labels"].mean(),
            "full length": (n == max_seq_length).mean(), "mean length": n.mean(),
            "masked per token": w.sum() / n.sum(), "[MASK]": (now == mask_id).mean(),
            "kept": (now == label).mean(), "random id": ((now != mask_id) & (now != label)).mean()}


def compare_statistics(args, vocab_file: str, work: str, workers: int) -> None:
    import glob
    from framework import text_encoders
    mask_id = text_encoders.WordpieceEncoder(vocab_file).vocab["[MASK]"]
    ours_files = sorted(glob.glob(os.path.join(work, f"ours_w{workers}", "bert_pretrain", "*.tfrecord")))
    a = record_statistics([os.path.join(work, "original.tfrecord")], args.max_seq_length, mask_id)
    b = record_statistics(ours_files, args.max_seq_length, mask_id)
    print(f"\n{'statistics':28s} {'original':>9s} {'textrain':>9s}")
    for key in a:
        print(f"{key:28s} {a[key]:9.4f} {b[key]:9.4f}")


def corpus_tokens(corpus_path: str, vocab_file: str) -> int:
    from framework import corpus, text_encoders
    encoder = text_encoders.WordpieceEncoder(vocab_file)
    return sum(len(ids) for doc in corpus.read_documents(corpus_path) for ids in encoder.encode_batch(doc))


def build_vocab(corpus_path: str, work: str) -> str:
    from problems import bert_pretrain as bp
    problem = bp.BertPretrain(bp.BertPretrainHParams(input_file=corpus_path))
    problem.prepare(work, work)
    return problem.vocab_path(work)


def breakdown(args, vocab_file: str, num_shards: int) -> None:
    """CPU seconds of the problem's work and of the records writer, over all shards, in-process."""
    from framework import records
    from problems import bert_pretrain as bp
    hp = bp.BertPretrainHParams(input_file=args.corpus, vocab_file=vocab_file, dupe_factor=args.dupe_factor,
                                max_seq_length=args.max_seq_length)
    problem = bp.BertPretrain(hp)
    read = make = write = 0.0
    count = 0
    for shard in range(num_shards):
        t = time.process_time()
        docs = problem.shard_documents("", "train", shard, num_shards)
        read += time.process_time() - t
        vocab = bp.Vocabulary.from_encoder(problem.encoder(""))
        seed = bp.combined_seed(0, hp.random_seed)
        t = time.process_time()
        instances = list(bp.generate_instances(docs, vocab, hp, bp.shard_rng(seed, "train", shard),
                                               bp.shard_np_rng(seed, "train", shard)))
        make += time.process_time() - t
        t = time.process_time()
        for ex in instances:
            records.to_example(ex).SerializeToString()
        write += time.process_time() - t
        count += len(instances)
    print(f"\nbreakdown over {num_shards} shards, {count} instances (CPU s, this process):")
    print(f"  read + tokenize (all shards)   {read:7.2f}")
    print(f"  pairs + masking + features     {make:7.2f}  ({make / count * 1e6:.1f} us/instance)")
    print(f"  records.to_example + serialize {write:7.2f}  ({write / count * 1e6:.1f} us/instance)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=DEFAULT_CORPUS)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--num_shards", type=int, default=0, help="train shards (0: the problem's default)")
    parser.add_argument("--original", choices=["auto", "skip"], default="auto")
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--work_dir", default="")
    args = parser.parse_args()
    if not os.path.exists(args.corpus):
        sys.exit(f"corpus {args.corpus} not found (pass --corpus)")
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_bert_datagen.")
    os.makedirs(work, exist_ok=True)

    vocab_file = build_vocab(args.corpus, work)
    tokens = corpus_tokens(args.corpus, vocab_file)
    with open(vocab_file) as f:
        vocab_size = sum(1 for _ in f)
    print(f"corpus {args.corpus}: {tokens} WordPiece tokens (vocab {vocab_size}); dupe_factor "
          f"{args.dupe_factor}, max_seq_length {args.max_seq_length}; {os.cpu_count()} cores; work dir {work}")

    rows = []
    ref = original(args, vocab_file, work) if args.original == "auto" else None
    if ref is None:
        rows.append(("original (DESIGN.md §7)", dict(wall=DESIGN_ORIGINAL["wall"], processes=1,
                                                     cpu=DESIGN_ORIGINAL["wall"],
                                                     rss_mib=DESIGN_ORIGINAL["rss_mib"], rss_single_mib=None,
                                                     instances=None, tokens_per_s=DESIGN_ORIGINAL["tokens_per_s"])))
    else:
        rows.append(("original bert-tensorflow", ref))
    for w in [int(x) for x in args.workers.split(",")]:
        rows.append((f"textrain, {w} worker{'s' if w > 1 else ''}", ours(args, vocab_file, w, work)))

    base = rows[0][1]
    base_rate = base.get("tokens_per_s") or tokens / base["wall"]
    base_cpu_rate = tokens / base["cpu"]
    print(f"\n{'run':28s} {'wall s':>7s} {'tokens/s':>9s} {'x orig':>6s} {'CPU s':>6s} {'tok/CPU-s':>9s} "
          f"{'x orig/core':>11s} {'instances':>9s} {'peak RSS MiB':>14s}")
    for name, r in rows:
        rate = r.get("tokens_per_s") or tokens / r["wall"]
        cpu_rate = tokens / r["cpu"]
        single = f" [{r['rss_single_mib']:.0f}]" if r.get("rss_single_mib") else ""
        inst = r["instances"] if r["instances"] is not None else "-"
        print(f"{name:28s} {r['wall']:7.2f} {rate:9.0f} {rate / base_rate:6.2f} {r['cpu']:6.2f} {cpu_rate:9.0f} "
              f"{cpu_rate / base_cpu_rate:11.2f} {inst!s:>9s} {r['rss_mib']:8.0f}{single}")
    print("(wall includes the TensorFlow import in every process; 'x orig/core' compares tokens per CPU-second,"
          " which a loaded machine distorts less than wall time; RSS: process tree [largest process])")
    if ref is not None:
        compare_statistics(args, vocab_file, work, int(args.workers.split(",")[0]))
    if args.breakdown:
        from problems import bert_pretrain as bp
        breakdown(args, vocab_file, args.num_shards or bp.BertPretrain.train_shards)


if __name__ == "__main__":
    main()
