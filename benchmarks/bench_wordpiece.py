"""WordpieceEncoder vs google-research/bert's own FullTokenizer: identical ids, throughput on ONE core.

    python benchmarks/bench_wordpiece.py [--max_lines N] [--vocab_size 30522] [--backends regex,hf]

The reference is the original itself, unchanged: ../shared/originals/bert/tokenization.py. It does
`import tensorflow as tf` (TF1 API: tf.gfile), so this process maps `sys.modules["tensorflow"]` to
`tf.compat.v1` while importing it, as ../shared/originals/run_original.py does, and puts the real module
back afterwards (benchmarks/lib/same_run.import_original). Nothing of it is copied.

Corpus: every line with text of ../shared/corpora/en/*.txt.gz (the whole English corpus, ~68 MB) unless
--max_lines; without it the script says so and exits 0. The vocabulary is built from the corpus with
build_wordpiece_vocab (30522, uncased) and cached under /tmp. Both sides encode the same lines in
interleaved blocks and every line's ids are compared; any mismatch is printed and the exit status is 1.
Times are CPU seconds of this process (time.process_time) pinned to one core (affinity and
RAYON_NUM_THREADS=1), so other load on a shared machine counts as little as it can.
Printed: lines/s and tokens per CPU-second of each side, ours / original, and the size of the encoder's
caches at the end (they are bounded; see framework/encoders.py).
"""
import argparse
import glob
import gzip
import hashlib
import os
import sys
import time

# One core for everything: HF's Rayon pool, and the process itself.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpora", "en")


def read_lines(paths, max_lines):
    lines = []
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines.extend(line.rstrip("\n") for line in f if line.strip())
        if max_lines and len(lines) >= max_lines:
            return lines[:max_lines]
    return lines


def cached_vocab(paths, vocab_size):
    from textrain.framework import encoders as te
    key = hashlib.sha256(repr([(p, os.path.getsize(p)) for p in paths] + [vocab_size]).encode())
    out = f"/tmp/textrain_bench_wordpiece_{key.hexdigest()[:12]}.txt"
    if not os.path.exists(out):
        t = time.process_time()
        te.build_wordpiece_vocab(paths, vocab_size, out, do_lower_case=True)
        print(f"built vocab {out} in {time.process_time() - t:.1f} s")
    return out


def cache_mib(encoder) -> float:
    """Approximate memory of the encoder's caches: keys, values and the dicts themselves."""
    total = 0
    for cache in (encoder._chunks, encoder._word_cache):
        total += sys.getsizeof(cache)
        total += sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in cache.items())
    return total / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max_lines", type=int, default=0, help="0 = the whole corpus")
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--block", type=int, default=20000, help="lines per interleaved block")
    parser.add_argument("--backends", default="regex", help="ours: regex (default backend), hf, or both")
    args = parser.parse_args()

    paths = sorted(glob.glob(os.path.join(CORPUS, "*.txt.gz")))
    if not paths:
        print(f"corpus {CORPUS}/*.txt.gz is absent: nothing to benchmark")
        return 0
    from textrain.framework import encoders as te
    vocab = cached_vocab(paths, args.vocab_size)
    lines = read_lines(paths, args.max_lines)
    n_chars = sum(map(len, lines))
    print(f"corpus: {len(paths)} files, {len(lines):,} lines, {n_chars / 1e6:.1f} M chars; "
          f"vocab {vocab}; cpu affinity {sorted(os.sched_getaffinity(0))}")

    from benchmarks.lib.same_run import import_original
    tokenization = import_original("bert/tokenization.py")
    original = tokenization.FullTokenizer(vocab, do_lower_case=True)
    backends = args.backends.split(",")
    ours = {b: te.WordpieceEncoder(vocab, do_lower_case=True, backend=b) for b in backends}

    t_orig, t_ours = 0.0, dict.fromkeys(backends, 0.0)
    n_tokens = 0
    mismatches = dict.fromkeys(backends, 0)
    for start in range(0, len(lines), args.block):
        block = lines[start:start + args.block]
        t = time.process_time()
        theirs = [original.convert_tokens_to_ids(original.tokenize(x)) for x in block]
        t_orig += time.process_time() - t
        n_tokens += sum(map(len, theirs))
        for b, encoder in ours.items():
            t = time.process_time()
            mine = encoder.encode_batch(block)
            t_ours[b] += time.process_time() - t
            for i, (a, c) in enumerate(zip(mine, theirs)):
                if a != c:
                    mismatches[b] += 1
                    if mismatches[b] <= 5:
                        print(f"MISMATCH ({b}) line {start + i}: {block[i][:120]!r}\n  ours {a[:30]}\n"
                              f"  orig {c[:30]}")

    print()
    print("| tokenizer (1 core, CPU s) | CPU s | lines/s | tokens/CPU-s | ours / original |")
    print("|---|---|---|---|---|")
    print(f"| google-research/bert FullTokenizer (original tokenization.py) | {t_orig:.1f} | "
          f"{len(lines) / t_orig:,.0f} | {n_tokens / t_orig:,.0f} | 1.0x |")
    for b, t in t_ours.items():
        print(f"| textrain WordpieceEncoder (backend={b}) | {t:.1f} | {len(lines) / t:,.0f} | "
              f"{n_tokens / t:,.0f} | {t_orig / t:.1f}x |")
    print()
    for b, encoder in ours.items():
        extra = (f"; {encoder.fallback_texts:,} lines took the reference fallback "
                 f"({len(encoder._unsafe_chars)} characters where HF differs)") if b == "hf" else (
            f"; caches at the end: {len(encoder._chunks):,} chunks + {len(encoder._word_cache):,} words "
            f"~ {cache_mib(encoder):.0f} MiB")
        print(f"backend={b}: ids identical on {len(lines) - mismatches[b]:,} of {len(lines):,} lines "
              f"({n_tokens:,} tokens){extra}")
    return 1 if any(mismatches.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
