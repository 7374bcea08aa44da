"""What the training-step benchmarks share (bench_bert_step, bench_electra's step part, bench_xlnet_step):
time OUR step as users run it, measure the machine's matmul peak, profile a step, and find the device.

Decisions:
- Our side is `trainers.core.Trainer`, THE training step (all-reduced counts, dense gradients, global-norm
  clipping, the AdamW of trainers/optimization.py, the autograph host loop), fed a fixed batch from a
  repeated `tf.data` dataset. A benchmark-only loop would time something users never run. The timed call is
  `Trainer._loop_fn(1)`, exactly what `Trainer.train` calls per host loop, without the checkpoint that
  `train()` writes at its end (seconds of disk I/O for BERT-base that no step pays).
- Time is taken as wall AND CPU seconds of this process (`time.process_time`, all threads): on a shared,
  loaded machine CPU seconds are the steadier figure. Peak RSS is the process's `ru_maxrss`.
- The matmul peak is measured, not quoted: the best of ten timed square `tf.matmul`s (fp32 and bf16) on
  the same device, in a fresh process of the same run, per wall-second and per CPU-second. A side's share
  of it is model FLOPs per step / step time / matmul FLOP/s (FLOPs from the analytic counts in each
  benchmark: 2 per multiply-add, backward = 2 x forward), printed both ways: on a loaded machine the wall
  share swings with the load, the CPU share much less.
- Profiles use `tf.profiler.experimental` and are summarised from the written XSpace (`summarise_profile`):
  self time per TensorFlow op type over the host threads that execute kernels, so a benchmark can say where
  a step's time goes without TensorBoard.
"""
from __future__ import annotations

import glob
import json
import os
import resource
import statistics
import tempfile
import time
from collections import defaultdict
from typing import Any, Callable

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gpu_present() -> bool:
    """True when TensorFlow sees a GPU (the GPU paths of the step benchmarks run only then)."""
    import tensorflow as tf
    return bool(tf.config.list_physical_devices("GPU"))


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def matmul_gflops(dtype: str = "float32", n: int = 2048, repeats: int = 5) -> tuple[float, float]:
    """Measured (GFLOP per wall-second, GFLOP per CPU-second of this process) of an n x n x n `tf.matmul` in
    `dtype` ("float32" | "bfloat16") on the default device: the best of `repeats` timed runs after one warm-up
    (best = least disturbed by other jobs). On a loaded machine the CPU figure is the steadier one."""
    import tensorflow as tf
    a = tf.random.stateless_normal([n, n], seed=[1, 2], dtype=tf.float32)
    b = tf.random.stateless_normal([n, n], seed=[3, 4], dtype=tf.float32)
    a, b = tf.cast(a, dtype), tf.cast(b, dtype)
    mm = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y)[:1, :1], tf.float32)))
    float(mm(a, b))
    wall = cpu = float("inf")
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        float(mm(a, b))
        wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.process_time() - start_cpu)
    flops = 2 * n ** 3 / 1e9
    return flops / wall, flops / max(cpu, 1e-9)


def matmul_peak() -> dict:
    """The device's measured matmul GFLOP/s, fp32 and bf16, measured in a fresh process (so the caller's
    threads and memory do not disturb it): {"fp32", "bf16" (per wall-second), "fp32_cpu", "bf16_cpu" (per
    CPU-second), "gpu": device name or ""}."""
    import sys

    from benchmarks.lib import same_run
    out = same_run.run_measured([sys.executable, os.path.abspath(__file__), "--matmul"],
                                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))["output"]
    return parse_child(out)


def _matmul_child() -> dict:
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    n = 8192 if gpus else 2048
    (fp32, fp32_cpu), (bf16, bf16_cpu) = matmul_gflops("float32", n, 10), matmul_gflops("bfloat16", n, 10)
    return {"fp32": fp32, "bf16": bf16, "fp32_cpu": fp32_cpu, "bf16_cpu": bf16_cpu,
            "gpu": tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU") if gpus else ""}


def shares(flops: float, wall_s: float, cpu_s: float, peak: dict, precision: str) -> tuple[float, float]:
    """(% of the matmul peak per wall-second, % per CPU-second): model FLOPs / step time / matmul FLOP/s.
    On a GPU the CPU share means nothing and is NaN."""
    wall = 100 * flops / wall_s / (peak[precision] * 1e9)
    cpu = float("nan") if peak["gpu"] else 100 * flops / cpu_s / (peak[f"{precision}_cpu"] * 1e9)
    return wall, cpu


def fixed_dataset_fn(batch: dict) -> Callable:
    """`dataset_fn(InputContext)` for the Trainer: the same batch forever (speed does not depend on it)."""
    import tensorflow as tf

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return tf.data.Dataset.from_tensors(batch).repeat()

    return dataset_fn


def make_trainer(model_fn: Callable, batch: dict, *, precision: str = "fp32", jit_compile: bool = False,
                 learning_rate: float = 1e-4, num_warmup_steps: int = 10_000, num_train_steps: int = 1_000_000,
                 optimizer: str = "adamw", weight_decay: float = 0.01, clip_norm: float = 1.0,
                 model_dir: str | None = None):
    """A `Trainer` on one device (GPU 0 when present, else the CPU) with the optimizer the trainer CLIs
    build from these flags (`create_optimizer`), ready to step. Returns (trainer, model_dir)."""
    import sys
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from textrain.trainers.core import Trainer
    from textrain.trainers.optimization import create_optimizer
    from textrain.trainers.strategy import make_strategy
    from textrain.trainers.train_config import TrainConfig

    model_dir = model_dir or tempfile.mkdtemp(prefix="step_bench_")
    config = TrainConfig(model_dir=model_dir, num_train_steps=num_train_steps, iterations_per_loop=1,
                         log_steps=1, clip_norm=clip_norm, jit_compile=jit_compile, precision=precision,
                         handle_sigterm=False)
    strategy = make_strategy("one_device", num_gpus=1 if gpu_present() else 0)
    trainer = Trainer(strategy, model_fn,
                      lambda: create_optimizer(learning_rate, num_train_steps, num_warmup_steps,
                                               optimizer=optimizer, weight_decay=weight_decay),
                      fixed_dataset_fn(batch), config)
    return trainer, model_dir


def trainer_step_fn(trainer) -> Callable[[], float]:
    """One training step of `trainer` (the host loop `Trainer.train` runs, with one step); returns the loss."""
    import tensorflow as tf
    one = tf.constant(1, tf.int64)

    def step() -> float:
        _, last, _, _, _ = trainer._loop_fn(one)
        return float(last["loss"])  # float() waits for the step to finish

    return step


def time_steps(step: Callable[[], float], warmup: int, steps: int) -> dict[str, Any]:
    """Runs `warmup` untimed then `steps` timed calls of `step`; wall and CPU seconds of each timed step."""
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    loss = float("nan")
    for _ in range(warmup):
        loss = step()
    warm = dict(warmup_wall_s=time.perf_counter() - start_wall, warmup_cpu_s=time.process_time() - start_cpu)
    walls, cpus = [], []
    for _ in range(steps):
        w, c = time.perf_counter(), time.process_time()
        loss = step()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return dict(warm, step_wall_s=walls, step_cpu_s=cpus, loss=loss, peak_rss_mib=peak_rss_mib(),
                load_avg_1m=os.getloadavg()[0])


def profile_steps(step: Callable[[], float], logdir: str, steps: int = 1) -> str:
    """Runs `steps` steps under the TensorFlow profiler into `logdir`; returns the .xplane.pb written."""
    import tensorflow as tf
    tf.profiler.experimental.start(logdir, options=tf.profiler.experimental.ProfilerOptions(host_tracer_level=2))
    try:
        for _ in range(steps):
            step()
    finally:
        tf.profiler.experimental.stop()
    found = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))
    if not found:
        raise FileNotFoundError(f"the profiler wrote no .xplane.pb under {logdir}")
    return found[-1]


def summarise_profile(xplane_path: str, top: int = 25) -> list[tuple[str, float, int]]:
    """(op type, total ms, count) over the host's TF-op events of an XSpace, largest first.

    Reads the XSpace proto directly: events on the host plane whose metadata names a TF op
    (`name:OpType`) are attributed to OpType; nested events are not double counted because only the
    executor's per-op events carry that form. The runs of XLA-compiled functions (models/layers/fused.py,
    the fused optimizer update) carry no op name; they are summed as "(XLA-fused functions)".
    Durations are wall time per op: with TensorFlow's default inter-op parallelism two ops may run at
    once and share the cores, so for shares that add up profile with one inter-op thread."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # shipped with TensorFlow

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as f:
        space.ParseFromString(f.read())
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        meta = plane.event_metadata
        for line in plane.lines:
            for event in line.events:
                name = meta[event.metadata_id].name
                if name == "CpuExecutable::ExecuteAsyncOnStream":  # one run of an XLA-compiled function
                    totals["(XLA-fused functions)"] += event.duration_ps / 1e9
                    counts["(XLA-fused functions)"] += 1
                    continue
                if ":" not in name or "::" in name or name.startswith(("__inference", "Eager", "Iterator")):
                    continue
                op_type = name.rsplit(":", 1)[1]
                if not op_type or not (op_type[0].isupper() or op_type[0] == "_") or " " in op_type:
                    continue
                totals[op_type] += event.duration_ps / 1e9
                counts[op_type] += 1
    return sorted(((k, v, counts[k]) for k, v in totals.items()), key=lambda r: -r[1])[:top]


def child_result(result: dict) -> str:
    """The one line a child prints for its parent (parsed by `parse_child`)."""
    return "RESULT " + json.dumps(result)


def parse_child(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"no RESULT line in the child's output:\n{output[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def run_child(argv: list[str]) -> dict[str, Any]:
    """Runs a child (`argv`, which prints a RESULT line) in a fresh process: its parsed result, with the
    process tree's CPU and wall seconds (every side of every step benchmark runs this way)."""
    from benchmarks.lib import same_run  # here: a child process imports this module without the benchmarks package
    measured = same_run.run_measured(argv, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    result = parse_child(measured["output"])
    result["process_cpu_s"], result["process_wall_s"] = measured["cpu"], measured["wall"]
    return result


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def paired_ratios(ours: list[dict], peer: list[dict], key: str) -> list[float]:
    """ours / peer of `key`'s mean, run by run (the i-th run of each side ran next to each other)."""
    return [mean(o[key]) / mean(p[key]) for o, p in zip(ours, peer)]


def ratio_line(config: str, ours: list[dict], peer: list[dict], goal: str, what: str = "ours/peer") -> str:
    """Step wall and CPU-s of ours over the peer's (the median over paired runs, each run's wall ratio
    listed when there are several) and the larger peak RSS of each side, against `goal`."""
    wall, cpu = paired_ratios(ours, peer, "step_wall_s"), paired_ratios(ours, peer, "step_cpu_s")
    rounds = f" (rounds {', '.join(f'{x:.2f}' for x in wall)})" if len(wall) > 1 else ""
    rss = max(r["peak_rss_mib"] for r in ours) / max(r["peak_rss_mib"] for r in peer)
    return (f"{config:<10} {what}: step wall {statistics.median(wall):.2f}x{rounds}, "
            f"CPU {statistics.median(cpu):.2f}x, peak RSS {rss:.2f}x (goal {goal})")


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--matmul"]:
        print(child_result(_matmul_child()), flush=True)
