"""In-graph WordPiece (framework/graph_wordpiece.py) vs the Python WordpieceEncoder + bert_layout:
identical features, throughput on ONE core.

    python benchmarks/bench_graph_wordpiece.py [--max_lines N] [--batch_size 64] [--max_seq_length 128]

What is timed: raw text lines -> classifier features (input_ids, input_mask, segment_ids) for
single-sentence examples, as the raw-strings-in serving signature does it (graph: one traced
tf.function per batch, batches of --batch_size) and as datagen does it (Python: WordpieceEncoder.encode
+ problems.layouts.bert_layout per line). Every line's features must be identical (checked; a
mismatch exits 1). The corpus is ../shared/corpora/en/*.txt.gz relative to the project root (the first
--max_lines non-blank lines); without it, tests/data/austen_emma.txt, and the output says which. The
vocabulary is learned from those lines with build_wordpiece_vocab (30522 at most). Times are CPU seconds
of this process (time.process_time), TensorFlow limited to one intra-op and one inter-op thread, so
other load on a shared machine does not count; the Python encoder's per-word cache is warm after its
first pass, so its second pass is reported too.
"""
import argparse
import glob
import gzip
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpora", "en")


def read_lines(max_lines: int) -> tuple[list[str], str]:
    paths = sorted(glob.glob(os.path.join(CORPUS, "*.txt.gz")))
    lines: list[str] = []
    if paths:
        for path in paths:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                lines.extend(line.rstrip("\n") for line in f if line.strip())
            if len(lines) >= max_lines:
                break
        return lines[:max_lines], f"{CORPUS} (first {max_lines} non-blank lines)"
    emma = os.path.join(ROOT, "tests", "data", "austen_emma.txt")
    with open(emma, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    return lines[:max_lines], f"{emma} ({CORPUS} is absent)"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_lines", type=int, default=20000)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_seq_length", type=int, default=128)
    args = parser.parse_args()

    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from textrain.framework import encoders as te
    from textrain.framework.graph_wordpiece import GraphWordpieceTokenizer
    from textrain.problems.layouts import bert_layout

    lines, source = read_lines(args.max_lines)
    print(f"corpus: {source}: {len(lines)} lines, {sum(len(x) for x in lines) / 1e6:.2f} M characters")
    vocab = f"/tmp/textrain_bench_graph_wordpiece_{len(lines)}.txt"
    if not os.path.exists(vocab):
        te.build_wordpiece_vocab(iter(lines), 30522, vocab)
    length = args.max_seq_length

    encoder = te.WordpieceEncoder(vocab)
    cls_id, sep_id = encoder.special_ids["[CLS]"], encoder.special_ids["[SEP]"]
    python_features = None
    python_times = []
    for _ in range(2):  # cold cache, warm cache
        start = time.process_time()
        python_features = [bert_layout(encoder.encode(t), None, length, cls_id, sep_id)["input_ids"] for t in lines]
        python_times.append(time.process_time() - start)

    start = time.process_time()
    tokenizer = GraphWordpieceTokenizer(vocab, do_lower_case=True, max_seq_length=length)
    build = time.process_time() - start
    fn = tf.function(tokenizer, input_signature=[tf.TensorSpec([None], tf.string)])
    start = time.process_time()
    fn(tf.constant(lines[:2]))
    trace = time.process_time() - start
    batches = [tf.constant(lines[i:i + args.batch_size]) for i in range(0, len(lines), args.batch_size)]
    start = time.process_time()
    graph_ids = [fn(b)["input_ids"].numpy() for b in batches]
    graph_time = time.process_time() - start

    graph_rows = [row.tolist() for batch in graph_ids for row in batch]
    mismatches = sum(g != p for g, p in zip(graph_rows, python_features))
    n, chars = len(lines), sum(len(x) for x in lines)
    print(f"max_seq_length {length}, batch {args.batch_size}, one core; CPU seconds")
    print(f"python encoder + layout, cold cache: {python_times[0]:.2f} s = {n / python_times[0]:,.0f} lines/s")
    print(f"python encoder + layout, warm cache: {python_times[1]:.2f} s = {n / python_times[1]:,.0f} lines/s")
    print(f"graph tokenizer: {graph_time:.2f} s = {n / graph_time:,.0f} lines/s, "
          f"{chars / graph_time / 1e6:.2f} M chars/s (construction {build:.2f} s, first trace {trace:.2f} s)")
    print(f"identical features: {n - mismatches}/{n} lines")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
