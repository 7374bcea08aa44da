"""BERT: config files, pretraining heads and their Terms, TF1 checkpoint import, building from the trainer flags."""
import json
import types

import numpy as np
import pytest
import tensorflow as tf

from textrain.framework import registry
from textrain.models import bert
from textrain.models.bert import BertClassifier, BertConfig, BertPretrainer
from textrain.models.checkpoints import CheckpointMismatchError, write_tf1_checkpoint
from textrain.trainers.strategy import make_strategy  # noqa: E402
from textrain.trainers.trainer_flags import model_settings_from_flags

# The released uncased_L-12_H-768_A-12/bert_config.json, with the extra key some releases carry.
ORIGINAL_CONFIG = """{
  "attention_probs_dropout_prob": 0.1,
  "directionality": "bidi",
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 768,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 512,
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "type_vocab_size": 2,
  "vocab_size": 30522
}
"""

VOCAB = 50


def tiny_config(**overrides):
    values = dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    values.update(overrides)
    return BertConfig(**values)


def features(batch=2, length=8, predictions=3, seed=0):
    rng = np.random.default_rng(seed)
    lengths = [length - 3, length][:batch] + [length] * max(0, batch - 2)
    mask = np.array([[1] * n + [0] * (length - n) for n in lengths], np.int32)
    ids = rng.integers(5, VOCAB, size=(batch, length)).astype(np.int32) * mask
    segments = np.array([[0] * (n // 2) + [1] * (length - n // 2) for n in lengths], np.int32) * mask
    positions = np.stack([rng.choice(np.arange(1, n), predictions, replace=False) for n in lengths]).astype(np.int32)
    return {
        "input_ids": tf.constant(ids), "input_mask": tf.constant(mask), "segment_ids": tf.constant(segments),
        "masked_lm_positions": tf.constant(positions),
        "masked_lm_ids": tf.constant(rng.integers(5, VOCAB, size=(batch, predictions)), tf.int32),
        "masked_lm_weights": tf.constant([[1.0, 1.0, 0.0]] * batch, tf.float32)[:, :predictions],
        "next_sentence_labels": tf.constant(rng.integers(0, 2, size=(batch, 1)), tf.int32),
    }


@pytest.fixture(scope="module")
def model():
    return BertPretrainer(tiny_config())


def test_config_from_original_json(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text(ORIGINAL_CONFIG)
    config = BertConfig.from_json_file(str(path))
    assert config.vocab_size == 30522 and config.num_hidden_layers == 12 and config.hidden_act == "gelu"
    assert config.embedding_size is None
    assert config == BertConfig.preset("base")
    assert json.loads(config.to_json_string()) == {k: v for k, v in json.loads(ORIGINAL_CONFIG).items()
                                                   if k != "directionality"}


@pytest.mark.parametrize("text, message", [
    ('{"vocab_size": 10,\n "hidden_size": }', r"bert_config.json:2: not valid JSON"),
    ('{"hidden_size": 64}', "vocab_size is required"),
    ('{"vocab_size": "30522"}', "vocab_size must be int"),
    ('{"vocab_size": 10, "hidden_size": 100, "num_attention_heads": 12}', "not a multiple"),
    ('{"vocab_size": 10, "hidden_act": "gelu3"}', "unknown activation"),
])
def test_config_errors_name_the_file(tmp_path, text, message):
    path = tmp_path / "bert_config.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        BertConfig.from_json_file(str(path))
    assert str(path) in str(info.value)


def test_presets():
    sizes = {name: (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size)
             for name in bert.PRESETS for c in [BertConfig.preset(name, vocab_size=100)]}
    assert sizes == {"tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024), "small": (4, 512, 8, 2048),
                     "medium": (8, 512, 8, 2048), "base": (12, 768, 12, 3072), "large": (24, 1024, 16, 4096)}
    with pytest.raises(ValueError, match="known: tiny"):
        BertConfig.preset("huge")


def test_registered_names():
    assert registry.models.get("bert") is BertPretrainer
    assert registry.models.get("bert_classifier") is BertClassifier


def test_output_shapes(model):
    out = model(features())
    assert out["mlm_logits"].shape == (2, 3, VOCAB)
    assert out["nsp_logits"].shape == (2, 2)
    assert out["sequence_output"].shape == (2, 8, 16)
    assert out["pooled_output"].shape == (2, 16)
    assert out["mlm_logits"].dtype == tf.float32


def test_padded_token_changes_nothing(model):
    f = features()
    out = model(f)
    ids = f["input_ids"].numpy().copy()
    ids[0, 5:] = [7, 8, 9]  # example 0 has 5 real tokens
    segments = f["segment_ids"].numpy().copy()
    segments[0, 5:] = 1
    out2 = model({**f, "input_ids": tf.constant(ids), "segment_ids": tf.constant(segments)})
    for key in ("mlm_logits", "nsp_logits", "pooled_output"):
        np.testing.assert_allclose(out2[key].numpy(), out[key].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out2["sequence_output"].numpy()[0, :5], out["sequence_output"].numpy()[0, :5],
                               rtol=1e-5, atol=1e-5)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_step_output_terms_by_hand(model):
    f = features()
    out = model(f)
    result = model.step_output(f, {}, training=False)
    assert result.state == {}
    mlm_lp = _log_softmax(out["mlm_logits"].numpy().astype(np.float64))
    labels = f["masked_lm_ids"].numpy()
    weights = f["masked_lm_weights"].numpy()
    ce = -np.take_along_axis(mlm_lp, labels[..., None], -1)[..., 0]
    mlm = result.losses["mlm"]
    np.testing.assert_allclose(mlm.total.numpy(), (ce * weights).sum(), rtol=1e-5)
    assert mlm.count.numpy() == 4.0  # weights [1, 1, 0] on 2 examples
    correct = (mlm_lp.argmax(-1) == labels)
    assert result.metrics["mlm_accuracy"].total.numpy() == (correct * weights).sum()
    nsp_lp = _log_softmax(out["nsp_logits"].numpy().astype(np.float64))
    nsp_labels = f["next_sentence_labels"].numpy()[:, 0]
    nsp = result.losses["nsp"]
    np.testing.assert_allclose(nsp.total.numpy(), -nsp_lp[np.arange(2), nsp_labels].sum(), rtol=1e-5)
    assert nsp.count.numpy() == 2.0
    assert result.metrics["nsp_accuracy"].count.numpy() == 2.0
    # A prediction of weight 0 is excluded: its label can be anything.
    other = labels.copy()
    other[:, 2] = (other[:, 2] + 1) % VOCAB
    again = model.step_output({**f, "masked_lm_ids": tf.constant(other)}, {}, training=False)
    assert again.losses["mlm"].total.numpy() == mlm.total.numpy()


def test_training_reduces_the_loss():
    model = BertPretrainer(tiny_config())
    optimizer = tf.keras.optimizers.Adam(1e-2)
    f = features(seed=3)

    def step():  # eager: tracing a tf.function costs more than these few tiny steps
        with tf.GradientTape() as tape:
            out = model.step_output(f, {}, training=True)
            loss = sum(t.total / t.count for t in out.losses.values())
        grads = tape.gradient(loss, model.trainable_variables)
        assert all(g is not None for g in grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = [float(step()) for _ in range(5)]
    assert losses[-1] < losses[0]


def _perturbed_checkpoint(model, path, seed=0):
    """Perturb every variable in place (so LayerNorm/bias are not at their trivial init), then write
    them under the original names."""
    rng = np.random.default_rng(seed)
    values = {}
    for name, var in model.tf1_variable_map().items():
        value = var.numpy() + rng.normal(scale=0.05, size=var.shape).astype(np.float32)
        var.assign(value)
        values[name] = value
    return write_tf1_checkpoint(str(path), values), values


def test_tf1_checkpoint_import_reproduces_logits(tmp_path):
    source = BertPretrainer(tiny_config())
    ckpt, values = _perturbed_checkpoint(source, tmp_path / "bert_model.ckpt")
    shapes = dict(tf.train.list_variables(ckpt))
    assert shapes["cls/seq_relationship/output_weights"] == [2, 16]
    assert shapes["bert/encoder/layer_1/attention/self/query/kernel"] == [16, 16]
    assert shapes["bert/encoder/layer_0/intermediate/dense/kernel"] == [16, 32]
    assert shapes["cls/predictions/output_bias"] == [VOCAB]
    assert len(values) == 5 + 2 * 16 + 2 + 4 + 1 + 2
    fresh = BertPretrainer(tiny_config())
    f = features()
    assert not np.allclose(fresh(f)["mlm_logits"].numpy(), source(f)["mlm_logits"].numpy(), atol=1e-3)
    loaded = fresh.load_tf1_checkpoint(ckpt)
    assert len(loaded) == len(values)
    for key in ("mlm_logits", "nsp_logits", "sequence_output"):
        np.testing.assert_allclose(fresh(f)[key].numpy(), source(f)[key].numpy(), rtol=1e-5, atol=1e-5)

    classifier = BertClassifier(tiny_config(), num_labels=3)
    classifier.init_from_pretrained(ckpt)
    np.testing.assert_allclose(classifier.bert.pooler.kernel.numpy(), values["bert/pooler/dense/kernel"])
    assert classifier(f).shape == (2, 3)
    assert tuple(classifier.tf1_variable_map()["output_weights"].shape) == (3, 16)
    # A run_classifier.py checkpoint (head at the top level) round-trips too.
    head_ckpt = write_tf1_checkpoint(str(tmp_path / "model.ckpt-100"),
                                     {n: v.numpy() + 0.1 for n, v in classifier.tf1_variable_map().items()})
    fine_tuned = BertClassifier(tiny_config(), num_labels=3)
    fine_tuned.load_tf1_checkpoint(head_ckpt)
    np.testing.assert_allclose(fine_tuned.classifier.output_bias.numpy(), 0.1)


@pytest.mark.parametrize("change, listed", [
    ("drop", "missing from checkpoint (1): bert/encoder/layer_1/output/dense/bias"),
    ("extra", "not used by the model (1): bert/encoder/layer_2/output/dense/bias"),
    ("reshape", "shape mismatch (1): bert/embeddings/word_embeddings: checkpoint (51, 16) vs model (50, 16)"),
])
def test_checkpoint_mismatch_lists_the_variable(tmp_path, model, change, listed):
    values = {name: var.numpy() for name, var in model.tf1_variable_map().items()}
    if change == "drop":
        del values["bert/encoder/layer_1/output/dense/bias"]
    elif change == "extra":
        values["bert/encoder/layer_2/output/dense/bias"] = np.zeros([16], np.float32)
    else:
        values["bert/embeddings/word_embeddings"] = np.zeros([VOCAB + 1, 16], np.float32)
    values["global_step"] = np.int64(7)  # bookkeeping the originals save is ignored
    ckpt = write_tf1_checkpoint(str(tmp_path / "ckpt"), values)
    before = model.bert.embeddings.word_embeddings.numpy()
    with pytest.raises(CheckpointMismatchError) as info:
        model.load_tf1_checkpoint(ckpt)
    assert listed in str(info.value)
    np.testing.assert_array_equal(model.bert.embeddings.word_embeddings.numpy(), before)  # nothing assigned


def test_bf16_policy_forward_and_loss_are_finite():
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = BertPretrainer(tiny_config())
        out = model.step_output(features(), {}, training=True)
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    assert model.bert.embeddings.word_embeddings.dtype == tf.float32
    for term in list(out.losses.values()) + list(out.metrics.values()):
        assert term.total.dtype == tf.float32 and np.isfinite(term.total.numpy())
    assert 0 < out.losses["mlm"].total.numpy() / out.losses["mlm"].count.numpy() < 2 * np.log(VOCAB)


def test_classifier_step_output_weights_padding_examples():
    model = BertClassifier(tiny_config(), num_labels=2)
    f = features()
    f = {k: f[k] for k in ("input_ids", "input_mask", "segment_ids")}
    f["label_ids"] = tf.constant([1, 0])
    f["is_real_example"] = tf.constant([1, 0])
    out = model.step_output(f, {}, training=False)
    assert out.losses["classification"].count.numpy() == 1.0
    lp = _log_softmax(model(f).numpy().astype(np.float64))
    np.testing.assert_allclose(out.losses["classification"].total.numpy(), -lp[0, 1], rtol=1e-5)


def build_from_flags(flags, manifest):
    """As the trainers build `--model=bert`: the flags' settings, the one constructor."""
    return BertPretrainer.from_settings(manifest=manifest, **model_settings_from_flags(flags))


def test_build_from_flags(tmp_path):
    flags = types.SimpleNamespace(model_size="tiny")
    manifest = {"settings": {"vocab_size": 64, "max_seq_length": 128}, "feature_max": {"input_ids": 63}}
    model = build_from_flags(flags, manifest)
    assert model.config.vocab_size == 64 and model.config.hidden_size == 128
    with pytest.raises(ValueError, match="largest input id is 64.*vocab_size 64"):
        build_from_flags(flags, {**manifest, "feature_max": {"input_ids": 64}})
    with pytest.raises(ValueError, match="max_seq_length is 600.*max_position_embeddings 512"):
        build_from_flags(flags, {**manifest, "settings": {"vocab_size": 64, "max_seq_length": 600}})
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(tiny_config(vocab_size=60).to_dict()))
    flags = types.SimpleNamespace(bert_config_file=str(path), model_size="base")
    with pytest.raises(ValueError, match=f"bert_config_file={path}"):
        build_from_flags(flags, manifest)  # ids up to 63 with a 60-word config


def test_multi_replica_step_matches_one_replica():
    """Variables are created in the strategy scope at construction; sums/counts make 2 replicas == 1."""
    strategy = make_strategy("mirrored", 2)  # one MirroredStrategy per process (trainers/core.py)
    with strategy.scope():
        model = BertPretrainer(tiny_config())
    f = features(batch=4)
    single = model.step_output(f, {}, training=False).losses["mlm"]
    dist = strategy.experimental_distribute_values_from_function(
        lambda ctx: {k: v[ctx.replica_id_in_sync_group * 2:(ctx.replica_id_in_sync_group + 1) * 2]
                     for k, v in f.items()})
    per_replica = strategy.run(lambda x: model.step_output(x, {}, training=False).losses["mlm"], args=(dist,))
    total = strategy.reduce("SUM", per_replica.total, axis=None)
    count = strategy.reduce("SUM", per_replica.count, axis=None)
    np.testing.assert_allclose(total / count, single.total / single.count, rtol=1e-5)
