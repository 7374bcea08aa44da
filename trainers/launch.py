"""The launch code every trainer CLI shares (textrain-train-gpu, textrain-train-tpu): ONE copy.

A trainer CLI only decides its strategy and a few TrainConfig settings; everything else is here:
reading the train split's manifest, checking the command line against it, building the problem,
model and optimizer, the TrainConfig from the flags, the data seed, training through THE loop
(trainers/core.Trainer) and printing the final JSON line.

Decisions:
- The problem's settings are those recorded in the train split's manifest, then the flags given on the
  command line (so reading always matches how the records were written). Settings shared by the problem
  and the run (`--max_seq_length`, `--seq_len`, ...) are checked against the manifest before anything is
  built; a mismatch is refused naming both values. For data made per host (XLNet's `bsz_per_host`), the
  per-worker batch must equal it.
- A flag/data mismatch found while building (e.g. XLNet's per-core batch layout, raised as
  `framework.errors.SettingsMismatchError` by the problem's `dataset`) also ends as one line
  (`framework.errors.UserError`), never a traceback.
- Data seed. With `--seed` the input pipeline uses it. Without `--seed` a seed is drawn once per run and
  input pipeline and recorded in `{model_dir}/data_seed-{pipeline}.txt` (temp name, then rename); a
  resumed run reads it back, so it continues the very same stream (XLNet's parse-time permutations,
  shuffles) and `input_mode=distributed`'s resume-by-skipping is exact. Model initialisation stays
  unseeded without `--seed`, as users expect.
- The model is built by the model module's `build_from_flags(FLAGS, manifest)` (docs/CONTRACTS.md); a
  model class may instead define a `build_from_flags` classmethod/staticmethod, which then wins.
- Exit status: 0 when training reached `--num_train_steps`, 143 after SIGTERM (checkpoint saved first),
  1 with a one-line `textrain-<cli>: error: ...` for a user error.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import sys
from typing import Any, Callable

from absl import flags

FLAGS = flags.FLAGS
log = logging.getLogger("textrain.launch")

REQUIRED = ("problem", "data_dir", "model", "model_dir")

# Settings a trainer flag shares with a problem (checked against the data manifest).
SHARED_SETTINGS = ("max_seq_length", "max_predictions_per_seq", "seq_len", "reuse_len", "bi_data",
                   "num_predict", "uncased", "perm_size", "mask_alpha", "mask_beta")


def missing_required_flags() -> list[str]:
    return [f"--{n}" for n in REQUIRED if not FLAGS[n].value]


def split_cpu_for_replicas(num_replicas: int) -> None:
    """Without GPUs, N>1 replicas mirror over N logical CPUs (must run before TF picks its devices)."""
    import tensorflow as tf

    if num_replicas <= 1 or tf.config.list_physical_devices("GPU"):
        return
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_replicas)
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
    from textrain.framework.errors import SettingsMismatchError
    from textrain.framework.flags import given_flags
    from textrain.framework.manifests import check_settings

    names = {f.name for f in dataclasses.fields(hparams_cls)} if dataclasses.is_dataclass(hparams_cls) else set()
    names |= set(SHARED_SETTINGS)
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
    from textrain.framework.flags import given_flags

    cls = problem_cls.HParams
    if not dataclasses.is_dataclass(cls):
        return cls()
    names = [f.name for f in dataclasses.fields(cls)]
    settings = manifest.get("settings", {})
    values = {n: settings[n] for n in names if n in settings}
    values.update(given_flags(names))
    return cls(**values)


def train_config_from_flags(**overrides: Any):
    """core.TrainConfig from the flags; a trainer CLI overrides what it decides itself."""
    from textrain.trainers.core import TrainConfig

    values = dict(
        model_dir=FLAGS.model_dir, num_train_steps=FLAGS.num_train_steps, global_batch_size=FLAGS.train_batch_size,
        iterations_per_loop=FLAGS.iterations_per_loop, save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max, log_steps=FLAGS.log_steps,
        grad_accum_steps=FLAGS.grad_accum_steps, clip_norm=FLAGS.clip_norm, jit_compile=FLAGS.jit_compile,
        precision=FLAGS.precision, nan_policy=FLAGS.nan_policy, mem_reset=FLAGS.mem_reset,
        input_mode=FLAGS.input_mode, init_checkpoint=FLAGS.init_checkpoint)
    if FLAGS.use_bfloat16 and not FLAGS["precision"].present:
        values["precision"] = "bf16"
    values.update(overrides)
    return TrainConfig(**values)


def optimizer_from_flags(model=None):
    """The optimizer of the flags; `--layerwise_lr_decay` != 1 takes its layer depths from `model`."""
    from textrain.trainers.optimization import create_optimizer, model_depth_fn

    depth_fn, top_depth = model_depth_fn(model) if FLAGS.layerwise_lr_decay != 1.0 else (None, None)
    return create_optimizer(
        FLAGS.learning_rate, FLAGS.num_train_steps, FLAGS.num_warmup_steps, optimizer=FLAGS.optimizer,
        weight_decay=FLAGS.weight_decay, decay=FLAGS.lr_decay, power=FLAGS.poly_power,
        end_lr=FLAGS.learning_rate * FLAGS.min_lr_ratio, epsilon=FLAGS.adam_epsilon,
        layerwise_lr_decay=FLAGS.layerwise_lr_decay, depth_fn=depth_fn, top_depth=top_depth,
        beta_1=FLAGS.adam_beta1, beta_2=FLAGS.adam_beta2, lr_hidden_size=FLAGS.lr_hidden_size)


def apply_model_flag_defaults(model_cls: type) -> None:
    """A model module's `trainer_flag_defaults(FLAGS)` (tensor2tensor: the hparams set carries the batch,
    schedule and optimizer) sets every flag among them that the command line did not give."""
    defaults = getattr(sys.modules[model_cls.__module__], "trainer_flag_defaults", None)
    if defaults is None:
        # t2t-trainer's --hparams/--hparams_set steer the Transformer only; never ignore them silently.
        given = [f"--{name}" for name in ("hparams_set", "hparams") if FLAGS[name].value]
        if given:
            raise ValueError(f"{' and '.join(given)}: tensor2tensor's hyper-parameter set and overrides apply to "
                             f"--model=transformer, not --model={FLAGS.model} (ELECTRA's run_pretraining.py "
                             "--hparams JSON is read when its --data-dir and --model-name are given too)")
        return
    for name, value in defaults(FLAGS).items():
        if not FLAGS[name].present:
            FLAGS[name].value = value


def data_seed(model_dir: str, seed: int | None, pipeline_id: int) -> int:
    """The input pipeline's seed: `--seed`, else the one recorded for this run, else a fresh one (recorded)."""
    import tensorflow as tf

    if seed is not None:
        return seed
    path = os.path.join(model_dir, f"data_seed-{pipeline_id}.txt")
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            return int(f.read().strip())
    drawn = random.SystemRandom().randrange(2**31)
    tf.io.gfile.makedirs(model_dir)
    tmp = f"{path}.tmp-{os.getpid()}"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(f"{drawn}\n")
    tf.io.gfile.rename(tmp, path, overwrite=True)
    log.info("no --seed: the input pipeline uses seed %d, recorded in %s for resumes", drawn, path)
    return drawn


def run_training(prog: str, strategy, *, data_params: dict | None = None,
                 config_overrides: dict | None = None,
                 check_dataset: Callable[[Any], None] | None = None) -> None:
    """Build everything from the flags under `strategy`, train through core.Trainer, print the final line.

    data_params: extra framework.problem.DataParams fields (train_tpu: fixed shapes, drop_remainder);
    config_overrides: TrainConfig fields the CLI decides (train_tpu: input_mode, jit_compile);
    check_dataset(ds): called on each input pipeline's dataset (train_tpu: static shapes).
    Exits 143 after SIGTERM; user errors are raised as framework.errors.UserError.
    """
    import tensorflow as tf

    from textrain.framework import errors, registry
    from textrain.framework.errors import SettingsMismatchError
    from textrain.framework.problem import DataParams, ModeKeys
    from textrain.trainers import core

    logging.getLogger("textrain").setLevel(logging.INFO)
    if FLAGS.seed is not None:
        tf.keras.utils.set_random_seed(FLAGS.seed)
    problem_cls = registry.problems.get(FLAGS.problem)
    manifest = problem_cls().read_manifest(FLAGS.data_dir, "train")
    context = core.input_context(strategy)
    try:
        # The manifest check first: a flag that disagrees with the data is named as such, not as
        # whichever invariant of the problem's settings it happens to break (XLNet's
        # --num_core_per_host vs bsz_per_host).
        check_run_settings(manifest, problem_cls.HParams, context.num_input_pipelines)
        problem = problem_cls(problem_hparams_for_training(problem_cls, manifest))
    except ValueError as e:
        raise errors.UserError(str(e)) from None
    model_cls = registry.models.get(FLAGS.model)
    try:
        apply_model_flag_defaults(model_cls)
    except ValueError as e:
        raise errors.UserError(str(e)) from None
    build = model_builder(model_cls)
    # The reading knobs: batch (examples, or tokens with --batching=tokens), max_length, batching.
    reading = dict(batch_size=FLAGS.train_batch_size, max_length=FLAGS.max_length or 0, batching=FLAGS.batching,
                   seed=data_seed(FLAGS.model_dir, FLAGS.seed, context.input_pipeline_id))
    params = DataParams(**{**reading, **(data_params or {})})

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = problem.dataset(ModeKeys.TRAIN, FLAGS.data_dir, params, input_context=ctx)
        if check_dataset is not None:
            check_dataset(ds)
        return ds

    built = {}

    def model_fn():
        built["model"] = build(FLAGS, manifest)
        return built["model"]

    if FLAGS.do_eval:  # before training: a missing dev split is found now, not after hours
        try:
            problem.read_manifest(FLAGS.data_dir, "dev")
        except FileNotFoundError as e:
            raise errors.UserError(f"--do_eval: {e} (pretraining problems make it with --dev_fraction > 0)") from None
    try:
        trainer = core.Trainer(strategy, model_fn, lambda: optimizer_from_flags(built["model"]), dataset_fn,
                               train_config_from_flags(**(config_overrides or {})))
    except SettingsMismatchError as e:  # the data's layout vs this run (found while building the input)
        raise errors.UserError(str(e)) from None
    result = trainer.train() if FLAGS.do_train else None
    if FLAGS.do_eval and not (result is not None and result.preempted):
        # run_pretraining.py --do_eval: the model's own metrics on the dev split, through the one eval loop.
        from textrain.trainers.evaluation import PeriodicEvaluator, eval_dataset_fn

        evaluator = PeriodicEvaluator(strategy, trainer.model, FLAGS.model_dir,
                                      {"dev": eval_dataset_fn(problem, FLAGS.data_dir, "dev", FLAGS.eval_batch_size)},
                                      max_steps=FLAGS.max_eval_steps, is_chief=trainer.is_chief)
        print("eval " + json.dumps(evaluator.run(int(trainer.step.numpy()))["dev"]), flush=True)
    if result is None:
        print("final " + json.dumps({"step": int(trainer.step.numpy()), "trained": False}), flush=True)
        return
    figures = {"step": result.step, "loss": result.loss, **result.terms, **result.metrics,
               "examples_per_sec": round(result.examples_per_sec, 2), "skipped_steps": result.skipped_steps,
               "checkpoint": result.checkpoint, "preempted": result.preempted}
    print("final " + json.dumps(figures), flush=True)
    if result.preempted:
        sys.exit(128 + (result.stop_signal or 15))  # 143 after SIGTERM, 130 after Ctrl-C


def define_all_flags(argv: list[str]) -> None:
    """Register built-ins and --usr_dir, then define problem and trainer flags (idempotent)."""
    from textrain.framework import registry
    from textrain.framework.flags import define_problem_flags
    from textrain.trainers.flags import define_trainer_flags

    registry.import_builtins()
    registry.import_usr_dir(registry.usr_dir_from_argv(argv))
    define_trainer_flags()
    define_problem_flags()


def console_main(prog: str, main: Callable[[list[str]], None]) -> None:
    """A trainer's console entry point: the originals' flag names translated, flags defined, main run."""
    from textrain.framework import cli
    from textrain.framework.flag_aliases import translate_argv

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, os.getcwd())  # problems/models of a --usr_dir next to the working directory
    try:
        sys.argv = translate_argv(sys.argv, "train")
    except ValueError as e:
        cli.fail(prog, str(e))
    define_all_flags(sys.argv)
    cli.run_main(prog, main)
