"""XLNet pretraining training step on this machine, ours beside keras-hub's: s/step, CPU-s/step,
examples/s, peak RSS, the share of the measured matmul peak, ratios ours/peer; with and without per-layer
recompute (gradient checkpointing, ours only) and bf16.

Sides (`--sides`, default all three; each side and variant a fresh process, `same_run.run_measured`, so its peak
RSS is its own; the matmul peak, fp32 and bf16, is measured in its own process of the same run):
- `ours`: `trainers.core.Trainer`'s step (benchmarks/lib/step_bench.py: forward + backward + global-norm clipping +
  XLNet's Adam with bias correction, `--optimizer=adam --weight_decay=0`), full XLNet pretraining: two-stream
  attention (query stream on the num_predict targets through target_mapping), memories carried from step to step
  in the Trainer's per-replica state, the permutation mask, bi_data, dropout and attention dropout 0.1.
- `peer`: keras-hub 0.32.0's `XLNetBackbone` (in .venv-bench; without it "peer not installed: <command>" and ours
  alone) with XLNet's LM head tied to its word embedding (+ bias) on the same predicted positions, the same
  cross-entropy, Keras Adam (our schedule, epsilon 1e-6, `global_clipnorm=1.0`), one `tf.function` step, fp32 or
  `mixed_bfloat16`. What the peer CANNOT express: `XLNetBackbone` runs the content stream only, with a mask made
  from the padding mask alone: no query stream / target_mapping, no memories (its inputs are token_ids,
  segment_ids and padding_mask), no permutation mask, no bi_data (its relative encoding is forward only), no
  attention dropout (its attention layers are built with rate 0). Its layers (`XLNetEncoder`,
  `TwoStreamRelativeAttention`) take `mems`, a query stream and `target_mapping`, but the backbone does not wire
  them. It also projects the relative encoding once per example (ours once per direction) and, for a batch
  above 1, scrambles it (a reshape where a transpose is meant: example 0 of batch 2 gets distances
  3,3,2,2,1,1 for 3,2,1,0,-1,-2); the cost is unchanged by that.
- `ours_content`: ours with only what the peer computes, for the like-for-like ratio: our encoder's content
  stream (no query stream, memories, permutation mask; bi_data and attention dropout off), the tied LM head at the
  predicted positions, through the same Trainer.

XLNet-base shapes by default (L=512, reuse_len=256, mem_len=384, num_predict=85, bi_data, batch 2).

    nice -n 10 python3 benchmarks/bench_xlnet_step.py --variants=fp32,bf16 --steps=1     # base, three sides
    python3 benchmarks/bench_xlnet_step.py --n_layer=2 --steps=2 --variants=fp32,fp32_recompute --sides=ours

Model FLOPs per step are counted from the shapes (ours: two-stream attention with memories, relative positions,
the LM head on the num_predict targets; the peer and ours_content: the content stream alone; backward = 2 x
forward); the share is FLOPs / step wall / matmul peak.

On a GPU (found automatically) `--max_batch` finds the largest batch of XLNet-Large at L512 that trains
(doubling until a step fails, then bisecting; each try is a fresh process) and prints its s/step. On a CPU-only
machine that search is skipped with a message.
"""
from __future__ import annotations

import argparse
import os
import sys
from types import SimpleNamespace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
# The presets' sizes for the peer's process, which does not import our package (ours checks they agree).
PEER_SIZES = {"base": dict(n_layer=12, d_model=768, n_head=12, d_inner=3072, n_token=32000),
              "large": dict(n_layer=24, d_model=1024, n_head=16, d_inner=4096, n_token=32000),
              "tiny": dict(n_layer=2, d_model=32, n_head=4, d_inner=64, n_token=100)}
SIDES = ("ours", "ours_content", "peer")
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
    p.add_argument("--steps", type=int, default=3, help="timed steps")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (tracing)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--sides", default=",".join(SIDES), help="comma list of ours (full XLNet), ours_content (ours "
                   "with only what the peer computes), peer (keras-hub XLNetBackbone, in .venv-bench); the last "
                   "two run only for the variants without recompute")
    p.add_argument("--profile", default="", help="profile one more step of each side into this folder and print "
                   "the op types that took the time (step_bench.summarise_profile)")
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


def content_flops(config, args) -> float:
    """Model FLOPs of a content-stream-only step (the peer's and ours_content's): no memories, no query
    stream, relative positions over 2L, the LM head on the num_predict positions."""
    d, inner, length, rlen = config.d_model, config.d_inner, args.seq_len, 2 * args.seq_len
    proj = 2 * d * d * (4 * length + rlen)
    attn = 2 * (2 * 2 * length * length * d + 2 * length * rlen * d)
    ffn = 2 * 2 * d * inner * length
    return 3.0 * args.batch * (config.n_layer * (proj + attn + ffn) + 2 * args.num_predict * d * config.n_token)


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


def positions_of(target_mapping):
    """[B, P] positions of the predicted tokens (the one-hot rows of target_mapping)."""
    import tensorflow as tf
    return tf.argmax(target_mapping, axis=-1, output_type=tf.int32)


def content_only_model(config):
    """Ours with only what keras-hub's XLNetBackbone computes (the `ours_content` side): our encoder's content
    stream over the sequence (no query stream, no memories, no permutation mask; bi_data and attention
    dropout off in its config), the LM head tied to the word embedding at the predicted positions."""
    import tensorflow as tf

    from textrain.models.base import StepOutput, Term
    from textrain.models.layers.fused import sparse_softmax_cross_entropy
    from textrain.models.xlnet import XLNetPretrainer

    class XLNetContentLM(XLNetPretrainer):
        def step_output(self, features, state, training):
            enc = self.transformer(features["input_k"], seg_ids=features["seg_id"], training=training)
            out = tf.gather(enc["output"], positions_of(features["target_mapping"]), batch_dims=1)
            table = tf.cast(self.transformer.lookup_table, out.dtype)
            logits = tf.cast(tf.einsum("bmd,nd->bmn", out, table), tf.float32) + tf.cast(self.lm_bias, tf.float32)
            ce = sparse_softmax_cross_entropy(tf.cast(features["target"], tf.int32), logits)
            weight = tf.cast(features["target_mask"], tf.float32)
            return StepOutput(losses={"lm": Term(tf.reduce_sum(ce * weight), tf.reduce_sum(weight))}, metrics={},
                              state={})

    return XLNetContentLM(config, name="model")


def run_child(args) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, REPO)
    import tensorflow as tf

    from benchmarks.lib import step_bench
    from textrain.models.xlnet import XLNetConfig, XLNetPretrainer

    side, variant = args.child.split(":")
    bf16, recompute = VARIANTS[variant]
    if side == "peer":
        return peer_child(args, bf16)
    full = side == "ours"
    overrides = dict(mem_len=args.mem_len if full else 0, reuse_len=args.reuse_len if full else 0, bi_data=full,
                     dropout=0.1, dropatt=0.1 if full else 0.0, recompute=recompute)
    if args.n_layer:
        overrides["n_layer"] = args.n_layer
    config = XLNetConfig.preset(args.preset, **overrides)
    batch = {k: tf.constant(v) for k, v in synthetic_features(args, config.n_token, 0).items()}
    model_fn = (lambda: XLNetPretrainer(config)) if full else (lambda: content_only_model(config))
    trainer, model_dir = step_bench.make_trainer(model_fn, batch, precision="bf16" if bf16 else "fp32",
                                                 optimizer="adam", weight_decay=0.0)
    try:
        step = step_bench.trainer_step_fn(trainer)
        result = step_bench.time_steps(step, args.warmup, args.steps)
        if args.profile:
            result["profile"] = step_bench.summarise_profile(step_bench.profile_steps(step, args.profile))
    finally:
        import shutil
        shutil.rmtree(model_dir, ignore_errors=True)
    result.update(variant=variant, flops=step_flops(config, args) if full else content_flops(config, args),
                  params=sum(int(tf.size(v)) for v in trainer.model.trainable_variables))
    return result


def peer_child(args, bf16: bool) -> dict:
    """keras-hub's `XLNetBackbone` (as shipped: the content stream over the sequence, padding mask only)
    with a LM head tied to its word embedding (+ bias) at the predicted positions, the cross-entropy over
    the same targets, Keras Adam (our schedule, epsilon 1e-6, global_clipnorm 1.0) in one `tf.function`."""
    import keras
    import keras_hub
    import tensorflow as tf

    from benchmarks.lib import peers, step_bench

    keras.mixed_precision.set_global_policy("mixed_bfloat16" if bf16 else "float32")
    sizes = PEER_SIZES[args.preset]
    n_layer = args.n_layer or sizes["n_layer"]
    backbone = keras_hub.models.XLNetBackbone(
        vocabulary_size=sizes["n_token"], num_layers=n_layer, num_heads=sizes["n_head"],
        hidden_dim=sizes["d_model"], intermediate_dim=sizes["d_inner"], dropout=0.1, activation="gelu")

    class TiedLMHead(keras.layers.Layer):
        """XLNet's lm_loss: logits = output . word_embedding^T + bias (no dense, no LayerNorm)."""
        def build(self, input_shape):
            self.bias = self.add_weight(name="bias", shape=(sizes["n_token"],), initializer="zeros")

        def call(self, x):
            table = tf.cast(backbone.token_embedding.embeddings, x.dtype)
            return tf.cast(tf.einsum("bmd,nd->bmn", x, table), tf.float32) + tf.cast(self.bias, tf.float32)

    head = TiedLMHead(dtype=backbone.dtype_policy)
    batch = {k: tf.constant(v) for k, v in synthetic_features(args, sizes["n_token"], 0).items()}

    def loss_fn(features, training):
        out = backbone({"token_ids": features["input_k"], "segment_ids": features["seg_id"],
                        "padding_mask": tf.ones_like(features["input_k"])}, training=training)
        logits = head(tf.gather(out, positions_of(features["target_mapping"]), batch_dims=1))
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["target"], logits=logits)
        weight = features["target_mask"]
        return tf.reduce_sum(ce * weight) / tf.reduce_sum(weight)

    loss_fn({k: v[:1] for k, v in batch.items()}, training=False)  # builds every layer (eager)
    variables = backbone.trainable_variables + head.trainable_variables
    optimizer = peers.keras_optimizer(1e-4, weight_decay=0.0)
    optimizer.build(variables)

    @tf.function
    def train_step(features):
        with tf.GradientTape() as tape:
            loss = loss_fn(features, training=True)
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    step = lambda: float(train_step(batch))  # noqa: E731
    result = step_bench.time_steps(step, args.warmup, args.steps)
    if args.profile:
        result["profile"] = step_bench.summarise_profile(step_bench.profile_steps(step, args.profile))
    config = SimpleNamespace(n_layer=n_layer, **{k: v for k, v in sizes.items() if k != "n_layer"})
    result.update(flops=content_flops(config, args), params=sum(int(tf.size(v)) for v in variables))
    return result


def max_batch_search(args, passthrough: list[str], peak: dict) -> None:
    """GPU only: the largest batch of XLNet-Large at L512 whose step runs (doubling, then bisecting)."""
    from benchmarks.lib import same_run, step_bench

    def fits(batch: int) -> dict | None:
        argv = [sys.executable, os.path.abspath(__file__), *passthrough, "--preset=large", "--n_layer=0",
                "--seq_len=512", f"--batch={batch}", "--steps=1", "--child=ours:bf16"]  # later flags win
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
        from benchmarks.lib import step_bench
        print(step_bench.child_result(run_child(args)), flush=True)
        return
    sys.path.insert(0, REPO)
    from benchmarks.lib import peers, step_bench
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            sys.exit(f"--variants: unknown {variant!r}; known: {', '.join(VARIANTS)}")
    for side in args.sides.split(","):
        if side not in SIDES:
            sys.exit(f"--sides: unknown {side!r}; known: {', '.join(SIDES)}")
    if args.preset in ("base", "large"):
        from textrain.models.xlnet import PRESETS
        assert all(PRESETS[args.preset][k] == v for k, v in PEER_SIZES[args.preset].items())
    sides = peers.choose_sides(args.sides)
    passthrough = [f"--{k}={getattr(args, k)}" for k in ("preset", "n_layer", "seq_len", "reuse_len", "mem_len",
                                                          "num_predict", "batch", "steps", "warmup")]
    peak = step_bench.matmul_peak()
    print(f"XLNet {args.preset}{f' n_layer={args.n_layer}' if args.n_layer else ''}: L={args.seq_len} "
          f"reuse={args.reuse_len} mem={args.mem_len} num_predict={args.num_predict} batch={args.batch}, dropout 0.1; "
          f"{args.warmup} warm-up + {args.steps} timed steps; each side and variant a fresh process")
    print("  ours = trainers.core.Trainer, full XLNet (two streams, memories, perm mask, bi_data, dropatt 0.1); "
          "ours_content = ours with only what the peer computes; peer = keras-hub XLNetBackbone + tied LM head "
          "(content stream only: no memories, query stream, perm mask, bi_data or attention dropout)")
    print(f"device: {peak['gpu'] or f'CPU, {os.cpu_count()} cores'}; measured matmul peak fp32 {peak['fp32']:,.0f} "
          f"GFLOP/s ({peak['fp32_cpu']:,.0f} per CPU-s), bf16 {peak['bf16']:,.0f} GFLOP/s ({peak['bf16_cpu']:,.0f} per CPU-s)")
    print(peers.HEADER)
    for variant in args.variants.split(","):
        rows = {}
        for side in sides:
            if side != "ours" and VARIANTS[variant][1]:
                continue  # recompute is ours alone
            python = peers.PEER_PYTHON if side == "peer" else sys.executable
            try:
                profile = [f"--profile={os.path.join(args.profile, side + '_' + variant)}"] if args.profile else []
                r = rows[side] = step_bench.run_child([python, os.path.abspath(__file__), *passthrough, *profile,
                                                 f"--child={side}:{variant}"])
            except RuntimeError as e:
                print(f"{variant:<10} {side:<16} failed: {str(e)[-1500:]}")
                continue
            label = {"ours": "textrain", "ours_content": "textrain content", "peer": "keras-hub"}[side]
            print(peers.row(variant, label, r, args.batch, r["flops"], peak,
                            "bf16" if variant.startswith("bf16") else "fp32"), flush=True)
            for op, ms, count in r.get("profile", []):
                print(f"    {op:<40} {ms:10.1f} ms  x{count}")
        if "peer" in rows:
            for side in ("ours_content", "ours"):
                if side in rows:
                    print(step_bench.ratio_line(variant, [rows[side]], [rows["peer"]], peers.GOAL,
                                                f"{side}/peer"), flush=True)
    if args.max_batch or peak["gpu"]:
        if peak["gpu"]:
            max_batch_search(args, passthrough, peak)
        else:
            print("no GPU: the XLNet-Large L512 largest-batch search (--max_batch) runs only on a GPU")


if __name__ == "__main__":
    main()
