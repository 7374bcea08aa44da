"""trainers/strategy.PipelineLayout: which input pipeline a process is, how many there are and how many replicas each
feeds — the arithmetic behind the resume skip and per-host batches, on simulated TPU pod and multi-worker
topologies (it is arithmetic: InputContexts as distribute_datasets_from_function builds them), and a real
resume on another topology (2 replicas -> 1 and back) that continues the data stream where it stopped."""
from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import tensorflow as tf
from test_trainer_core import make_trainer, one_device, two_replicas, write_records

from textrain.trainers.strategy import PipelineLayout, input_context
from textrain.trainers.train_config import TrainerSetupError

# (hosts or workers, replicas per host): TPU v3-8, a v3-32 slice, a v3-256 pod; MWMS 2 workers x 2 devices.
TOPOLOGIES = [(1, 8), (4, 8), (32, 8), (2, 2)]


@pytest.mark.parametrize("hosts,cores", TOPOLOGIES)
def test_each_pipeline_skips_only_what_it_fed_its_own_replicas(hosts, cores):
    global_batch, step, accum = 4 * hosts * cores, 1000, 2
    layouts = [PipelineLayout.of(tf.distribute.InputContext(hosts, h, hosts * cores)) for h in range(hosts)]
    for h, layout in enumerate(layouts):
        ctx = tf.distribute.InputContext(hosts, h, hosts * cores)
        assert layout.replicas_per_pipeline == cores
        assert layout.pipeline_batch(global_batch) == cores * ctx.get_per_replica_batch_size(global_batch)
        assert layout.batches_consumed(step, accum) == step * accum * cores
    # Over all pipelines: exactly the examples of `step` global steps, none skipped, none twice.
    per_replica = global_batch // (hosts * cores)
    assert sum(lay.batches_consumed(step, accum) * per_replica for lay in layouts) == step * accum * global_batch


def test_a_batch_that_does_not_split_over_the_replicas_is_one_line():
    layout = PipelineLayout.of(tf.distribute.InputContext(4, 0, 32))
    with pytest.raises(TrainerSetupError, match="not a multiple of the 32 replicas"):
        layout.pipeline_batch(48)


def test_mirrored_strategy_is_one_pipeline_feeding_every_replica():
    layout = PipelineLayout.of(input_context(two_replicas()))
    assert (layout.num_pipelines, layout.pipeline_id, layout.replicas_per_pipeline) == (1, 0, 2)


def _stream_ids(paths: list[str]) -> np.ndarray:
    """Row ids in the order the (unshuffled) toy pipeline reads them."""
    from test_trainer_core import SPEC
    return np.array([tf.io.parse_single_example(r, SPEC)["id"].numpy() for r in tf.data.TFRecordDataset(paths)])


@pytest.mark.parametrize("first,second", [("two", "one"), ("one", "two")])
def test_resume_on_another_topology_continues_the_stream(first, second, tmp_path, caplog):
    strategies = {"one": one_device, "two": two_replicas}
    paths = write_records(str(tmp_path / "data"))
    run = tmp_path / "run"
    t = make_trainer(strategies[first](), run, paths, 6, global_batch=16, iterations_per_loop=3)
    t.train()
    saved = [w.numpy() for w in t.model.trainable_variables]
    with caplog.at_level(logging.WARNING, logger="absl"):
        moved = make_trainer(strategies[second](), run, paths, 10, global_batch=16, iterations_per_loop=3)
    assert int(moved.step.numpy()) == 6
    assert "re-derived from the step (exact" in caplog.text
    for a, b in zip(saved, moved.model.trainable_variables):
        np.testing.assert_array_equal(a, b.numpy())
    # 6 steps x 16 examples were read: the next global batch is the stream's examples 96..111.
    following = np.asarray(next(moved._iterator)["id"]).reshape(-1)
    np.testing.assert_array_equal(following, _stream_ids(paths)[96:112])
    assert moved.train().step == 10


def test_tpu_contract_iterations_per_loop_is_steps_per_call_and_logs_between_calls(tmp_path, caplog):
    """TPUEstimator's contract: log_steps (100) does not cut a 250-step device call; at most one line a call."""
    paths = write_records(str(tmp_path / "data"))
    loops = []
    t = make_trainer(one_device(), tmp_path / "run", paths, 500, iterations_per_loop=250, log_steps=100,
                     save_checkpoints_steps=1000, log_shortens_loops=False)
    with caplog.at_level(logging.INFO, logger="absl"):
        t.train(callbacks=[lambda fig: loops.append(fig["step"])])
    assert loops == [250, 500]
    assert [int(m) for m in re.findall(r"step (\d+)/500", caplog.text)] == [250, 500]
    gpu = make_trainer(one_device(), tmp_path / "gpu", paths, 300, iterations_per_loop=250, log_steps=100,
                       save_checkpoints_steps=1000)
    steps = []
    gpu.train(callbacks=[lambda fig: steps.append(fig["step"])])
    assert steps == [100, 200, 300]  # the GPU trainer's loops end at every log_steps boundary, as before


@pytest.mark.parametrize("hosts,cores", [(1, 8), (4, 8), (32, 8)])
def test_xlnet_per_host_batch_checks_agree_on_a_pod(hosts, cores):
    """The trainer's manifest check and xlnet_pretrain's dataset check count the same per-host batch: with
    bsz_per_host=32 a global batch of 32 x hosts passes both, any other fails both (before, with more than one
    host one of the two refused every batch size)."""
    from absl import flags

    from textrain.framework.errors import SettingsMismatchError
    from textrain.problems import xlnet_pretrain as xp
    from textrain.trainers import launch

    hp = xp.XlnetPretrainHParams(bsz_per_host=32, num_core_per_host=cores)
    manifest = {"settings": {"bsz_per_host": 32, "num_core_per_host": cores}}
    layout = PipelineLayout.of(tf.distribute.InputContext(hosts, 0, hosts * cores))
    launch.define_all_flags([])
    try:
        for global_batch, ok in ((32 * hosts, True), (32 * hosts * 2, False)):
            flags.FLAGS.unparse_flags()
            flags.FLAGS(["textrain-train-tpu", f"--train_batch_size={global_batch}"])
            outcomes = []
            for check in (lambda: launch.check_run_settings(manifest, xp.XlnetPretrainHParams, layout),
                          lambda: xp.check_batch_layout(hp, global_batch, tf.distribute.InputContext(
                              hosts, hosts - 1, hosts * cores))):
                try:
                    check()
                    outcomes.append(True)
                except SettingsMismatchError:
                    outcomes.append(False)
            assert outcomes == [ok, ok], (global_batch, outcomes)
    finally:
        flags.FLAGS.unparse_flags()
