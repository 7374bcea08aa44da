"""BERT pretraining step, ours beside keras-hub's in the same run: s/step, examples/s, peak RSS, ratio,
and each side's share of the machine's measured matmul peak.

One step = forward (MLM on the masked positions only + NSP) + backward + AdamW update with global-norm
clipping, on a fixed random batch shaped like create_pretraining_data.py's records (BERT-base, L128,
batch 32, 20 predictions by default).

- Ours: `trainers.core.Trainer`, the step every trainer CLI runs (benchmarks/lib/step_bench.py), with the
  optimizer `--optimizer=adamw --learning_rate=1e-4 --num_warmup_steps=10000 --weight_decay=0.01
  --clip_norm=1.0` builds (BERT's AdamWeightDecayOptimizer: no bias correction, epsilon 1e-6, no decay on
  LayerNorm/bias).
- Peer: keras-hub's `BertBackbone` (same shapes, dropout 0.1, tanh GELU), `keras_hub.layers.MaskedLMHead`
  tied to its token embedding on the masked positions, a Dense(2) NSP head on the pooled output, Keras'
  `AdamW` (same lr schedule, beta, epsilon 1e-6, weight decay 0.01 excluding LayerNorm gamma/beta and
  biases, `global_clipnorm=1.0`) in a `tf.function` train step (XLA off, as Keras' `jit_compile="auto"`
  chooses on a CPU). Differences Keras does not let us remove: its AdamW applies bias correction (BERT's
  has none) and its MLM head computes in the policy's compute dtype; the FLOPs are the same.
- Each side and each precision runs in a FRESH process (`same_run.run_measured`): its peak RSS is its own
  and the precision policy does not leak. The matmul peak (a timed 2048^3 `tf.matmul`, fp32 and bf16) is
  measured in its own process of the same run.
- keras-hub is NOT a dependency and must never be installed in the shared environment (its
  tensorflow-text requirement would replace tensorflow-cpu). Get the peer in a venv of its own:

      python3 -m venv --system-site-packages .venv-bench && .venv-bench/bin/pip install --no-deps keras-hub==0.32.0

  (BertBackbone needs nothing else that is not already installed; `pip check` lists kagglehub, kagglesdk
  and tensorflow-text as missing: they serve presets and tokenizers, which this benchmark does not use.)
  Without it the benchmark prints "peer not installed: <that command>" and runs ours alone.

Commands:

    nice -n 10 python3 benchmarks/bench_bert_step.py                       # base, fp32 + bf16, both sides
    python3 benchmarks/bench_bert_step.py --configs bf16 --rounds 3        # ours, peer x3 alternating: median ratio
    python3 benchmarks/bench_bert_step.py --num_layers 2 --steps 2         # reduced depth, same widths
    python3 benchmarks/bench_bert_step.py --num_layers 2 --sides ours --profile /tmp/prof   # where time goes
    python3 benchmarks/bench_bert_step.py --num_layers 2 --sides ours --configs bf16 --profile /tmp/prof \
        --inter_op_threads 1                                               # per-op times that add up

On a GPU (found automatically) the configs default to fp32, bf16 and bf16_xla (XLA + bf16, our side; the
peer with jit_compile too): the figure to read is bf16_xla's share of the measured bf16 matmul (model FLOPs
utilisation). On a CPU-only machine the *_xla configs run only when asked for.
Timings on a shared machine are noisy: CPU seconds per step and the 1-minute load are printed beside wall.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.lib import step_bench  # noqa: E402
from benchmarks.lib.peers import PEER_INSTALL, PEER_PYTHON, peer_available  # noqa: E402,F401
from benchmarks.lib.step_bench import mean  # noqa: E402

REPO = step_bench.REPO
CONFIGS = {"fp32": ("fp32", False), "bf16": ("bf16", False), "fp32_xla": ("fp32", True), "bf16_xla": ("bf16", True)}
PRESET_HIDDEN = {"tiny": 128, "mini": 256, "small": 512, "medium": 512, "base": 768, "large": 1024}
PRESET_LAYERS = {"tiny": 2, "mini": 4, "small": 4, "medium": 8, "base": 12, "large": 24}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="base", choices=list(PRESET_HIDDEN), help="BERT preset (widths, depth)")
    parser.add_argument("--num_layers", type=int, default=0, help="override the preset's depth (0 = keep)")
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--predictions", type=int, default=20, help="max_predictions_per_seq")
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side and config")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps (tracing/compilation)")
    parser.add_argument("--configs", default="", help=f"comma list of {', '.join(CONFIGS)} "
                        "(default fp32,bf16; on a GPU fp32,bf16,bf16_xla)")
    parser.add_argument("--sides", default="ours,peer", help="ours, peer or both")
    parser.add_argument("--rounds", type=int, default=1, help="run the sides this many times, alternating "
                        "(ours, peer, ours, peer, ...): each round's ratio pairs two neighbouring runs, and the "
                        "ratio line gives their median (a shared machine's load drifts between minutes)")
    parser.add_argument("--peer_python", default=PEER_PYTHON, help="the interpreter that has keras-hub")
    parser.add_argument("--profile", default="", help="ours only: profile one step into this folder and "
                        "print the op types that took the time")
    parser.add_argument("--dropout", type=float, default=-1.0, help="ours only: hidden and attention dropout "
                        "rate instead of the preset's 0.1 (--dropout=0 with --sides=ours: what dropout costs)")
    parser.add_argument("--inter_op_threads", type=int, default=0, help="ours only: TensorFlow inter-op "
                        "threads (0 = its default); 1 runs one op at a time, so --profile's per-op times add up")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dropout >= 0 and "peer" in args.sides.split(",") and not args.child:
        parser.error("--dropout changes our side only: use it with --sides=ours")
    if args.inter_op_threads and "peer" in args.sides.split(",") and not args.child:
        parser.error("--inter_op_threads changes our side only: use it with --sides=ours")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    for name in filter(None, args.configs.split(",")):
        if name not in CONFIGS:
            parser.error(f"--configs: unknown {name!r}; known: {', '.join(CONFIGS)}")
    return args


def shapes(args: argparse.Namespace) -> dict[str, int]:
    hidden = PRESET_HIDDEN[args.size]
    return dict(layers=args.num_layers or PRESET_LAYERS[args.size], hidden=hidden, heads=hidden // 64,
                intermediate=4 * hidden, vocab=args.vocab_size, seq=args.seq_len, batch=args.batch,
                predictions=args.predictions)


def step_flops(s: dict[str, int]) -> float:
    """Model FLOPs of one training step (2 per multiply-add; backward = 2 x forward): the encoder's
    projections, FFN and attention matmuls, the MLM head on the masked positions, pooler and NSP."""
    tokens = s["batch"] * s["seq"]
    h = s["hidden"]
    layer = tokens * (2 * 4 * h * h + 2 * 2 * h * s["intermediate"]) + s["batch"] * 2 * 2 * s["seq"] ** 2 * h
    mlm = s["batch"] * s["predictions"] * (2 * h * h + 2 * h * s["vocab"])
    pooler_nsp = s["batch"] * (2 * h * h + 2 * h * 2)
    return 3.0 * (s["layers"] * layer + mlm + pooler_nsp)


def make_batch(s: dict[str, int]) -> dict:
    """A fixed random batch with the records' features (int32 after preprocess_example's cast)."""
    import tensorflow as tf
    g = tf.random.Generator.from_seed(0)
    b, length, p, v = s["batch"], s["seq"], s["predictions"], s["vocab"]
    return {
        "input_ids": g.uniform([b, length], 0, v, tf.int32),
        "input_mask": tf.ones([b, length], tf.int32),
        "segment_ids": tf.concat([tf.zeros([b, length // 2], tf.int32), tf.ones([b, length - length // 2], tf.int32)], 1),
        "masked_lm_positions": g.uniform([b, p], 1, length, tf.int32),
        "masked_lm_ids": g.uniform([b, p], 0, v, tf.int32),
        "masked_lm_weights": tf.ones([b, p], tf.float32),
        "next_sentence_labels": g.uniform([b, 1], 0, 2, tf.int32),
    }


# ------------------------------------------------------------------------------------------- children
def child_ours(args: argparse.Namespace) -> dict:
    import tensorflow as tf

    from textrain.models.bert import BertConfig, BertPretrainer
    if args.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    s = shapes(args)
    precision, xla = CONFIGS[args.child.split(":")[1]]
    rates = ({"hidden_dropout_prob": args.dropout, "attention_probs_dropout_prob": args.dropout}
             if args.dropout >= 0 else {})
    config = BertConfig.preset(args.size, vocab_size=s["vocab"], num_hidden_layers=s["layers"], **rates)
    trainer, model_dir = step_bench.make_trainer(lambda: BertPretrainer(config), make_batch(s),
                                                 precision=precision, jit_compile=xla)
    try:
        step = step_bench.trainer_step_fn(trainer)
        result = step_bench.time_steps(step, args.warmup, args.steps)
        if args.profile:
            xplane = step_bench.profile_steps(step, args.profile)
            result["profile"] = step_bench.summarise_profile(xplane)
        return result
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)


def child_peer(args: argparse.Namespace) -> dict:
    """keras-hub's BERT with MLM + NSP heads and Keras AdamW (see the module docstring)."""
    import keras
    import keras_hub
    import tensorflow as tf

    s = shapes(args)
    precision, xla = CONFIGS[args.child.split(":")[1]]
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    init = keras.initializers.TruncatedNormal(stddev=0.02)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=s["vocab"], num_layers=s["layers"], num_heads=s["heads"], hidden_dim=s["hidden"],
        intermediate_dim=s["intermediate"], dropout=0.1, max_sequence_length=512, num_segments=2)
    mlm_head = keras_hub.layers.MaskedLMHead(vocabulary_size=s["vocab"], token_embedding=backbone.token_embedding,
                                             intermediate_activation="gelu", kernel_initializer=init,
                                             dtype=backbone.dtype_policy)
    nsp_head = keras.layers.Dense(2, kernel_initializer=init, dtype=backbone.dtype_policy)

    class WarmupLinear(keras.optimizers.schedules.LearningRateSchedule):
        """BERT's schedule: linear warmup to 1e-4 over 10k steps, linear decay to 0 at 1M (as ours)."""
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            decayed = 1e-4 * (1.0 - tf.minimum(step / 1e6, 1.0))
            return tf.where(step < 1e4, 1e-4 * step / 1e4, decayed)

    optimizer = keras.optimizers.AdamW(learning_rate=WarmupLinear(), weight_decay=0.01, beta_1=0.9, beta_2=0.999,
                                       epsilon=1e-6, global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])
    batch = make_batch(s)

    def losses(features, training):
        out = backbone({"token_ids": features["input_ids"], "segment_ids": features["segment_ids"],
                        "padding_mask": features["input_mask"]}, training=training)
        logits = tf.cast(mlm_head(out["sequence_output"], mask_positions=features["masked_lm_positions"]), tf.float32)
        weights = features["masked_lm_weights"]
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["masked_lm_ids"], logits=logits)
        mlm = tf.reduce_sum(ce * weights) / tf.reduce_sum(weights)
        nsp_logits = tf.cast(nsp_head(out["pooled_output"]), tf.float32)
        nsp = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.reshape(features["next_sentence_labels"], [-1]), logits=nsp_logits))
        return mlm + nsp

    losses({k: v[:2] for k, v in batch.items()}, training=False)  # builds every layer (eager, batch 2)
    variables = backbone.trainable_variables + mlm_head.trainable_variables + nsp_head.trainable_variables
    optimizer.build(variables)

    @tf.function(jit_compile=xla)
    def train_step(features):
        with tf.GradientTape() as tape:
            loss = losses(features, training=True)
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return step_bench.time_steps(lambda: float(train_step(batch)), args.warmup, args.steps)


# --------------------------------------------------------------------------------------------- parent
def run_side(args: argparse.Namespace, side: str, config: str, python: str) -> dict:
    argv = [python, os.path.abspath(__file__), f"--child={side}:{config}"] + [
        f"--{k}={getattr(args, k)}" for k in ("size", "num_layers", "seq_len", "batch", "predictions", "vocab_size",
                                               "steps", "warmup", "dropout", "inter_op_threads")]
    if args.profile and side == "ours":
        argv.append(f"--profile={os.path.join(args.profile, config)}")
    return step_bench.run_child(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        fn = {"ours": child_ours, "peer": child_peer}[args.child.split(":")[0]]
        print(step_bench.child_result(fn(args)), flush=True)
        return
    s = shapes(args)
    flops = step_flops(s)
    peak = step_bench.matmul_peak()
    on_gpu = bool(peak["gpu"])
    configs = [c for c in (args.configs or ("fp32,bf16,bf16_xla" if on_gpu else "fp32,bf16")).split(",") if c]
    sides = [x for x in args.sides.split(",") if x]
    print(f"BERT-{args.size} ({s['layers']} layers, hidden {s['hidden']}, vocab {s['vocab']}) training step: "
          f"L={s['seq']} batch={s['batch']} predictions={s['predictions']}; {args.warmup} warm-up + "
          f"{args.steps} timed steps; each side a fresh process; model {flops / 1e9:,.0f} GFLOP/step")
    print(f"device: {peak['gpu'] or f'CPU, {os.cpu_count()} cores'}; measured matmul peak fp32 {peak['fp32']:,.0f} "
          f"GFLOP/s ({peak['fp32_cpu']:,.0f} per CPU-s), bf16 {peak['bf16']:,.0f} GFLOP/s ({peak['bf16_cpu']:,.0f} per CPU-s)")
    if "peer" in sides and not peer_available(args.peer_python):
        print(f"peer not installed: {PEER_INSTALL}")
        sides.remove("peer")
    print(f"{'config':<9} {'side':<10} {'s/step':>7} {'CPU s/step':>10} {'ex/s':>6} {'% matmul':>8} {'(CPU)':>6} "
          f"{'warm-up s':>9} {'peak RSS MiB':>12} {'load':>5} {'loss':>7}")
    for config in configs:
        runs: dict[str, list[dict]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side in sides:
                python = args.peer_python if side == "peer" else sys.executable
                try:
                    r = run_side(args, side, config, python)
                except RuntimeError as e:
                    print(f"{config:<9} {side:<10} FAILED: {str(e)[-1500:]}")
                    continue
                runs[side].append(r)
                wall, cpu = mean(r["step_wall_s"]), mean(r["step_cpu_s"])
                share, share_cpu = step_bench.shares(flops, wall, cpu, peak, CONFIGS[config][0])
                label = "textrain" if side == "ours" else "keras-hub"
                print(f"{config:<9} {label:<10} {wall:7.2f} {cpu:10.2f} {s['batch'] / wall:6.2f} {share:7.1f}% "
                      f"{share_cpu:5.1f}% {r['warmup_wall_s']:9.1f} {r['peak_rss_mib']:12,.0f} "
                      f"{r['load_avg_1m']:5.1f} {r['loss']:7.3f}", flush=True)
                for op, ms, count in r.get("profile", []):
                    print(f"    {op:<40} {ms:10.1f} ms  x{count}")
        if runs.get("ours") and runs.get("peer"):
            print(step_bench.ratio_line(config, runs["ours"], runs["peer"], goal(config)), flush=True)


def goal(config: str) -> str:
    """The goal for this BERT step's config (benchmarks/README.md)."""
    return "<= 0.75x time at >= 80 % of the bf16 peak" if config.startswith("bf16") else ">= 85 % of the peak"


if __name__ == "__main__":
    main()
