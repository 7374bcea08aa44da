"""The loop's settings (`TrainConfig`) and its result: plain dataclasses, no TensorFlow."""
from __future__ import annotations

import dataclasses

from textrain.framework.errors import UserError


class TrainerSetupError(UserError, ValueError):
    """A trainer flag the run cannot honour (one line from any CLI; still a ValueError)."""


@dataclasses.dataclass
class TrainConfig:
    model_dir: str
    num_train_steps: int | None  # None: from num_train_epochs (trainers/run.resolve)
    global_batch_size: int = 0          # for examples/s only (0: not reported)
    iterations_per_loop: int = 100
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_steps: int = 100                # a progress line every log_steps (see log_shortens_loops)
    # True (GPU trainer): a host loop also ends at every log_steps boundary, so a line comes at least that
    # often. False (TPU trainer, TPUEstimator's contract): iterations_per_loop steps per device call whatever
    # log_steps says; a line is logged between calls, at most once per call, when a boundary was crossed.
    log_shortens_loops: bool = True
    grad_accum_steps: int = 1
    clip_norm: float = 1.0              # 0 disables clipping
    jit_compile: bool = False
    precision: str = "fp32"             # fp32 | bf16 | fp16
    nan_policy: str = "raise"           # raise | skip
    mem_reset: str = "never"            # never | every_loop
    input_mode: str = "host"            # host (checkpointed iterator) | distributed
    init_checkpoint: str | None = None
    init_head: bool = False  # fine-tuning models: also load the head of a TF1 / HF init_checkpoint
    handle_sigterm: bool = True
    loss_scale_period: int = 2000       # fp16: finite steps before the loss scale doubles
    eval_every_steps: int = 0           # host loops also end at multiples of this (evaluation callbacks)
    # Without num_train_steps: int(train examples / global_batch_size * num_train_epochs), as run_classifier.py.
    num_train_epochs: float = 0.0

    def validate(self) -> None:
        checks = [
            (self.num_train_steps > 0, f"num_train_steps must be > 0 (got {self.num_train_steps})"),
            (self.iterations_per_loop > 0, f"iterations_per_loop must be > 0 (got {self.iterations_per_loop})"),
            (self.save_checkpoints_steps > 0, f"save_checkpoints_steps must be > 0 (got {self.save_checkpoints_steps})"),
            (self.grad_accum_steps >= 1, f"grad_accum_steps must be >= 1 (got {self.grad_accum_steps})"),
            (self.precision in ("fp32", "bf16", "fp16"), f"precision must be fp32, bf16 or fp16 (got {self.precision!r})"),
            (self.nan_policy in ("raise", "skip"), f"nan_policy must be raise or skip (got {self.nan_policy!r})"),
            (self.mem_reset in ("never", "every_loop"), f"mem_reset must be never or every_loop (got {self.mem_reset!r})"),
            (self.input_mode in ("host", "distributed"), f"input_mode must be host or distributed (got {self.input_mode!r})"),
        ]
        for ok, message in checks:
            if not ok:
                raise TrainerSetupError(f"--{message}")


@dataclasses.dataclass
class TrainResult:
    step: int
    loss: float
    terms: dict[str, float]
    metrics: dict[str, float]
    examples_per_sec: float
    steps_per_sec: float
    skipped_steps: int
    preempted: bool
    checkpoint: str | None
    stop_signal: int = 0                # the signal that stopped the run early (SIGTERM / SIGINT), else 0

