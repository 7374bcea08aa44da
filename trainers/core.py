"""The ONE training loop: every model and every tf.distribute strategy goes through `Trainer`.

What a step is. Each replica runs `model.step_output(features, state, training=True)`, which returns
sums and counts (`models.base.Term`). The counts are all-reduced (SUM) across replicas *inside the
gradient tape* (as constants), each replica's loss is `sum_k weight_k * total_k / global_count_k`, and
the per-replica gradients are all-reduced with SUM. The result is exactly the gradient of the global
mean, so N replicas give the same step as one replica with the same global batch even when replicas
hold different numbers of masked tokens. Metrics are reported as global means sum(total)/sum(count).

Decisions (and why):
- Input. Default `input_mode="host"`: each process (worker) builds ONE dataset through
  `dataset_fn(tf.distribute.InputContext)` — the same contract as `distribute_datasets_from_function`:
  batched per replica, element i of the worker's stream goes to local replica i % n_local — and
  iterates it with an ordinary tf.data iterator, which is trackable, so the iterator state is in the
  checkpoint and a killed run resumes on the very next batch. (The DistributedIterator of
  `distribute_datasets_from_function` cannot be checkpointed in TF 2.21.) The per-replica slices are
  handed to the replicas with `experimental_distribute_values_from_function` inside the compiled loop.
  `input_mode="distributed"` uses `strategy.distribute_datasets_from_function` (prefetch to device,
  multi-host TPU); its resume skips the batches already consumed, which is exact for the deterministic
  (seeded) pipelines of framework/pipeline.py.
  With several workers, each worker's iterator is saved beside the main checkpoint in
  `{model_dir}/input_pipeline_{i}/` at the same step (the chief's checkpoint cannot hold them all).
- Per-replica state (XLNet memories) lives in ON_READ (sync-on-read) variables: one copy per replica, on
  that replica's device, read and written in replica context, never gathered to the host during training.
  At a save each local replica's copy is stacked into one host variable of the pipeline's checkpoint and
  written back at a restore. `mem_reset="every_loop"` re-initialises them at the start of every host loop;
  "never" carries them for the whole run.
- A resumed run is the same run: everything that draws randomness during training draws from state in the
  checkpoint. Keras keeps its SeedGenerators (dropout, ELECTRA's masking and sampling) out of
  tf.train.Checkpoint's object graph, so their state variables are added to it explicitly (`rng`); the
  input iterator and the memories are saved per input pipeline. A checkpoint written before this was
  restored without them (logged).
- Host loop. `iterations_per_loop` steps run inside one tf.function (an autograph `tf.range` loop), so
  the TPU-style host loop and the GPU loop are one code path; summaries and logs are written on the
  host between loops, outside any compiled code.
- XLA. With `jit_compile=True` the model's forward pass is compiled (`tf.function(jit_compile=True)`)
  and so is its gradient; the collectives (count and gradient all-reduce) stay outside the cluster,
  because MirroredStrategy cannot place collectives inside an XLA function (TPUStrategy compiles the
  whole replica function anyway).
- Gradient accumulation over k micro-batches: the k micro-batches of a step go to ONE replica function
  (unrolled), which sums the local gradients and all-reduces them once. (Separate `strategy.run` calls
  per micro-batch let the replicas' collectives pair up out of order under MirroredStrategy.) Each micro-batch is normalised by its
  own global counts and the k gradients are averaged (exact when every micro-batch holds the same
  count, e.g. fixed num_predict; otherwise each micro-batch gets equal weight).
- Non-finite loss: `nan_policy="raise"` stops the loop at that step (its update is not applied) and
  raises FloatingPointError naming the step; "skip" drops that update and goes on (counted in logs).
  Non-finite gradients always skip the update (fp16 loss scaling relies on it).
- Precision: "bf16" sets Keras' mixed_bfloat16 policy (float32 variables); "fp16" sets mixed_float16
  with dynamic loss scaling (x2 after 2000 finite steps, /2 on overflow). Losses are summed in float32.
- Checkpoints: tf.train.Checkpoint(model, optimizer, step, iterator) + CheckpointManager keeping the
  last `keep_checkpoint_max`, restored automatically from `model_dir`. Only when nothing is there is
  `init_checkpoint` used: ours (object-based) or an original TF1 release (plain variable names), the
  latter through `model.tf1_variable_map()` and models/checkpoints.load_tf1_checkpoint with the
  pretraining heads allowed to stay unused.
- One strategy per process: a second MirroredStrategy restarts the collective instance keys while TF's
  collective executor remembers the first one's shapes (mismatch errors). So `make_strategy` returns the
  same MirroredStrategy for the same devices every time it is asked (several Trainers, or several test
  files, in one process share it).
- SIGTERM (preemption) and SIGINT (Ctrl-C) set a flag; the loop saves a checkpoint at the end of the
  current host loop and `train` returns with `preempted=True` and `stop_signal` (the CLI exits 128 + it:
  143 / 130). A second Ctrl-C interrupts at once.
- Faults (trainers/checkpoint_checks.py, trainers/nonfinite.py): the chief locks model_dir and removes
  `ckpt-N_temp*` folders of interrupted saves; a checkpoint in model_dir or an init_checkpoint that does
  not fit the model is refused, listing the variables, before anything is restored; non-finite steps
  say whether the loss or the gradient norm was non-finite; a run whose steps were mostly skipped fails.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import signal
import time
from typing import Any, Callable, Sequence

import tensorflow as tf

from textrain.models.base import StepOutput, TrainableModel
from textrain.framework.errors import UserError
from textrain.models import hf_format
from textrain.models.checkpoints import load_tf1_checkpoint

from textrain.trainers import checkpoint_checks, nonfinite
from textrain.trainers.optimization import Optimizer

log = logging.getLogger("textrain.trainer")

# Original checkpoint names a fine-tuning or continued-pretraining model may leave unused.
DEFAULT_INIT_ALLOW_UNEXPECTED = (r"^cls/", r"^generator_predictions/", r"^discriminator_predictions/",
                                 r"^generator/", r"/lm_loss/", r"^model/lm_loss/", r"^bert/pooler/",
                                 r"^electra/pooler/")


class TrainerSetupError(UserError, ValueError):
    """A trainer flag the run cannot honour (one line from any CLI; still a ValueError)."""


# ---------------------------------------------------------------------------------------- strategy
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


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
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


def seed_states(model: tf.keras.layers.Layer) -> list:
    """The state variables of every Keras SeedGenerator in `model`, in layer order (dropout, ELECTRA's
    masking): Keras tracks them outside tf.train.Checkpoint's object graph, so a checkpoint of the model
    alone would restart every random stream from its first draw."""
    states, seen = [], set()
    for layer in model._flatten_layers(include_self=True, recursive=True):
        for generator in getattr(layer, "_seed_generators", ()):
            if id(generator) not in seen:
                seen.add(id(generator))
                states.append(generator.state)
    return states


# ------------------------------------------------------------------------------------------ config
@dataclasses.dataclass
class TrainConfig:
    model_dir: str
    num_train_steps: int
    global_batch_size: int = 0          # for examples/s only (0: not reported)
    iterations_per_loop: int = 100
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_steps: int = 100                # a progress line every log_steps (see log_shortens_loops)
    # True (GPU trainer): a host loop also ends at every log_steps boundary, so a line comes at least that
    # often. False (TPU trainer, TPUEstimator's contract): iterations_per_loop steps per device call whatever
    # log_steps says; a line is logged between calls, at most once per call, when a boundary was crossed.
    log_shortens_loops: bool = True
    grad_accum_steps: int = 1
    clip_norm: float = 1.0              # 0 disables clipping
    jit_compile: bool = False
    precision: str = "fp32"             # fp32 | bf16 | fp16
    nan_policy: str = "raise"           # raise | skip
    mem_reset: str = "never"            # never | every_loop
    input_mode: str = "host"            # host (checkpointed iterator) | distributed
    init_checkpoint: str | None = None
    init_allow_unexpected: Sequence[str] = DEFAULT_INIT_ALLOW_UNEXPECTED
    init_head: bool = False  # fine-tuning models: also load the head of a TF1 / HF init_checkpoint
    handle_sigterm: bool = True
    loss_scale_period: int = 2000       # fp16: finite steps before the loss scale doubles
    eval_every_steps: int = 0           # host loops also end at multiples of this (evaluation callbacks)

    def validate(self) -> None:
        checks = [
            (self.num_train_steps > 0, f"num_train_steps must be > 0 (got {self.num_train_steps})"),
            (self.iterations_per_loop > 0, f"iterations_per_loop must be > 0 (got {self.iterations_per_loop})"),
            (self.save_checkpoints_steps > 0, f"save_checkpoints_steps must be > 0 (got {self.save_checkpoints_steps})"),
            (self.grad_accum_steps >= 1, f"grad_accum_steps must be >= 1 (got {self.grad_accum_steps})"),
            (self.precision in ("fp32", "bf16", "fp16"), f"precision must be fp32, bf16 or fp16 (got {self.precision!r})"),
            (self.nan_policy in ("raise", "skip"), f"nan_policy must be raise or skip (got {self.nan_policy!r})"),
            (self.mem_reset in ("never", "every_loop"), f"mem_reset must be never or every_loop (got {self.mem_reset!r})"),
            (self.input_mode in ("host", "distributed"), f"input_mode must be host or distributed (got {self.input_mode!r})"),
        ]
        for ok, message in checks:
            if not ok:
                raise TrainerSetupError(f"--{message}")


@dataclasses.dataclass
class TrainResult:
    step: int
    loss: float
    terms: dict[str, float]
    metrics: dict[str, float]
    examples_per_sec: float
    steps_per_sec: float
    skipped_steps: int
    preempted: bool
    checkpoint: str | None
    stop_signal: int = 0                # the signal that stopped the run early (SIGTERM / SIGINT), else 0


def set_precision_policy(precision: str) -> None:
    policy = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[precision]
    tf.keras.mixed_precision.set_global_policy(policy)


# ----------------------------------------------------------------------------------------- trainer
class Trainer:
    """Builds model, optimizer, input and checkpoints under `strategy`, then `train()`s.

    model_fn() -> TrainableModel and optimizer_fn() -> Optimizer (unbuilt) are called inside
    strategy.scope(); dataset_fn(InputContext) -> tf.data.Dataset batched per replica, repeated for
    training (an exhausted dataset ends training early with a log line).
    """

    def __init__(self, strategy: tf.distribute.Strategy, model_fn: Callable[[], TrainableModel],
                 optimizer_fn: Callable[[], Optimizer], dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset],
                 config: TrainConfig):
        config.validate()
        self.strategy = strategy
        self.config = config
        self.dataset_fn = dataset_fn
        self.is_chief = _is_chief(strategy)
        self._dir_lock = checkpoint_checks.prepare_model_dir(config.model_dir, self.is_chief)
        self.input_context = input_context(strategy)
        self.layout = PipelineLayout.of(self.input_context)
        self.num_replicas = strategy.num_replicas_in_sync
        self.num_local = self.layout.replicas_per_pipeline  # the replicas this process's dataset feeds
        set_precision_policy(config.precision)
        self._stop_requested = False
        self._stop_signal = 0
        self._skipped = 0

        sample = next(iter(dataset_fn(self.input_context)))  # one per-replica batch, to build the model
        with strategy.scope():
            self.model = model_fn()
            self.per_replica_batch = _batch_size(sample)
            self._term_names, self._metric_names = self._build_model(sample)
            self.optimizer = optimizer_fn()
            self.optimizer.build(self.model.trainable_variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            self._state_vars = self._make_state_variables()
            self._loss_scale = _DynamicLossScale(period=config.loss_scale_period) if config.precision == "fp16" else None
        self._forward_fn = (tf.function(self._forward, jit_compile=True) if config.jit_compile else self._forward)

        # A checkpoint saved on another topology restores model, optimizer, step and random streams; the
        # iterator and memories cannot move, so the input position is re-derived from the step.
        self._moved_from = self._saved_layout_if_moved()
        self._iterator = None
        if config.input_mode == "host":
            skip = 0
            if self._moved_from is not None:
                skip = self.layout.batches_consumed(self._saved_step(), config.grad_accum_steps)
            self._iterator = self._host_iterator(skip=skip)
        self._setup_checkpoints()
        self.restored_from = self._restore()
        if config.input_mode == "distributed":
            # Every pipeline's dataset (one per host or worker, each with its own InputContext) skips the
            # per-replica batches it has already dealt to its own replicas.
            step, accum = int(self.step.numpy()), config.grad_accum_steps
            self._dist_iterator = iter(strategy.distribute_datasets_from_function(
                lambda ctx: dataset_fn(ctx).skip(PipelineLayout.of(ctx).batches_consumed(step, accum))))
        self._loop_fn = tf.function(self._train_loop)
        self._writer = (tf.summary.create_file_writer(os.path.join(config.model_dir, "train"))
                        if self.is_chief else tf.summary.create_noop_writer())

    # ------------------------------------------------------------------------------------ building
    def _build_model(self, sample) -> tuple[list[str], list[str]]:
        """Create the model's variables with one forward pass (in the scope, not in a replica)."""
        out = self.model.step_output(sample, self.model.initial_state(self.per_replica_batch), training=False)
        _check_step_output(out)
        if not self.model.trainable_variables:
            raise ValueError(f"{type(self.model).__name__} has no trainable variables after a forward pass")
        return sorted(out.losses), sorted(out.metrics)

    def _make_state_variables(self):
        initial = self.model.initial_state(self.per_replica_batch)
        return tf.nest.map_structure(
            lambda t: tf.Variable(t, trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
                                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA), initial)

    def _host_iterator(self, skip: int):
        with tf.device(self.strategy.extended.worker_devices[0].rsplit("/device:", 1)[0] + "/device:CPU:0"):
            ds = self.dataset_fn(self.input_context)
            if skip:  # per-replica batches, counted before they are grouped by replica
                ds = ds.skip(skip)
            if self.num_local > 1:  # one element = the per-replica batches of all local replicas
                ds = ds.batch(self.num_local, drop_remainder=True)
            return iter(ds)

    # --------------------------------------------------------------------------------- checkpoints
    def _setup_checkpoints(self) -> None:
        cfg = self.config
        objects = dict(model=self.model, optimizer=self.optimizer, step=self.step)
        with tf.device("/cpu:0"):
            self._layout_var = tf.Variable([self.layout.num_pipelines, self.layout.num_replicas], dtype=tf.int64,
                                           trainable=False)
        objects["pipeline_layout"] = self._layout_var
        rng = seed_states(self.model)
        if rng:
            objects["rng"] = rng
        if self._loss_scale is not None:
            objects["loss_scale"] = self._loss_scale
        # What belongs to this input pipeline: its iterator and its replicas' memories. With one pipeline it
        # goes in the main checkpoint; with several, each pipeline keeps its own beside it (the chief's
        # checkpoint cannot hold the other workers' state).
        pipeline = {}
        if self._iterator is not None:
            pipeline["iterator"] = self._iterator
        self._state_snapshot = self._make_state_snapshot()
        if self._state_snapshot:
            pipeline["replica_state"] = self._state_snapshot
        many_pipelines = self.input_context.num_input_pipelines > 1
        if not many_pipelines:
            objects.update(pipeline)
        self._checkpoint_objects = objects
        self.checkpoint = tf.train.Checkpoint(**objects)
        directory = cfg.model_dir if self.is_chief else os.path.join(
            cfg.model_dir, ".worker_tmp", f"pipeline_{self.input_context.input_pipeline_id}")
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory,
                                                  max_to_keep=cfg.keep_checkpoint_max if self.is_chief else 1)
        self._input_manager = None
        if pipeline and many_pipelines:
            self._input_checkpoint = tf.train.Checkpoint(**pipeline)
            self._input_manager = tf.train.CheckpointManager(
                self._input_checkpoint, os.path.join(cfg.model_dir, f"input_pipeline_{self.input_context.input_pipeline_id}"),
                max_to_keep=cfg.keep_checkpoint_max)

    def _make_state_snapshot(self) -> list[tf.Variable]:
        """Host variables `[num_local, ...]` mirroring each per-replica state variable (see `save`)."""
        snapshot = []
        for var in tf.nest.flatten(self._state_vars):
            local = self.strategy.experimental_local_results(var)
            with tf.device("/cpu:0"):
                snapshot.append(tf.Variable(tf.zeros([len(local), *var.shape], var.dtype), trainable=False))
        return snapshot

    def _snapshot_state(self) -> None:
        for var, host in zip(tf.nest.flatten(self._state_vars), self._state_snapshot):
            host.assign(tf.stack([v.read_value() for v in self.strategy.experimental_local_results(var)]))

    def _restore_state_from_snapshot(self) -> None:
        for var, host in zip(tf.nest.flatten(self._state_vars), self._state_snapshot):
            for i, v in enumerate(self.strategy.experimental_local_results(var)):
                v.assign(host[i])

    def _restore(self) -> str | None:
        latest = tf.train.latest_checkpoint(self.config.model_dir)
        if latest:
            checkpoint_checks.check_model_dir_checkpoint(latest, self.model, self.config.model_dir)
            status = self._checkpoint_for(latest).restore(latest).assert_existing_objects_matched()
            if self._moved_from is not None:
                status.expect_partial()  # the old topology's iterator and memories stay unread
            if self._input_manager is None and "replica_state" in self._checkpoint_objects:
                self._restore_state_from_snapshot()
            self._restore_input_pipeline(int(self.step.numpy()))
            log.info("restored %s (step %d)", latest, int(self.step.numpy()))
            return latest
        if self.config.init_checkpoint:
            self._load_init_checkpoint(self.config.init_checkpoint)
            return self.config.init_checkpoint
        return None

    def _checkpoint_for(self, path: str) -> tf.train.Checkpoint:
        """The checkpoint object that restores `path`: all of ours, or, for a checkpoint written before the
        random streams and memories were saved, what it holds (the rest starts fresh, logged)."""
        saved = {name.split("/", 1)[0] for name, _ in tf.train.list_variables(path)}
        absent = [k for k in ("rng", "replica_state", "pipeline_layout")
                  if k in self._checkpoint_objects and k not in saved]
        if absent:
            log.warning("%s holds no %s (written by an earlier textrain): restored without, so the resumed run "
                        "is close to, not equal to, an uninterrupted one", path, " or ".join(absent))
        if self._moved_from is not None:
            absent += [k for k in ("iterator", "replica_state") if k in self._checkpoint_objects and k not in absent]
        if not absent:
            return self.checkpoint
        objects = {k: v for k, v in self._checkpoint_objects.items() if k not in absent}
        self._checkpoint_objects = objects
        return tf.train.Checkpoint(**objects)

    def _saved_layout_if_moved(self) -> PipelineLayout | None:
        """The layout the latest checkpoint in model_dir was saved with, when it differs from this run's."""
        latest = tf.train.latest_checkpoint(self.config.model_dir)
        if not latest:
            return None
        try:
            pipelines, replicas = tf.train.load_variable(latest, "pipeline_layout/.ATTRIBUTES/VARIABLE_VALUE")
        except (tf.errors.NotFoundError, ValueError):
            return None  # an earlier textrain's checkpoint: assumed to be this topology
        saved = PipelineLayout(int(pipelines), self.layout.pipeline_id, int(replicas))
        if (saved.num_pipelines, saved.num_replicas) == (self.layout.num_pipelines, self.layout.num_replicas):
            return None
        exact = saved.num_pipelines == self.layout.num_pipelines
        log.warning("%s was saved with %s; this run has %s. Model, optimizer, step and random streams are "
                    "restored; the input iterator cannot move between topologies, so each pipeline's position "
                    "is re-derived from the step (%s) and XLNet memories start fresh", latest, saved.describe(),
                    self.layout.describe(),
                    "exact: the same pipelines read the same examples per step" if exact else
                    "each pipeline skips its share of the examples consumed; the pipelines' shards changed, "
                    "so which examples those were is not the same")
        return saved

    def _saved_step(self) -> int:
        latest = tf.train.latest_checkpoint(self.config.model_dir)
        return int(tf.train.load_variable(latest, "step/.ATTRIBUTES/VARIABLE_VALUE"))

    def _restore_input_pipeline(self, step: int) -> None:
        if self._input_manager is None or self._moved_from is not None:
            return
        path = os.path.join(self._input_manager.directory, f"ckpt-{step}")
        if tf.io.gfile.exists(path + ".index"):
            self._input_checkpoint.restore(path).assert_existing_objects_matched()
            if self._state_snapshot:
                self._restore_state_from_snapshot()
        else:
            log.warning("no input-pipeline checkpoint %s: this worker's data starts from the beginning", path)

    def _load_init_checkpoint(self, path: str) -> None:
        if hasattr(self.model, "load_init_checkpoint"):  # fine-tuning models: encoder only, head fresh
            loaded = self.model.load_init_checkpoint(path, init_head=self.config.init_head)
            log.info("initialised %d encoder variables from %s", len(loaded), path)
            return
        path = path if hf_format.is_hf_directory(path) else checkpoint_checks.resolve_checkpoint(path)
        if not hf_format.is_hf_directory(path) and checkpoint_checks.is_textrain_checkpoint(path):
            loaded = checkpoint_checks.load_init_checkpoint(path, self.model, self.config.init_allow_unexpected)
            log.info("initialised %d variables from %s (textrain checkpoint)", len(loaded), path)
        else:
            loaded = load_tf1_checkpoint(path, self.model.tf1_variable_map(),
                                         allow_unexpected=self.config.init_allow_unexpected)
            log.info("initialised %d variables from %s (original TF1 checkpoint)", len(loaded), path)

    def save(self) -> str | None:
        step = int(self.step.numpy())
        if self._state_snapshot:
            self._snapshot_state()
        # Each pipeline's own state first: once the chief's checkpoint of this step is recorded, a restart
        # resumes from it, and every pipeline's state of that step must already be on disk (a kill between
        # the two writes would otherwise restart that pipeline's data from the beginning).
        if self._input_manager is not None:
            self._input_manager.save(checkpoint_number=step)
        path = self.manager.save(checkpoint_number=step)
        if not self.is_chief:  # every worker must take part in the save; only the chief's is kept
            tf.io.gfile.rmtree(self.manager.directory)
            return None
        return path

    # ---------------------------------------------------------------------------- the replica step
    def _forward(self, features, state):
        out = self.model.step_output(features, state, training=True)
        f32 = lambda t: tf.cast(t, tf.float32)  # noqa: E731
        losses = {k: (f32(t.total), f32(t.count)) for k, t in out.losses.items()}
        metrics = {k: (f32(t.total), f32(t.count)) for k, t in out.metrics.items()}
        self._loss_weights = {k: _python_weight(k, t.weight) for k, t in out.losses.items()}
        return losses, metrics, tf.nest.map_structure(tf.stop_gradient, out.state)

    def _replica_loss_and_grads(self, features):
        """This replica's share of the global loss, its (local) gradients, and global statistics."""
        ctx = tf.distribute.get_replica_context()
        variables = self.model.trainable_variables
        state = tf.nest.map_structure(lambda v: v.read_value(), self._state_vars)
        with tf.GradientTape() as tape:
            losses, metrics, new_state = self._forward_fn(features, state)
            counts = ctx.all_reduce(tf.distribute.ReduceOp.SUM, {k: c for k, (_, c) in losses.items()})
            loss = tf.add_n([self._loss_weights[k] * tf.math.divide_no_nan(t, counts[k])
                             for k, (t, _) in losses.items()])
            scaled = loss * self._loss_scale.value() if self._loss_scale is not None else loss
        grads = tape.gradient(scaled, variables)
        # Dense gradients (embedding lookups give IndexedSlices): all-reduce, clipping and accumulation
        # want one dense tensor per variable, as the originals do on TPU.
        self._no_gradient = [g is None for g in grads]  # trace time; such variables are left alone
        grads = [tf.zeros(v.shape, tf.float32) if g is None else tf.cast(tf.convert_to_tensor(g), tf.float32)
                 for g, v in zip(grads, variables)]
        tf.nest.map_structure(lambda var, t: var.assign(tf.cast(t, var.dtype)), self._state_vars, new_state)
        local = {"loss": loss}
        for k, (t, c) in losses.items():
            local[f"terms/{k}/total"], local[f"terms/{k}/count"] = t, c
        for k, (t, c) in metrics.items():
            local[f"metrics/{k}/total"], local[f"metrics/{k}/count"] = t, c
        stats = ctx.all_reduce(tf.distribute.ReduceOp.SUM, local)
        return grads, stats

    def _replica_step(self, batches):
        """One update from k micro-batches: local gradients summed, all-reduced once, clipped, applied."""
        ctx = tf.distribute.get_replica_context()
        variables = self.model.trainable_variables
        k = len(batches)
        grads, stats = self._replica_loss_and_grads(batches[0])
        for features in batches[1:]:  # unrolled: one replica function holds every collective, in order
            more_grads, more_stats = self._replica_loss_and_grads(features)
            grads = [a + b for a, b in zip(grads, more_grads)]
            stats = {name: stats[name] + more_stats[name] for name in stats}
        if k > 1:
            grads = [g / k for g in grads]
            stats["loss"] = stats["loss"] / k
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        if self._loss_scale is not None:
            grads = [g / self._loss_scale.value() for g in grads]
        grad_norm = tf.linalg.global_norm(grads)
        loss_finite = tf.math.is_finite(stats["loss"])
        update_ok = loss_finite & tf.math.is_finite(grad_norm)
        clip_scale = None
        if self.config.clip_norm > 0:
            # tf.clip_by_global_norm's factor, applied inside the optimizer's (fused) update instead of a
            # separate multiply over every gradient: the same float32 products, one pass fewer.
            use_norm = tf.where(update_ok, grad_norm, 1.0)
            clip_scale = self.config.clip_norm * tf.minimum(1.0 / use_norm, 1.0 / self.config.clip_norm)
        lr = self.optimizer.current_learning_rate()
        grads = [None if none else g for g, none in zip(grads, self._no_gradient)]
        self.optimizer.apply_gradients(zip(grads, variables), skip=tf.logical_not(update_ok), grad_scale=clip_scale)
        if self._loss_scale is not None:
            self._loss_scale.update(tf.math.is_finite(grad_norm))
            finite = loss_finite  # overflowing fp16 gradients are expected: skipped, not an error
        else:
            finite = update_ok
        return self._step_stats(stats, grad_norm=grad_norm, lr=lr, finite=finite)

    @staticmethod
    def _step_stats(stats, grad_norm, lr, finite):
        out = dict(stats)
        out["grad_norm"] = tf.cast(grad_norm, tf.float32)
        out["learning_rate"] = tf.cast(lr, tf.float32)
        out["finite"] = tf.cast(finite, tf.float32)
        return out

    # ------------------------------------------------------------------------------ the host loop
    def _next_batch(self):
        if self.config.input_mode == "distributed":
            return next(self._dist_iterator)
        element = next(self._iterator)
        if self.num_local == 1:
            return self.strategy.experimental_distribute_values_from_function(lambda ctx: element)
        n = self.num_local
        return self.strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.nest.map_structure(lambda t: t[ctx.replica_id_in_sync_group % n], element))

    def _first(self, per_replica):
        return tf.nest.map_structure(lambda v: self.strategy.experimental_local_results(v)[0], per_replica)

    def _one_step(self):
        batches = tuple(self._next_batch() for _ in range(self.config.grad_accum_steps))
        return self._first(self.strategy.run(self._replica_step, args=(batches,)))

    def _zero_stats(self) -> dict[str, tf.Tensor]:
        names = ["loss", "grad_norm", "learning_rate", "finite"]
        for k in self._term_names:
            names += [f"terms/{k}/total", f"terms/{k}/count"]
        for k in self._metric_names:
            names += [f"metrics/{k}/total", f"metrics/{k}/count"]
        return {n: tf.constant(0.0) for n in names}

    def _train_loop(self, num_steps):
        """`num_steps` steps in one tf.function; stops early at a non-finite loss when nan_policy=raise."""
        sums = self._zero_stats()
        last = self._zero_stats()
        done = tf.constant(0, tf.int64)
        skipped = tf.constant(0, tf.int64)
        bad = tf.zeros([2])  # loss and gradient norm of the last non-finite step
        for _ in tf.range(num_steps):
            last = self._one_step()
            done += 1
            self.step.assign_add(1)
            if last["finite"] < 0.5:
                skipped += 1
                bad = tf.stack([last["loss"], last["grad_norm"]])
                if self.config.nan_policy == "raise":
                    break
            else:
                sums = {n: sums[n] + last[n] for n in sums}
        return sums, last, done, skipped, bad

    def _refuse_other_batch_size(self, error: tf.errors.InvalidArgumentError, first_loop: bool) -> None:
        """A restored input iterator holds batches of the size it was saved with; a resume with another batch
        size meets them at the first step (TensorFlow's `Incompatible shapes ... expected [4,..] but got [8,..]`).
        Refused in one line naming both sizes: the iterator's position cannot be re-derived for another size."""
        import re
        found = re.search(r"Incompatible shapes at component \d+: expected \[(\d+)[,\]].* but got \[(\d+)[,\]]",
                          str(error))
        if not (first_loop and found and self.restored_from and self.restored_from != self.config.init_checkpoint):
            return
        now, saved = int(found.group(1)), int(found.group(2))
        scale = self.config.global_batch_size // now if self.config.global_batch_size and now else 1
        raise UserError(f"--model_dir={self.config.model_dir} was trained with batch size {saved * scale} "
                        f"({self.restored_from}); this run's is {now * scale}: resume with the batch size it was "
                        f"saved with, or start a new --model_dir") from None

    def _reset_state(self) -> None:
        initial = lambda: tf.nest.map_structure(  # noqa: E731
            lambda var, t: var.assign(tf.cast(t, var.dtype)), self._state_vars,
            self.model.initial_state(self.per_replica_batch))
        if tf.nest.flatten(self._state_vars):
            self.strategy.run(tf.function(initial))

    # ----------------------------------------------------------------------------------- training
    def train(self, callbacks: Sequence[Callable[[dict], None]] = ()) -> TrainResult:
        """Train to `num_train_steps`; returns the figures of the last loop."""
        cfg = self.config
        previous_handler = self._install_sigterm_handler()
        start_step = int(self.step.numpy())
        start_time = time.time()
        figures: dict[str, Any] = {"loss": float("nan"), "terms": {}, "metrics": {}}
        rate = steps_rate = 0.0
        saved = None
        saved_step = -1
        run_steps = run_skipped = 0
        last_bad = None
        try:
            step = start_step
            while step < cfg.num_train_steps and not self._stop_requested:
                if cfg.mem_reset == "every_loop":
                    self._reset_state()
                n = self._loop_length(step)
                t0 = time.time()
                try:
                    sums, last, done, skipped, bad = self._loop_fn(tf.constant(n, tf.int64))
                except tf.errors.OutOfRangeError:
                    log.warning("input exhausted at step %d; stopping", int(self.step.numpy()))
                    break
                except tf.errors.InvalidArgumentError as e:
                    self._refuse_other_batch_size(e, step == start_step)
                    raise
                elapsed = max(time.time() - t0, 1e-9)
                step = int(self.step.numpy())
                done, skipped = int(done), int(skipped)
                self._skipped += skipped
                run_steps, run_skipped = run_steps + done, run_skipped + skipped
                if skipped:
                    last_bad = (float(bad[0]), float(bad[1]))
                    log.warning("skipped %d of %d steps up to step %d: non-finite %s", skipped, done, step,
                                nonfinite.what_was_nonfinite(*last_bad))
                if cfg.nan_policy == "raise" and float(last["finite"]) < 0.5:
                    nonfinite.raise_nonfinite(step, float(last["loss"]), float(last["grad_norm"]))
                good = done - skipped  # figures average over good steps only (NaN when none)
                steps_rate = done / elapsed
                rate = steps_rate * cfg.global_batch_size * cfg.grad_accum_steps
                figures = _figures({k: float(v) for k, v in sums.items()}, good)
                figures.update(step=step, learning_rate=float(last["learning_rate"]),
                               grad_norm=float(last["grad_norm"]), examples_per_sec=rate, steps_per_sec=steps_rate)
                if self._crossed_log_boundary(step - done, step):
                    self._log_progress(figures, start_step, start_time)
                self._write_summaries(figures, step)
                for callback in callbacks:
                    callback(figures)
                if step % cfg.save_checkpoints_steps == 0 or step >= cfg.num_train_steps or self._stop_requested:
                    saved, saved_step = self.save(), step
            if int(self.step.numpy()) != saved_step:
                saved = self.save()
        finally:
            self._writer.flush()
            for signum, handler in (previous_handler or {}).items():
                signal.signal(signum, handler)
        if self._stop_requested:
            log.warning("%s: saved %s at step %d; exiting", signal.Signals(self._stop_signal).name
                        if self._stop_signal else "stop requested", saved, int(self.step.numpy()))
        nonfinite.check_mostly_skipped(run_skipped, run_steps, last_bad, saved)
        return TrainResult(step=int(self.step.numpy()), loss=figures["loss"], terms=figures["terms"],
                           metrics=figures["metrics"], examples_per_sec=rate, steps_per_sec=steps_rate,
                           skipped_steps=self._skipped, preempted=self._stop_requested, checkpoint=saved,
                           stop_signal=self._stop_signal)

    def _loop_length(self, step: int) -> int:
        """Steps of the next host loop: up to iterations_per_loop, never past a save, log or the end."""
        cfg = self.config
        n = min(cfg.iterations_per_loop, cfg.num_train_steps - step)
        ends = [cfg.save_checkpoints_steps, cfg.eval_every_steps] + ([cfg.log_steps] if cfg.log_shortens_loops else [])
        for every in ends:
            if every > 0:
                n = min(n, every - step % every)
        return max(n, 1)

    def _crossed_log_boundary(self, before: int, after: int) -> bool:
        """Whether the loop from step `before` to `after` reached a multiple of log_steps or the end."""
        every = self.config.log_steps
        return (self.config.log_shortens_loops or every <= 0 or after // every > before // every or after >= self.config.num_train_steps
                or self._stop_requested)

    def _install_sigterm_handler(self):
        if not self.config.handle_sigterm:
            return None

        def on_signal(signum, frame):
            if signum == signal.SIGINT and self._stop_signal == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: stop now
            self._stop_requested = True
            self._stop_signal = self._stop_signal or signum
            log.warning("%s received: saving a checkpoint at the end of this loop%s", signal.Signals(signum).name,
                        " (Ctrl-C again to stop at once)" if signum == signal.SIGINT else "")

        try:
            return {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        except ValueError:  # not the main thread
            return None

    def request_stop(self) -> None:
        """Programmatic preemption (same path as SIGTERM)."""
        self._stop_requested = True

    def _log_progress(self, fig: dict, start_step: int, start_time: float) -> None:
        step = fig["step"]
        elapsed = time.time() - start_time
        per_step = elapsed / max(step - start_step, 1)
        eta = per_step * (self.config.num_train_steps - step)
        parts = [f"step {step}/{self.config.num_train_steps}", f"loss {fig['loss']:.4f}"]
        parts += [f"{k} {v:.4f}" for k, v in fig["terms"].items()]
        parts += [f"{k} {v:.4f}" for k, v in fig["metrics"].items()]
        parts += [f"lr {fig['learning_rate']:.3g}", f"gnorm {fig['grad_norm']:.3g}",
                  f"{fig['steps_per_sec']:.2f} steps/s", f"{fig['examples_per_sec']:.1f} ex/s",
                  f"ETA {_hms(eta)}"]
        log.info(" | ".join(parts))

    def _write_summaries(self, fig: dict, step: int) -> None:
        with self._writer.as_default(step=step):
            tf.summary.scalar("loss", fig["loss"])
            for k, v in fig["terms"].items():
                tf.summary.scalar(f"losses/{k}", v)
            for k, v in fig["metrics"].items():
                tf.summary.scalar(f"metrics/{k}", v)
            tf.summary.scalar("learning_rate", fig["learning_rate"])
            tf.summary.scalar("grad_norm", fig["grad_norm"])
            tf.summary.scalar("examples_per_sec", fig["examples_per_sec"])
            tf.summary.scalar("steps_per_sec", fig["steps_per_sec"])


# ------------------------------------------------------------------------------------- loss scale
class _DynamicLossScale(tf.Module):
    """fp16 loss scale: x2 after `period` finite steps, /2 (not below 1) on a non-finite gradient."""

    def __init__(self, initial: float = 2.0 ** 15, period: int = 2000):
        super().__init__()
        self.scale = tf.Variable(initial, trainable=False, dtype=tf.float32)
        self.good_steps = tf.Variable(0, trainable=False, dtype=tf.int64)
        self.period = period

    def value(self) -> tf.Tensor:
        return tf.identity(self.scale)

    def update(self, finite: tf.Tensor):
        def apply(strategy, finite):
            # `finite` may be per-replica: each device computes the (identical) new values from its own copy.
            def new_scale(scale, good, ok):
                grow = ok & (good + 1 >= self.period)
                return scale.assign(tf.where(ok, tf.where(grow, scale * 2.0, scale), tf.maximum(scale / 2.0, 1.0)))

            def new_good(good, scale, ok):
                grow = ok & (good + 1 >= self.period)
                return good.assign(tf.where(ok & ~grow, good + 1, tf.constant(0, tf.int64)))

            # good_steps first is read by new_scale, so compute the scale from the old count before updating it.
            old_good = tf.identity(self.good_steps)
            done = strategy.extended.update(self.scale, new_scale, args=(old_good, finite), group=True)
            with tf.control_dependencies([done]):
                return strategy.extended.update(self.good_steps, new_good, args=(self.scale, finite), group=True)

        return tf.distribute.get_replica_context().merge_call(apply, args=(finite,))


# ---------------------------------------------------------------------------------------- helpers
def _batch_size(sample) -> int:
    first = tf.nest.flatten(sample)[0]
    return int(first.shape[0])


def _check_step_output(out) -> None:
    if not isinstance(out, StepOutput):
        raise TypeError(f"step_output must return models.base.StepOutput, got {type(out).__name__}")
    if not out.losses:
        raise ValueError("step_output returned no loss terms")


def _python_weight(name: str, weight) -> float:
    try:
        return float(weight)
    except TypeError:
        raise TypeError(f"loss term {name!r}: Term.weight must be a Python number, got {weight!r}") from None


def _figures(sums: dict[str, float], steps: int) -> dict[str, Any]:
    """Global means over the loop: loss averaged over steps, terms/metrics as sum(total)/sum(count)."""
    terms, metrics = {}, {}
    for key, value in sums.items():
        if key.endswith("/total"):
            kind, name, _ = key.split("/")
            count = sums[f"{kind}/{name}/count"]
            (terms if kind == "terms" else metrics)[name] = value / count if count else float("nan")
    return {"loss": sums["loss"] / steps if steps else float("nan"), "terms": terms, "metrics": metrics}


def _hms(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
