"""trainers/checkpoint_checks.py in-process on a small real BERT: a textrain checkpoint (model + optimizer,
as the trainer saves it) initialises a classifier completely, and checkpoints that do not fit are refused
listing the variables. The CLI-level cases are in tests/test_faults.py."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from textrain.models.bert import BertClassifier, BertPretrainer
from textrain.models.checkpoints import CheckpointMismatchError
from textrain.trainers import checkpoint_checks as cc
from textrain.trainers.optimization import create_optimizer

CONFIG = dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
              max_position_embeddings=32, type_vocab_size=2)


def _weights(model) -> dict[str, np.ndarray]:
    return {n: v.numpy() for n, v in cc.model_variables(model).items()}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    model = BertPretrainer(CONFIG)
    optimizer = create_optimizer(1e-3, 10, 1)
    optimizer.build(model.trainable_variables)
    path = tf.train.Checkpoint(model=model, optimizer=optimizer, step=tf.Variable(0, dtype=tf.int64)).save(
        str(tmp_path_factory.mktemp("ckpt") / "ckpt"))
    return model, path


def test_a_classifier_is_initialised_with_every_encoder_weight(pretrained):
    model, path = pretrained
    classifier = BertClassifier(CONFIG, 3)
    loaded = cc.load_init_checkpoint(path, classifier)
    source, target = _weights(model), _weights(classifier)
    encoder = [n for n in target if n.startswith("bert/")]
    assert sorted(loaded) == sorted(encoder) and len(encoder) > 30
    for name in encoder:
        np.testing.assert_array_equal(target[name], source[name])
    # The classifier's own head is new (allowed missing); the pretraining heads unused (allowed unexpected).
    assert any(n.startswith("classifier/") for n in target) and not any(n.startswith("classifier/") for n in loaded)


def test_a_deeper_or_wider_model_is_refused_listing_the_variables(pretrained):
    _, path = pretrained
    with pytest.raises(CheckpointMismatchError, match=r"missing from the checkpoint \(16\): bert/encoder/layer_2/"):
        cc.load_init_checkpoint(path, BertPretrainer(dict(CONFIG, num_hidden_layers=3)))
    with pytest.raises(CheckpointMismatchError, match=r"in the checkpoint but not in the model \(16\): bert/encoder/layer_1/"):
        cc.load_init_checkpoint(path, BertPretrainer(dict(CONFIG, num_hidden_layers=1)))
    with pytest.raises(CheckpointMismatchError,
                       match=r"shape mismatch .*bert/encoder/embeddings/word_embeddings: checkpoint \[60, 16\] vs model \[60, 32\]"):
        cc.load_init_checkpoint(path, BertPretrainer(dict(CONFIG, hidden_size=32, intermediate_size=64)))
    with pytest.raises(CheckpointMismatchError, match=r"--model_dir=/runs/x holds a checkpoint of a different model"):
        cc.check_model_dir_checkpoint(path, BertPretrainer(dict(CONFIG, num_hidden_layers=3)), "/runs/x")
    cc.check_model_dir_checkpoint(path, BertPretrainer(CONFIG), "/runs/x")  # the same model: fine


def test_a_missing_checkpoint_names_itself(tmp_path, pretrained):
    _, path = pretrained
    with pytest.raises(cc.UserError, match=rf"--init_checkpoint={tmp_path}/ckpt-9: no such checkpoint"):
        cc.resolve_checkpoint(f"{tmp_path}/ckpt-9")
    with pytest.raises(cc.UserError, match="is a directory without a checkpoint"):
        cc.resolve_checkpoint(str(tmp_path))
    assert cc.resolve_checkpoint(path) == path


def test_xlnet_init_checkpoint_loads_every_layer_norm(tmp_path):
    """XLNet's LayerNorm weights all have the Keras path `LayerNorm/gamma|beta`: loading by path would set one
    pair and leave the others at their initial values without a word. Such a model is restored through the
    checkpoint's object graph, every variable matched."""
    from textrain.models import xlnet

    def tiny():
        return xlnet.XLNetPretrainer.from_settings(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, n_token=50)

    source = tiny()
    rng = np.random.default_rng(0)
    weights = lambda model: [v for v in model.variables if "seed_generator" not in v.path]  # noqa: E731
    for v in weights(source):
        v.assign(rng.normal(size=v.shape).astype(np.float32))
    optimizer = tf.keras.optimizers.Adam()
    optimizer.build(source.trainable_variables)
    path = tf.train.Checkpoint(model=source, optimizer=optimizer).save(str(tmp_path / "ckpt"))
    target = tiny()
    cc.load_init_checkpoint(path, target)
    norms = [i for i, v in enumerate(source.variables) if "LayerNorm" in v.path]
    assert len(norms) == 8
    for a, b in zip(weights(source), weights(target)):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a), err_msg=a.path)
