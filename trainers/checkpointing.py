"""Checkpoints of the one loop: what a checkpoint holds, restoring it (also across topologies), and the
init checkpoint of a fresh run (ours, an original TF1 release or a Hugging Face directory).

Decisions:
- A resumed run is the same run: everything that draws randomness during training draws from state in the
  checkpoint. Keras keeps its SeedGenerators (dropout, ELECTRA's masking and sampling) out of
  tf.train.Checkpoint's object graph, so their state variables are added to it explicitly (`rng`); the
  input iterator and the memories are saved per input pipeline. A checkpoint written before this was
  restored without them (logged).
- Checkpoints: tf.train.Checkpoint(model, optimizer, step, iterator) + CheckpointManager keeping the
  last `keep_checkpoint_max`, restored automatically from `model_dir`. Only when nothing is there is
  `init_checkpoint` used: ours (object-based) or an original TF1 release (plain variable names), the
  latter through `model.tf1_variable_map()` and models/checkpoints.load_tf1_checkpoint with the
  pretraining heads allowed to stay unused.
- Faults (trainers/checkpoint_checks.py, trainers/nonfinite.py): the chief locks model_dir and removes
  `ckpt-N_temp*` folders of interrupted saves; a checkpoint in model_dir or an init_checkpoint that does
  not fit the model is refused, listing the variables, before anything is restored, and so is a resume with
  another global batch size (the checkpoint records the size beside the iterator); non-finite steps
  say whether the loss or the gradient norm was non-finite; a run whose steps were mostly skipped fails.
"""
from __future__ import annotations

import os

import tensorflow as tf
from absl import logging

from textrain.framework.errors import UserError
from textrain.models import hf_format
from textrain.models.base import FinetuneModel
from textrain.models.checkpoints import load_tf1_checkpoint
from textrain.trainers import checkpoint_checks
from textrain.trainers.strategy import PipelineLayout


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



class TrainerCheckpoints:
    """The checkpoint half of `core.Trainer` (its base class): reads the model, optimizer, step, iterators,
    replica state, layout and config the Trainer builds, and owns `checkpoint`, `manager` and `save()`."""

    def _setup_checkpoints(self) -> None:
        cfg = self.config
        objects = dict(model=self.model, optimizer=self.optimizer, step=self.step)
        with tf.device("/cpu:0"):
            self._layout_var = tf.Variable([self.layout.num_pipelines, self.layout.num_replicas], dtype=tf.int64,
                                           trainable=False)
        objects["pipeline_layout"] = self._layout_var
        if cfg.global_batch_size:
            # Read back before the iterator is restored: its saved batches have the size it was saved with.
            with tf.device("/cpu:0"):
                objects["global_batch_size"] = tf.Variable(cfg.global_batch_size, dtype=tf.int64, trainable=False)
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
        for var, host in zip(tf.nest.flatten(self._state_vars), self._state_snapshot, strict=True):
            host.assign(tf.stack([v.read_value() for v in self.strategy.experimental_local_results(var)]))

    def _restore_state_from_snapshot(self) -> None:
        for var, host in zip(tf.nest.flatten(self._state_vars), self._state_snapshot, strict=True):
            for i, v in enumerate(self.strategy.experimental_local_results(var)):
                v.assign(host[i])

    def _restore(self) -> str | None:
        latest = tf.train.latest_checkpoint(self.config.model_dir)
        if latest:
            checkpoint_checks.check_model_dir_checkpoint(latest, self.model, self.config.model_dir)
            self._refuse_other_batch_size(latest)
            status = self._checkpoint_for(latest).restore(latest).assert_existing_objects_matched()
            if self._moved_from is not None:
                status.expect_partial()  # the old topology's iterator and memories stay unread
            if self._input_manager is None and "replica_state" in self._checkpoint_objects:
                self._restore_state_from_snapshot()
            self._restore_input_pipeline(int(self.step.numpy()))
            logging.info("restored %s (step %d)", latest, int(self.step.numpy()))
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
            logging.warning("%s holds no %s (written by an earlier textrain): restored without, so the resumed run "
                        "is close to, not equal to, an uninterrupted one", path, " or ".join(absent))
        if "global_batch_size" in self._checkpoint_objects and "global_batch_size" not in saved:
            absent.append("global_batch_size")  # recorded for the check only: nothing to restore
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
        logging.warning("%s was saved with %s; this run has %s. Model, optimizer, step and random streams are "
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
            logging.warning("no input-pipeline checkpoint %s: this worker's data starts from the beginning", path)

    def _refuse_other_batch_size(self, latest: str) -> None:
        """A saved input iterator holds batches of the size it was saved with, and its position cannot be
        re-derived for another size: a resume with another global batch size is refused in one line naming
        both, before anything is restored."""
        restores_iterator = self._moved_from is None and (
            "iterator" in self._checkpoint_objects or self._input_manager is not None)
        if not (restores_iterator and "global_batch_size" in self._checkpoint_objects):
            return
        try:
            saved = int(tf.train.load_variable(latest, "global_batch_size/.ATTRIBUTES/VARIABLE_VALUE"))
        except (tf.errors.NotFoundError, ValueError):
            return  # an earlier textrain's checkpoint: it did not record the size
        now = self.config.global_batch_size
        if saved != now:
            raise UserError(f"--model_dir={self.config.model_dir} was trained with batch size {saved} ({latest}); "
                            f"this run's is {now}: resume with the batch size it was saved with, or start a new "
                            f"--model_dir")

    def _load_init_checkpoint(self, path: str) -> None:
        if isinstance(self.model, FinetuneModel):  # encoder only, head fresh
            loaded = self.model.load_init_checkpoint(path, init_head=self.config.init_head)
            logging.info("initialised %d encoder variables from %s", len(loaded), path)
            return
        path = path if hf_format.is_hf_directory(path) else checkpoint_checks.resolve_checkpoint(path)
        if not hf_format.is_hf_directory(path) and checkpoint_checks.is_textrain_checkpoint(path):
            loaded = checkpoint_checks.load_init_checkpoint(path, self.model, self.model.init_allow_unexpected)
            logging.info("initialised %d variables from %s (textrain checkpoint)", len(loaded), path)
        else:
            loaded = load_tf1_checkpoint(path, self.model.tf1_variable_map(),
                                         allow_unexpected=self.model.init_allow_unexpected)
            logging.info("initialised %d variables from %s (original TF1 checkpoint)", len(loaded), path)

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

