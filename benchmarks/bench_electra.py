"""Benchmark: ELECTRA pretraining data generation and the ELECTRA-small training step on CPU.

    nice -n 10 python benchmarks/bench_electra.py --part=datagen            # 5 and 20 MB, original and ours
    python benchmarks/bench_electra.py --part=datagen --mb=4 --small_mb=0 --original=skip   # quick, ours only
    python benchmarks/bench_electra.py --part=step --modes=fp32,bf16,fp32_xla,bf16_xla --batch_size=16 --steps=3

Datagen, same run (issue #12): a plain corpus of at least `--mb` MB (20) and one of `--small_mb` MB (5) are built
from ../shared/corpora/en by `same_run.plain_corpus` (whole documents, one sentence per line, blank lines between
documents). google-research/electra's `build_pretraining_dataset.py` runs unchanged (../shared/originals, through
`same_run.original_cmd`: 1 process, --max-seq-length=128, --do-lower-case, blank lines separate documents) and ours
runs as a user types it (`python -m framework.datagen --problem=electra_pretrain`, 1 worker, then 2 on the big
corpus; the same settings; the overflow dropped as the original does), both through `same_run.run_measured`: a
fresh process each, so both include the TensorFlow import. The WordPiece vocab (30522 requested) is learned once by
our `prepare` from the small corpus and given to both sides (not timed).
Printed per run: wall s, CPU s of the process tree, corpus WordPiece tokens (counted once with our encoder) per
CPU-second and per wall-second, ours / original on the same corpus (per core = CPU-s ratio, wall ratio), peak RSS
of the process tree [largest process], examples written and the share of tokens the builder dropped. Then the
MARGINAL rate of each side (tokens of the big corpus minus the small one, over the CPU-s difference): the per-token
cost without the fixed start-up (TF import ~2.6 CPU-s each side), which is what a large corpus pays; and ours' peak
RSS on the small vs the big corpus (memory must not grow with the corpus). Figures: benchmarks/README.md.

Step: ELECTRA-small (hidden 256, 12 layers, embedding 128, generator 64 wide) at L128 on batches of the records made
above, forward + backward + AdamW update, in fp32 or mixed bf16, with or without XLA (jit_compile). One warm-up step
(tracing/compilation) is excluded; the next `--steps` are timed. CPU peers from DESIGN §7: BERT-base keras-hub at
L128, batch 32: 8.3 s/step fp32, 5.5 bf16; XLA slower on this CPU. ELECTRA-small is ~1/8 of BERT-base's compute.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import same_run  # noqa: E402  (one way to measure a side, run an original, build a corpus)

SETTINGS = dict(max_seq_length=128)  # lower-case, blank lines separate documents: both sides' defaults, passed


def corpus_tokens(corpus: str, vocab: str) -> int:
    """WordPiece tokens of the corpus's non-empty lines with our encoder (the rates' numerator)."""
    from framework import corpus as corpus_lib
    from framework.text_encoders import WordpieceEncoder
    encoder = WordpieceEncoder(vocab, do_lower_case=True)
    return sum(len(ids) for doc in corpus_lib.read_documents([corpus]) for ids in encoder.encode_batch(doc))


def content_tokens(files: list[str], length: int) -> tuple[int, int]:
    """(examples, tokens other than [CLS]/[SEP]) in ELECTRA records: what the builder kept."""
    import tensorflow as tf
    spec = {"input_mask": tf.io.FixedLenFeature([length], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([length], tf.int64)}
    examples = kept = 0
    for batch in tf.data.TFRecordDataset(files).batch(4096):
        parsed = tf.io.parse_example(batch, spec)
        mask, seg = parsed["input_mask"].numpy(), parsed["segment_ids"].numpy()
        examples += len(mask)
        kept += int(mask.sum()) - 2 * len(mask) - int((seg.max(axis=1) == 1).sum())
    return examples, kept


def run_original(corpus: str, vocab: str, work: str, tag: str) -> dict:
    """The original, unchanged, on a folder holding only `corpus` (it reads every file of --corpus-dir)."""
    folder = os.path.join(work, f"corpus_{tag}")
    os.makedirs(folder, exist_ok=True)
    link = os.path.join(folder, os.path.basename(corpus))
    if not os.path.exists(link):
        os.symlink(os.path.abspath(corpus), link)
    out = os.path.join(work, f"original_{tag}")
    result = same_run.run_measured(same_run.original_cmd("electra/build_pretraining_dataset.py", [
        f"--corpus-dir={folder}", f"--vocab-file={vocab}", f"--output-dir={out}",
        f"--max-seq-length={SETTINGS['max_seq_length']}", "--num-processes=1", "--do-lower-case"]),
        adopt_orphans=True)
    import glob
    result["files"] = sorted(glob.glob(os.path.join(out, "pretrain_data.tfrecord-*")))
    return result


def run_ours(corpus: str, vocab: str, work: str, tag: str, workers: int) -> dict:
    """`python -m framework.datagen --problem=electra_pretrain ...`, as a user runs it."""
    import shutil
    data_dir = os.path.join(work, f"ours_{tag}_w{workers}")
    shutil.rmtree(data_dir, ignore_errors=True)
    result = same_run.run_measured([
        sys.executable, "-m", "framework.datagen", "--problem=electra_pretrain", f"--data_dir={data_dir}",
        f"--input_file={corpus}", f"--vocab_file={vocab}", f"--num_workers={workers}",
        f"--max_seq_length={SETTINGS['max_seq_length']}", "--do_lower_case", "--blanks_separate_docs"],
        adopt_orphans=True)
    import glob
    result["files"] = sorted(glob.glob(os.path.join(data_dir, "electra_pretrain", "*.tfrecord")))
    result["data_dir"] = data_dir
    return result


def bench_datagen(args, work: str) -> str:
    """The same-run comparison; returns the data_dir of ours' 1-worker run on the big corpus (for the step)."""
    from problems.electra_pretrain import ElectraPretrain, ElectraPretrainHParams
    os.makedirs(work, exist_ok=True)
    sizes = [mb for mb in (args.small_mb, args.mb) if mb > 0]
    corpora = {mb: same_run.plain_corpus(os.path.join(work, f"en_{mb:g}mb.txt"), mb) for mb in sizes}
    vocab_dir = os.path.join(work, "vocab")
    start = time.time()
    problem = ElectraPretrain(ElectraPretrainHParams(input_file=corpora[sizes[0]]))
    problem.prepare(vocab_dir, "")
    vocab = problem.vocab_path(vocab_dir)
    print(f"vocab {vocab} learned from the {sizes[0]:g} MB corpus in {time.time() - start:.0f}s (not timed); "
          f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}; work dir {work}")
    tokens = {mb: corpus_tokens(path, vocab) for mb, path in corpora.items()}
    for mb, path in corpora.items():
        print(f"corpus {path}: {os.path.getsize(path) / 1e6:.1f} MB, {tokens[mb]:,} WordPiece tokens")
    rows: list[tuple[float, str, int, dict]] = []
    for mb in sizes:
        if args.original != "skip":
            rows.append((mb, "original", 1, run_original(corpora[mb], vocab, work, f"{mb:g}mb")))
        for w in ([1] if mb != args.mb else [int(x) for x in args.workers.split(",")]):
            rows.append((mb, "textrain", w, run_ours(corpora[mb], vocab, work, f"{mb:g}mb", w)))
            print(f"  ... {mb:g} MB textrain w{w}: {rows[-1][3]['cpu']:.1f} CPU-s", flush=True)
    print(f"\n{'corpus':>7s} {'side':9s} {'proc':>4s} {'wall s':>7s} {'CPU s':>6s} {'tok/CPU-s':>10s} "
          f"{'tok/wall-s':>10s} {'x orig/core':>11s} {'x orig wall':>11s} {'peak RSS MiB':>14s} {'examples':>8s} "
          f"{'dropped':>7s}")
    originals = {mb: r for mb, side, _, r in rows if side == "original"}
    for mb, side, w, r in rows:
        examples, kept = content_tokens(r["files"], SETTINGS["max_seq_length"])
        ref = originals.get(mb)
        per_core = f"{ref['cpu'] / r['cpu']:10.2f}x" if ref else f"{'-':>11s}"
        per_wall = f"{ref['wall'] / r['wall']:10.2f}x" if ref else f"{'-':>11s}"
        print(f"{mb:5g}MB {side:9s} {w:4d} {r['wall']:7.1f} {r['cpu']:6.1f} {tokens[mb] / r['cpu']:10,.0f} "
              f"{tokens[mb] / r['wall']:10,.0f} {per_core} {per_wall} {r['rss_mib']:7.0f} [{r['rss_single_mib']:4.0f}] "
              f"{examples:8d} {100 * (1 - kept / tokens[mb]):6.1f}%")
    print("(wall and CPU include the TensorFlow import of every process; 'x orig/core' = original CPU-s / ours on "
          "the same corpus; RSS: process tree [largest process]; the machine is shared: CPU-s are the stable figure)")
    if len(sizes) == 2:
        small, big = sizes
        one = {(mb, side): r for mb, side, w, r in rows if w == 1}
        print(f"\nmarginal rate, {small:g} -> {big:g} MB (start-up excluded: extra tokens / extra CPU-s):")
        marginal = {}
        for side in ("original", "textrain"):
            if (small, side) in one and (big, side) in one:
                extra = one[(big, side)]["cpu"] - one[(small, side)]["cpu"]
                marginal[side] = (tokens[big] - tokens[small]) / extra
                print(f"  {side:9s} {marginal[side]:12,.0f} tokens per CPU-second")
        if len(marginal) == 2:
            print(f"  ours / original per core, marginal: {marginal['textrain'] / marginal['original']:.2f}x")
        if (small, "textrain") in one and (big, "textrain") in one:
            print(f"  ours' peak RSS: {one[(small, 'textrain')]['rss_mib']:.0f} MiB on {small:g} MB, "
                  f"{one[(big, 'textrain')]['rss_mib']:.0f} MiB on {big:g} MB")
    big_runs = [r for mb, side, w, r in rows if mb == args.mb and side == "textrain"]
    if len(big_runs) > 1:
        print(f"  workers on {args.mb:g} MB: " + ", ".join(
            f"w{w}: wall {r['wall']:.1f}s ({big_runs[0]['wall'] / r['wall']:.2f}x), CPU {r['cpu']:.1f}s"
            for (mb, side, w, r) in rows if mb == args.mb and side == "textrain"))
    return big_runs[0]["data_dir"] if big_runs else ""


def bench_step(data_dir: str | None, modes: list[str], batch_size: int, steps: int) -> None:
    import numpy as np
    import tensorflow as tf
    from framework.problem import DataParams
    from models import electra
    from models.base import weighted_loss
    from problems.electra_pretrain import ElectraPretrain

    if data_dir:
        problem = ElectraPretrain()
        settings = problem.read_manifest(data_dir)["settings"]
        batches = iter(problem.dataset("train", data_dir, DataParams(batch_size=batch_size, seed=0)))
        vocab_size, special = settings["vocab_size"], settings["special_ids"]
        batch = next(batches)
    else:  # no corpus: random ids in Google's vocab layout (speed does not depend on the text)
        vocab_size, special = 30522, electra.GOOGLE_VOCAB_SPECIAL_IDS
        rs = np.random.RandomState(0)
        ids = rs.randint(1000, vocab_size, size=(batch_size, 128)).astype(np.int32)
        ids[:, 0], ids[:, -1] = special["[CLS]"], special["[SEP]"]
        batch = {"input_ids": tf.constant(ids), "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)}
    threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()
    print(f"\nELECTRA-small step, batch {batch_size} x L128, vocab {vocab_size}, {threads} threads")
    print(f"{'mode':10s} {'warm-up s':>9s} {'s/step':>7s} {'examples/s':>10s} {'loss':>8s}")
    for mode in modes:
        precision, xla = mode.split("_")[0], mode.endswith("_xla")
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")
        tf.random.set_seed(0)
        model = electra.ElectraPretrainer(electra.ElectraConfig.preset("small", vocab_size=vocab_size),
                                          special_ids=special)
        optimizer = tf.keras.optimizers.AdamW(learning_rate=5e-4, weight_decay=0.01)

        @tf.function(jit_compile=xla)
        def step(features):
            with tf.GradientTape() as tape:
                out = model.step_output(features, {}, training=True)
                loss = weighted_loss(out.losses)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        start = time.time()
        float(step(batch))
        warm = time.time() - start
        start = time.time()
        for _ in range(steps):
            loss = float(step(batch))
        per_step = (time.time() - start) / steps
        print(f"{mode:10s} {warm:9.1f} {per_step:7.2f} {batch_size / per_step:10.1f} {loss:8.3f}", flush=True)
    tf.keras.mixed_precision.set_global_policy("float32")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["all", "datagen", "step"], default="all")
    parser.add_argument("--mb", type=float, default=20, help="datagen: the big corpus, MB of ../shared/corpora/en")
    parser.add_argument("--small_mb", type=float, default=5, help="datagen: the small corpus (0: none)")
    parser.add_argument("--workers", default="1,2", help="datagen: our worker counts on the big corpus")
    parser.add_argument("--original", choices=["auto", "skip"], default="auto", help="datagen: run the original")
    parser.add_argument("--modes", default="fp32,bf16,fp32_xla,bf16_xla")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--work_dir", default="", help="keep outputs here (default: a temporary folder)")
    args = parser.parse_args()

    work = args.work_dir or tempfile.mkdtemp(prefix="bench_electra_")
    data_dir = None
    if args.part in ("all", "datagen"):
        if not os.path.isdir(same_run.CORPUS_EN):
            print(f"{same_run.CORPUS_EN} is absent (../shared/corpora not available): datagen skipped; "
                  f"the step runs on random ids")
        else:
            data_dir = bench_datagen(args, work)
    if args.part in ("all", "step"):
        bench_step(data_dir, [m for m in args.modes.split(",") if m], args.batch_size, args.steps)


if __name__ == "__main__":
    main()
