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
above (random ids in Google's vocab layout without a corpus), as `trainers.core.Trainer` runs it (forward + backward +
global-norm clipping + AdamW, benchmarks/step_bench.py), in fp32 or mixed bf16, with or without XLA (jit_compile).
Each mode runs in a fresh process (its own peak RSS); one warm-up step (tracing/compilation) is excluded, the next
`--steps` are timed (wall and CPU seconds); the share of the matmul peak (measured in the same run) is model FLOPs
per step / step wall / matmul FLOP/s. No peer runs beside it (bench_bert_step.py runs keras-hub for BERT).
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


def electra_step_flops(config, batch_size: int, seq_len: int = 128) -> float:
    """Model FLOPs of one ELECTRA training step (2 per multiply-add, backward = 2 x forward): generator and
    discriminator encoders, their embedding projections, the generator's MLM head on the masked slots and
    the discriminator's per-token head."""
    from models.electra import ElectraObjective

    def encoder(layers: int, h: int, inner: int) -> float:
        return layers * (batch_size * seq_len * (8 * h * h + 4 * h * inner) + batch_size * 4 * seq_len ** 2 * h)

    tokens, emb = batch_size * seq_len, config.embedding_width
    gen = config.generator_config()
    slots = ElectraObjective().max_predictions(seq_len)
    forward = (encoder(gen.num_hidden_layers, gen.hidden_size, gen.intermediate_size)
               + encoder(config.num_hidden_layers, config.hidden_size, config.intermediate_size)
               + tokens * 2 * emb * (gen.hidden_size + config.hidden_size)  # embeddings_project (both)
               + batch_size * slots * 2 * (gen.hidden_size * emb + emb * config.vocab_size)  # generator MLM head
               + tokens * 2 * (config.hidden_size ** 2 + config.hidden_size))  # discriminator head
    return 3.0 * forward


def step_batch(data_dir: str | None, batch_size: int):
    """(batch, vocab_size, special ids): the first batch of the records made above, else random ids."""
    import numpy as np
    import tensorflow as tf
    from framework.problem import DataParams
    from models import electra
    from problems.electra_pretrain import ElectraPretrain

    if data_dir:
        problem = ElectraPretrain()
        settings = problem.read_manifest(data_dir)["settings"]
        batch = next(iter(problem.dataset("train", data_dir, DataParams(batch_size=batch_size, seed=0))))
        return batch, settings["vocab_size"], settings["special_ids"]
    vocab_size, special = 30522, electra.GOOGLE_VOCAB_SPECIAL_IDS  # speed does not depend on the text
    rs = np.random.RandomState(0)
    ids = rs.randint(1000, vocab_size, size=(batch_size, 128)).astype(np.int32)
    ids[:, 0], ids[:, -1] = special["[CLS]"], special["[SEP]"]
    return ({"input_ids": tf.constant(ids), "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)},
            vocab_size, special)


def step_child(data_dir: str | None, mode: str, batch_size: int, steps: int) -> None:
    """One mode in this (fresh) process: trainers.core.Trainer's step (benchmarks/step_bench.py), AdamW 5e-4."""
    import shutil
    from benchmarks import step_bench
    from models import electra

    batch, vocab_size, special = step_batch(data_dir, batch_size)
    config = electra.ElectraConfig.preset("small", vocab_size=vocab_size)
    trainer, model_dir = step_bench.make_trainer(
        lambda: electra.ElectraPretrainer(config, special_ids=special), batch, precision=mode.split("_")[0],
        jit_compile=mode.endswith("_xla"), learning_rate=5e-4)
    try:
        result = step_bench.time_steps(step_bench.trainer_step_fn(trainer), 1, steps)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    result.update(flops=electra_step_flops(config, batch_size), vocab_size=vocab_size)
    print(step_bench.child_result(result), flush=True)


def bench_step(data_dir: str | None, modes: list[str], batch_size: int, steps: int) -> None:
    """Each mode in a fresh process (its own peak RSS), beside the matmul peak measured in this run."""
    from benchmarks import same_run, step_bench
    peak = step_bench.matmul_peak()
    print(f"\nELECTRA-small step (trainers.core.Trainer), batch {batch_size} x L128, 1 warm-up + {steps} timed steps; "
          f"{peak['gpu'] or f'CPU, {os.cpu_count()} cores'}; measured matmul peak fp32 {peak['fp32']:,.0f} GFLOP/s "
          f"({peak['fp32_cpu']:,.0f} per CPU-s), bf16 {peak['bf16']:,.0f} GFLOP/s ({peak['bf16_cpu']:,.0f} per CPU-s)")
    print(f"{'mode':10s} {'s/step':>7s} {'CPU s/step':>10s} {'examples/s':>10s} {'% matmul':>8s} {'(CPU)':>6s} {'warm-up s':>9s} "
          f"{'peak RSS MiB':>12s} {'load':>5s} {'loss':>8s}")
    for mode in modes:
        argv = [sys.executable, os.path.abspath(__file__), "--part=step", f"--step_child={mode}",
                f"--batch_size={batch_size}", f"--steps={steps}", f"--step_data_dir={data_dir or ''}"]
        try:
            r = step_bench.parse_child(same_run.run_measured(argv)["output"])
        except RuntimeError as e:
            print(f"{mode:10s} failed: {str(e)[-1500:]}")
            continue
        wall, cpu = sum(r["step_wall_s"]) / steps, sum(r["step_cpu_s"]) / steps
        share, share_cpu = step_bench.shares(r["flops"], wall, cpu, peak, "bf16" if mode.startswith("bf16") else "fp32")
        print(f"{mode:10s} {wall:7.2f} {cpu:10.2f} {batch_size / wall:10.1f} {share:7.1f}% {share_cpu:5.1f}% {r['warmup_wall_s']:9.1f} "
              f"{r['peak_rss_mib']:12,.0f} {r['load_avg_1m']:5.1f} {r['loss']:8.3f}", flush=True)


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
    parser.add_argument("--step_child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--step_data_dir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step_child:
        step_child(args.step_data_dir or None, args.step_child, args.batch_size, args.steps)
        return

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
