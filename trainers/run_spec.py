"""One run specification: plain dataclasses (no absl, no gin) that say everything a run does.

`trainers/run.run(spec)` runs it (TF Model Garden's `run_experiment`: one function runs any task from one
config tree). The CLIs only fill it: textrain-train-gpu / -tpu translate absl flags (trainers/launch.py),
textrain-finetune translates its gin bindings (trainers/finetune.py). A Python caller builds one directly.

Decisions:
- The loop's settings are `train_config.TrainConfig` itself (model_dir, steps, batch, checkpoints, precision ...);
  nothing here repeats its fields.
- Values a CLI resolves from the data before the run (the problem's settings from the train manifest, the
  fine-tuning step count from the number of examples) are resolved by the CLI: the spec holds the results.
- `ModelSpec.settings` are the keyword settings of the model's one constructor,
  `model_cls.from_settings(manifest=<train manifest>, **settings)` (models/base.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from textrain.trainers.train_config import TrainConfig


@dataclasses.dataclass
class ProblemSpec:
    name: str  # registered problem
    hparams: Any = None  # an instance of the problem's HParams; None: its defaults


@dataclasses.dataclass
class ModelSpec:
    name: str  # registered model
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)  # from_settings keywords


@dataclasses.dataclass
class OptimizerSpec:
    """trainers.optimization.create_optimizer's settings (its step count is TrainConfig.num_train_steps)."""

    learning_rate: float = 5e-5
    num_warmup_steps: int = 0
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
