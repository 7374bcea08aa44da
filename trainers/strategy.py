"""The tf.distribute strategy of a run and the input layout under it (which input pipeline this process is).

Decisions:
- One strategy per process: a second MirroredStrategy restarts the collective instance keys while TF's
  collective executor remembers the first one's shapes (mismatch errors). So `make_strategy` returns the
  same MirroredStrategy for the same devices every time it is asked (several Trainers, or several test
  files, in one process share it)."""
from __future__ import annotations

import dataclasses
import functools
import os

import tensorflow as tf

from textrain.trainers.run_spec import StrategySpec
from textrain.trainers.train_config import TrainerSetupError


def make_strategy(kind: str = "auto", num_gpus: int = 0, *, tpu: str | None = None,
                  tpu_zone: str | None = None, gcp_project: str | None = None) -> tf.distribute.Strategy:
    """Build the tf.distribute strategy.

    kind: "auto" (num_gpus <= 1: one_device, else mirrored) | "one_device" | "mirrored" |
    "multi_worker" (MultiWorkerMirroredStrategy from TF_CONFIG) | "tpu".
    mirrored with `num_gpus` > the GPUs present uses that many logical CPUs when the CPU was split into
    logical devices (tests; see tests/conftest.py), and is an error otherwise.
    """
    # multi_worker and tpu first: listing logical devices initialises TF's context, after which
    # MultiWorkerMirroredStrategy can no longer configure its collectives.
    if kind == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise TrainerSetupError("--strategy=multi_worker needs the TF_CONFIG environment variable "
                             "(cluster and task of this worker)")
        return tf.distribute.MultiWorkerMirroredStrategy()
    if kind == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu, zone=tpu_zone, project=gcp_project)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if kind == "auto":
        kind = "mirrored" if num_gpus > 1 else "one_device"
    gpus = tf.config.list_logical_devices("GPU")
    if kind == "one_device":
        return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus and num_gpus != 0 else "/cpu:0")
    if kind == "mirrored":
        return _mirrored_strategy(tuple(_mirrored_devices(num_gpus, gpus)))
    raise TrainerSetupError(f"unknown strategy {kind!r}; use auto, one_device, mirrored, multi_worker or tpu")


@functools.lru_cache(maxsize=None)
def _mirrored_strategy(devices: tuple[str, ...]) -> tf.distribute.MirroredStrategy:
    # One instance per device set and process (see "One strategy per process" in the module docstring).
    return tf.distribute.MirroredStrategy(list(devices))


def _mirrored_devices(num_gpus: int, gpus: list) -> list[str]:
    if num_gpus <= 0:
        num_gpus = max(len(gpus), 1)
    if len(gpus) >= num_gpus:
        return [g.name for g in gpus[:num_gpus]]
    cpus = tf.config.list_logical_devices("CPU")
    if not gpus and len(cpus) >= num_gpus:
        return [c.name for c in cpus[:num_gpus]]
    raise TrainerSetupError(f"--num_gpus={num_gpus} but this machine has {len(gpus)} GPU(s) and {len(cpus)} "
                     f"logical CPU(s); lower --num_gpus")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief


def input_context(strategy: tf.distribute.Strategy) -> tf.distribute.InputContext:
    """This process's InputContext, as `distribute_datasets_from_function` hands it to the dataset function:
    one input pipeline per worker (MultiWorkerMirroredStrategy) or per host (TPUStrategy: one client feeds
    every host; this process builds pipeline 0 for its own checks, TF calls the dataset function once per
    host with that host's context)."""
    num_pipelines, pipeline_id = 1, 0
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        resolver = strategy.cluster_resolver
        spec = resolver.cluster_spec().as_dict()
        workers = len(spec.get("worker", [])) + len(spec.get("chief", []))
        num_pipelines = max(workers, 1)
        if resolver.task_type == "worker" and "chief" in spec:
            pipeline_id = resolver.task_id + 1
        elif resolver.task_type == "worker":
            pipeline_id = resolver.task_id
    elif isinstance(strategy, tf.distribute.TPUStrategy):
        num_pipelines = max(int(strategy.extended.num_hosts), 1)
    return tf.distribute.InputContext(num_input_pipelines=num_pipelines, input_pipeline_id=pipeline_id,
                                      num_replicas_in_sync=strategy.num_replicas_in_sync)


@dataclasses.dataclass(frozen=True)
class PipelineLayout:
    """Which input pipeline this is, how many there are and how many replicas each one feeds: the one source
    of truth for the resume skip, per-host batch checks, per-pipeline data seeds and logs. Built from an
    InputContext, so under every strategy it says what `distribute_datasets_from_function` does: each
    pipeline's dataset yields per-replica batches dealt to its own replicas only."""

    num_pipelines: int
    pipeline_id: int
    num_replicas: int

    @classmethod
    def of(cls, ctx: tf.distribute.InputContext) -> "PipelineLayout":
        return cls(ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync)

    @property
    def replicas_per_pipeline(self) -> int:
        return max(self.num_replicas // self.num_pipelines, 1)

    def pipeline_batch(self, global_batch: int) -> int:
        """Examples this pipeline reads per step (per micro-batch) of `global_batch`."""
        if global_batch % self.num_replicas:
            raise TrainerSetupError(f"--train_batch_size={global_batch} is not a multiple of the "
                                    f"{self.num_replicas} replicas")
        return global_batch // self.num_pipelines

    def batches_consumed(self, step: int, grad_accum_steps: int = 1) -> int:
        """Per-replica batches this pipeline's dataset has yielded after `step` steps."""
        return step * grad_accum_steps * self.replicas_per_pipeline

    def describe(self) -> str:
        return (f"{self.num_pipelines} input pipeline(s) x {self.replicas_per_pipeline} replica(s) "
                f"({self.num_replicas} in all)")


def set_precision_policy(precision: str) -> None:
    policy = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[precision]
    tf.keras.mixed_precision.set_global_policy(policy)


def split_cpu_for_replicas(num_replicas: int) -> None:
    """Without GPUs, N>1 replicas mirror over N logical CPUs (must run before TF picks its devices)."""
    if num_replicas <= 1 or tf.config.list_physical_devices("GPU"):
        return
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_replicas)
    except RuntimeError:  # already initialised (e.g. split by the caller): use what is there
        pass


def strategy_from_spec(spec: StrategySpec) -> tf.distribute.Strategy:
    """The spec's strategy; first, so MultiWorkerMirroredStrategy configures collectives before TF's
    context initialises."""
    split_cpu_for_replicas(spec.num_gpus)
    return make_strategy(spec.kind, spec.num_gpus, tpu=spec.tpu, tpu_zone=spec.tpu_zone,
                              gcp_project=spec.gcp_project)
