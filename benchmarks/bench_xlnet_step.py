"""XLNet pretraining train-step cost on this machine: seconds per step and peak memory, with and
without per-layer recompute (gradient checkpointing) and bf16.

Each variant runs in its own child process so its peak RSS (`ru_maxrss`) is its own. A step is
forward + backward + Adam update inside one `tf.function`, memories carried from step to step, on
XLNet-base shapes by default (L=512, reuse_len=256, mem_len=384, num_predict=85, bi_data, batch 2).

    python benchmarks/bench_xlnet_step.py                     # all four variants, base shapes
    python benchmarks/bench_xlnet_step.py --n_layer=2 --steps=2 --variants=fp32,fp32_recompute

No figure from the original XLNet (TF1) on this CPU is available to print beside ours; the
comparison that matters here is between variants (recompute should cut activation memory at the
cost of one extra forward per layer; bf16 halves activation bytes).
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
VARIANTS = {"fp32": (False, False), "fp32_recompute": (False, True),
            "bf16": (True, False), "bf16_recompute": (True, True)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="base", choices=["base", "large", "tiny"])
    p.add_argument("--n_layer", type=int, default=0, help="override the preset's depth (0 = keep)")
    p.add_argument("--seq_len", type=int, default=512)
    p.add_argument("--reuse_len", type=int, default=256)
    p.add_argument("--mem_len", type=int, default=384)
    p.add_argument("--num_predict", type=int, default=85)
    p.add_argument("--batch", type=int, default=2, help="per-replica batch (even: bi_data)")
    p.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def synthetic_features(args, n_token: int, seed: int):
    """Random features with XLNet's structure (permutation mask from a factorisation order)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    b, length, npred = args.batch, args.seq_len, args.num_predict
    ranks = np.stack([rng.permutation(length) for _ in range(b)])
    perm = (ranks[:, None, :] >= ranks[:, :, None]).astype(np.float32)
    pos = np.stack([rng.choice(length, npred, replace=False) for _ in range(b)])
    tm = np.zeros((b, npred, length), np.float32)
    for i in range(b):
        tm[i, np.arange(npred), pos[i]] = 1.0
    ids = rng.integers(0, n_token, (b, length)).astype(np.int32)
    seg = np.zeros((b, length), np.int32)
    seg[:, length // 2:] = 1
    return dict(input_k=ids, input_q=tm.sum(1), seg_id=seg, perm_mask=perm, target_mapping=tm,
                target=np.take_along_axis(ids, pos, 1), target_mask=np.ones((b, npred), np.float32))


def run_child(args) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, REPO)
    import tensorflow as tf

    from models.xlnet import XLNetConfig, XLNetPretrainer

    bf16, recompute = VARIANTS[args.child]
    if bf16:
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    overrides = dict(mem_len=args.mem_len, reuse_len=args.reuse_len, bi_data=True, dropout=0.1,
                     dropatt=0.1, recompute=recompute)
    if args.n_layer:
        overrides["n_layer"] = args.n_layer
    config = XLNetConfig.preset(args.preset, **overrides)
    model = XLNetPretrainer(config)
    optimizer = tf.keras.optimizers.Adam(1e-4)
    optimizer.build(model.trainable_variables)
    feats = [{k: tf.constant(v) for k, v in synthetic_features(args, config.n_token, s).items()}
             for s in range(2)]

    @tf.function
    def train_step(features, state):
        with tf.GradientTape() as tape:
            out = model.step_output(features, state, training=True)
            loss = out.losses["lm"].total / out.losses["lm"].count
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, out.state

    state = model.initial_state(args.batch)
    t0 = time.perf_counter()
    loss, state = train_step(feats[0], state)
    loss.numpy()
    first = time.perf_counter() - t0
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        loss, state = train_step(feats[(step + 1) % 2], state)
        loss.numpy()
        times.append(time.perf_counter() - t0)
    params = sum(int(tf.size(v)) for v in model.trainable_variables)
    return {"variant": args.child, "params": params, "first_step_s": round(first, 2),
            "s_per_step": round(sorted(times)[len(times) // 2], 3), "loss": float(loss),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(run_child(args)), flush=True)
        return
    passthrough = [a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--variants")]
    print(f"XLNet {args.preset}{f' n_layer={args.n_layer}' if args.n_layer else ''}: L={args.seq_len} "
          f"reuse={args.reuse_len} mem={args.mem_len} num_predict={args.num_predict} batch={args.batch} "
          f"bi_data, dropout 0.1; median of {args.steps} steps after 1 warm-up; {os.cpu_count()} CPUs")
    print(f"{'variant':<16}{'s/step':>9}{'first step s':>14}{'peak RSS MiB':>14}{'loss':>8}")
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            sys.exit(f"--variants: unknown {variant!r}; known: {', '.join(VARIANTS)}")
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), *passthrough, f"--child={variant}"],
                              capture_output=True, text=True)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if proc.returncode or not lines:
            print(f"{variant:<16} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
            continue
        r = json.loads(lines[-1][len("RESULT "):])
        print(f"{variant:<16}{r['s_per_step']:>9.2f}{r['first_step_s']:>14.1f}{r['peak_rss_mib']:>14.0f}"
              f"{r['loss']:>8.3f}", flush=True)


if __name__ == "__main__":
    main()
