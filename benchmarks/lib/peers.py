"""What the step benchmarks that run keras-hub beside ours share (bench_electra.py --part=step,
bench_xlnet_step.py; each side runs in a fresh process through step_bench.run_child, as bench_bert_step.py's):
which sides run, a result row, the goal of the ours/peer ratio line, and the peer's Keras optimizer with our trainers' schedule.

Decisions:
- The peer (keras-hub 0.32.0) lives in `.venv-bench` only (see bench_bert_step.py for why and how to
  install it); without it a benchmark prints "peer not installed: <command>" and runs ours alone.
- Every side runs in its own process (`same_run.run_measured`), so its peak RSS is its own and a Keras
  precision policy does not leak into the next side.
- The peer's optimizer is Keras' AdamW / Adam with the linear warmup + linear decay of
  trainers/optimization.py and `global_clipnorm` (ours clips by global norm too). Keras' Adam family
  always applies bias correction; our `adamw` (BERT/ELECTRA's) does not: a few elementwise ops per
  variable, the same matmuls.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.lib import step_bench  # noqa: E402
from benchmarks.lib.step_bench import mean  # noqa: E402

PEER_PYTHON = os.path.join(step_bench.REPO, ".venv-bench", "bin", "python")
PEER_INSTALL = ("python3 -m venv --system-site-packages .venv-bench && "
                ".venv-bench/bin/pip install --no-deps keras-hub==0.32.0")

__all__ = ["PEER_INSTALL", "PEER_PYTHON", "choose_sides", "row", "GOAL",
           "keras_optimizer", "HEADER"]

HEADER = (f"{'config':<10} {'side':<16} {'s/step':>7} {'CPU s/step':>10} {'ex/s':>6} {'% matmul':>8} {'(CPU)':>6} "
          f"{'warm-up s':>9} {'peak RSS MiB':>12} {'load':>5} {'loss':>8}")


def peer_available(python: str) -> bool:
    """Whether `python` exists and imports keras_hub."""
    if not os.path.exists(python):
        return False
    import subprocess
    probe = subprocess.run([python, "-c", "import keras_hub"], capture_output=True,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return probe.returncode == 0


def choose_sides(spec: str, peer_python: str = PEER_PYTHON) -> list[str]:
    """The sides of `spec` ("ours,peer") that can run; a peer side without keras-hub is dropped with a line."""
    sides = [s for s in spec.split(",") if s]
    if any(s.startswith("peer") for s in sides) and not peer_available(peer_python):
        print(f"peer not installed: {PEER_INSTALL}")
        sides = [s for s in sides if not s.startswith("peer")]
    return sides


def row(config: str, label: str, r: dict, batch: int, flops: float, peak: dict, precision: str) -> str:
    """One printed line of a side's result (HEADER's columns)."""
    wall, cpu = mean(r["step_wall_s"]), mean(r["step_cpu_s"])
    share, share_cpu = step_bench.shares(flops, wall, cpu, peak, precision)
    return (f"{config:<10} {label:<16} {wall:7.2f} {cpu:10.2f} {batch / wall:6.2f} {share:7.1f}% {share_cpu:5.1f}% "
            f"{r['warmup_wall_s']:9.1f} {r['peak_rss_mib']:12,.0f} {r['load_avg_1m']:5.1f} {r['loss']:8.3f}")


GOAL = "<= 0.85x time, <= 1x RSS"  # the step goal beside keras-hub, for step_bench.ratio_line


def keras_optimizer(learning_rate: float, num_warmup_steps: int = 10_000, num_train_steps: int = 1_000_000,
                    weight_decay: float = 0.01, clip_norm: float = 1.0, epsilon: float = 1e-6):
    """The peer's optimizer: Keras AdamW (Adam when weight_decay is 0) with our schedule (linear warmup to
    `learning_rate`, linear decay to 0 at `num_train_steps`), LayerNorm/bias excluded from the decay."""
    import keras
    import tensorflow as tf

    class WarmupLinear(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            decayed = learning_rate * (1.0 - tf.minimum(step / num_train_steps, 1.0))
            return tf.where(step < num_warmup_steps, learning_rate * step / num_warmup_steps, decayed)

    if weight_decay == 0:
        return keras.optimizers.Adam(learning_rate=WarmupLinear(), beta_1=0.9, beta_2=0.999, epsilon=epsilon,
                                     global_clipnorm=clip_norm)
    optimizer = keras.optimizers.AdamW(learning_rate=WarmupLinear(), weight_decay=weight_decay, beta_1=0.9,
                                       beta_2=0.999, epsilon=epsilon, global_clipnorm=clip_norm)
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])
    return optimizer
