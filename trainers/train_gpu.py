"""textrain-train-gpu: pretrain/fine-tune a registered model on a registered problem, on one device,
many GPUs (MirroredStrategy) or many workers (MultiWorkerMirroredStrategy).

    textrain-train-gpu --problem=bert_pretrain --data_dir=data --model=bert --model_dir=runs/b \
        --bert_config_file=bert_config.json --train_batch_size=256 --num_gpus=8

Decisions:
- Strategy: `--strategy=auto` takes `--num_gpus` 0/1 -> OneDeviceStrategy, >1 -> MirroredStrategy over that
  many GPUs; `--strategy=multi_worker` -> MultiWorkerMirroredStrategy from TF_CONFIG. On a machine WITHOUT
  GPUs, `--num_gpus=N>1` splits the CPU into N logical devices and mirrors over them: the multi-replica
  code path runs for real (tests, CI), with no speed-up.
- Built-ins are registered by importing the `problems` and `models` packages
  (framework.registry.import_builtins); `--usr_dir` is imported before the problem flags are defined so
  its problems get flags too.
- The model is built by the model module's `build_from_flags(FLAGS, manifest)` (docs/CONTRACTS.md). A model
  class may instead define a `build_from_flags` classmethod/staticmethod; that one wins.
- The problem's settings are those recorded in the train split's manifest, then the flags given on the
  command line (so reading always matches how the records were written).
- Settings shared by the problem and the run (`--max_seq_length`, `--seq_len`, ...) are checked against the
  train split's manifest before anything is built; a mismatch is refused naming both values. For data
  made per host (XLNet's `bsz_per_host`), the per-worker batch must equal it.
- Exit status: 0 when training reached `--num_train_steps`, 143 after SIGTERM (checkpoint saved first),
  1 with a one-line `textrain-train-gpu: error: ...` when flags disagree with the data manifest.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from typing import Any, Callable

from absl import app, flags

FLAGS = flags.FLAGS

REQUIRED = ("problem", "data_dir", "model", "model_dir")


def split_cpu_for_replicas(num_gpus: int) -> None:
    """Without GPUs, --num_gpus=N>1 mirrors over N logical CPUs (must run before TF picks its devices)."""
    import tensorflow as tf

    if num_gpus <= 1 or tf.config.list_physical_devices("GPU"):
        return
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_gpus)
    except RuntimeError:  # already initialised (e.g. split by the caller): use what is there
        pass


def model_builder(model_cls: type) -> Callable[[Any, dict], Any]:
    """The model's `build_from_flags`: a class attribute if defined, else its module's function."""
    build = getattr(model_cls, "build_from_flags", None)
    if build is None:
        build = getattr(sys.modules[model_cls.__module__], "build_from_flags", None)
    if build is None:
        raise AttributeError(f"model {model_cls.registered_name!r} ({model_cls.__module__}) has no "
                             f"build_from_flags(flags, manifest); see docs/CONTRACTS.md")
    return build


def check_run_settings(manifest: dict, hparams_cls: type, num_input_pipelines: int) -> None:
    """Refuse command-line settings that disagree with how the data was made."""
    from framework.flags import given_flags
    from framework.problem import SettingsMismatchError, check_settings

    names = {f.name for f in dataclasses.fields(hparams_cls)} if dataclasses.is_dataclass(hparams_cls) else set()
    names |= {"max_seq_length", "max_predictions_per_seq", "seq_len", "reuse_len", "bi_data", "num_predict",
              "uncased", "perm_size", "mask_alpha", "mask_beta"}
    check_settings(manifest, given_flags(sorted(names)), source="the command line")
    per_host = manifest.get("settings", {}).get("bsz_per_host")
    if per_host and FLAGS.train_batch_size // num_input_pipelines != per_host:
        raise SettingsMismatchError(
            f"--train_batch_size={FLAGS.train_batch_size} gives {FLAGS.train_batch_size // num_input_pipelines} "
            f"rows per worker, but the data was made with bsz_per_host={per_host}")


def problem_hparams_for_training(problem_cls: type, manifest: dict) -> Any:
    """The problem's settings as the data was made (manifest), then the flags given on the command line.

    Reading must agree with writing (e.g. the record shapes follow max_predictions_per_seq), so a
    setting the user did not give comes from the manifest, not from the HParams default; a given flag
    that disagrees is refused by `check_run_settings`.
    """
    from framework.flags import given_flags

    cls = problem_cls.HParams
    if not dataclasses.is_dataclass(cls):
        return cls()
    names = [f.name for f in dataclasses.fields(cls)]
    settings = manifest.get("settings", {})
    values = {n: settings[n] for n in names if n in settings}
    values.update(given_flags(names))
    return cls(**values)


def train_config_from_flags():
    from trainers.core import TrainConfig

    return TrainConfig(
        model_dir=FLAGS.model_dir, num_train_steps=FLAGS.num_train_steps, global_batch_size=FLAGS.train_batch_size,
        iterations_per_loop=FLAGS.iterations_per_loop, save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max, log_steps=FLAGS.log_steps,
        grad_accum_steps=FLAGS.grad_accum_steps, clip_norm=FLAGS.clip_norm, jit_compile=FLAGS.jit_compile,
        precision=FLAGS.precision, nan_policy=FLAGS.nan_policy, mem_reset=FLAGS.mem_reset,
        input_mode=FLAGS.input_mode, init_checkpoint=FLAGS.init_checkpoint)


def optimizer_from_flags():
    from trainers.optimization import create_optimizer

    return create_optimizer(
        FLAGS.learning_rate, FLAGS.num_train_steps, FLAGS.num_warmup_steps, optimizer=FLAGS.optimizer,
        weight_decay=FLAGS.weight_decay, decay=FLAGS.lr_decay, power=FLAGS.poly_power,
        end_lr=FLAGS.learning_rate * FLAGS.min_lr_ratio, epsilon=FLAGS.adam_epsilon,
        beta_1=FLAGS.adam_beta1, beta_2=FLAGS.adam_beta2, lr_hidden_size=FLAGS.lr_hidden_size)


def apply_model_flag_defaults(model_cls: type) -> None:
    """A model module's `trainer_flag_defaults(FLAGS)` (tensor2tensor: the hparams set carries the batch,
    schedule and optimizer) sets every flag among them that the command line did not give."""
    defaults = getattr(sys.modules[model_cls.__module__], "trainer_flag_defaults", None)
    if defaults is None:
        return
    for name, value in defaults(FLAGS).items():
        if not FLAGS[name].present:
            FLAGS[name].value = value


def data_params_from_flags():
    """The reading knobs: batch (examples, or tokens with --batching=tokens), max_length, batching."""
    from framework.problem import DataParams

    return DataParams(batch_size=FLAGS.train_batch_size, seed=FLAGS.seed, max_length=FLAGS.max_length or 0,
                      batching=FLAGS.batching)


def main(argv: list[str]) -> None:
    del argv
    missing = [f"--{n}" for n in REQUIRED if not FLAGS[n].value]
    if missing:
        raise app.UsageError(f"missing required flag(s): {', '.join(missing)}")
    split_cpu_for_replicas(FLAGS.num_gpus)
    import tensorflow as tf

    from framework import cli, registry
    from framework.problem import ModeKeys
    from trainers import core

    logging.getLogger("textrain").setLevel(logging.INFO)
    # First: MultiWorkerMirroredStrategy must configure collectives before TF's context initialises.
    strategy = core.make_strategy(FLAGS.strategy, FLAGS.num_gpus, tpu=FLAGS.tpu, tpu_zone=FLAGS.tpu_zone,
                                  gcp_project=FLAGS.gcp_project)
    if FLAGS.seed is not None:
        tf.keras.utils.set_random_seed(FLAGS.seed)
    problem_cls = registry.problems.get(FLAGS.problem)
    manifest = problem_cls().read_manifest(FLAGS.data_dir, "train")
    try:
        # The manifest check first: a flag that disagrees with the data is named as such, not as
        # whichever invariant of the problem's settings it happens to break (XLNet's
        # --num_core_per_host vs bsz_per_host). A user error ends with its message, no traceback.
        check_run_settings(manifest, problem_cls.HParams, core.input_context(strategy).num_input_pipelines)
        problem = problem_cls(problem_hparams_for_training(problem_cls, manifest))
    except ValueError as e:
        raise cli.UserError(str(e)) from None
    model_cls = registry.models.get(FLAGS.model)
    try:
        apply_model_flag_defaults(model_cls)
    except ValueError as e:
        raise cli.UserError(str(e)) from None
    build = model_builder(model_cls)
    params = data_params_from_flags()

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return problem.dataset(ModeKeys.TRAIN, FLAGS.data_dir, params, input_context=ctx)

    trainer = core.Trainer(strategy, lambda: build(FLAGS, manifest), optimizer_from_flags, dataset_fn,
                           train_config_from_flags())
    result = trainer.train()
    figures = {"step": result.step, "loss": result.loss, **result.terms, **result.metrics,
               "examples_per_sec": round(result.examples_per_sec, 2), "skipped_steps": result.skipped_steps,
               "checkpoint": result.checkpoint, "preempted": result.preempted}
    print("final " + json.dumps(figures), flush=True)
    if result.preempted:
        sys.exit(143)


def define_all_flags(argv: list[str]) -> None:
    """Register built-ins and --usr_dir, then define problem and trainer flags (idempotent)."""
    from framework import registry
    from framework.flags import define_problem_flags
    from trainers.flags import define_trainer_flags

    registry.import_builtins()
    registry.import_usr_dir(registry.usr_dir_from_argv(argv))
    define_trainer_flags()
    define_problem_flags()


def run() -> None:
    """Console entry point `textrain-train-gpu`."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, os.getcwd())  # problems/models of a --usr_dir next to the working directory
    define_all_flags(sys.argv)
    from framework import cli

    cli.run_main("textrain-train-gpu", main)


if __name__ == "__main__":
    run()
