"""Fine-tuning models (models/task_heads.py and the three classifiers), their initialisation from original
TF1 and textrain checkpoints, XLNet's padding mask, the evaluation loop under two replicas, layer-wise LR
decay depths, and the export (SavedModel reload == Keras model)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import textrain.models as models  # noqa: F401  (registers the models)
from textrain.framework import registry
from textrain.models.bert import BertClassifier, BertConfig, BertPretrainer
from textrain.models.checkpoints import CheckpointMismatchError, write_tf1_checkpoint
from textrain.models.electra import ElectraClassifier, ElectraConfig, ElectraPretrainer
from textrain.models.task_heads import task_terms
from textrain.models.xlnet import XLNetClassifier, XLNetConfig, XLNetEncoder, XLNetPretrainer
from textrain.trainers.evaluation import evaluate
from textrain.trainers.optimization import create_optimizer, model_depth_fn
from textrain.trainers.strategy import make_strategy

VOCAB = 40
L = 8


def bert_config():
    return BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32)


def electra_config():
    return ElectraConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=32, embedding_size=8, max_position_embeddings=32)


def xlnet_config(**kw):
    return XLNetConfig(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, n_token=VOCAB, dropout=0.0,
                       dropatt=0.0, **kw)


FAMILIES = {
    "bert": (lambda: BertPretrainer(bert_config()), lambda **kw: BertClassifier(bert_config(), **kw)),
    "electra": (lambda: ElectraPretrainer(electra_config(), special_ids={"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3}),
                lambda **kw: ElectraClassifier(electra_config(), task_name="mrpc", **kw)),
    "xlnet": (lambda: XLNetPretrainer(xlnet_config(), name="model"),
              lambda **kw: XLNetClassifier(xlnet_config(), task_name="mrpc", **kw)),
}


def features(batch=3, xlnet=False, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(batch, L)).astype(np.int32)
    if xlnet:
        mask = np.zeros((batch, L), np.float32)
        mask[0, :3] = 1.0  # left padding
        return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
                "segment_ids": tf.zeros((batch, L), tf.int32), "label_ids": tf.constant(rng.integers(0, 2, batch))}
    mask = np.ones((batch, L), np.int32)
    mask[0, 5:] = 0
    return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask), "segment_ids": tf.zeros((batch, L), tf.int32),
            "label_ids": tf.constant(rng.integers(0, 2, batch))}


def test_classifiers_are_registered_and_build_themselves_from_flags():
    import types

    manifest = {"problem": "mrpc", "settings": {"vocab_size": VOCAB, "num_labels": 3, "task_type": "classification"}}
    flags = types.SimpleNamespace(model_size="tiny", bert_config_file=None)
    for name, cls in (("bert_classifier", BertClassifier), ("electra_classifier", ElectraClassifier),
                      ("xlnet_classifier", XLNetClassifier)):
        assert registry.models.get(name) is cls
    # As train_gpu builds --model=bert_classifier / --model=bert: the flags' settings, the class's one constructor.
    from textrain.trainers.trainer_flags import model_settings_from_flags

    settings = model_settings_from_flags(flags)
    model = BertClassifier.from_settings(manifest=manifest, **settings)
    assert isinstance(model, BertClassifier) and model.num_labels == 3 and model.config.vocab_size == VOCAB
    assert isinstance(BertPretrainer.from_settings(manifest=manifest, **settings), BertPretrainer)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tf1_checkpoint_initialises_the_encoder_and_leaves_the_head_fresh(tmp_path, family):
    make_pretrainer, make_classifier = FAMILIES[family]
    pretrainer = make_pretrainer()
    values = {n: np.asarray(v.numpy()) + 0.5 for n, v in pretrainer.tf1_variable_map().items()}
    values["global_step"] = np.int64(1000)
    ckpt = write_tf1_checkpoint(str(tmp_path / "model.ckpt"), values)
    clf = make_classifier(num_labels=2)
    if family == "bert":  # the pooler is part of BERT's encoder side (trained by NSP)
        assert "bert/pooler/dense/kernel" in clf.encoder_tf1_variable_map()
    head_before = {n: v.numpy().copy() for n, v in clf.head_tf1_variable_map().items()}
    loaded = clf.load_init_checkpoint(ckpt)
    encoder = clf.encoder_tf1_variable_map()
    assert sorted(loaded) == sorted(encoder)
    for name, var in encoder.items():  # every encoder variable, from the file
        np.testing.assert_array_equal(var.numpy(), values[name], err_msg=name)
    for name, var in clf.head_tf1_variable_map().items():
        np.testing.assert_array_equal(var.numpy(), head_before[name], err_msg=name)
    assert set(encoder) | set(clf.head_tf1_variable_map()) == set(clf.tf1_variable_map())
    assert len(clf.tf1_variable_map()) == len(clf.trainable_variables)


def test_tf1_checkpoint_missing_an_encoder_variable_is_refused(tmp_path):
    pretrainer = BertPretrainer(bert_config())
    values = {n: v.numpy() for n, v in pretrainer.tf1_variable_map().items()}
    del values["bert/encoder/layer_1/output/dense/bias"]
    ckpt = write_tf1_checkpoint(str(tmp_path / "model.ckpt"), values)
    with pytest.raises(CheckpointMismatchError, match="layer_1/output/dense/bias"):
        BertClassifier(bert_config()).load_init_checkpoint(ckpt)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_textrain_pretraining_checkpoint_initialises_the_encoder(tmp_path, family):
    make_pretrainer, make_classifier = FAMILIES[family]
    pretrainer = make_pretrainer()
    for v in pretrainer.trainable_variables:  # "trained": away from any initialisation
        v.assign(v + 0.25)
    # What trainers/core.py writes: Checkpoint(model=..., optimizer=..., step=...) in a model_dir.
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=pretrainer, step=tf.Variable(7, dtype=tf.int64)),
                                         str(tmp_path / "pretrain"), max_to_keep=1)
    manager.save(checkpoint_number=7)
    clf = make_classifier(num_labels=2)
    clf.load_init_checkpoint(str(tmp_path / "pretrain"))
    source, target = pretrainer.tf1_variable_map(), clf.encoder_tf1_variable_map()
    for name, var in target.items():
        np.testing.assert_array_equal(var.numpy(), source[name].numpy(), err_msg=name)
    # A checkpoint of another family has no such encoder: refused, naming the encoder.
    other = "xlnet" if family != "xlnet" else "bert"
    with pytest.raises(ValueError, match="encoder"):
        FAMILIES[other][1](num_labels=2).load_init_checkpoint(str(tmp_path / "pretrain"))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_pretraining_run_with_optimizer_loads_by_path_and_logs_no_unrestored_values(tmp_path, family):
    """A checkpoint as trainers/core.py writes it (model + optimizer with slots + step): most model variables
    are stored under the optimizer's variable list (their shortest path), yet the classifier reads each
    encoder variable's own value, and the unused pretraining heads / optimizer in the file produce none of
    TF's "Value in checkpoint could not be found" warnings (they printed ~100 lines per fine-tune)."""
    import gc
    import logging

    make_pretrainer, make_classifier = FAMILIES[family]
    pretrainer = make_pretrainer()
    for i, v in enumerate(pretrainer.trainable_variables):  # distinct values per variable
        v.assign(v + 0.01 * (i + 1))
    optimizer = create_optimizer(1e-3, 10, 0, optimizer="adam")
    optimizer.build(pretrainer.trainable_variables)
    ckpt = tf.train.Checkpoint(model=pretrainer, optimizer=optimizer, step=tf.Variable(3, dtype=tf.int64))
    tf.train.CheckpointManager(ckpt, str(tmp_path / "pretrain"), max_to_keep=1).save(checkpoint_number=3)
    keys = [k for k, _ in tf.train.list_variables(str(tmp_path / "pretrain" / "ckpt-3"))]
    assert any(k.startswith("optimizer/_variables/") and "OPTIMIZER_SLOT" not in k for k in keys)

    lines = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    tf_logger = logging.getLogger("tensorflow")
    tf_logger.addHandler(handler)
    try:
        clf = make_classifier(num_labels=2)
        clf.load_init_checkpoint(str(tmp_path / "pretrain"))
        gc.collect()  # TF logs unrestored values when the restore's bookkeeping is collected
    finally:
        tf_logger.removeHandler(handler)
    assert not [line for line in lines if "could not be found" in line or "unrestored" in line], lines[:3]
    source, target = pretrainer.tf1_variable_map(), clf.encoder_tf1_variable_map()
    for name, var in target.items():
        np.testing.assert_array_equal(var.numpy(), source[name].numpy(), err_msg=name)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_pretraining_checkpoint_passes_the_resume_check_of_its_own_model(tmp_path, family):
    """Every variable of a pretrainer is recorded in its checkpoint under its own name, so `--model_dir`'s
    resume check (trainers/checkpoint_checks.py) accepts a fresh model of the same config. ELECTRA's
    discriminator head used to record both of its dense kernels as `discriminator_predictions/kernel`,
    and every ELECTRA pretraining run refused to resume ("holds a checkpoint of a different model")."""
    from textrain.trainers import checkpoint_checks as cc

    make_pretrainer, _ = FAMILIES[family]
    model = make_pretrainer()
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    recorded = cc.checkpoint_model_variables(path)
    assert len(recorded) == len(cc.model_variables(model))
    assert cc.compare(make_pretrainer(), path) == ([], [], [])
    cc.check_model_dir_checkpoint(path, make_pretrainer(), str(tmp_path))  # does not raise


def test_xlnet_padding_changes_nothing_of_the_real_tokens():
    encoder = XLNetEncoder(xlnet_config(), name="transformer")
    rng = np.random.default_rng(1)
    real = rng.integers(5, VOCAB, size=(2, 5)).astype(np.int32)
    seg = np.array([[0, 0, 1, 1, 2]] * 2, np.int32)
    alone = encoder(tf.constant(real), seg_ids=tf.constant(seg), input_mask=tf.zeros((2, 5)))["output"].numpy()
    pad = 3  # left padding, as the XLNet records: 1 = padding, padding segment 4
    ids = np.concatenate([np.zeros((2, pad), np.int32), real], 1)
    segs = np.concatenate([np.full((2, pad), 4, np.int32), seg], 1)
    mask = np.concatenate([np.ones((2, pad), np.float32), np.zeros((2, 5), np.float32)], 1)
    padded = encoder(tf.constant(ids), seg_ids=tf.constant(segs), input_mask=tf.constant(mask))["output"].numpy()
    np.testing.assert_allclose(padded[:, pad:], alone, rtol=1e-5, atol=1e-5)
    # Without the mask the padding would leak into the real tokens.
    leaky = encoder(tf.constant(ids), seg_ids=tf.constant(segs))["output"].numpy()
    assert np.abs(leaky[:, pad:] - alone).max() > 1e-3


def test_task_terms_regression_and_multilabel():
    logits = tf.constant([[0.5], [2.0]])
    losses, metrics = task_terms(logits, tf.constant([1.0, 1.0]), "regression", tf.constant([1, 0]))
    assert losses["regression"].total.numpy() == pytest.approx(0.25) and losses["regression"].count.numpy() == 1
    logits = tf.constant([[3.0, -3.0, 1.0]])
    losses, metrics = task_terms(logits, tf.constant([[1, 0, 0]]), "multilabel")
    expected = sum(np.log1p(np.exp(-z if y else z)) for z, y in zip([3.0, -3.0, 1.0], [1, 0, 0]))
    assert losses["multilabel"].total.numpy() == pytest.approx(expected, rel=1e-5)
    assert metrics["label_accuracy"].total.numpy() / metrics["label_accuracy"].count.numpy() == pytest.approx(2 / 3)


def _records_dataset(n: int, seed: int = 0) -> tf.data.Dataset:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(n, L)).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices({
        "input_ids": ids, "input_mask": np.ones((n, L), np.int32), "segment_ids": np.zeros((n, L), np.int32),
        "label_ids": rng.integers(0, 2, n).astype(np.int32), "is_real_example": np.ones(n, np.int32),
        "example_index": np.arange(n, dtype=np.int32)})


@pytest.mark.slow
def test_evaluate_sees_every_example_once_in_order_on_two_replicas():
    n, batch = 11, 4  # 11 = 2 full global batches + a partial one (3 rows over 2 replicas)
    one = make_strategy("one_device", 0)
    two = make_strategy("mirrored", 2)
    with one.scope():
        m1 = BertClassifier(bert_config(), num_labels=2)
    with two.scope():
        m2 = BertClassifier(bert_config(), num_labels=2)
    for a, b in zip(m2.weights, m1.weights):
        a.assign(b)

    def dataset_fn(ctx):
        per_replica = ctx.get_per_replica_batch_size(batch)
        return _records_dataset(n).shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(per_replica)

    r1 = evaluate(one, m1, dataset_fn, collect_outputs=True)
    r2 = evaluate(two, m2, dataset_fn, collect_outputs=True)
    np.testing.assert_array_equal(r2.outputs["example_index"], np.arange(n))
    np.testing.assert_allclose(r2.outputs["probabilities"], r1.outputs["probabilities"], rtol=1e-5, atol=1e-6)
    full = {k: tf.constant(v) for k, v in next(iter(_records_dataset(n).batch(n))).items()}
    np.testing.assert_allclose(r2.outputs["logits"], m1.predict_outputs(full)["logits"].numpy(), rtol=1e-5, atol=1e-5)
    for k in ("loss", "accuracy"):
        assert r2.metrics[k] == pytest.approx(r1.metrics[k], rel=1e-5)
    labels = full["label_ids"].numpy()
    assert r1.metrics["accuracy"] == pytest.approx(np.mean(r1.outputs["logits"].argmax(-1) == labels))
    # max_steps (pretraining eval): only the first global batches
    assert evaluate(one, m1, dataset_fn, max_steps=2).num_examples == 8


@pytest.mark.parametrize("family, style_top", [("electra", 4), ("xlnet", 2)])
def test_layerwise_lr_decay_scales_each_layers_update(family, style_top):
    clf = FAMILIES[family][1](num_labels=2)
    depth_fn, top = model_depth_fn(clf)
    assert top == style_top
    decay = 0.5
    variables = clf.trainable_variables
    opt = create_optimizer(1e-3, 10, 0, layerwise_lr_decay=decay, depth_fn=depth_fn, top_depth=top, weight_decay=0.0)
    opt.build(variables)
    before = [v.numpy().copy() for v in variables]
    opt.apply_gradients([(tf.ones_like(v), v) for v in variables])
    step = {clf_name(clf, v): float(np.abs(v.numpy() - b).max()) for v, b in zip(variables, before)}
    names = clf.tf1_variable_map()
    by_name = {n: step[clf_name(clf, v)] for n, v in names.items()}
    if family == "electra":
        top_update = by_name["task_specific/mrpc/dense/kernel"]
        assert by_name["electra/embeddings/word_embeddings"] == pytest.approx(top_update * decay ** 4, rel=1e-4)
        assert by_name["electra/encoder/layer_0/attention/self/query/kernel"] == pytest.approx(top_update * decay ** 3, rel=1e-4)
        assert by_name["electra/encoder/layer_1/output/dense/kernel"] == pytest.approx(top_update * decay ** 2, rel=1e-4)
    else:  # XLNet: only the layers, layer l by decay ** (n_layer - 1 - l)
        top_update = by_name["model/sequnece_summary/summary/kernel"]
        assert by_name["model/transformer/word_embedding/lookup_table"] == pytest.approx(top_update, rel=1e-4)
        assert by_name["model/transformer/layer_0/ff/layer_1/kernel"] == pytest.approx(top_update * decay, rel=1e-4)
        assert by_name["model/transformer/layer_1/ff/layer_1/kernel"] == pytest.approx(top_update, rel=1e-4)


def clf_name(model, var) -> int:
    from textrain.models.checkpoints import backing_variable

    return id(backing_variable(var))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_export_reloads_with_the_keras_models_outputs(tmp_path, family):
    from textrain.trainers.export import export_classifier

    clf = FAMILIES[family][1](num_labels=3)
    f = features(xlnet=family == "xlnet")
    path = export_classifier(clf, str(tmp_path / "export"), labels=["a", "b", "c"])
    loaded = tf.saved_model.load(path)
    ids = {k: tf.cast(f[k], tf.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    out = loaded.signatures["serving_default"](**ids)
    expected = clf.predict_outputs(f)
    np.testing.assert_allclose(out["probabilities"].numpy(), expected["probabilities"].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["logits"].numpy(), expected["logits"].numpy(), rtol=1e-5, atol=1e-5)
    labels = [s.decode() for s in out["label"].numpy()]
    assert labels == [["a", "b", "c"][i] for i in expected["probabilities"].numpy().argmax(-1)]
    assert not tf.io.gfile.exists(path + ".tmp")
