"""BERT pretraining step on CPU: fp32 vs mixed_bfloat16, XLA off vs on.

One training step = forward (MLM on the masked positions only + NSP) + backward + Adam update,
on a fixed random batch (BERT-base, L128, batch 32, 20 predictions by default). Each
configuration runs in its own subprocess so its peak RSS is its own and the precision policy
does not leak. Prints s/step, examples/s and peak RSS beside the peers measured on this machine
class (DESIGN.md §7: keras-hub bf16 ~5.5 s/step, fp32 ~8.3; XLA slower for both).

    python benchmarks/bench_bert_step.py                      # all four configs, 3 timed steps
    python benchmarks/bench_bert_step.py --steps 2 --configs fp32,bf16 --size small

Timings on a machine shared with other jobs are noisy: the 1-minute load average is printed
with each figure.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {"fp32": ("float32", False), "bf16": ("mixed_bfloat16", False),
           "fp32_xla": ("float32", True), "bf16_xla": ("mixed_bfloat16", True)}
PEERS = {"fp32": "keras-hub fp32 ~8.3 s/step", "bf16": "keras-hub bf16 ~5.5 s/step",
         "fp32_xla": "peers: XLA slower than fp32", "bf16_xla": "peers: XLA slower than bf16"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="base", help="BERT preset (tiny ... large)")
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--predictions", type=int, default=20, help="max_predictions_per_seq")
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per config")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps (tracing/compilation)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma list of {', '.join(CONFIGS)}")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in args.configs.split(","):
        if name not in CONFIGS:
            parser.error(f"--configs: unknown {name!r}; known: {', '.join(CONFIGS)}")
    return args


def make_batch(args: argparse.Namespace, tf) -> dict:
    """A fixed random batch shaped like create_pretraining_data.py's records."""
    g = tf.random.Generator.from_seed(0)
    b, l, p = args.batch, args.seq_len, args.predictions
    return {
        "input_ids": g.uniform([b, l], 0, args.vocab_size, tf.int32),
        "input_mask": tf.ones([b, l], tf.int32),
        "segment_ids": tf.concat([tf.zeros([b, l // 2], tf.int32), tf.ones([b, l - l // 2], tf.int32)], 1),
        "masked_lm_positions": g.uniform([b, p], 1, l, tf.int32),
        "masked_lm_ids": g.uniform([b, p], 0, args.vocab_size, tf.int32),
        "masked_lm_weights": tf.ones([b, p], tf.float32),
        "next_sentence_labels": g.uniform([b, 1], 0, 2, tf.int32),
    }


def run_child(args: argparse.Namespace) -> dict:
    """Time one configuration in this process; returns the figures."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, REPO)
    import tensorflow as tf

    from models.base import weighted_loss
    from models.bert import BertConfig, BertPretrainer

    policy, xla = CONFIGS[args.child]
    tf.keras.mixed_precision.set_global_policy(policy)
    model = BertPretrainer(BertConfig.preset(args.size, vocab_size=args.vocab_size))
    optimizer = tf.keras.optimizers.Adam(1e-4)
    optimizer.build(model.trainable_variables)
    batch = make_batch(args, tf)

    @tf.function(jit_compile=xla)
    def train_step(features):
        with tf.GradientTape() as tape:
            out = model.step_output(features, {}, training=True)
            loss = weighted_loss(out.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    start = time.perf_counter()
    for _ in range(args.warmup):
        loss = float(train_step(batch))
    warmup_s = time.perf_counter() - start
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = float(train_step(batch))  # float() waits for the step to finish
        times.append(time.perf_counter() - start)
    step_s = sum(times) / len(times)
    return {"config": args.child, "warmup_s": warmup_s, "step_s": step_s, "min_step_s": min(times),
            "examples_per_s": args.batch / step_s, "loss": loss,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "load_avg_1m": os.getloadavg()[0]}


def run_parent(args: argparse.Namespace) -> None:
    print(f"BERT-{args.size} training step on CPU ({os.cpu_count()} cores): L={args.seq_len} "
          f"batch={args.batch} predictions={args.predictions}, {args.warmup} warm-up + {args.steps} timed steps")
    header = f"{'config':<9} {'s/step':>7} {'min':>6} {'ex/s':>6} {'warmup s':>9} {'RSS MiB':>8} {'load':>5}  peer"
    print(header)
    for name in args.configs.split(","):
        argv = [sys.executable, os.path.abspath(__file__), "--child", name] + [
            f"--{k}={getattr(args, k)}" for k in ("size", "seq_len", "batch", "predictions", "vocab_size",
                                                  "steps", "warmup")]
        proc = subprocess.run(argv, capture_output=True, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode or not lines:
            print(f"{name:<9} FAILED (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
            continue
        r = json.loads(lines[-1])
        print(f"{name:<9} {r['step_s']:7.2f} {r['min_step_s']:6.2f} {r['examples_per_s']:6.2f} "
              f"{r['warmup_s']:9.1f} {r['peak_rss_mib']:8.0f} {r['load_avg_1m']:5.1f}  {PEERS[name]}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args)))
    else:
        run_parent(args)


if __name__ == "__main__":
    main()
