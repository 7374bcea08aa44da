"""Host overhead per step: iterations_per_loop 1 vs 100 on a tiny model, same run, same loop (trainers/core.py).

    nice -n 10 python3 benchmarks/bench_host_loop.py [--steps 2000] [--replicas 1]

The model is a 16 -> 4 linear classifier on an in-memory batch of 32, so a step's device work is tiny
and what is measured is what the host adds per device call: a tf.function call, the per-call
bookkeeping of the loop (figures, summaries, the progress line) and the Python between calls. With
iterations_per_loop=100 the host pays that once per 100 steps (the TPUEstimator device loop, which
train_tpu keeps). Each setting first runs one loop (tracing), then times `--steps` steps; wall seconds
and process CPU seconds are both printed (the machine may be shared).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from textrain.models.base import StepOutput, Term, TrainableModel  # noqa: E402
from textrain.trainers import core, optimization  # noqa: E402
from textrain.trainers.strategy import make_strategy  # noqa: E402
from textrain.trainers.train_config import TrainConfig  # noqa: E402


class Tiny(TrainableModel):
    def __init__(self):
        super().__init__(name="tiny")
        self.dense = tf.keras.layers.Dense(4, kernel_initializer="zeros")

    def step_output(self, features, state, training):
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(features["y"], self.dense(features["x"]))
        return StepOutput({"ce": Term(tf.reduce_sum(ce), tf.cast(tf.size(ce), tf.float32))}, {}, state)


def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    batch = ctx.get_per_replica_batch_size(32)
    x = rng.normal(size=(batch, 16)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    return tf.data.Dataset.from_tensors({"x": x, "y": y}).repeat()


def measure(strategy, iterations_per_loop: int, steps: int, model_dir: str) -> tuple[float, float]:
    """(steps/s wall, CPU seconds per step) for `steps` steps after one warm-up loop."""
    config = TrainConfig(model_dir=model_dir, num_train_steps=iterations_per_loop,
                              iterations_per_loop=iterations_per_loop, save_checkpoints_steps=10**9,
                              log_steps=10**9, handle_sigterm=False)
    trainer = core.Trainer(strategy, Tiny, lambda: optimization.create_optimizer(0.01, 10**6, 0), dataset_fn, config)
    trainer.train()  # traces the loop function
    trainer.config.num_train_steps += steps
    wall, cpu = time.perf_counter(), time.process_time()
    trainer.train()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return steps / wall, cpu / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--loops", type=int, nargs="+", default=[1, 100])
    args = parser.parse_args()
    logging.getLogger("textrain").setLevel(logging.WARNING)
    strategy = make_strategy("one_device", 0)
    print(f"tiny model (16->4 linear, batch 32), {args.steps} timed steps per setting, one device")
    results = {}
    for ipl in args.loops:
        with tempfile.TemporaryDirectory() as model_dir:
            results[ipl] = measure(strategy, ipl, args.steps, model_dir)
        rate, cpu = results[ipl]
        print(f"iterations_per_loop={ipl:4d}: {rate:8.1f} steps/s  ({1e3 / rate:.3f} ms wall, "
              f"{1e3 * cpu:.3f} ms CPU per step)")
    first, last = args.loops[0], args.loops[-1]
    print(f"device loop speed-up ({last} vs {first}): {results[last][0] / results[first][0]:.1f}x steps/s")


if __name__ == "__main__":
    main()
