"""trainers/core.py: the one training loop, on real TFRecords, real checkpoints and real processes.

The toy model is a linear classifier whose loss is a masked sum (weights `w` differ per example, so
replicas hold different counts) and whose per-replica state sums the ids of the rows it saw. A killed or
SIGTERMed training is tested through the CLIs that run this loop (test_resume_exact, test_train_tpu,
test_faults).
"""
from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import tensorflow as tf

from textrain.models.base import StepOutput, Term, TrainableModel
from textrain.trainers import core, optimization
from textrain.trainers.strategy import make_strategy, set_precision_policy
from textrain.trainers.train_config import TrainConfig

N_EXAMPLES, DIM, CLASSES = 512, 4, 3


# ------------------------------------------------------------------------------------ toy pieces
class Toy(TrainableModel):
    """Linear classifier, deterministic initial weights; state = running sum of row ids per row."""

    def __init__(self):
        super().__init__(name="toy")
        init = np.linspace(-0.5, 0.5, DIM * CLASSES, dtype=np.float32).reshape(DIM, CLASSES)
        self.dense = tf.keras.layers.Dense(CLASSES, name="dense",
                                           kernel_initializer=tf.keras.initializers.Constant(init))

    def initial_state(self, batch_size):
        return {"seen": tf.zeros([batch_size])}

    def step_output(self, features, state, training):
        logits = tf.cast(self.dense(features["x"]), tf.float32)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(features["y"], logits)
        w = features["w"]
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), features["y"]), tf.float32)
        return StepOutput(losses={"ce": Term(tf.reduce_sum(ce * w), tf.reduce_sum(w))},
                          metrics={"accuracy": Term(tf.reduce_sum(correct * w), tf.reduce_sum(w))},
                          state={"seen": state["seen"] + features["id"]})

    def tf1_variable_map(self):
        # models/checkpoints.py assigns tf.Variables: unwrap the Keras 3 variables.
        return {"toy/dense/kernel": self.dense.kernel.value, "toy/dense/bias": self.dense.bias.value}


def write_records(directory: str, nan_ids: tuple[int, ...] = (), num_shards: int = 2) -> list[str]:
    """Real TFRecord shards: x ~ N(0,1), y from x, w in {0,1} with ~30 % zeros, id = row index."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_EXAMPLES, DIM)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5).astype(np.int64)
    w = (rng.random(N_EXAMPLES) > 0.3).astype(np.float32)
    x[list(nan_ids)] = np.nan
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, f"toy-{i:05d}.tfrecord") for i in range(num_shards)]
    writers = [tf.io.TFRecordWriter(p) for p in paths]
    for i in range(N_EXAMPLES):
        ex = tf.train.Example(features=tf.train.Features(feature={
            "x": tf.train.Feature(float_list=tf.train.FloatList(value=x[i])),
            "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[y[i]])),
            "w": tf.train.Feature(float_list=tf.train.FloatList(value=[w[i]])),
            "id": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)])),
        }))
        writers[(i // 64) % num_shards].write(ex.SerializeToString())  # contiguous blocks per shard
    for wr in writers:
        wr.close()
    return paths


SPEC = {"x": tf.io.FixedLenFeature([DIM], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64),
        "w": tf.io.FixedLenFeature([], tf.float32), "id": tf.io.FixedLenFeature([], tf.float32)}


def make_dataset_fn(paths, global_batch: int, shuffle: bool = False):
    def parse(record):
        ex = tf.io.parse_single_example(record, SPEC)
        ex["y"] = tf.cast(ex["y"], tf.int32)
        return ex

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        files = paths[ctx.input_pipeline_id::ctx.num_input_pipelines]
        ds = tf.data.TFRecordDataset(files).map(parse).repeat()
        if shuffle:
            ds = ds.shuffle(64, seed=7)
        return ds.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)

    return dataset_fn


def make_trainer(strategy, model_dir, paths, steps, global_batch=16, lr=0.1, shuffle=False, **config):
    config.setdefault("iterations_per_loop", 5)
    config.setdefault("save_checkpoints_steps", 1000)
    return core.Trainer(
        strategy, Toy, lambda: optimization.create_optimizer(lr, 100, 2, weight_decay=0.01),  # same schedule for every run length
        make_dataset_fn(paths, global_batch, shuffle),
        TrainConfig(model_dir=str(model_dir), num_train_steps=steps, global_batch_size=global_batch,
                         **config))


def weights(trainer) -> list[np.ndarray]:
    return [v.numpy() for v in trainer.model.trainable_variables]


@functools.lru_cache(maxsize=None)
def two_replicas():
    # ONE MirroredStrategy per process: a second instance restarts the collective instance keys, and TF's
    # collective executor remembers the shapes of the first one's instances (mismatch errors).
    return make_strategy("mirrored", 2)


@functools.lru_cache(maxsize=None)
def one_device():
    return make_strategy("one_device", 0)


# ------------------------------------------------------------------------------------------ tests
def test_loss_decreases_and_summaries_written(tmp_path):
    paths = write_records(str(tmp_path / "data"))
    losses = []
    figures = []
    t = make_trainer(one_device(), tmp_path / "run", paths, 60, lr=0.2, iterations_per_loop=10, log_steps=10)
    result = t.train(callbacks=[lambda fig: losses.append(fig["loss"]), figures.append])
    assert result.step == 60 and len(losses) == 6
    assert losses[-1] < 0.8 * losses[0], losses
    assert 0.0 <= result.metrics["accuracy"] <= 1.0 and result.examples_per_sec > 0
    assert tf.io.gfile.glob(str(tmp_path / "run" / "train" / "events.out.tfevents.*"))
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith("ckpt-60")
    # Read the event files back: every scalar of every host loop, with its step and value.
    written = {}
    for path in tf.io.gfile.glob(str(tmp_path / "run" / "train" / "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                written[(value.tag, event.step)] = float(tf.make_ndarray(value.tensor))
    expected = {}
    for fig in figures:
        expected[("loss", fig["step"])] = fig["loss"]
        expected[("losses/ce", fig["step"])] = fig["terms"]["ce"]
        expected[("metrics/accuracy", fig["step"])] = fig["metrics"]["accuracy"]
        for name in ("learning_rate", "grad_norm", "examples_per_sec", "steps_per_sec"):
            expected[(name, fig["step"])] = fig[name]
    assert sorted(written) == sorted(expected)
    assert {step for _, step in written} == {10, 20, 30, 40, 50, 60}
    for key, value in expected.items():
        assert written[key] == pytest.approx(value, rel=1e-6), key


def test_two_replicas_equal_one_replica_with_same_global_batch(tmp_path):
    """Same global batch of 16: replica 0 gets rows 0-7, replica 1 rows 8-15, with different numbers of
    non-zero weights; 3 steps of AdamW must give the same weights (tolerance 1e-6 absolute)."""
    paths = write_records(str(tmp_path / "data"))
    one = make_trainer(one_device(), tmp_path / "one", paths, 3, iterations_per_loop=3)
    r1 = one.train()
    two = make_trainer(two_replicas(), tmp_path / "two", paths, 3, iterations_per_loop=3)
    r2 = two.train()
    counts = [sum(1 for i in range(8 * r, 8 * r + 8) if _w()[i] > 0) for r in (0, 1)]
    assert counts[0] != counts[1], "the test needs replicas with different counts"
    for a, b in zip(weights(one), weights(two)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert abs(r1.loss - r2.loss) < 1e-6 and abs(r1.terms["ce"] - r2.terms["ce"]) < 1e-6
    assert r1.metrics["accuracy"] == r2.metrics["accuracy"]


def _w():
    rng = np.random.default_rng(0)
    rng.normal(size=(N_EXAMPLES, DIM))
    return (rng.random(N_EXAMPLES) > 0.3).astype(np.float32)


def test_per_replica_state_stays_with_its_replica(tmp_path):
    paths = write_records(str(tmp_path / "data"))
    t = make_trainer(two_replicas(), tmp_path / "run", paths, 2, iterations_per_loop=2)
    t.train()
    seen = [v.numpy() for v in t.strategy.experimental_local_results(t._state_vars["seen"])]
    # Step 1: global rows 0-15 (replica 0: 0-7, replica 1: 8-15); step 2: rows 16-31.
    np.testing.assert_array_equal(seen[0], np.arange(0, 8) + np.arange(16, 24))
    np.testing.assert_array_equal(seen[1], np.arange(8, 16) + np.arange(24, 32))


def test_mem_reset_every_loop(tmp_path):
    paths = write_records(str(tmp_path / "data"))
    t = make_trainer(one_device(), tmp_path / "run", paths, 4, iterations_per_loop=2, mem_reset="every_loop")
    t.train()
    seen = t.strategy.experimental_local_results(t._state_vars["seen"])[0].numpy()
    np.testing.assert_array_equal(seen, np.arange(32, 48) + np.arange(48, 64))  # only the last loop's 2 steps


def test_resume_continues_with_the_same_data_order(tmp_path):
    paths = write_records(str(tmp_path / "data"))
    straight = make_trainer(one_device(), tmp_path / "a", paths, 8, shuffle=True, iterations_per_loop=4)
    straight.train()
    first = make_trainer(one_device(), tmp_path / "b", paths, 4, shuffle=True, iterations_per_loop=4)
    first.train()
    resumed = make_trainer(one_device(), tmp_path / "b", paths, 8, shuffle=True, iterations_per_loop=4)
    assert int(resumed.step.numpy()) == 4 and resumed.restored_from.endswith("ckpt-4")
    resumed.train()
    for a, b in zip(weights(straight), weights(resumed)):
        np.testing.assert_allclose(a, b, atol=1e-7)


def test_gradient_accumulation_exact_with_equal_counts(tmp_path):
    paths = write_records(str(tmp_path / "data"))

    class AllCount(Toy):
        def step_output(self, features, state, training):
            features = dict(features, w=tf.ones_like(features["w"]))
            return super().step_output(features, state, training)

    def trainer(model_dir, batch, k):
        return core.Trainer(two_replicas(), AllCount, lambda: optimization.create_optimizer(0.1, 3, 0),
                            make_dataset_fn(paths, batch),
                            TrainConfig(model_dir=str(model_dir), num_train_steps=3, iterations_per_loop=3,
                                             grad_accum_steps=k))

    big, acc = trainer(tmp_path / "big", 16, 1), trainer(tmp_path / "acc", 8, 2)
    big.train()
    acc.train()
    for a, b in zip(weights(big), weights(acc)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_jit_compile_gives_the_same_step(tmp_path):
    paths = write_records(str(tmp_path / "data"))
    plain = make_trainer(two_replicas(), tmp_path / "plain", paths, 3, iterations_per_loop=3)
    plain.train()
    jit = make_trainer(two_replicas(), tmp_path / "jit", paths, 3, iterations_per_loop=3, jit_compile=True)
    jit.train()
    for a, b in zip(weights(plain), weights(jit)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_bf16_trains(tmp_path):
    paths = write_records(str(tmp_path / "data"))
    try:
        t = make_trainer(one_device(), tmp_path / "run", paths, 10, precision="bf16", iterations_per_loop=10)
        assert t.model.dense.compute_dtype == "bfloat16" and t.model.dense.kernel.dtype == "float32"
        result = t.train()
        assert np.isfinite(result.loss)
    finally:
        set_precision_policy("fp32")


def test_fp16_with_loss_scaling_trains(tmp_path):
    paths = write_records(str(tmp_path / "data"))
    try:
        t = make_trainer(one_device(), tmp_path / "run", paths, 6, precision="fp16", iterations_per_loop=6)
        result = t.train()
        assert np.isfinite(result.loss) and float(t._loss_scale.scale.numpy()) == 2.0 ** 15
        assert int(t.optimizer.iterations.numpy()) == 6
    finally:
        set_precision_policy("fp32")


def test_fp16_loss_scale_grows_and_shrinks_on_overflow(tmp_path):
    """Loss scale period 2 (TrainConfig.loss_scale_period): x2 after every 2 finite steps; step 4's batch holds
    a NaN row (a forced overflow): its update is skipped and the scale halves."""
    paths = write_records(str(tmp_path / "data"), nan_ids=(50,), num_shards=1)
    scales = []
    try:
        t = make_trainer(one_device(), tmp_path / "run", paths, 6, precision="fp16", iterations_per_loop=1,
                         loss_scale_period=2, nan_policy="skip")
        result = t.train(callbacks=[lambda fig: scales.append(float(t._loss_scale.scale.numpy()))])
    finally:
        set_precision_policy("fp32")
    assert scales == [2.0 ** 15, 2.0 ** 16, 2.0 ** 16, 2.0 ** 15, 2.0 ** 15, 2.0 ** 16]
    assert result.skipped_steps == 1 and int(t.optimizer.iterations.numpy()) == 5
    assert all(np.isfinite(w).all() for w in weights(t))


def test_nan_loss_raises_naming_the_step(tmp_path):
    # Rows 48..63 form the 4th batch of 16 (no shuffling): step 4 has a NaN loss.
    paths = write_records(str(tmp_path / "data"), nan_ids=(50,), num_shards=1)
    t = make_trainer(one_device(), tmp_path / "run", paths, 10, iterations_per_loop=10)
    try:
        t.train()
    except FloatingPointError as e:
        assert "at step 4" in str(e)
    else:
        raise AssertionError("no FloatingPointError")
    assert all(np.isfinite(w).all() for w in weights(t)), "the NaN step's update must not be applied"


def test_nan_loss_skipped_by_option(tmp_path):
    paths = write_records(str(tmp_path / "data"), nan_ids=(50,), num_shards=1)
    t = make_trainer(one_device(), tmp_path / "run", paths, 10, iterations_per_loop=10, nan_policy="skip")
    result = t.train()
    assert result.step == 10 and result.skipped_steps == 1 and np.isfinite(result.loss)
    assert int(t.optimizer.iterations.numpy()) == 9
    assert all(np.isfinite(w).all() for w in weights(t))


def test_init_checkpoint_from_tf1_release_and_from_ours(tmp_path):
    from textrain.models.checkpoints import write_tf1_checkpoint

    paths = write_records(str(tmp_path / "data"))
    kernel = np.full((DIM, CLASSES), 0.25, np.float32)
    tf1 = write_tf1_checkpoint(str(tmp_path / "orig" / "model.ckpt"), {
        "toy/dense/kernel": kernel, "toy/dense/bias": np.ones(CLASSES, np.float32),
        "cls/predictions/output_bias": np.zeros(7, np.float32), "global_step": np.int64(1000)})
    t = make_trainer(one_device(), tmp_path / "run", paths, 2, init_checkpoint=tf1)
    np.testing.assert_array_equal(t.model.dense.kernel.numpy(), kernel)
    assert t.restored_from == tf1
    t.train()
    ours = make_trainer(one_device(), tmp_path / "run2", paths, 2, init_checkpoint=str(tmp_path / "run"))
    np.testing.assert_array_equal(ours.model.dense.kernel.numpy(), t.model.dense.kernel.numpy())
    assert int(ours.step.numpy()) == 0  # only the weights: a fresh run
