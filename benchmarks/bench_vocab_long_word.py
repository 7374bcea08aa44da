"""WordPiece vocab learning on a corpus holding one very long space-less line: linear.

    python benchmarks/bench_vocab_long_word.py [--sizes 20000,1000000,10000000] [--bound_per_mb 5]

A few hundred ordinary lines plus one line of N characters without spaces go through
`build_wordpiece_vocab` (what `textrain-datagen --problem=bert_pretrain` without `--vocab_file` runs).
Before the fix a 20,000-character word took about 119 s per MB of corpus and a 10 MB one never
finished: merging inside one word is quadratic in its length. Such a word is [UNK] when encoding
(longer than MAX_INPUT_CHARS_PER_WORD), so the learner skips it. The script prints CPU seconds
(time.process_time, so other load on a shared machine does not count) per size and per MB, and exits
non-zero if any size takes more than --bound_per_mb CPU seconds per MB: a generous bound, kept out of
the timed tests. Needs no corpus files (the text is generated).
"""
import argparse
import os
import random
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from textrain.framework import encoders  # noqa: E402

ORDINARY = ["It was the best of times, it was the worst of times.",
            "Emma Woodhouse, handsome, clever, and rich, had lived nearly twenty-one years."] * 200


def measure(size: int, out_dir: str) -> float:
    rng = random.Random(size)
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(size))
    start = time.process_time()
    encoders.build_wordpiece_vocab(iter(ORDINARY + [word]), 200, os.path.join(out_dir, f"vocab-{size}.txt"))
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="20000,1000000,10000000")
    parser.add_argument("--bound_per_mb", type=float, default=5.0)
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as out_dir:
        for size in (int(s) for s in args.sizes.split(",")):
            seconds = measure(size, out_dir)
            per_mb = seconds / max(size / 1e6, 1e-3)
            ok &= per_mb <= args.bound_per_mb or seconds < 1.0
            print(f"line of {size:>10,} chars: {seconds:6.2f} CPU s ({per_mb:.2f} CPU s per MB)")
    print("linear: OK" if ok else f"FAILED: over {args.bound_per_mb} CPU s per MB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
