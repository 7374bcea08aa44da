"""The ONE training loop: every model and every tf.distribute strategy goes through `Trainer`.

What a step is. Each replica runs `model.step_output(features, state, training=True)`, which returns
sums and counts (`models.base.Term`). The counts are all-reduced (SUM) across replicas *inside the
gradient tape* (as constants), each replica's loss is `sum_k weight_k * total_k / global_count_k`, and
the per-replica gradients are all-reduced with SUM. The result is exactly the gradient of the global
mean, so N replicas give the same step as one replica with the same global batch even when replicas
hold different numbers of masked tokens. Metrics are reported as global means sum(total)/sum(count).

Decisions (and why); the strategy and input layout are trainers/strategy.py, checkpoints
trainers/checkpointing.py, the loop's settings trainers/train_config.py:
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
- SIGTERM (preemption) and SIGINT (Ctrl-C) set a flag; the loop saves a checkpoint at the end of the
  current host loop and `train` returns with `preempted=True` and `stop_signal` (the CLI exits 128 + it:
  143 / 130). A second Ctrl-C interrupts at once."""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable, Sequence

import tensorflow as tf
from absl import logging

from textrain.models.base import StepOutput, TrainableModel
from textrain.trainers import checkpoint_checks, nonfinite
from textrain.trainers.checkpointing import TrainerCheckpoints
from textrain.trainers.loss_scale import DynamicLossScale
from textrain.trainers.optimization import Optimizer
from textrain.trainers.strategy import PipelineLayout, input_context, is_chief, set_precision_policy
from textrain.trainers.train_config import TrainConfig, TrainResult


# ----------------------------------------------------------------------------------------- trainer
class Trainer(TrainerCheckpoints):
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
        self.is_chief = is_chief(strategy)
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
            self._loss_scale = DynamicLossScale(period=config.loss_scale_period) if config.precision == "fp16" else None
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
                 for g, v in zip(grads, variables, strict=True)]
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
            grads = [a + b for a, b in zip(grads, more_grads, strict=True)]
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
        grads = [None if none else g for g, none in zip(grads, self._no_gradient, strict=True)]
        self.optimizer.apply_gradients(zip(grads, variables, strict=True), skip=tf.logical_not(update_ok), grad_scale=clip_scale)
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
                    logging.warning("input exhausted at step %d; stopping", int(self.step.numpy()))
                    break
                elapsed = max(time.time() - t0, 1e-9)
                step = int(self.step.numpy())
                done, skipped = int(done), int(skipped)
                self._skipped += skipped
                run_steps, run_skipped = run_steps + done, run_skipped + skipped
                if skipped:
                    last_bad = (float(bad[0]), float(bad[1]))
                    logging.warning("skipped %d of %d steps up to step %d: non-finite %s", skipped, done, step,
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
            logging.warning("%s: saved %s at step %d; exiting", signal.Signals(self._stop_signal).name
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
            logging.warning("%s received: saving a checkpoint at the end of this loop%s", signal.Signals(signum).name,
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
        logging.info(" | ".join(parts))

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
