"""textrain-train-tpu: the TPUEstimator contract (run_pretraining.py's flags) on TPUStrategy, through THE loop.

    textrain-train-tpu --use_tpu --tpu=my-tpu --tpu_zone=us-central1-a --gcp_project=p \
        --problem=bert_pretrain --data_dir=gs://b/data --model=bert --model_dir=gs://b/runs/base \
        --bert_config_file=gs://b/bert_config.json --train_batch_size=256 --num_hosts=1 --num_core_per_host=8 \
        --iterations_per_loop=1000 --save_checkpoints_steps=1000 --use_bfloat16

TF 2.21 ships no Estimator; what TPUEstimator users rely on is kept, everything else is trainers/core.py
(the one loop) and trainers/launch.py (the launch code shared with textrain-train-gpu):
- `--iterations_per_loop` steps run inside ONE device call (core's host loop: a tf.range loop inside one
  tf.function); summaries, logs and checkpoints are written on the host between loops.
- Per-host input: `trainers/strategy.distribute_datasets_from_function` with a tf.distribute.InputContext
  (core's input_mode="distributed"): each host reads its own files (file i goes to host i % num_hosts),
  batched per replica with drop_remainder; every feature must have a static shape (refused otherwise,
  naming the feature), as XLA on TPU needs.
- The replica step compiles with XLA (TrainConfig.jit_compile=True): TPUStrategy compiles the whole
  replica function; off TPU the model's forward and backward pass are an XLA cluster.
- `--use_bfloat16` = `--precision=bf16` (mixed_bfloat16: float32 variables, bfloat16 activations).
- `--use_tpu=false` runs the SAME code path on the local devices: a MirroredStrategy over
  `--num_core_per_host` GPUs, or, without GPUs, over `--num_core_per_host` logical CPU devices (one
  device: OneDeviceStrategy). So CI exercises the whole TPU trainer.
- `--use_tpu` needs gs:// paths: a Cloud TPU reads and writes through GCS, never the VM's disk (the
  originals end in "File system scheme '[local]' not implemented"). A local `--data_dir`, `--model_dir`,
  `--init_checkpoint` (or `--bert_config_file`...) is refused up front with one line naming the flag.
- `--num_hosts`/`--num_core_per_host` are checked against the TPU the resolver found.
- Resume: the distributed input iterator cannot be checkpointed in TF 2.21; a resumed run skips the
  batches already consumed, exact because the input seed is fixed per run (trainers/run.py data_seed).
- `--do_eval`/`--max_eval_steps`: defined; the eval loop is wired in trainers/run.py.
- Exit status: 0 done, 143 after SIGTERM (checkpoint saved), 1 with one line for a user error.
"""
from __future__ import annotations

from absl import app, flags

from textrain.trainers import launch

FLAGS = flags.FLAGS

# What the TPU trainer decides itself (TrainConfig fields): per-host distributed input, an XLA step, and
# TPUEstimator's iterations_per_loop (steps per device call; --log_steps does not cut a call short).
TPU_CONFIG = dict(input_mode="distributed", jit_compile=True, log_shortens_loops=False)


def check_preset_flags() -> None:
    """A flag given on the command line that the TPU preset would override is refused, never silently
    replaced (one line naming it and the value the TPU path needs)."""
    from textrain.framework import errors

    for name in ("input_mode", "jit_compile"):
        if name in FLAGS and FLAGS[name].present and FLAGS[name].value != TPU_CONFIG[name]:
            value = str(TPU_CONFIG[name]).lower()
            raise errors.UserError(f"--{name}={FLAGS[name].value}: textrain-train-tpu runs with --{name}={value} "
                                   f"(TPUStrategy feeds each host through distribute_datasets_from_function and "
                                   f"compiles the step with XLA); drop the flag, or use textrain-train-gpu")


def connect_tpu():
    """TPUStrategy for --tpu; a TPU that cannot be found or reached is one line naming the flags."""
    from textrain.framework import errors
    from textrain.trainers.strategy import make_strategy

    if not FLAGS.tpu:
        raise errors.UserError("--use_tpu needs --tpu=NAME (the Cloud TPU's name or grpc:// address; on a TPU VM "
                               "--tpu=local)")
    try:
        return make_strategy("tpu", tpu=FLAGS.tpu, tpu_zone=FLAGS.tpu_zone, gcp_project=FLAGS.gcp_project)
    except Exception as e:  # noqa: BLE001 - the resolver raises ValueError, URLError, HttpError, NotFoundError...
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise errors.UserError(f"--tpu={FLAGS.tpu}: cannot reach the TPU ({type(e).__name__}: {first}); check "
                               f"--tpu, --tpu_zone and --gcp_project, and that this machine may reach the TPU "
                               f"(--verbose shows the traceback)") from e

# Flags naming files a Cloud TPU must reach through GCS.
PATH_FLAGS = ("data_dir", "model_dir", "init_checkpoint", "bert_config_file", "electra_config_file",
              "model_config_path")


def check_tpu_paths() -> None:
    """With --use_tpu every path must be gs:// (one line naming the first flag that is not)."""
    from textrain.framework import errors

    for name in PATH_FLAGS:
        value = FLAGS[name].value if name in FLAGS else None
        if value and not str(value).startswith("gs://"):
            raise errors.UserError(
                f"--{name}={value} is a local path, but --use_tpu reads and writes through Google Cloud Storage "
                f"(a TPU cannot see this machine's disk): copy it to a gs:// bucket and pass --{name}=gs://...")


def local_replicas() -> int:
    """--use_tpu=false: how many local replicas stand in for the TPU cores of one host."""
    return FLAGS.num_core_per_host or 1


def make_tpu_strategy():
    """TPUStrategy (--use_tpu) or the local stand-in, checked against --num_hosts/--num_core_per_host."""
    from textrain.framework import errors

    if FLAGS.use_tpu:
        strategy = connect_tpu()
        hosts = strategy.extended.num_hosts
        if hosts != FLAGS.num_hosts:
            raise errors.UserError(f"--num_hosts={FLAGS.num_hosts} but the TPU {FLAGS.tpu!r} has {hosts} host(s)")
        cores = strategy.num_replicas_in_sync // max(hosts, 1)
        if FLAGS.num_core_per_host and cores != FLAGS.num_core_per_host:
            raise errors.UserError(f"--num_core_per_host={FLAGS.num_core_per_host} but the TPU {FLAGS.tpu!r} has "
                                   f"{cores} core(s) per host")
        return strategy
    if FLAGS.num_hosts != 1:
        raise errors.UserError(f"--num_hosts={FLAGS.num_hosts} needs --use_tpu (several GPU machines: "
                               f"textrain-train-gpu --strategy=multi_worker)")
    from textrain.trainers.strategy import strategy_from_spec

    return strategy_from_spec(strategy_spec_from_flags())


def strategy_spec_from_flags():
    """The strategy the flags choose, as the run's spec records it: the TPU, else the local replicas."""
    from textrain.trainers.run_spec import StrategySpec

    if FLAGS.use_tpu:
        return StrategySpec("tpu", tpu=FLAGS.tpu, tpu_zone=FLAGS.tpu_zone, gcp_project=FLAGS.gcp_project)
    n = local_replicas()
    return StrategySpec("mirrored" if n > 1 else "one_device", n)


def require_static_shapes(ds) -> None:
    """XLA on TPU compiles one program for fixed shapes: every feature of a batch must have one."""
    import tensorflow as tf

    from textrain.framework import errors

    spec = ds.element_spec
    named = sorted(spec.items()) if isinstance(spec, dict) else enumerate(tf.nest.flatten(spec))
    for name, spec in named:
        if not spec.shape.is_fully_defined():
            raise errors.UserError(f"feature {name!r} has the dynamic shape {spec.shape} on the TPU trainer: use "
                                   f"fixed-length batching (pad to --max_length) for this problem")


def main(argv: list[str]) -> None:
    del argv
    missing = launch.missing_required_flags()
    if missing:
        raise app.UsageError(f"missing required flag(s): {', '.join(missing)}")
    check_preset_flags()
    if FLAGS.use_tpu:
        check_tpu_paths()
    strategy = make_tpu_strategy()
    # Fixed-shape batches (drop_remainder) are DataParams' default, which the run keeps.
    launch.run_training("textrain-train-tpu", strategy_spec_from_flags(), strategy, config_overrides=TPU_CONFIG,
                        check_dataset=require_static_shapes)


def run() -> None:
    """Console entry point `textrain-train-tpu`."""
    launch.console_main("textrain-train-tpu", main)


if __name__ == "__main__":
    run()
