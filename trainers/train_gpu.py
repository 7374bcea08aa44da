"""textrain-train-gpu: pretrain/fine-tune a registered model on a registered problem, on one device,
many GPUs (MirroredStrategy) or many workers (MultiWorkerMirroredStrategy).

    textrain-train-gpu --problem=bert_pretrain --data_dir=data --model=bert --model_dir=runs/b \
        --bert_config_file=bert_config.json --train_batch_size=256 --num_gpus=8

Decisions:
- Strategy: `--use_tpu` and `--strategy=tpu` are refused naming textrain-train-tpu (one way to a TPU).
  `--strategy=auto` takes `--num_gpus` 0/1 -> OneDeviceStrategy, >1 -> MirroredStrategy over that
  many GPUs; `--strategy=multi_worker` -> MultiWorkerMirroredStrategy from TF_CONFIG. On a machine WITHOUT
  GPUs, `--num_gpus=N>1` splits the CPU into N logical devices and mirrors over them: the multi-replica
  code path runs for real (tests, CI), with no speed-up.
- Built-ins are registered by importing the `problems` and `models` packages
  (framework.registry.import_builtins); `--usr_dir` is imported before the problem flags are defined so
  its problems get flags too.
- The model is built by its one constructor, `from_settings` (models/base.py), from the settings
  `trainers.trainer_flags.model_settings_from_flags` maps the flags to.
- The problem's settings are those recorded in the train split's manifest, then the flags given on the
  command line (so reading always matches how the records were written).
- Settings shared by the problem and the run (`--max_seq_length`, `--seq_len`, ...) are checked against the
  train split's manifest before anything is built; a mismatch is refused naming both values. For data
  made per host (XLNet's `bsz_per_host`), the per-worker batch must equal it.
- `--num_core_per_host` (XLNet's train_gpu.py: the GPUs per host) sets `--num_gpus` when `--num_gpus` is
  not given; the originals' other flag names are translated by framework/flag_aliases.py
  (docs/ORIGINAL_FLAGS.md).
- Everything but the strategy is trainers/launch.py (flags -> RunSpec), shared with textrain-train-tpu,
  and trainers/run.py (the one function that runs a RunSpec).
- Exit status: 0 when training reached `--num_train_steps`, 143 after SIGTERM and 130 after Ctrl-C
  (checkpoint saved first),
  1 with a one-line `textrain-train-gpu: error: ...` when flags disagree with the data manifest.
"""
from __future__ import annotations

from absl import app, flags

from textrain.trainers import launch

FLAGS = flags.FLAGS


def num_gpus_from_flags() -> int:
    """--num_gpus, or XLNet train_gpu.py's --num_core_per_host (GPUs per host) when only that is given."""
    if not FLAGS["num_gpus"].present and FLAGS.num_core_per_host:
        return FLAGS.num_core_per_host
    return FLAGS.num_gpus


def main(argv: list[str]) -> None:
    del argv
    missing = launch.missing_required_flags()
    if missing:
        raise app.UsageError(f"missing required flag(s): {', '.join(missing)}")
    from textrain.framework.errors import UserError
    from textrain.trainers.run_spec import StrategySpec
    from textrain.trainers.strategy import strategy_from_spec

    # The TPU path has checks of its own (gs:// paths, static shapes, per-host input): one way to reach it.
    if FLAGS.use_tpu or FLAGS.strategy == "tpu":
        given = "--use_tpu" if FLAGS.use_tpu else "--strategy=tpu"
        raise UserError(f"{given}: TPUs are trained by textrain-train-tpu (TPUStrategy, gs:// paths, per-host "
                        f"input); run the same command line with textrain-train-tpu --use_tpu --tpu=NAME")
    # First: MultiWorkerMirroredStrategy must configure collectives before TF's context initialises.
    strategy_spec = StrategySpec(FLAGS.strategy, num_gpus_from_flags(), tpu=FLAGS.tpu, tpu_zone=FLAGS.tpu_zone,
                                 gcp_project=FLAGS.gcp_project)
    launch.run_training("textrain-train-gpu", strategy_spec, strategy_from_spec(strategy_spec))


def run() -> None:
    """Console entry point `textrain-train-gpu`."""
    launch.console_main("textrain-train-gpu", main)


if __name__ == "__main__":
    run()
