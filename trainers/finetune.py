"""textrain-finetune: fine-tune a pretrained encoder on a sequence-level task, configured with gin.

    textrain-finetune --gin_file=configs/bert_base.gin --gin_file=configs/glue_mrpc.gin \
        --gin_param="finetune.data_dir='glue_data'" --gin_param="finetune.model_dir='runs/mrpc'" \
        --gin_param="finetune.init_checkpoint='uncased_L-12_H-768_A-12/bert_model.ckpt'"

One configurable, `finetune`, holds everything a run needs (every argument of `finetune()` below is a
binding); configs/ has a base file per model family and size and one per task, combined with gin's
`include` or several --gin_file flags (later files and --gin_param override earlier ones).

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
  as run_classifier.py; warmup = int(num_train_steps * warmup_proportion).
- `gin.tf` does not import with TF 2.21, so this module registers tf.io.gfile as gin's file reader
  itself (gs:// configs work) and adds configs/ to the include search path.
- The operative config (every value the run used, defaults included) goes to
  `{model_dir}/operative_config.gin` and to TensorBoard as text (`{model_dir}/train`).
- A misspelled binding or configurable, a missing required value, an unknown problem setting or model
  name: one line `textrain-finetune: error: ...` naming it (framework.cli.UserError).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import sys
from typing import Any

import gin
from absl import flags

from textrain.trainers import gin_configs

FLAGS = flags.FLAGS
log = logging.getLogger("textrain.finetune")


class _QuietGinResourceProbe(logging.Filter):
    """gin's package-resource reader logs an ERROR ("Path not found: _bert.gin") each time it is asked about a
    path that is not a Python package resource, which is every include of configs/ before the next reader
    finds the file: a false alarm in every run's output. Only that record is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.pathname.replace(os.sep, "/").endswith("gin/resource_reader.py")
                    and str(record.msg).startswith("Path not found"))


def _register_gin_tf_io() -> None:
    """What gin.tf would do: read config files through tf.io.gfile (local, gs://, ...)."""
    import tensorflow as tf

    gin.config.register_file_reader(tf.io.gfile.GFile, tf.io.gfile.exists)
    root = logging.getLogger()
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
    init_checkpoint: str | None = None,
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

    model: registered classifier (bert_classifier | electra_classifier | xlnet_classifier).
    task: registered task problem (GLUE names, tsv_classification, ...).
    problem_hparams: the problem's own settings (task files, columns, labels ...), a dict.
    vocab_file / do_lower_case (WordPiece: BERT, ELECTRA) / sp_model (SentencePiece: XLNet): the
      PRETRAINED model's tokenizer, passed to the problem's settings of those names; its `tokenizer`
      setting follows the model (xlnet_classifier -> sentencepiece, else wordpiece).
    model_size / model_config_file / model_overrides: the encoder (a preset, an original config json,
      single fields replaced, e.g. {'num_hidden_layers': 2}).
    layerwise_lr_decay: ELECTRA's layer-wise LR decay (0.8 in its configs; 1 = off).
    """
    from textrain.framework import cli, registry

    _check_choice("precision", precision, ("fp32", "bf16", "fp16"))
    _check_choice("optimizer", optimizer, ("adamw", "adam", "lamb"))
    registry.import_usr_dir(usr_dir)
    tokenizer = {"tokenizer": "sentencepiece" if model.startswith("xlnet") else "wordpiece", "vocab_file": vocab_file,
                 "do_lower_case": do_lower_case, "sp_model": sp_model, "max_seq_length": max_seq_length}
    problem = build_problem(task, problem_hparams or {}, tokenizer)
    model_cls = _model_class(model)
    from textrain.trainers.train_gpu import split_cpu_for_replicas

    split_cpu_for_replicas(num_gpus)
    import tensorflow as tf

    from textrain.trainers import core
    from textrain.trainers.evaluation import PeriodicEvaluator, best_checkpoint, eval_dataset_fn

    logging.getLogger("textrain").setLevel(logging.INFO)
    dist = core.make_strategy(strategy, num_gpus)
    if seed is not None:
        tf.keras.utils.set_random_seed(seed)
    tf.io.gfile.makedirs(model_dir)
    write_operative_config(model_dir)

    manifest = ensure_records(problem, data_dir, tmp_dir, datagen, seed)
    task_type = getattr(problem, "task_type", "classification")
    num_labels = int(problem.num_labels(data_dir))
    train_examples = int(manifest["num_examples"])
    if num_train_steps is None:
        num_train_steps = int(train_examples / train_batch_size * num_train_epochs)
    if num_train_steps <= 0:
        raise cli.UserError(f"finetune.num_train_steps is {num_train_steps} ({train_examples} train examples, "
                            f"batch {train_batch_size}, {num_train_epochs} epochs): bind a positive value")
    num_warmup_steps = int(num_train_steps * warmup_proportion)

    def model_fn():
        try:
            return model_cls.from_settings(num_labels=num_labels, task_type=task_type, size=model_size,
                                           config_file=model_config_file, overrides=model_overrides,
                                           manifest=manifest, task_name=task)
        except (ValueError, TypeError) as e:
            raise cli.UserError(f"finetune.model={model!r}: {e}") from None

    built: dict[str, Any] = {}

    def optimizer_fn():
        from textrain.trainers.optimization import create_optimizer, model_depth_fn

        depth_fn, top = model_depth_fn(built["model"]) if layerwise_lr_decay != 1.0 else (None, None)
        return create_optimizer(learning_rate, num_train_steps, num_warmup_steps, optimizer=optimizer,
                                weight_decay=weight_decay, decay=lr_decay, epsilon=adam_epsilon,
                                layerwise_lr_decay=layerwise_lr_decay, depth_fn=depth_fn, top_depth=top)

    from textrain.framework.problem import DataParams, ModeKeys

    params = DataParams(batch_size=train_batch_size, seed=seed)

    def train_dataset_fn(ctx):
        return problem.dataset(ModeKeys.TRAIN, data_dir, params, input_context=ctx)

    config = core.TrainConfig(
        model_dir=model_dir, num_train_steps=num_train_steps, global_batch_size=train_batch_size,
        iterations_per_loop=iterations_per_loop, save_checkpoints_steps=save_checkpoints_steps,
        keep_checkpoint_max=keep_checkpoint_max, log_steps=log_steps, clip_norm=clip_norm, precision=precision,
        init_checkpoint=init_checkpoint, eval_every_steps=eval_every_steps if do_eval else 0)

    def keep_model():
        built["model"] = model_fn()
        return built["model"]

    try:
        trainer = core.Trainer(dist, keep_model, optimizer_fn, train_dataset_fn, config)
    except (ValueError, FileNotFoundError) as e:
        raise cli.UserError(str(e)) from None
    model_obj = trainer.model
    summary: dict[str, Any] = {"num_train_steps": num_train_steps, "num_warmup_steps": num_warmup_steps,
                               "train_examples": train_examples, "num_labels": num_labels, "task_type": task_type}
    evaluator = None
    if do_eval:
        splits = {s: eval_dataset_fn(problem, data_dir, s, eval_batch_size) for s in _eval_splits(problem, data_dir)}
        evaluator = PeriodicEvaluator(
            dist, model_obj, model_dir, splits, every_steps=eval_every_steps, final_step=num_train_steps,
            metrics_fn=lambda split, result: task_metrics(problem, data_dir, split, result), main_metric=getattr(problem, "main_metric", None),
            is_chief=trainer.is_chief)
    if do_train:
        result = trainer.train(callbacks=[evaluator] if evaluator else [])
        summary.update(step=result.step, loss=result.loss, **result.metrics)
        if result.preempted:
            summary["preempted"] = True
            return summary
    if evaluator is not None:
        step = int(trainer.step.numpy())
        if evaluator.last_step != step:
            evaluator.run(step)
        summary["eval"] = {s: h[-1] for s, h in evaluator.history.items() if h}
        summary["best"] = evaluator.best
    if do_predict:
        summary["predict"] = predict(dist, model_obj, problem, data_dir, model_dir, predict_batch_size)
    if export:
        from textrain.trainers.export import export_classifier

        source = best_checkpoint(model_dir) if do_eval else None
        summary["export"] = export_classifier(
            model_obj, export_dir or os.path.join(model_dir, "export"), problem=problem, data_dir=data_dir,
            family=model, checkpoint=source, max_seq_length=max_seq_length or _problem_seq_length(problem))
    return summary


# ------------------------------------------------------------------------------------------ pieces
def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    from textrain.framework.cli import UserError

    if value not in choices:
        raise UserError(f"finetune.{name}={value!r}: use one of {', '.join(choices)}")


def _model_class(name: str) -> type:
    from textrain.framework import registry
    from textrain.framework.cli import UserError

    try:
        cls = registry.models.get(name)
    except KeyError as e:
        raise UserError(f"finetune.model: {e.args[0]}") from None
    if not hasattr(cls, "from_settings"):
        raise UserError(f"finetune.model={name!r} is not a fine-tuning model; use one with a task head: "
                        f"{', '.join(n for n in registry.models.names() if hasattr(registry.models.get(n), 'from_settings'))}")
    return cls


def build_problem(task: str, hparams: dict, shared: dict | None = None):
    """The task problem with its settings; an unknown task or setting is a UserError naming it.

    `shared`: run-level values (tokenizer, vocab_file, max_seq_length ...) given to the problem when its
    settings have that name and the value is not None; `hparams` (finetune.problem_hparams) win."""
    from textrain.framework import registry
    from textrain.framework.cli import UserError

    try:
        cls = registry.problems.get(task)
    except KeyError as e:
        raise UserError(f"finetune.task: {e.args[0]}") from None
    fields = {f.name for f in dataclasses.fields(cls.HParams)} if dataclasses.is_dataclass(cls.HParams) else set()
    unknown = sorted(set(hparams) - fields)
    if unknown:
        raise UserError(f"finetune.problem_hparams: {task} has no setting {', '.join(map(repr, unknown))}; "
                        f"its settings: {', '.join(sorted(fields))}")
    values = {k: v for k, v in (shared or {}).items() if v is not None and k in fields}
    values.update(hparams)
    try:
        return cls(cls.HParams(**values))
    except (TypeError, ValueError) as e:
        raise UserError(f"finetune.problem_hparams for {task}: {e}") from None


def _problem_seq_length(problem) -> int:
    return int(getattr(problem.hparams, "max_seq_length", 128))


def ensure_records(problem, data_dir: str, tmp_dir: str, datagen: bool, seed: int | None) -> dict:
    """The train manifest; when the records are absent and `datagen`, make them first with the problem's
    own generate_data (what textrain-datagen --problem=<task> runs)."""
    from textrain.framework.cli import UserError
    from textrain.framework.problem import SettingsMismatchError

    try:
        return problem.read_manifest(data_dir, "train")
    except FileNotFoundError as e:
        if not datagen:
            raise UserError(f"{e} (or bind finetune.datagen=True)") from None
    log.info("records of %s absent in %s: generating them", problem.name, data_dir)
    try:
        problem.generate_data(data_dir, tmp_dir, seed=0)
        return problem.read_manifest(data_dir, "train")
    except (ValueError, FileNotFoundError, SettingsMismatchError) as e:
        raise UserError(f"datagen for {problem.name}: {e}") from None


def _eval_splits(problem, data_dir: str) -> list[str]:
    splits = list(problem.eval_splits()) if hasattr(problem, "eval_splits") else ["dev"]
    present = []
    for split in splits:
        try:
            problem.read_manifest(data_dir, split)
            present.append(split)
        except FileNotFoundError:
            log.warning("no %s records of %s in %s: not evaluated", split, problem.name, data_dir)
    return present


def _model_outputs(result) -> Any:
    """What problem.compute_metrics receives as `outputs` (framework/tasks.py): logits `[N, num_labels]`,
    or the predicted value `[N]` for regression."""
    out = result.outputs
    return out["predictions"] if "predictions" in out else out["logits"]


def task_metrics(problem, data_dir: str, split: str, result) -> dict:
    """The task's own metrics of one evaluated split (none for a split without labels)."""
    if hasattr(problem, "metrics_from_outputs"):  # span QA: EM/F1 from every window's outputs (c-qa)
        return dict(problem.metrics_from_outputs(data_dir, split, result.outputs))
    if not hasattr(problem, "compute_metrics") or "label_ids" not in result.outputs:
        return {}
    if hasattr(problem, "has_labels") and not problem.has_labels(data_dir, split):
        return {}
    return dict(problem.compute_metrics(result.outputs["label_ids"], _model_outputs(result)))


def predict(strategy, model, problem, data_dir: str, model_dir: str, batch_size: int) -> dict[str, str]:
    """Write `predict_<split>.tsv` (class probabilities per line, input order, as run_classifier's
    test_results.tsv; regression: the value) and `.jsonl` (example_index, label, probabilities) for each
    of the task's predict splits that has records."""
    import tensorflow as tf

    from textrain.framework import records
    from textrain.trainers.evaluation import eval_dataset_fn, evaluate

    splits = list(problem.predict_splits()) if hasattr(problem, "predict_splits") else ["test"]
    labels = list(problem.label_list(data_dir)) if hasattr(problem, "label_list") else []
    written = {}
    for split in splits:
        try:
            problem.read_manifest(data_dir, split)
        except FileNotFoundError:
            log.warning("no %s records of %s: nothing to predict", split, problem.name)
            continue
        result = evaluate(strategy, model, eval_dataset_fn(problem, data_dir, split, batch_size), collect_outputs=True)
        if hasattr(problem, "write_predictions"):  # span QA: run_squad.py's predictions.json & co (c-qa)
            written[split] = problem.write_predictions(data_dir, split, result.outputs,
                                                       os.path.join(model_dir, f"predict_{split}"))
            continue
        tsv, jsonl = prediction_lines(result.outputs, labels)
        base = os.path.join(model_dir, f"predict_{split}")
        records.write_text_atomic(base + ".tsv", tsv)
        records.write_text_atomic(base + ".jsonl", jsonl)
        written[split] = base + ".tsv"
        log.info("wrote %s.tsv / .jsonl (%d examples)", base, tsv.count("\n"))
    del tf
    return written


def prediction_lines(outputs: dict, labels: list[str]) -> tuple[str, str]:
    """(tsv, jsonl) text of gathered, ordered outputs."""
    import numpy as np

    n = len(outputs["logits"])
    index = outputs.get("example_index", np.arange(n)).reshape(-1)
    tsv, jsonl = [], []
    for i in range(n):
        row = {"example_index": int(index[i])}
        if "predictions" in outputs:
            value = float(outputs["predictions"][i])
            tsv.append(f"{value:.6f}")
            row["prediction"] = value
        else:
            probs = [float(p) for p in outputs["probabilities"][i]]
            tsv.append("\t".join(f"{p:.6f}" for p in probs))
            best = int(np.argmax(probs))
            row["label"] = labels[best] if best < len(labels) else best
            row["probabilities"] = probs
        jsonl.append(json.dumps(row))
    return "".join(line + "\n" for line in tsv), "".join(line + "\n" for line in jsonl)


def write_operative_config(model_dir: str) -> None:
    """`{model_dir}/operative_config.gin` and a TensorBoard text summary of it."""
    import tensorflow as tf

    from textrain.framework import records

    text = gin.operative_config_str()
    records.write_text_atomic(os.path.join(model_dir, "operative_config.gin"), text)
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
    from textrain.framework.cli import UserError

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
    from textrain.framework.cli import UserError

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
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, os.getcwd())
    from textrain.framework import cli

    cli.run_main("textrain-finetune", main)


if __name__ == "__main__":
    run()
