"""One run specification: plain dataclasses (no absl, no gin) that say everything a run does.

`trainers/run.run(spec)` runs it (TF Model Garden's `run_experiment`: one function runs any task from one
config tree). The CLIs only fill it, through `spec_from_names`: textrain-train-gpu / -tpu from absl flags
(trainers/launch.py), textrain-finetune from its gin bindings (trainers/finetune.py). A Python caller builds
one directly.

Decisions:
- The loop's settings are `train_config.TrainConfig` itself (model_dir, steps, batch, checkpoints, precision ...);
  nothing here repeats its fields.
- A CLI name (a flag, a `finetune.` binding) fills the field of the same name; the few names the originals
  gave otherwise (`train_batch_size`, `do_eval`, `task` ...) are mapped once, in `CLI_NAMES`.
- What depends on the data (the problem's settings as the train manifest recorded them, records made when
  absent, a task's label count, steps from epochs, warmup from a proportion) is resolved by
  `trainers/run.resolve`, the one place that builds the problem and reads the manifest: the spec says how
  (`ProblemSpec.from_manifest`, `ProblemSpec.datagen`, `ModelSpec.task_settings`, `TrainConfig.num_train_epochs`,
  `OptimizerSpec.warmup_proportion`), the resolved spec holds the results.
- `ModelSpec.settings` are the keyword settings of the model's one constructor,
  `model_cls.from_settings(manifest=<train manifest>, **settings)` (models/base.py).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from textrain.trainers.train_config import TrainConfig


@dataclasses.dataclass
class ProblemSpec:
    name: str  # registered problem
    # An instance of the problem's HParams, or a dict of its settings (an unknown name is refused); None: its
    # defaults (with from_manifest: the train manifest's).
    hparams: Any = None
    # Settings not in `hparams` come from the train manifest (how the records were made): reading always
    # matches writing. check_data(manifest, layout) runs first, before anything is built (the trainer CLIs:
    # flags that disagree with the data; `layout` is the run's trainers/strategy.PipelineLayout).
    from_manifest: bool = False
    check_data: Callable[[dict, Any], None] | None = None
    # Run-level values offered to the problem's settings of the same name when not None (the fine-tuning
    # tokenizer: tokenizer, vocab_file, do_lower_case, sp_model, max_seq_length); `hparams` wins.
    shared: dict[str, Any] = dataclasses.field(default_factory=dict)
    datagen: bool = False  # records absent: make them first with the problem's own generate_data
    tmp_dir: str = ""


@dataclasses.dataclass
class ModelSpec:
    name: str  # registered model
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)  # from_settings keywords
    # Add the task's num_labels, task_type and task_name to `settings` (the problem must be a FinetuneTask).
    task_settings: bool = False


@dataclasses.dataclass
class OptimizerSpec:
    """trainers.optimization.create_optimizer's settings (its step count is TrainConfig.num_train_steps)."""

    learning_rate: float = 5e-5
    num_warmup_steps: int = 0
    warmup_proportion: float | None = None  # set: num_warmup_steps = int(num_train_steps * warmup_proportion)
    optimizer: str = "adamw"  # adamw | adam | lamb
    weight_decay: float = 0.01
    lr_decay: str = "linear"
    poly_power: float = 1.0
    min_lr_ratio: float = 0.0  # end learning rate / peak
    adam_epsilon: float = 1e-6
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    layerwise_lr_decay: float = 1.0  # != 1: depths from the model (optimization.model_depth_fn)
    lr_hidden_size: int = 0


@dataclasses.dataclass
class InputSpec:
    """How the train split is read (framework.problem.DataParams) and seeded."""

    max_length: int = 0
    batching: str = "auto"
    # Without RunSpec.seed: draw the input seed once per run and record it in model_dir for resumes
    # (trainers/run.data_seed); False leaves the problem's own shuffling unseeded.
    record_data_seed: bool = True


@dataclasses.dataclass
class EvalSpec:
    enabled: bool = False
    batch_size: int = 8
    splits: tuple[str, ...] | None = None  # None: the problem's eval splits that have records
    max_steps: int | None = None  # most batches per split (None: all)
    # The task's own metrics (framework/tasks.py compute_metrics ...) and best/ by its main metric;
    # False: the model's losses/metrics only (pretraining's --do_eval).
    task_metrics: bool = True


@dataclasses.dataclass
class PredictSpec:
    enabled: bool = False
    batch_size: int = 8


@dataclasses.dataclass
class ExportSpec:
    enabled: bool = False
    export_dir: str | None = None  # None: {model_dir}/export
    max_seq_length: int | None = None  # None: the problem's max_seq_length (else 128)


@dataclasses.dataclass
class StrategySpec:
    """strategy.strategy_from_spec's choice (a caller may pass its own strategy to run() instead: the TPU trainer)."""

    kind: str = "auto"  # auto | one_device | mirrored | multi_worker | tpu
    num_gpus: int = 1
    tpu: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None


@dataclasses.dataclass
class RunSpec:
    problem: ProblemSpec
    model: ModelSpec
    data_dir: str
    train: TrainConfig  # model_dir, steps, global batch (also the reading batch), loop settings
    optimizer: OptimizerSpec = dataclasses.field(default_factory=OptimizerSpec)
    input: InputSpec = dataclasses.field(default_factory=InputSpec)
    eval: EvalSpec = dataclasses.field(default_factory=EvalSpec)
    predict: PredictSpec = dataclasses.field(default_factory=PredictSpec)
    export: ExportSpec = dataclasses.field(default_factory=ExportSpec)
    strategy: StrategySpec = dataclasses.field(default_factory=StrategySpec)
    do_train: bool = True
    seed: int | None = None  # model initialisation and input pipeline; None: unseeded init

    @property
    def model_dir(self) -> str:
        return self.train.model_dir


# ------------------------------------------------------------------------------ filled by name
SECTIONS: dict[str, type] = {
    "problem": ProblemSpec, "model": ModelSpec, "train": TrainConfig, "optimizer": OptimizerSpec,
    "input": InputSpec, "eval": EvalSpec, "predict": PredictSpec, "export": ExportSpec, "strategy": StrategySpec}

# The CLI names (the originals' flag names, textrain-finetune's bindings) that are not a field's own name, or
# that fill more than one field (max_seq_length: the exported signature and the task's records).
CLI_NAMES: dict[str, tuple[str, ...]] = {
    "problem": ("problem.name",), "task": ("problem.name",), "problem_hparams": ("problem.hparams",),
    "tokenizer": ("problem.shared.tokenizer",), "vocab_file": ("problem.shared.vocab_file",), "do_lower_case": ("problem.shared.do_lower_case",),
    "sp_model": ("problem.shared.sp_model",),
    "max_seq_length": ("export.max_seq_length", "problem.shared.max_seq_length"),
    "model": ("model.name",), "model_size": ("model.settings.size",),
    "model_config_file": ("model.settings.config_file",), "model_overrides": ("model.settings.overrides",),
    "train_batch_size": ("train.global_batch_size",),
    "do_eval": ("eval.enabled",), "eval_batch_size": ("eval.batch_size",), "max_eval_steps": ("eval.max_steps",),
    "do_predict": ("predict.enabled",), "predict_batch_size": ("predict.batch_size",),
    "export": ("export.enabled",), "strategy": ("strategy.kind",),
}


def _field_paths() -> dict[str, tuple[str, ...]]:
    """Every field name that stands in one place of the tree -> its path; CLI_NAMES on top."""
    places: dict[str, list[str]] = {}
    for f in dataclasses.fields(RunSpec):
        if f.name not in SECTIONS:
            places.setdefault(f.name, []).append(f.name)
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            places.setdefault(f.name, []).append(f"{section}.{f.name}")
    paths = {name: (where[0],) for name, where in places.items() if len(where) == 1}
    paths.update(CLI_NAMES)
    return paths


FIELD_PATHS = _field_paths()


def spec_from_names(values: Mapping[str, Any]) -> RunSpec:
    """The RunSpec that `values` (CLI name -> value) describe: each fills the field of its name, or those
    CLI_NAMES maps it to; what `values` leaves out keeps the dataclasses' defaults. A name that fills no
    field is a programming error (KeyError)."""
    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    top: dict[str, Any] = {}
    for name, value in values.items():
        for path in FIELD_PATHS[name]:
            section, _, rest = path.partition(".")
            if not rest:
                top[section] = value
                continue
            field, _, key = rest.partition(".")
            if key:  # a key of a dict field (model.settings, problem.shared)
                sections[section].setdefault(field, {})[key] = value
            else:
                sections[section][field] = value
    return RunSpec(**top, **{name: SECTIONS[name](**kwargs) for name, kwargs in sections.items()})
