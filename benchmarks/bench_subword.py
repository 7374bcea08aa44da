"""SubwordTextEncoder vs tensor2tensor's: same vocab, identical ids, build and encode time.

    python benchmarks/bench_subword.py [--target_size 8192] [--max_subtoken_length N] [--langs en,zh]

The original is tensor2tensor's text_encoder.py from PyPI (`pip install --no-deps tensor2tensor`; not
a dependency of textrain). When the package import fails on a missing dependency, its
text_encoder.py and tokenizer.py are loaded as files. For each language of
../shared/corpora/parallel/train.{en,zh}.gz (96k line-aligned pairs): token counting, vocab building
to the target size (both implementations, same counts; the vocabularies must be equal), then both
encoders load OUR stored vocab file and encode every line (ids must be equal). One core.
Without the corpus the script says so and exits 0.
Times are CPU seconds of this process (time.process_time), so other load on a shared machine
does not count.
"""
import argparse
import collections
import gzip
import importlib.util
import os
import sys
import time
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpora", "parallel")


def load_t2t():
    """(text_encoder, tokenizer) modules of tensor2tensor, or (None, reason)."""
    try:
        from tensor2tensor.data_generators import text_encoder, tokenizer
        return text_encoder, tokenizer
    except ImportError as e:
        reason = str(e)
    spec = importlib.util.find_spec("tensor2tensor")
    if spec is None or not spec.submodule_search_locations:
        return None, f"tensor2tensor is not installed ({reason})"
    base = os.path.join(list(spec.submodule_search_locations)[0], "data_generators")
    # Its tokenizer imports mlperf_log only to log; a stub is enough.
    stub = types.ModuleType("tensor2tensor.utils.mlperf_log")
    stub.transformer_print = lambda *a, **k: None
    sys.modules.setdefault("tensor2tensor.utils.mlperf_log", stub)
    modules = {}
    for name in ("tokenizer", "text_encoder"):
        full = f"tensor2tensor.data_generators.{name}"
        s = importlib.util.spec_from_file_location(full, os.path.join(base, f"{name}.py"))
        module = importlib.util.module_from_spec(s)
        sys.modules[full] = module
        s.loader.exec_module(module)
        modules[name] = module
    return modules["text_encoder"], modules["tokenizer"]


def timed(fn, *args, **kwargs):
    t = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - t


def bench_language(lang, args, t2t_te, t2t_tok):
    from textrain.framework import encoders as te
    path = os.path.join(CORPUS, f"train.{lang}.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f]  # t2t's corpus reader strips lines
    if args.max_lines:
        lines = lines[:args.max_lines]
    print(f"\n## {path}: {len(lines):,} lines, target vocab {args.target_size}, "
          f"max_subtoken_length {args.max_subtoken_length}")

    def t2t_counts():
        counts = collections.defaultdict(int)
        for line in lines:
            for tok in t2t_tok.encode(line):
                counts[tok] += 1
        return counts

    te.t2t_tokenize("warm up")  # t2t builds its character set at import, outside the timing too
    ours_counts, t_count_ours = timed(te.count_tokens, lines)
    theirs_counts, t_count_t2t = timed(t2t_counts)
    assert dict(ours_counts) == dict(theirs_counts), "token counts differ"

    build_args = (args.target_size,)
    ours, t_build_ours = timed(te.SubwordTextEncoder.build_to_target_size, *build_args,
                               ours_counts, 1, 1000, max_subtoken_length=args.max_subtoken_length)
    theirs, t_build_t2t = timed(t2t_te.SubwordTextEncoder.build_to_target_size, *build_args,
                                theirs_counts, 1, 1000,
                                max_subtoken_length=args.max_subtoken_length)
    same_vocab = ours.all_subtoken_strings == tuple(theirs.all_subtoken_strings)

    vocab_file = f"/tmp/textrain_bench_subword_{lang}.subwords"
    ours.store_to_file(vocab_file)
    ours_loaded = te.SubwordTextEncoder(vocab_file)
    theirs_loaded = t2t_te.SubwordTextEncoder(vocab_file)
    ours_ids, t_enc_ours = timed(lambda: [ours_loaded.encode(x) for x in lines])
    theirs_ids, t_enc_t2t = timed(lambda: [theirs_loaded.encode(x) for x in lines])
    bad = sum(a != b for a, b in zip(ours_ids, theirs_ids))
    round_trip = sum(ours_loaded.decode(ids) != x for ids, x in zip(ours_ids, lines))

    print("| step (1 core) | tensor2tensor s | textrain s | speed-up |")
    print("|---|---|---|---|")
    for name, a, b in [("count tokens", t_count_t2t, t_count_ours),
                       ("build_to_target_size", t_build_t2t, t_build_ours),
                       ("encode all lines", t_enc_t2t, t_enc_ours)]:
        print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.1f}x |")
    print(f"vocab sizes: t2t {theirs.vocab_size}, ours {ours.vocab_size}; vocabularies "
          f"{'IDENTICAL' if same_vocab else 'DIFFER'}; ids identical on "
          f"{len(lines) - bad:,} of {len(lines):,} lines ({sum(map(len, ours_ids)):,} subtokens); "
          f"decode(encode(x)) != x on {round_trip} lines")
    return same_vocab and bad == 0 and round_trip == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target_size", type=int, default=8192)
    parser.add_argument("--max_subtoken_length", type=int, default=None)
    parser.add_argument("--max_lines", type=int, default=0, help="0 = all lines")
    parser.add_argument("--langs", default="en,zh")
    args = parser.parse_args()
    if not os.path.isdir(CORPUS):
        print(f"corpus {CORPUS} is absent: nothing to benchmark")
        return 0
    t2t_te, t2t_tok = load_t2t()
    if t2t_te is None:
        print(f"cannot compare: {t2t_tok}; install it with `pip install --no-deps tensor2tensor`")
        return 0
    ok = all([bench_language(lang, args, t2t_te, t2t_tok) for lang in args.langs.split(",")])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
