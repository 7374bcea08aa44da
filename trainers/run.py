"""THE function that runs a run specification (trainers/run_spec.py): every trainer CLI ends here.

`run(spec)` first `resolve`s it (strategy, problem, train manifest, input context: built once, here), then
builds the model (its one constructor, `from_settings`), the optimizer, the input seed and the evaluators,
trains through THE loop (trainers/core.Trainer), evaluates, predicts and exports as the spec says, and returns
a `RunResult`. It prints nothing: each CLI prints its own lines from the result.

Decisions:
- Data seed. With `spec.seed` the input pipeline uses it. Without, and with `input.record_data_seed`, a
  seed is drawn once per run and input pipeline and recorded in `{model_dir}/data_seed-{pipeline}.txt`
  (temp name, then rename); a resumed run reads it back, so it continues the very same stream (XLNet's
  parse-time permutations, shuffles) and `input_mode=distributed`'s resume-by-skipping is exact. Model
  initialisation stays unseeded without a seed, as users expect.
- Evaluation: one `evaluation.PeriodicEvaluator` over the spec's splits, a `Trainer.train` callback
  (every `TrainConfig.eval_every_steps` and at the last step), then once at the final step unless that
  step was just evaluated; a preempted run stops before it.
- A setting the model, problem or data refuse while building (ValueError, TypeError; the data's layout
  vs the run: SettingsMismatchError) ends as one `framework.errors.UserError` line.
"""
from __future__ import annotations

import dataclasses
import os
import random
from typing import Any, Callable

from absl import logging

from textrain.trainers.run_spec import ProblemSpec, RunSpec


@dataclasses.dataclass
class RunResult:
    step: int  # the global step after the run
    train: Any = None  # TrainResult, None without training
    eval: dict[str, dict] = dataclasses.field(default_factory=dict)  # split -> last metrics (with "step")
    best: dict | None = None  # the best checkpoint's figures (task metrics)
    predict: dict[str, str] = dataclasses.field(default_factory=dict)  # split -> file written
    export: Any = None  # trainers.export.export_classifier's result
    spec: RunSpec | None = None  # the spec as resolved: task settings, steps and warmup filled in
    train_examples: int = 0  # the train manifest's example count

    @property
    def preempted(self) -> bool:
        return bool(self.train is not None and self.train.preempted)


def data_seed(model_dir: str, seed: int | None, pipeline_id: int) -> int:
    """The input pipeline's seed: `seed`, else the one recorded for this run, else a fresh one (recorded)."""
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
    logging.info("no --seed: the input pipeline uses seed %d, recorded in %s for resumes", drawn, path)
    return drawn


@dataclasses.dataclass
class ResolvedRun:
    """What a RunSpec names, built once (`resolve`): the spec with what depends on the data filled in, the
    strategy, the problem, its train manifest and this process's input context."""

    spec: RunSpec
    strategy: Any
    problem: Any
    manifest: dict
    context: Any  # tf.distribute.InputContext


def needs_finetune_task(spec: RunSpec) -> str | None:
    """What in `spec` needs a fine-tuning task (framework.tasks.FinetuneTask), or None."""
    if spec.model.task_settings:
        return "the model's task settings (num_labels, task_type)"
    if spec.eval.enabled and (spec.eval.task_metrics or spec.eval.splits is None):
        return "eval (the task's eval splits and metrics)"
    if spec.predict.enabled:
        return "predict"
    if spec.export.enabled:
        return "export"
    return None


def resolve(spec: RunSpec, strategy=None) -> ResolvedRun:
    """Build what `spec` names, once: the strategy (unless given), the problem (checked to be a fine-tuning
    task where the spec needs one) with its settings, its train manifest (records made first when absent and
    `problem.datagen`) and the input context; then fill in what the spec leaves to the data (task settings,
    steps from epochs, warmup from a proportion)."""
    from textrain.framework import registry
    from textrain.framework.errors import UserError
    from textrain.framework.tasks import FinetuneTask
    from textrain.trainers.strategy import PipelineLayout, input_context, strategy_from_spec

    strategy = strategy if strategy is not None else strategy_from_spec(spec.strategy)
    context = input_context(strategy)
    needs = needs_finetune_task(spec)
    if needs and not issubclass(registry.problems.get(spec.problem.name), FinetuneTask):
        raise UserError(f"problem {spec.problem.name!r} is not a fine-tuning task (framework.tasks.FinetuneTask): "
                        f"{needs} needs one; turn it off or name a task problem")
    problem, manifest = build_problem(spec.problem, spec.data_dir, PipelineLayout.of(context))
    _check_eval_splits(spec, problem)
    if spec.train.init_head and spec.train.init_checkpoint and isinstance(problem, FinetuneTask):
        _check_hf_head_labels(spec.train.init_checkpoint, problem.label_list(spec.data_dir))
    return ResolvedRun(_data_resolved(spec, problem, manifest), strategy, problem, manifest, context)


def _check_hf_head_labels(path: str, labels: list[str]) -> None:
    """init_head from an HF directory: its id2label, where it names labels, must be the task's in the same
    order, or each row of its head would score another label."""
    from textrain.framework.errors import UserError
    from textrain.models import hf_format

    if not hf_format.is_hf_directory(path):
        return
    names = hf_format.label_names(hf_format.read_config(path))
    if not names or all(n == f"LABEL_{i}" for i, n in enumerate(names)) or len(names) != len(labels):
        return  # unnamed (transformers' default) or another count: the head's shape check says it
    if names != list(labels):
        raise UserError(f"finetune.init_head: {path}/config.json's id2label ({', '.join(names)}) is not the task's "
                        f"label order ({', '.join(labels)}): its head's rows would score other labels")


def build_problem(p: ProblemSpec, data_dir: str, layout=None) -> tuple[Any, dict]:
    """The problem `p` names with its settings, and its train manifest (records made first when absent and
    `p.datagen`). With `p.from_manifest` the manifest is read first, `p.check_data(manifest, layout)` run on it,
    and the settings it recorded are the problem's defaults. A setting refused is one UserError line."""
    from textrain.framework import registry
    from textrain.framework.errors import UserError

    cls = registry.problems.get(p.name)
    manifest = None
    if p.from_manifest:
        # The check first: a setting that disagrees with the data is named as such, not as whichever invariant
        # of the problem's settings it happens to break (XLNet's --num_core_per_host vs bsz_per_host).
        manifest = cls().read_manifest(data_dir, "train")
        if p.check_data is not None:
            p.check_data(manifest, layout)
    try:
        problem = cls(_problem_hparams(p, cls, manifest))
    except (ValueError, TypeError) as e:
        raise UserError(f"problem {p.name!r}: {e}") from None
    if manifest is None:
        manifest = _train_manifest(problem, data_dir, p)
    return problem, manifest


def _problem_hparams(p, cls: type, manifest: dict | None):
    """The problem's settings: an HParams instance as given; else the manifest's (from_manifest), the shared
    run-level values of its settings' names, then `p.hparams` (a dict: an unknown name is refused)."""
    from textrain.framework.errors import UserError

    if p.hparams is not None and not isinstance(p.hparams, dict):
        return p.hparams
    if not dataclasses.is_dataclass(cls.HParams):
        return cls.HParams()
    fields = {f.name for f in dataclasses.fields(cls.HParams)}
    given = dict(p.hparams or {})
    unknown = sorted(set(given) - fields)
    if unknown:
        raise UserError(f"problem_hparams: {p.name} has no setting {', '.join(map(repr, unknown))}; "
                        f"its settings: {', '.join(sorted(fields))}")
    recorded = (manifest or {}).get("settings", {}) if p.from_manifest else {}
    values = {k: v for k, v in recorded.items() if k in fields}
    values.update({k: v for k, v in p.shared.items() if v is not None and k in fields})
    values.update(given)
    return cls.HParams(**values)


def _train_manifest(problem, data_dir: str, p) -> dict:
    """The train manifest; when the records are absent and `p.datagen`, made first with the problem's own
    generate_data (what textrain-datagen --problem=<name> runs)."""
    from textrain.framework.errors import SettingsMismatchError, UserError

    try:
        return problem.read_manifest(data_dir, "train")
    except FileNotFoundError as e:
        if not p.datagen:
            raise UserError(f"{e} (or bind finetune.datagen=True)") from None
    logging.info("records of %s absent in %s: generating them", problem.name, data_dir)
    try:
        problem.generate_data(data_dir, p.tmp_dir, seed=0)
        return problem.read_manifest(data_dir, "train")
    except (ValueError, FileNotFoundError, SettingsMismatchError) as e:
        raise UserError(f"datagen for {problem.name}: {e}") from None


def _check_eval_splits(spec: RunSpec, problem) -> None:
    """Eval splits the spec names exist before training: a missing one is found now, not after hours."""
    from textrain.framework.errors import UserError

    if not spec.eval.enabled or spec.eval.splits is None:
        return
    for split in spec.eval.splits:
        try:
            problem.read_manifest(spec.data_dir, split)
        except FileNotFoundError as e:
            raise UserError(f"--do_eval: {e} (pretraining problems make it with --dev_fraction > 0)") from None


def _data_resolved(spec: RunSpec, problem, manifest: dict) -> RunSpec:
    """`spec` with what it leaves to the data filled in."""
    from textrain.framework.errors import UserError

    model, train, optimizer = spec.model, spec.train, spec.optimizer
    if model.task_settings:
        settings = dict(model.settings, num_labels=int(problem.num_labels(spec.data_dir)),
                        task_type=problem.task_type)
        settings.setdefault("task_name", spec.problem.name)  # an HF init's head: its own scope (finetune)
        model = dataclasses.replace(model, settings=settings, task_settings=False)
    if train.num_train_steps is None:
        examples = int(manifest["num_examples"])
        steps = int(examples / train.global_batch_size * train.num_train_epochs)
        if steps <= 0:
            raise UserError(f"num_train_steps is {steps} ({examples} train examples, batch "
                            f"{train.global_batch_size}, {train.num_train_epochs} epochs): bind a positive value")
        train = dataclasses.replace(train, num_train_steps=steps)
    if not spec.eval.enabled and train.eval_every_steps:
        train = dataclasses.replace(train, eval_every_steps=0)
    if optimizer.warmup_proportion is not None:
        optimizer = dataclasses.replace(optimizer, num_warmup_steps=int(train.num_train_steps
                                                                        * optimizer.warmup_proportion),
                                        warmup_proportion=None)
    return dataclasses.replace(spec, model=model, train=train, optimizer=optimizer)


def build_model(name: str, settings: dict[str, Any], manifest: dict | None):
    """The registered model `name` from its one constructor; a setting it refuses is one UserError line."""
    from textrain.framework import registry
    from textrain.framework.errors import UserError

    try:
        return registry.models.get(name).from_settings(manifest=manifest, **settings)
    except UserError:
        raise
    except (ValueError, TypeError) as e:
        raise UserError(f"model {name!r}: {e}") from None


def build_optimizer(spec: RunSpec, model):
    from textrain.trainers.optimization import optimizer_from_spec

    return optimizer_from_spec(spec.optimizer, spec.train.num_train_steps, model)


def _evaluator(spec: RunSpec, strategy, trainer, problem):
    from textrain.trainers import evaluation

    splits = (list(spec.eval.splits) if spec.eval.splits is not None
              else evaluation.present_eval_splits(problem, spec.data_dir))
    datasets = {s: evaluation.eval_dataset_fn(problem, spec.data_dir, s, spec.eval.batch_size) for s in splits}
    task = spec.eval.task_metrics
    return evaluation.PeriodicEvaluator(
        strategy, trainer.model, spec.model_dir, datasets, every_steps=spec.train.eval_every_steps,
        final_step=spec.train.num_train_steps if task else None,
        metrics_fn=(lambda split, result: evaluation.task_metrics(problem, spec.data_dir, split, result)) if task
        else None,
        main_metric=problem.main_metric if task else None,  # task metrics: a FinetuneTask
        max_steps=spec.eval.max_steps, is_chief=trainer.is_chief)


def run(spec: RunSpec, strategy=None, *, check_dataset: Callable[[Any], None] | None = None) -> RunResult:
    """Run `spec` under `strategy` (default: `strategy.strategy_from_spec(spec.strategy)`).

    check_dataset(ds): called on each input pipeline's dataset (the TPU trainer: static shapes).
    """
    import tensorflow as tf

    from textrain.trainers.strategy import strategy_from_spec

    strategy = strategy if strategy is not None else strategy_from_spec(spec.strategy)
    resolved = resolve(spec, strategy)  # before seeding: records it makes leave the seeded streams alone
    if spec.seed is not None:
        tf.keras.utils.set_random_seed(spec.seed)
    fresh = resolved.context.num_input_pipelines == 1 and not tf.io.gfile.exists(spec.model_dir)
    try:
        return _run(resolved, check_dataset)
    except BaseException:
        if fresh:
            _remove_if_no_checkpoint(spec.model_dir)
        raise


def _remove_if_no_checkpoint(model_dir: str) -> None:
    """A run that failed before its first checkpoint leaves no model_dir behind (its data seed, lock and empty
    summaries would only make the next run look like a resume)."""
    import tensorflow as tf

    if tf.io.gfile.exists(model_dir) and not tf.train.latest_checkpoint(model_dir):
        tf.io.gfile.rmtree(model_dir)


def _run(resolved: ResolvedRun, check_dataset) -> RunResult:
    import tensorflow as tf

    from textrain.framework.errors import UserError
    from textrain.framework.problem import DataParams, ModeKeys
    from textrain.trainers import core

    spec, strategy, problem, manifest = resolved.spec, resolved.strategy, resolved.problem, resolved.manifest
    seed = (data_seed(spec.model_dir, spec.seed, resolved.context.input_pipeline_id) if spec.input.record_data_seed
            else spec.seed)
    params = DataParams(batch_size=spec.train.global_batch_size, max_length=spec.input.max_length,
                        batching=spec.input.batching, seed=seed)

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = problem.dataset(ModeKeys.TRAIN, spec.data_dir, params, input_context=ctx)
        if check_dataset is not None:
            check_dataset(ds)
        return ds

    built: dict[str, Any] = {}

    def model_fn():
        built["model"] = build_model(spec.model.name, spec.model.settings, manifest)
        return built["model"]

    try:
        trainer = core.Trainer(strategy, model_fn, lambda: build_optimizer(spec, built["model"]), dataset_fn,
                               spec.train)
    except UserError:  # SettingsMismatchError: the data's layout vs this run (found while building the input)
        raise
    except (ValueError, FileNotFoundError) as e:
        raise UserError(str(e)) from None
    evaluator = _evaluator(spec, strategy, trainer, problem) if spec.eval.enabled else None
    result = RunResult(step=int(trainer.step.numpy()), spec=spec, train_examples=int(manifest.get("num_examples", 0)))
    if spec.do_train:
        result.train = trainer.train(callbacks=[evaluator] if evaluator else [])
        result.step = int(trainer.step.numpy())
        if result.preempted:
            return result
    if evaluator is not None:
        if evaluator.last_step != result.step:
            evaluator.run(result.step)
        result.eval = {s: h[-1] for s, h in evaluator.history.items() if h}
        result.best = evaluator.best
    from textrain.trainers import evaluation

    if spec.predict.enabled:
        result.predict = evaluation.predict(strategy, trainer.model, problem, spec.data_dir, spec.model_dir,
                                            spec.predict.batch_size)
    if spec.export.enabled:
        from textrain.trainers.export import export_classifier

        source = evaluation.best_checkpoint(spec.model_dir) if spec.eval.enabled else None
        seq_length = spec.export.max_seq_length or int(getattr(problem.hparams, "max_seq_length", 128))
        result.export = export_classifier(
            trainer.model, spec.export.export_dir or os.path.join(spec.model_dir, "export"), problem=problem,
            data_dir=spec.data_dir, family=spec.model.name, checkpoint=source, max_seq_length=seq_length)
    return result
