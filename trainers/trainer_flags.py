"""The trainer and model flags, defined in ONE place (the originals re-declared them in every script).

`define_trainer_flags()` is idempotent and defines every flag through `_define`, which skips a name that
is already defined. That matters because several names are BOTH a model/trainer setting and a problem
hyper-parameter that framework/flags.py defines from the problems' HParams dataclasses (`max_seq_length`,
`max_predictions_per_seq`, `seq_len`, `reuse_len`, `bi_data`, `num_predict`, `perm_size`, `mask_alpha`,
`mask_beta`, `uncased`, `num_core_per_host`, `vocab_size`): one flag serves both, whichever module defines
it first. That is the point: the trainer passes the value to the problem AND checks it against the data
manifest (framework.manifests.check_settings), refusing a mismatch with both values named. Such shared
flags default to None here ("not given": the problem's default, the manifest or the model preset
decides), so the two definitions can never disagree on a default or a type.

Names follow the originals where they exist: google-research/bert run_pretraining.py, zihangdai/xlnet
train_gpu.py, google-research/electra configure_pretraining.py. Model flags default to None, meaning
"the model's preset / config file value"; the help text says the original's default.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from absl import flags

FLAGS = flags.FLAGS

_DEFINERS = {"string": flags.DEFINE_string, "integer": flags.DEFINE_integer, "float": flags.DEFINE_float,
             "bool": flags.DEFINE_bool}


def _define(kind: str, name: str, default: Any, help_text: str, **kwargs: Any) -> None:
    """Define a flag unless a flag of that name exists (it is then shared: see the module docstring)."""
    if name in FLAGS:
        return
    if kind == "enum":
        flags.DEFINE_enum(name, default, kwargs.pop("values"), help_text)
    else:
        _DEFINERS[kind](name, default, help_text, **kwargs)


# (kind, name, default, help[, enum values])
_RUN_FLAGS = [
    ("string", "problem", None, "Registered problem name (framework.registry)."),
    ("string", "data_dir", None, "Directory of the generated records ({data_dir}/{problem}/...)."),
    ("string", "model", None, "Registered model name: bert, electra, xlnet (or one from --usr_dir)."),
    ("string", "model_dir", None, "Checkpoints and TensorBoard summaries; a run restarts from its latest checkpoint."),
    ("string", "usr_dir", None, "Python package of user problems/models to import (tensor2tensor's --t2t_usr_dir)."),
    ("integer", "num_gpus", 1, "0/1: one device; >1: MirroredStrategy over that many GPUs (logical CPUs in tests)."),
    ("enum", "strategy", "auto", "auto (by --num_gpus) | one_device | mirrored | multi_worker (TF_CONFIG) | tpu.",
     ["auto", "one_device", "mirrored", "multi_worker", "tpu"]),
    ("integer", "seed", None, "Seed of the model initialisation and of the input pipeline's shuffling."),
]

_BERT_RUN_FLAGS = [  # google-research/bert run_pretraining.py
    ("string", "bert_config_file", None, "BERT config JSON of the original release (else --model_size preset)."),
    ("string", "init_checkpoint", None, "Initial weights: a textrain checkpoint or an original TF1 release."),
    ("integer", "max_seq_length", None, "Sequence length (BERT/ELECTRA data); checked against the data manifest."),
    ("integer", "max_predictions_per_seq", None, "Masked positions per sequence; checked against the manifest."),
    ("integer", "train_batch_size", 32, "GLOBAL batch size (all replicas, all workers)."),
    ("integer", "num_train_steps", 100000, "Training steps (optimizer updates)."),
    ("integer", "num_warmup_steps", 10000, "Linear warmup steps."),
    ("float", "learning_rate", 5e-5, "Peak learning rate."),
    ("integer", "save_checkpoints_steps", 1000, "Save a checkpoint every this many steps."),
    ("integer", "iterations_per_loop", 1000, "Steps per compiled host loop (summaries/logs between loops)."),
    ("bool", "use_tpu", False, "Train on a TPU (train_tpu.py)."),
    ("bool", "do_train", True, "Train (run_pretraining.py's --do_train; default true here)."),
    ("bool", "do_eval", False, "After training, evaluate the model's losses/metrics on the dev split "
                               "(run_pretraining.py --do_eval); results in {model_dir}/eval_results.json."),
    ("integer", "max_eval_steps", 100, "Most eval batches (run_pretraining.py's --max_eval_steps)."),
    ("integer", "eval_batch_size", 8, "GLOBAL eval batch size (run_pretraining.py's --eval_batch_size)."),
    ("bool", "use_bfloat16", False, "bfloat16 activations: --precision=bf16 unless --precision is given "
     "(XLNet's and the TPU trainer's name)."),
]

_TPU_FLAGS = [
    ("string", "tpu", None, "TPU name or grpc address (TPUClusterResolver)."),
    ("string", "tpu_zone", None, "GCE zone of the TPU."),
    ("string", "gcp_project", None, "GCP project of the TPU."),
    ("integer", "num_hosts", 1, "TPU hosts."),
    ("integer", "num_core_per_host", None, "Cores per host (XLNet: also how the data was split, checked)."),
]

_OPTIMIZER_FLAGS = [
    ("enum", "optimizer", "adamw",
     "adamw (BERT's AdamWeightDecay, no bias correction) | adam (bias-corrected, decoupled decay: XLNet's) | lamb.",
     ["adamw", "adam", "lamb"]),
    ("float", "weight_decay", 0.01, "Decoupled weight decay (not on LayerNorm/bias)."),
    ("float", "adam_epsilon", 1e-6, "Adam epsilon (1e-6 in BERT/ELECTRA; XLNet used 1e-8)."),
    ("enum", "lr_decay", "linear",
     "Decay after warmup: linear | polynomial | cosine | constant | rsqrt_decay (tensor2tensor's "
     "Transformer schedule: learning_rate * min(1, step/warmup) * rsqrt(max(step, warmup)) * rsqrt(--lr_hidden_size)).",
     ["linear", "polynomial", "cosine", "constant", "rsqrt_decay"]),
    ("integer", "lr_hidden_size", 0, "rsqrt_decay: the hidden size of t2t's rsqrt_hidden_size factor (0: none)."),
    ("float", "adam_beta1", 0.9, "Adam beta1."),
    ("float", "adam_beta2", 0.999, "Adam beta2 (tensor2tensor's Transformer: 0.997)."),
    ("float", "poly_power", 1.0, "Power of the polynomial decay."),
    ("float", "min_lr_ratio", 0.0, "End learning rate as a fraction of the peak (XLNet's name)."),
    ("float", "layerwise_lr_decay", 1.0, "Per-layer LR decay (ELECTRA fine-tuning); 1 disables it."),
    ("float", "clip_norm", 1.0, "Global-norm gradient clipping (1.0 in the originals); 0 disables."),
    ("integer", "grad_accum_steps", 1, "Micro-batches per update (train_batch_size is per micro-batch)."),
]

_LOOP_FLAGS = [
    ("integer", "keep_checkpoint_max", 5, "Checkpoints kept in --model_dir."),
    ("enum", "precision", "fp32", "fp32 | bf16 (mixed_bfloat16) | fp16 (mixed_float16 + loss scaling).",
     ["fp32", "bf16", "fp16"]),
    ("bool", "jit_compile", False, "XLA-compile the model's forward and backward pass."),
    ("integer", "log_steps", 100, "A progress line (and summaries) at least every this many steps."),
    ("enum", "mem_reset", "never", "XLNet memories: never reset, or reset at every host loop.",
     ["never", "every_loop"]),
    ("enum", "nan_policy", "raise", "Non-finite loss: raise (naming the step) or skip the update.", ["raise", "skip"]),
    ("enum", "input_mode", "host", "host: checkpointed input iterator | distributed: prefetch to device.",
     ["host", "distributed"]),
]

_T2T_FLAGS = [  # tensor2tensor t2t-trainer; the transformer's hparams set gives defaults to flags not given
    ("string", "hparams_set", None, "Named hyper-parameter set (transformer_tiny|small|base|big); "
     "it also sets the trainer flags you do not give (batch, schedule, Adam)."),
    ("string", "hparams", "", "Comma-separated name=value overrides of the set, e.g. 'hidden_size=256,num_hidden_layers=2'."),
    ("integer", "max_length", None, "Variable-length problems: examples longer than this (tokens) are dropped; "
     "with --batching=fixed|tokens_fixed every batch is padded to it."),
    ("enum", "batching", "auto",
     "auto (the problem's) | bucket | fixed | pack | tokens (--train_batch_size in tokens, t2t length buckets) | "
     "tokens_fixed (TPU: train_batch_size // max_length examples padded to max_length).",
     ["auto", "bucket", "fixed", "pack", "tokens", "tokens_fixed"]),
]

ALL_FLAG_GROUPS = (_RUN_FLAGS, _BERT_RUN_FLAGS, _TPU_FLAGS, _OPTIMIZER_FLAGS, _LOOP_FLAGS)
_KINDS = {"int | None": "integer", "float | None": "float", "bool | None": "bool", "str | None": "string"}


def model_setting_flags() -> list[tuple[str, str, Any, str]]:
    """(kind, name, default, help) of every registered model's `Settings` field (models/base.py), each name
    once, registered order (the built-ins, then a --usr_dir's)."""
    from textrain.framework import registry

    registry.import_builtins()  # the built-in models' flags exist whatever the caller imported
    out, seen = [], set()
    for model in registry.models.names():
        settings = registry.models.get(model).Settings
        for field in dataclasses.fields(settings) if settings is not None else ():
            if field.name not in seen:
                seen.add(field.name)
                out.append((_KINDS[str(field.type)], field.name, field.default, field.metadata["help"]))
    return out


_DECODE_FLAGS = [  # tensor2tensor t2t-decoder (its --decode_hparams beam_size/alpha/batch_size/extra_length)
    ("string", "checkpoint_path", None, "Checkpoint to decode with (default: the latest in --model_dir)."),
    ("string", "decode_from_file", None, "Source sentences, one per line (default: stdin)."),
    ("string", "decode_to_file", None, "Where the translations go, one per line (default: stdout)."),
    ("string", "reference_file", None, "Reference translations, one per line: report sacreBLEU against them."),
    ("integer", "beam_size", None, "Beam width; 1 = greedy (default: the hparams set's, 4)."),
    ("float", "alpha", None, "Length penalty exponent of ((5+len)/6)^alpha (default: the hparams set's, 0.6)."),
    ("integer", "decode_batch_size", 32, "Sentences decoded together."),
    ("integer", "extra_length", None, "Decode at most input length + this many tokens (default: the set's, 100)."),
]


def define_decode_flags() -> None:
    """The decoder's own flags (textrain-decode), beside the run flags it shares with the trainers."""
    for kind, name, default, help_text in _DECODE_FLAGS:
        _define(kind, name, default, help_text)


def define_trainer_flags() -> None:
    """Define every trainer and model flag (idempotent; shared names are defined once)."""
    for group in (*ALL_FLAG_GROUPS, model_setting_flags(), _T2T_FLAGS):
        for kind, name, default, help_text, *values in group:
            if values:
                _define("enum", name, default, help_text, values=values[0])
            else:
                _define(kind, name, default, help_text)


def flag_names() -> list[str]:
    return [entry[1] for group in (*ALL_FLAG_GROUPS, model_setting_flags(), _T2T_FLAGS) for entry in group]


# ------------------------------------------------------------------------- flags -> model settings
# The config-file flag of each family (a run gives the one of its model): the setting `config_file`.
CONFIG_FILE_FLAGS = ("electra_config_file", "bert_config_file", "model_config_path")
# Flags that are model settings under their own (the originals') names; `--model_size` is `size`.
def model_setting_names() -> list[str]:
    return [entry[1] for entry in model_setting_flags()
            if entry[1] not in CONFIG_FILE_FLAGS + ("model_size",)] + ["hparams_set", "hparams"]


def model_settings_from_flags(values: Any) -> dict[str, Any]:
    """THE adapter from trainer flags to the keyword settings of a model's one constructor
    (`from_settings`, models/base.py): every model flag that is set (not None) under its name,
    `--model_size` as `size`, the config-file flag given as `config_file`. `values` is FLAGS (or any
    object with those attributes). Which settings a model reads is the model's business."""
    def value(name: str) -> Any:
        return getattr(values, name, None)

    settings = {name: value(name) for name in model_setting_names() if value(name) is not None}
    if value("model_size") is not None:
        settings["size"] = value("model_size")
    config_file = next((value(n) for n in CONFIG_FILE_FLAGS if value(n)), None)
    if config_file:
        settings["config_file"] = config_file
    return settings
