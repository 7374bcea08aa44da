"""textrain-finetune: fine-tune a pretrained encoder on a sequence-level task, configured with gin.

    textrain-finetune --gin_file=configs/bert_base.gin --gin_file=configs/glue_mrpc.gin \
        --gin_param="finetune.data_dir='glue_data'" --gin_param="finetune.model_dir='runs/mrpc'" \
        --gin_param="finetune.init_checkpoint='uncased_L-12_H-768_A-12/bert_model.ckpt'"

One configurable, `finetune`, holds everything a run needs (every argument of `finetune()` below is a
binding); configs/ has a base file per model family and size and one per task, combined with gin's
`include` or several --gin_file flags (later files and --gin_param override earlier ones).

`finetune()` is a thin binding: each argument fills the `trainers.run_spec.RunSpec` field of its name
(`run_spec.spec_from_names`; the originals' names such as `train_batch_size` and `do_eval` mapped once in
`run_spec.CLI_NAMES`, the same table the trainer flags go through), and `trainers.run.run` does the rest:
its `resolve` builds the problem, makes its records if absent and works out the label count and steps.

What a run does, in order: registers the built-ins (and `usr_dir`); builds the task problem with
`problem_hparams` (+ `max_seq_length`); runs the problem's own `generate_data` when its records are
absent (`datagen=True`: one command for the user; textrain-datagen --problem=<task> makes the same
records); builds the classifier named by `model` from a size preset or a config file (+ overrides) with
the task's label count; initialises its encoder from `init_checkpoint` (an original TF1 release or a
textrain pretraining run's model_dir; the head stays fresh); trains with the one loop
(trainers/core.py), evaluating every `eval_every_steps` and at the end on the task's eval splits
(trainers/evaluation.py: eval_results.json, TensorBoard, best/ by the task's main metric); predicts the
task's predict splits (`predict_<split>.tsv` / `.jsonl`); exports a SavedModel (`export=True`,
trainers/export.py).

Decisions:
- Steps: `num_train_steps` if bound, else int(num_train_examples / train_batch_size * num_train_epochs)
  as run_classifier.py; warmup = int(num_train_steps * warmup_proportion) (trainers/run.resolve).
- `gin.tf` does not import with TF 2.21, so this module registers tf.io.gfile as gin's file reader
  itself (gs:// configs work) and adds configs/ to the include search path.
- The operative config (every value the run used, defaults included) goes to
  `{model_dir}/operative_config.gin` and to TensorBoard as text (`{model_dir}/train`).
- A misspelled binding or configurable, a missing required value, an unknown problem setting or model
  name: one line `textrain-finetune: error: ...` naming it (framework.errors.UserError).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging as std_logging  # gin logs through the standard library: its filter is one
import os
import sys
from collections.abc import Iterator
from typing import Any

import gin
from absl import flags, logging

from textrain.framework import lazy_tf
from textrain.trainers import gin_configs

FLAGS = flags.FLAGS


class _QuietGinResourceProbe(std_logging.Filter):
    """gin's package-resource reader logs an ERROR ("Path not found: _bert.gin") each time it is asked about a
    path that is not a Python package resource, which is every include of configs/ before the next reader
    finds the file: a false alarm in every run's output. Only that record is dropped."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        return not (record.pathname.replace(os.sep, "/").endswith("gin/resource_reader.py")
                    and str(record.msg).startswith("Path not found"))


def _register_gin_tf_io() -> None:
    """What gin.tf would do: read config files through tf.io.gfile (local, gs://, ...)."""
    import tensorflow as tf

    gin.config.register_file_reader(tf.io.gfile.GFile, tf.io.gfile.exists)
    root = std_logging.getLogger()
    if not any(isinstance(f, _QuietGinResourceProbe) for f in root.filters):
        root.addFilter(_QuietGinResourceProbe())


@gin.configurable("finetune")
def finetune(
    model: str = gin.REQUIRED,
    task: str = gin.REQUIRED,
    data_dir: str = gin.REQUIRED,
    model_dir: str = gin.REQUIRED,
    tmp_dir: str = "",
    usr_dir: str | None = None,
    problem_hparams: dict | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    sp_model: str | None = None,
    datagen: bool = True,
    model_size: str | None = None,
    model_config_file: str | None = None,
    model_overrides: dict | None = None,
    model_settings: dict | None = None,
    init_checkpoint: str | None = None,
    init_head: bool = False,
    max_seq_length: int | None = None,
    train_batch_size: int = 32,
    eval_batch_size: int = 8,
    predict_batch_size: int = 8,
    learning_rate: float = 5e-5,
    num_train_epochs: float = 3.0,
    num_train_steps: int | None = None,
    warmup_proportion: float = 0.1,
    optimizer: str = "adamw",
    weight_decay: float = 0.01,
    adam_epsilon: float = 1e-6,
    lr_decay: str = "linear",
    layerwise_lr_decay: float = 1.0,
    clip_norm: float = 1.0,
    seed: int | None = None,
    precision: str = "fp32",
    strategy: str = "auto",
    num_gpus: int = 1,
    do_train: bool = True,
    do_eval: bool = True,
    do_predict: bool = False,
    export: bool = False,
    export_dir: str | None = None,
    eval_every_steps: int = 0,
    save_checkpoints_steps: int = 1000,
    iterations_per_loop: int = 100,
    log_steps: int = 100,
    keep_checkpoint_max: int = 2,
) -> dict[str, Any]:
    """One fine-tuning run (see the module docstring). Returns a summary dict (also printed as `final`).

    Every binding fills the RunSpec field of its name (trainers/run_spec.py: `spec_from_names`, `CLI_NAMES`
    for the originals' names); trainers/run.resolve builds the problem, makes its records if absent and works
    out what depends on them.

    model: registered classifier (bert_classifier | electra_classifier | xlnet_classifier).
    task: registered task problem (GLUE names, tsv_classification, ...).
    problem_hparams: the problem's own settings (task files, columns, labels ...), a dict.
    vocab_file / do_lower_case (WordPiece: BERT, ELECTRA) / sp_model (SentencePiece: XLNet): the
      PRETRAINED model's tokenizer, passed to the problem's settings of those names; its `tokenizer`
      setting follows the model (its class's `tokenizer`).
    model_size / model_config_file / model_overrides: the encoder (a preset, an original config json,
      single fields replaced, e.g. {'num_hidden_layers': 2}).
    model_settings: the model's own settings (its class's `Settings` fields), e.g. {'head': 'hf'}.
    init_head: also load the head of a TF1 or Hugging Face init_checkpoint (an HF classifier's; same labels);
      an HF head unlike the original's (ElectraForSequenceClassification ...) brings its head variant.
    layerwise_lr_decay: ELECTRA's layer-wise LR decay (0.8 in its configs; 1 = off).
    """
    bindings = dict(locals())
    from textrain.framework import registry
    from textrain.models import hf_format
    from textrain.trainers.run import run
    from textrain.trainers.run_spec import spec_from_names
    from textrain.trainers.strategy import strategy_from_spec

    _check_choice("precision", precision, ("fp32", "bf16", "fp16"))
    _check_choice("optimizer", optimizer, ("adamw", "adam", "lamb"))
    registry.import_usr_dir(bindings.pop("usr_dir"))
    model_cls = finetune_model_class(model)
    settings = checked_model_settings(model, model_cls, bindings.pop("model_settings"))
    if init_checkpoint and hf_format.is_hf_directory(init_checkpoint):
        # The names an HF directory's head is read under (init_head), not the task's.
        settings["task_name"] = hf_format.HF_TASK_NAME
        config = hf_format.read_config(init_checkpoint)
        if not model_config_file:
            # A Hugging Face model brings its architecture: its config.json decides, not the gin file's size.
            bindings["model_config_file"] = init_checkpoint
            logging.info("model config from %s/config.json (model_size %r not used)", init_checkpoint, model_size)
        variant = hf_format.HEAD_VARIANTS.get(hf_format.architecture_of(config, init_checkpoint))
        if init_head and variant and "head" not in settings:  # its fine-tuned head is kept: its own variant
            settings["head"] = variant
            logging.info("head=%r: the head of %s", variant, init_checkpoint)
    spec = spec_from_names(dict(bindings, tokenizer=model_cls.tokenizer, from_manifest=False, task_settings=True,
                                record_data_seed=False))
    spec.model.settings.update(settings)
    dist = strategy_from_spec(spec.strategy)
    with _removed_if_it_fails_before_a_checkpoint(model_dir):
        write_operative_config(model_dir)
        result = run(spec, dist)
    done = result.spec
    summary: dict[str, Any] = {
        "num_train_steps": done.train.num_train_steps, "num_warmup_steps": done.optimizer.num_warmup_steps,
        "train_examples": result.train_examples, "num_labels": done.model.settings["num_labels"],
        "task_type": done.model.settings["task_type"]}
    return run_summary(done, result, summary)


def run_summary(spec, result, summary: dict[str, Any]) -> dict[str, Any]:
    """`summary` + what the run did, as the spec asked it (the `final` line)."""
    if result.train is not None:
        summary.update(step=result.train.step, loss=result.train.loss, **result.train.metrics)
        if result.preempted:
            summary["preempted"] = True
            return summary
    if spec.eval.enabled:
        summary["eval"] = result.eval
        summary["best"] = result.best
    if spec.predict.enabled:
        summary["predict"] = result.predict
    if spec.export.enabled:
        summary["export"] = result.export
    return summary


# ------------------------------------------------------------------------------------------ pieces
@contextlib.contextmanager
def _removed_if_it_fails_before_a_checkpoint(model_dir: str) -> Iterator[None]:
    """Make `model_dir`; if the run fails before it saved a checkpoint, remove what the run created there
    (the whole directory if it made it), keeping whatever was there before: a failed fine-tune leaves no
    half-made run behind."""
    import tensorflow as tf
    existed = tf.io.gfile.isdir(model_dir)
    before = set(tf.io.gfile.listdir(model_dir)) if existed else set()
    latest = tf.train.latest_checkpoint(model_dir) if existed else None
    tf.io.gfile.makedirs(model_dir)
    try:
        yield
    except BaseException:
        if tf.train.latest_checkpoint(model_dir) == latest:
            if not existed:
                tf.io.gfile.rmtree(model_dir)
            else:
                for name in set(tf.io.gfile.listdir(model_dir)) - before:
                    path = os.path.join(model_dir, name.rstrip("/"))
                    tf.io.gfile.rmtree(path) if tf.io.gfile.isdir(path) else tf.io.gfile.remove(path)
        raise


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    from textrain.framework.errors import UserError

    if value not in choices:
        raise UserError(f"finetune.{name}={value!r}: use one of {', '.join(choices)}")


def finetune_model_class(name: str) -> type:
    """The registered model `name`, which must have a task head (a models.base.FinetuneModel)."""
    from textrain.framework import registry
    from textrain.framework.errors import UserError
    from textrain.models.base import FinetuneModel

    try:
        cls = registry.models.get(name)
    except KeyError as e:
        raise UserError(f"finetune.model: {e.args[0]}") from None
    if not issubclass(cls, FinetuneModel):
        heads = [n for n in registry.models.names() if issubclass(registry.models.get(n), FinetuneModel)]
        raise UserError(f"finetune.model={name!r} is not a fine-tuning model; use one with a task head: "
                        f"{', '.join(heads)}")
    return cls


def checked_model_settings(name: str, model_cls: type, settings: dict | None) -> dict[str, Any]:
    """finetune.model_settings, each key a field of the model's declared `Settings` (models/base.py)."""
    from textrain.framework.errors import UserError

    settings = dict(settings or {})
    known = {f.name for f in dataclasses.fields(model_cls.Settings)} if model_cls.Settings is not None else set()
    unknown = sorted(set(settings) - known)
    if unknown:
        raise UserError(f"finetune.model_settings: {name} has no setting {', '.join(unknown)}; its settings: "
                        f"{', '.join(sorted(known)) or '(none)'}")
    return settings


def write_operative_config(model_dir: str) -> None:
    """`{model_dir}/operative_config.gin` and a TensorBoard text summary of it."""
    import tensorflow as tf

    from textrain.framework import fileio

    text = gin.operative_config_str()
    fileio.write_text_atomic(os.path.join(model_dir, "operative_config.gin"), text)
    writer = tf.summary.create_file_writer(os.path.join(model_dir, "train"))
    with writer.as_default(step=0):
        md = "\n".join("    " + line for line in text.splitlines())  # code block in TensorBoard's markdown
        tf.summary.text("operative_config", md)
    writer.close()


# ---------------------------------------------------------------------------------------- CLI
flags.DEFINE_multi_string("gin_file", [], "Gin config file(s); later ones override earlier ones.")
flags.DEFINE_multi_string("gin_param", [], "Gin binding(s), e.g. \"finetune.learning_rate=2e-5\" (applied last).")


def parse_gin(files: list[str], params: list[str]) -> None:
    """Parse the configs; a bad binding or file is one UserError line naming it."""
    from textrain.framework.errors import UserError

    _register_gin_tf_io()
    files = gin_configs.prepare(files)  # --gin_file=bert_base.gin: the shipped config of that name
    try:
        gin.parse_config_files_and_bindings(files, params, finalize_config=False)
    except (ValueError, IOError, SyntaxError) as e:
        raise UserError(_one_line(e)) from None


def _one_line(error: Exception) -> str:
    """gin's message: first line + where (file/bindings line), on one line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines[:3]) if lines else type(error).__name__


def main(argv: list[str]) -> None:
    from textrain.framework import registry
    from textrain.framework.errors import UserError

    if len(argv) > 1:
        raise UserError(f"unexpected arguments {argv[1:]}: configure with --gin_file / --gin_param")
    registry.import_builtins()
    parse_gin(FLAGS.gin_file, FLAGS.gin_param)
    try:
        summary = finetune()
    except UserError as e:  # gin appends "In call to configurable ..." on a new line: keep one line
        raise UserError(str(e).split("\n  In call to configurable")[0]) from None
    except RuntimeError as e:
        if "Required bindings" in str(e) or "REQUIRED" in str(e):
            raise UserError(_one_line(e) + " (bind them with --gin_param or in a --gin_file)") from None
        raise
    print("final " + json.dumps(summary, default=str), flush=True)
    if summary.get("preempted"):
        sys.exit(143)


def run() -> None:
    """Console entry point `textrain-finetune`."""
    lazy_tf.quiet_start(sys.argv)
    sys.path.insert(0, os.getcwd())
    from textrain.framework import cli

    cli.run_main("textrain-finetune", main)


if __name__ == "__main__":
    # `python -m textrain.trainers.finetune`: this module is also the package's, so an import of it
    # (trainers/run.py's, until the eval helpers have moved) does not define its flags and configurable twice.
    sys.modules.setdefault("textrain.trainers.finetune", sys.modules[__name__])
    run()
