"""Benchmark: ELECTRA pretraining data generation and the ELECTRA-small training step on CPU.

    python benchmarks/bench_electra.py                         # datagen 1 and 2 workers, then the step
    python benchmarks/bench_electra.py --part=datagen --workers=1,2,4
    python benchmarks/bench_electra.py --part=step --modes=fp32,bf16,fp32_xla,bf16_xla --batch_size=16 --steps=3

Datagen, in the setting of ../shared/DESIGN.md §7: ../shared/corpora/en/jane_austen_novels.txt.gz (4.0 MB),
max_seq_length 128, default semantics (the overflow is dropped, as the original does). The WordPiece vocab (30522
requested) is built once from the corpus by our `prepare` and not timed; the original script is given a vocab too.
Each run is a fresh process, so its wall includes the TensorFlow import, as the DESIGN's figure does (7.4 s wall,
122k corpus WordPiece tokens/s, 494 MiB for google-research/electra's `build_pretraining_dataset.py`, 1 process).
Reported: wall, corpus tokens / wall (the DESIGN's measure), the time spent after the import, CPU seconds of the
process tree and tokens per CPU-second (less distorted than wall time on a shared, loaded machine; it includes the
TensorFlow import of every process), examples written, the share of tokens the builder dropped, and the largest
child's peak RSS. Where the time goes (in-process, Austen, one shard): WordPiece ~75 %, Example serialisation
(framework.records) ~18 %, reading ~2 %, this problem's builder ~5 %.

Step: ELECTRA-small (hidden 256, 12 layers, embedding 128, generator 64 wide) at L128 on batches of the records made
above, forward + backward + AdamW update, in fp32 or mixed bf16, with or without XLA (jit_compile). One warm-up step
(tracing/compilation) is excluded; the next `--steps` are timed. CPU peers from DESIGN §7: BERT-base keras-hub at
L128, batch 32: 8.3 s/step fp32, 5.5 bf16; XLA slower on this CPU. ELECTRA-small is ~1/8 of BERT-base's compute.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DEFAULT_CORPUS = os.path.join(os.path.dirname(REPO), "shared", "corpora", "en", "jane_austen_novels.txt.gz")
ORIGINAL = dict(wall=7.4, tokens_per_s=122e3, rss_mib=494)

# Run in a fresh process: import, then generate; prints one JSON line.
_CHILD = """
import json, resource, sys, time
def cpu():
    return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))
t0 = time.time()
sys.path.insert(0, {repo!r})
from problems.electra_pretrain import ElectraPretrain, ElectraPretrainHParams
t1, c1 = time.time(), cpu()
hp = ElectraPretrainHParams(input_file={corpus!r}, vocab_file={vocab!r}, max_seq_length=128,
                            carry_overflow={carry!r})
manifest = ElectraPretrain(hp).generate_data({out!r}, {out!r} + "/tmp", num_workers={workers}, seed=0)["train"]
t2 = time.time()
print(json.dumps(dict(import_s=t1 - t0, generate_s=t2 - t1, generate_cpu=cpu() - c1,
                      examples=manifest["num_examples"])))
"""


def corpus_tokens(corpus: str, vocab: str) -> tuple[int, float]:
    """(WordPiece tokens in the corpus, tokenizer seconds) with our encoder."""
    from framework import corpus as corpus_lib
    from framework.text_encoders import WordpieceEncoder
    encoder = WordpieceEncoder(vocab, do_lower_case=True)
    lines = [line for _, line in corpus_lib.iter_lines(corpus) if line.strip()]
    start = time.process_time()
    total = sum(len(ids) for ids in encoder.encode_batch(lines))
    return total, time.process_time() - start


def kept_tokens(data_dir: str) -> int:
    """Non-special tokens in the written train records (to report the share the builder dropped)."""
    import tensorflow as tf
    from problems.electra_pretrain import ElectraPretrain
    problem = ElectraPretrain()
    total = 0
    spec = {"input_mask": tf.io.FixedLenFeature([128], tf.int64), "segment_ids": tf.io.FixedLenFeature([128], tf.int64)}
    for path in problem.data_files(data_dir, "train"):
        for record in tf.data.TFRecordDataset(path).batch(1024):
            parsed = tf.io.parse_example(record, spec)
            mask, seg = parsed["input_mask"].numpy(), parsed["segment_ids"].numpy()
            total += int(mask.sum()) - 2 * len(mask) - int((seg.max(axis=1) == 1).sum())  # [CLS], [SEP](s)
    return total


def bench_datagen(corpus: str, workers: list[int], work: str, carry: bool) -> str:
    from problems.electra_pretrain import ElectraPretrain, ElectraPretrainHParams
    vocab_dir = os.path.join(work, "vocab")
    problem = ElectraPretrain(ElectraPretrainHParams(input_file=corpus))
    start = time.time()
    problem.prepare(vocab_dir, "")
    vocab = problem.vocab_path(vocab_dir)
    print(f"vocab: {vocab} built in {time.time() - start:.1f}s (not timed below)")
    tokens, tok_s = corpus_tokens(corpus, vocab)
    print(f"corpus: {corpus} ({os.path.getsize(corpus) / 1e6:.1f} MB gz), {tokens:,} WordPiece tokens; "
          f"our encoder alone: {tokens / tok_s / 1e3:,.0f}k tokens per CPU-second\n")
    print(f"{'run':34s} {'wall s':>7s} {'after import':>12s} {'tokens/s':>10s} {'vs original':>11s} "
          f"{'CPU s':>6s} {'tok/CPU-s':>9s} {'(after import)':>14s} {'examples':>8s} {'dropped':>7s} {'peak RSS':>9s}")
    print(f"{'original, 1 process (DESIGN §7)':34s} {ORIGINAL['wall']:7.1f} {'':>12s} "
          f"{ORIGINAL['tokens_per_s'] / 1e3:9.0f}k {'1.0x':>11s} {'':>6s} {'':>9s} {'':>14s} {'':>8s} {'~17%':>7s} "
          f"{ORIGINAL['rss_mib']:6d} MiB")
    data_dir = ""
    for n in workers:
        data_dir = os.path.join(work, f"data_{n}{'_carry' if carry else ''}")
        script = _CHILD.format(repo=REPO, corpus=corpus, vocab=vocab, carry=carry, out=data_dir, workers=n)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.time()
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        wall = time.time() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        if proc.returncode:
            raise RuntimeError(f"datagen with {n} workers failed:\n{proc.stderr[-3000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        dropped = 1 - kept_tokens(data_dir) / tokens
        rate = tokens / wall
        label = f"textrain, {n} worker{'s' if n > 1 else ''}{', carry_overflow' if carry else ''}"
        print(f"{label:34s} {wall:7.1f} {result['generate_s']:11.1f}s {rate / 1e3:9.0f}k "
              f"{rate / ORIGINAL['tokens_per_s']:10.1f}x {cpu:6.1f} {tokens / cpu / 1e3:8.0f}k "
              f"{tokens / result['generate_cpu'] / 1e3:13.0f}k "
              f"{result['examples']:8d} {100 * dropped:6.1f}% {rss:6.0f} MiB", flush=True)
    return data_dir


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
    parser.add_argument("--corpus", default=DEFAULT_CORPUS)
    parser.add_argument("--part", choices=["all", "datagen", "step"], default="all")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--carry_overflow", action="store_true", help="datagen with the overflow carried")
    parser.add_argument("--modes", default="fp32,bf16,fp32_xla,bf16_xla")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--work_dir", default="", help="keep outputs here (default: a temporary folder)")
    args = parser.parse_args()

    work = args.work_dir or tempfile.mkdtemp(prefix="bench_electra_")
    data_dir = None
    if args.part in ("all", "datagen"):
        if not os.path.exists(args.corpus):
            print(f"{args.corpus} is absent (../shared/corpora not available): datagen skipped; "
                  f"the step runs on random ids")
        else:
            data_dir = bench_datagen(args.corpus, [int(w) for w in args.workers.split(",")], work,
                                     args.carry_overflow)
    if args.part in ("all", "step"):
        bench_step(data_dir, [m for m in args.modes.split(",") if m], args.batch_size, args.steps)


if __name__ == "__main__":
    main()
