"""WordpieceEncoder vs google-research/bert's FullTokenizer: identical ids, throughput on ONE core.

    python benchmarks/bench_wordpiece.py [--max_lines N] [--vocab_size 30522]

The original is the PyPI package `bert-tensorflow` (`pip install --no-deps bert-tensorflow`; not a
dependency of textrain). When it cannot be imported, the comparison is against the pure-Python
reference in framework/text_encoders.py, and the output says so. The vocabulary is built from the
corpus itself with build_wordpiece_vocab and cached under /tmp. The corpus is
../shared/corpora/en/*.txt.gz relative to the project root; without it the script says so and exits 0.
Times are CPU seconds of this process (time.process_time), so other load on a shared machine
does not count.
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
    from framework import text_encoders as te
    key = hashlib.sha256(repr([(p, os.path.getsize(p)) for p in paths] + [vocab_size]).encode())
    out = f"/tmp/textrain_bench_wordpiece_{key.hexdigest()[:12]}.txt"
    if not os.path.exists(out):
        t = time.process_time()
        te.build_wordpiece_vocab(paths, vocab_size, out, do_lower_case=True)
        print(f"built vocab {out} in {time.process_time() - t:.1f} s")
    return out


def load_original(vocab_file):
    """bert-tensorflow's FullTokenizer, or None when it does not import."""
    try:
        from absl import flags
        from bert import tokenization
        flags.FLAGS.mark_as_parsed()  # it reads --preserve_unused_tokens inside tokenize()
        return tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    except Exception as e:  # ImportError, or TF1-only API under TF 2.21
        print(f"bert-tensorflow unavailable ({type(e).__name__}: {e}); comparing against the "
              "pure-Python reference ReferenceWordpieceTokenizer instead")
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max_lines", type=int, default=0, help="0 = the whole corpus")
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--chunk", type=int, default=20000)
    args = parser.parse_args()

    paths = sorted(glob.glob(os.path.join(CORPUS, "*.txt.gz")))
    if not paths:
        print(f"corpus {CORPUS}/*.txt.gz is absent: nothing to benchmark")
        return 0
    from framework import text_encoders as te
    vocab = cached_vocab(paths, args.vocab_size)
    lines = read_lines(paths, args.max_lines)
    n_chars = sum(map(len, lines))
    print(f"corpus: {len(paths)} files, {len(lines):,} lines, {n_chars / 1e6:.1f} M chars; "
          f"vocab {vocab}; cpu affinity {sorted(os.sched_getaffinity(0))}")

    original = load_original(vocab)
    ours = te.WordpieceEncoder(vocab, do_lower_case=True)  # backend="regex"
    ours_hf = te.WordpieceEncoder(vocab, do_lower_case=True, backend="hf")
    if original is not None:
        name = "bert-tensorflow FullTokenizer"
        encode_original = lambda t: original.convert_tokens_to_ids(original.tokenize(t))  # noqa
    else:
        name = "pure-Python reference"
        encode_original = ours.reference.encode

    t_ours = t_orig = t_hf = 0.0
    n_tokens = mismatches = 0
    for start in range(0, len(lines), args.chunk):
        chunk = lines[start:start + args.chunk]
        t = time.process_time()
        mine = ours.encode_batch(chunk)
        t_ours += time.process_time() - t
        t = time.process_time()
        mine_hf = ours_hf.encode_batch(chunk)
        t_hf += time.process_time() - t
        t = time.process_time()
        theirs = [encode_original(x) for x in chunk]
        t_orig += time.process_time() - t
        n_tokens += sum(map(len, theirs))
        for i, (a, b, c) in enumerate(zip(mine, theirs, mine_hf)):
            if a != b or c != b:
                mismatches += 1
                if mismatches <= 5:
                    print(f"MISMATCH line {start + i}: {chunk[i][:120]!r}\n  ours {a[:30]}\n  "
                          f"hf   {c[:30]}\n  orig {b[:30]}")

    print()
    print("| tokenizer (1 core) | seconds | tokens/s | speed-up |")
    print("|---|---|---|---|")
    print(f"| {name} | {t_orig:.1f} | {n_tokens / t_orig:,.0f} | 1.0x |")
    print(f"| textrain WordpieceEncoder (regex, default) | {t_ours:.1f} | {n_tokens / t_ours:,.0f} | "
          f"{t_orig / t_ours:.1f}x |")
    print(f"| textrain WordpieceEncoder (backend=hf) | {t_hf:.1f} | {n_tokens / t_hf:,.0f} | "
          f"{t_orig / t_hf:.1f}x |")
    print()
    print(f"ids identical on {len(lines) - mismatches:,} of {len(lines):,} lines "
          f"({n_tokens:,} tokens); {ours_hf.fallback_texts:,} lines took the reference fallback "
          f"in the hf backend ({len(ours_hf._unsafe_chars)} characters where HF differs were seen)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
