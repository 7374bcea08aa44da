"""The flag side every trainer CLI shares (textrain-train-gpu, textrain-train-tpu): flags -> RunSpec -> run.

A trainer CLI decides its strategy and a few TrainConfig settings; here the flags (and the train split's
manifest) are translated into ONE `trainers.run_spec.RunSpec`, which `trainers.run.run` runs; then the
final JSON line is printed from its result. Nothing here builds a model, optimizer or input pipeline.

Decisions:
- The problem's settings are those recorded in the train split's manifest, then the flags given on the
  command line (so reading always matches how the records were written). Settings shared by the problem
  and the run (`--max_seq_length`, `--seq_len`, ...) are checked against the manifest before anything is
  built; a mismatch is refused naming both values. For data made per host (XLNet's `bsz_per_host`), the
  per-worker batch must equal it.
- A flag/data mismatch found while building (e.g. XLNet's per-core batch layout, raised as
  `framework.errors.SettingsMismatchError` by the problem's `dataset`) also ends as one line
  (`framework.errors.UserError`), never a traceback.
- The model's settings are `trainers.trainer_flags.model_settings_from_flags(FLAGS)` (the one adapter); a model's
  hyper-parameter set may decide trainer flags the command line did not give (`trainer_defaults`,
  tensor2tensor's Transformer: batch, schedule, Adam).
- Without `--seed` the input seed is drawn once per run and recorded in model_dir (trainers/run.py).
- Exit status: 0 when training reached `--num_train_steps`, 143 after SIGTERM (checkpoint saved first),
  1 with a one-line `textrain-<cli>: error: ...` for a user error.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any, Callable

from absl import flags

from textrain.framework import lazy_tf

FLAGS = flags.FLAGS

REQUIRED = ("problem", "data_dir", "model", "model_dir")

# Settings a trainer flag shares with a problem (checked against the data manifest).
SHARED_SETTINGS = ("max_seq_length", "max_predictions_per_seq", "seq_len", "reuse_len", "bi_data",
                   "num_predict", "uncased", "perm_size", "mask_alpha", "mask_beta")


def missing_required_flags() -> list[str]:
    return [f"--{n}" for n in REQUIRED if not FLAGS[n].value]


def check_run_settings(manifest: dict, hparams_cls: type, layout) -> None:
    """Refuse command-line settings that disagree with how the data was made. `layout`: the run's
    `trainers/strategy.PipelineLayout` (per-host data such as XLNet's bsz_per_host is checked per input pipeline: per host
    on a TPU pod, per worker under MultiWorkerMirroredStrategy, as the problem's own dataset check counts)."""
    from textrain.framework.errors import SettingsMismatchError
    from textrain.framework.flags import given_flags
    from textrain.framework.manifests import check_settings

    names = {f.name for f in dataclasses.fields(hparams_cls)} if dataclasses.is_dataclass(hparams_cls) else set()
    names |= set(SHARED_SETTINGS)
    check_settings(manifest, given_flags(sorted(names)), source="the command line")
    per_host = manifest.get("settings", {}).get("bsz_per_host")
    if per_host and FLAGS.train_batch_size // layout.num_pipelines != per_host:
        raise SettingsMismatchError(
            f"--train_batch_size={FLAGS.train_batch_size} gives {FLAGS.train_batch_size // layout.num_pipelines} "
            f"rows per input pipeline ({layout.describe()}), but the data was made with bsz_per_host={per_host}")


def apply_model_flag_defaults(model_cls: type) -> None:
    """The model's `trainer_defaults` (tensor2tensor: the hparams set carries the batch, schedule and
    optimizer) set every flag among them that the command line did not give."""
    from textrain.trainers.trainer_flags import model_settings_from_flags

    defaults = model_cls.trainer_defaults(model_settings_from_flags(FLAGS))
    if not defaults:
        # t2t-trainer's --hparams/--hparams_set steer the Transformer only; never ignore them silently.
        given = [f"--{name}" for name in ("hparams_set", "hparams") if FLAGS[name].value]
        if given:
            raise ValueError(f"{' and '.join(given)}: tensor2tensor's hyper-parameter set and overrides apply to "
                             f"--model=transformer, not --model={FLAGS.model} (ELECTRA's run_pretraining.py "
                             "--hparams JSON is read when its --data-dir and --model-name are given too)")
        return
    for name, value in defaults.items():
        if not FLAGS[name].present:
            FLAGS[name].value = value


# The flags a trainer CLI's RunSpec takes, by their names (trainers/run_spec.spec_from_names).
SPEC_FLAGS = (
    "problem", "model", "data_dir", "do_train", "seed",
    # TrainConfig
    "model_dir", "num_train_steps", "train_batch_size", "iterations_per_loop", "save_checkpoints_steps",
    "keep_checkpoint_max", "log_steps", "grad_accum_steps", "clip_norm", "jit_compile", "precision", "nan_policy",
    "mem_reset", "input_mode", "init_checkpoint",
    # OptimizerSpec
    "learning_rate", "num_warmup_steps", "optimizer", "weight_decay", "lr_decay", "poly_power", "min_lr_ratio",
    "adam_epsilon", "adam_beta1", "adam_beta2", "layerwise_lr_decay", "lr_hidden_size",
    # InputSpec, EvalSpec
    "batching", "do_eval", "eval_batch_size", "max_eval_steps",
)


def run_spec_from_flags(strategy_spec, config_overrides: dict | None = None):
    """The RunSpec of the command line; `strategy_spec` is the trainer CLI's choice (its StrategySpec),
    `config_overrides` the TrainConfig fields it decides. The problem's settings are the train manifest's,
    then the flags given (trainers/run.resolve reads the manifest and checks the given ones against it)."""
    import dataclasses as dc

    from textrain.framework import errors, registry
    from textrain.framework.flags import given_flags
    from textrain.trainers.run_spec import spec_from_names
    from textrain.trainers.trainer_flags import model_settings_from_flags

    hparams_cls = registry.problems.get(FLAGS.problem).HParams
    names = [f.name for f in dc.fields(hparams_cls)] if dc.is_dataclass(hparams_cls) else []
    try:
        apply_model_flag_defaults(registry.models.get(FLAGS.model))
    except ValueError as e:
        raise errors.UserError(str(e)) from None
    values = {name: FLAGS[name].value for name in SPEC_FLAGS}
    if FLAGS.use_bfloat16 and not FLAGS["precision"].present:
        values["precision"] = "bf16"
    spec = spec_from_names(dict(
        values, hparams=given_flags(names), from_manifest=True,
        check_data=lambda manifest, layout: check_run_settings(manifest, hparams_cls, layout),
        settings=model_settings_from_flags(FLAGS), max_length=FLAGS.max_length or 0,
        # run_pretraining.py --do_eval: the model's own metrics on the dev split, through the one eval loop.
        splits=("dev",), task_metrics=False, **(config_overrides or {})))
    return dc.replace(spec, strategy=strategy_spec)


def run_training(prog: str, strategy_spec, strategy, *, config_overrides: dict | None = None,
                 check_dataset: Callable[[Any], None] | None = None) -> None:
    """The command line's RunSpec, run under `strategy` (built from `strategy_spec`, which the spec records:
    trainers/run.py); prints the final line(s).

    config_overrides: TrainConfig fields the CLI decides (train_tpu: input_mode, jit_compile);
    check_dataset(ds): called on each input pipeline's dataset (train_tpu: static shapes).
    Exits 143 after SIGTERM; user errors are raised as framework.errors.UserError.
    """
    from textrain.trainers.run import run

    del prog
    result = run(run_spec_from_flags(strategy_spec, config_overrides), strategy, check_dataset=check_dataset)
    if "dev" in result.eval and FLAGS.do_eval:
        print("eval " + json.dumps({k: v for k, v in result.eval["dev"].items() if k != "step"}), flush=True)
    trained = result.train
    if trained is None:
        print("final " + json.dumps({"step": result.step, "trained": False}), flush=True)
        return
    figures = {"step": trained.step, "loss": trained.loss, **trained.terms, **trained.metrics,
               "examples_per_sec": round(trained.examples_per_sec, 2), "skipped_steps": trained.skipped_steps,
               "checkpoint": trained.checkpoint, "preempted": trained.preempted}
    print("final " + json.dumps(figures), flush=True)
    if trained.preempted:
        sys.exit(128 + (trained.stop_signal or 15))  # 143 after SIGTERM, 130 after Ctrl-C


def define_all_flags(argv: list[str]) -> None:
    """Register built-ins and --usr_dir, then define problem and trainer flags (idempotent)."""
    from textrain.framework import registry
    from textrain.framework.flags import define_problem_flags
    from textrain.trainers.trainer_flags import define_trainer_flags

    registry.import_builtins()
    registry.import_usr_dir(registry.usr_dir_from_argv(argv))
    define_trainer_flags()
    define_problem_flags()


def console_main(prog: str, main: Callable[[list[str]], None]) -> None:
    """A trainer's console entry point: the originals' flag names translated, flags defined, main run."""
    from textrain.framework import cli
    from textrain.framework.flag_aliases import translate_argv

    lazy_tf.quiet_start(sys.argv)
    sys.path.insert(0, os.getcwd())  # problems/models of a --usr_dir next to the working directory
    try:
        sys.argv = translate_argv(sys.argv, "train")
    except ValueError as e:
        cli.fail(prog, str(e))
    define_all_flags(sys.argv)
    cli.run_main(prog, main)
