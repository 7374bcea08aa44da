"""XLNet pretraining training step on this machine: s/step, examples/s, peak RSS and the share of the measured
matmul peak, with and without per-layer recompute (gradient checkpointing) and bf16.

A step is `trainers.core.Trainer`'s step (benchmarks/step_bench.py: forward + backward + global-norm clipping +
XLNet's Adam with bias correction, `--optimizer=adam --weight_decay=0`), memories carried from step to step in
the Trainer's per-replica state, on XLNet-base shapes by default (L=512, reuse_len=256, mem_len=384,
num_predict=85, bi_data, batch 2). Each variant runs in its own process (`same_run.run_measured`), so its peak
RSS is its own; the matmul peak (fp32, bf16) is measured in its own process of the same run.

    nice -n 10 python3 benchmarks/bench_xlnet_step.py --variants=fp32,bf16      # base shapes
    python3 benchmarks/bench_xlnet_step.py --n_layer=2 --steps=2 --variants=fp32,fp32_recompute

Model FLOPs per step are counted from the shapes (two-stream attention with memories, relative positions,
the LM head on the num_predict targets; backward = 2 x forward); the share is FLOPs / step wall / matmul peak.
No original XLNet (TF1) figure from this machine exists to print beside ours; the comparison that matters here is
between variants (recompute cuts activation memory at the cost of one extra forward per layer).

On a GPU (found automatically) `--max_batch` finds the largest batch of XLNet-Large at L512 that trains
(doubling until a step fails, then bisecting; each try is a fresh process) and prints its s/step. On a CPU-only
machine that search is skipped with a message.
"""
from __future__ import annotations

import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
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
    p.add_argument("--max_batch", action="store_true", help="GPU: largest XLNet-Large L512 batch (see above)")
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


def step_flops(config, args) -> float:
    """Model FLOPs of one training step (2 per multiply-add, backward = 2 x forward), per the shapes."""
    d, inner, b = config.d_model, config.d_inner, args.batch
    length, m, mlen = args.seq_len, args.num_predict, args.mem_len
    klen = mlen + length
    rlen = klen + length  # relative positions, both directions
    proj = 2 * d * d * (length + 2 * klen + rlen + length + 2 * m)  # q, k, v, r, o (content) + q, o (query)
    attn = 2 * (2 * 2 * length * klen * d + 2 * length * rlen * d) + 2 * 2 * m * length * d  # both streams
    ffn = 2 * 2 * d * inner * (length + m)
    head = 2 * m * d * config.n_token
    return 3.0 * b * (config.n_layer * (proj + attn + ffn) + head)


def run_child(args) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, REPO)
    import tensorflow as tf

    from benchmarks import step_bench
    from textrain.models.xlnet import XLNetConfig, XLNetPretrainer

    bf16, recompute = VARIANTS[args.child]
    overrides = dict(mem_len=args.mem_len, reuse_len=args.reuse_len, bi_data=True, dropout=0.1,
                     dropatt=0.1, recompute=recompute)
    if args.n_layer:
        overrides["n_layer"] = args.n_layer
    config = XLNetConfig.preset(args.preset, **overrides)
    batch = {k: tf.constant(v) for k, v in synthetic_features(args, config.n_token, 0).items()}
    trainer, model_dir = step_bench.make_trainer(lambda: XLNetPretrainer(config), batch,
                                                 precision="bf16" if bf16 else "fp32", optimizer="adam",
                                                 weight_decay=0.0)
    try:
        result = step_bench.time_steps(step_bench.trainer_step_fn(trainer), 1, args.steps)
    finally:
        import shutil
        shutil.rmtree(model_dir, ignore_errors=True)
    result.update(variant=args.child, flops=step_flops(config, args),
                  params=sum(int(tf.size(v)) for v in trainer.model.trainable_variables))
    return result


def max_batch_search(args, passthrough: list[str], peak: dict) -> None:
    """GPU only: the largest batch of XLNet-Large at L512 whose step runs (doubling, then bisecting)."""
    from benchmarks import same_run, step_bench

    def fits(batch: int) -> dict | None:
        argv = [sys.executable, os.path.abspath(__file__), *passthrough, "--preset=large", "--n_layer=0",
                "--seq_len=512", f"--batch={batch}", "--steps=1", "--child=bf16"]  # later flags win
        try:
            return step_bench.parse_child(same_run.run_measured(argv)["output"])
        except RuntimeError:
            return None

    good, bad, last = 0, 0, None
    batch = 2
    while not bad:
        r = fits(batch)
        print(f"  batch {batch}: {'fits, %.2f s/step' % r['step_wall_s'][0] if r else 'does not fit'}", flush=True)
        if r:
            good, last, batch = batch, r, batch * 2
        else:
            bad = batch
    while bad - good > 2:  # bi_data needs an even batch
        mid = (good + bad) // 2 // 2 * 2
        r = fits(mid)
        print(f"  batch {mid}: {'fits' if r else 'does not fit'}", flush=True)
        good, last, bad = (mid, r, bad) if r else (good, last, mid)
    if last:
        wall = last["step_wall_s"][0]
        print(f"XLNet-Large L512 bf16 on {peak['gpu']}: largest batch {good}, {wall:.2f} s/step, "
              f"{good / wall:.1f} ex/s, {100 * last['flops'] / wall / (peak['bf16'] * 1e9):.1f}% of the bf16 matmul")
    else:
        print("XLNet-Large L512: not even batch 2 fits")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        from benchmarks import step_bench
        print(step_bench.child_result(run_child(args)), flush=True)
        return
    sys.path.insert(0, REPO)
    from benchmarks import same_run, step_bench
    passthrough = [f"--{k}={getattr(args, k)}" for k in ("preset", "n_layer", "seq_len", "reuse_len", "mem_len",
                                                          "num_predict", "batch", "steps")]
    peak = step_bench.matmul_peak()
    print(f"XLNet {args.preset}{f' n_layer={args.n_layer}' if args.n_layer else ''}: L={args.seq_len} "
          f"reuse={args.reuse_len} mem={args.mem_len} num_predict={args.num_predict} batch={args.batch} "
          f"bi_data, dropout 0.1; 1 warm-up + {args.steps} timed steps through trainers.core.Trainer")
    print(f"device: {peak['gpu'] or f'CPU, {os.cpu_count()} cores'}; measured matmul peak fp32 {peak['fp32']:,.0f} "
          f"GFLOP/s ({peak['fp32_cpu']:,.0f} per CPU-s), bf16 {peak['bf16']:,.0f} GFLOP/s ({peak['bf16_cpu']:,.0f} per CPU-s)")
    print(f"{'variant':<16}{'s/step':>8}{'CPU s/step':>11}{'ex/s':>7}{'% matmul':>9}{'(CPU)':>7}{'warm-up s':>10}"
          f"{'peak RSS MiB':>13}{'load':>6}{'loss':>8}")
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            sys.exit(f"--variants: unknown {variant!r}; known: {', '.join(VARIANTS)}")
        try:
            measured = same_run.run_measured([sys.executable, os.path.abspath(__file__), *passthrough,
                                              f"--child={variant}"], env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        except RuntimeError as e:
            print(f"{variant:<16} failed: {str(e)[-1500:]}")
            continue
        r = step_bench.parse_child(measured["output"])
        wall, cpu = sum(r["step_wall_s"]) / len(r["step_wall_s"]), sum(r["step_cpu_s"]) / len(r["step_cpu_s"])
        share, share_cpu = step_bench.shares(r["flops"], wall, cpu, peak, "bf16" if variant.startswith("bf16") else "fp32")
        print(f"{variant:<16}{wall:8.2f}{cpu:11.2f}{args.batch / wall:7.2f}{share:8.1f}%{share_cpu:6.1f}%{r['warmup_wall_s']:10.1f}"
              f"{r['peak_rss_mib']:13,.0f}{r['load_avg_1m']:6.1f}{r['loss']:8.3f}", flush=True)
    if args.max_batch or peak["gpu"]:
        if peak["gpu"]:
            max_batch_search(args, passthrough, peak)
        else:
            print("no GPU: the XLNet-Large L512 largest-batch search (--max_batch) runs only on a GPU")


if __name__ == "__main__":
    main()
