"""QA heads: they learn, their beams are the teacher-forced end distribution's top-k, masks hold, and
the originals' variable names round-trip through a TF1 checkpoint."""
import numpy as np
import pytest
import tensorflow as tf

from textrain.models import qa_heads
from textrain.models.base import weighted_loss
from textrain.models.bert import BertConfig
from textrain.models.checkpoints import load_tf1_checkpoint, write_tf1_checkpoint
from textrain.models.electra import ElectraConfig
from textrain.models.xlnet import XLNetConfig

B, L, V = 4, 16, 100


def _bert_config():
    return BertConfig.preset("tiny", vocab_size=V, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _electra_config():
    return ElectraConfig.preset("small", vocab_size=V, hidden_size=32, num_hidden_layers=2, embedding_size=16,
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _xlnet_config():
    return XLNetConfig.preset("tiny", n_token=V)


def _wordpiece_batch(seed=0):
    rng = np.random.default_rng(seed)
    return {"unique_ids": np.arange(B), "input_ids": rng.integers(5, V, (B, L)).astype(np.int32),
            "input_mask": np.array([[1] * 14 + [0] * 2] * B, np.int32),
            "segment_ids": np.array([[0] * 5 + [1] * 11] * B, np.int32),
            "start_positions": np.array([6, 7, 0, 9]), "end_positions": np.array([8, 7, 0, 12]),
            "is_impossible": np.array([0, 0, 1, 0])}


def _xlnet_batch(seed=0):
    rng = np.random.default_rng(seed)
    p_mask = np.array([[0.0] * 10 + [1.0] * 4 + [0.0] + [1.0]] * B, np.float32)  # cls at 14, pad at 15
    return {"unique_ids": np.arange(B), "input_ids": rng.integers(9, V, (B, L)).astype(np.int32),
            "input_mask": np.array([[0.0] * 15 + [1.0]] * B, np.float32),
            "segment_ids": np.array([[0] * 11 + [1] * 3 + [2, 3]] * B, np.int32), "p_mask": p_mask,
            "cls_index": np.full(B, 14), "start_positions": np.array([2, 5, 14, 0]),
            "end_positions": np.array([4, 5, 14, 3]), "is_impossible": np.array([0.0, 0.0, 1.0, 0.0], np.float32)}


MODELS = {
    "bert_squad": (lambda: qa_heads.BertSquad(_bert_config()), _wordpiece_batch),
    "electra_squad": (lambda: qa_heads.ElectraSquad(_electra_config(), with_negative=True, beam_size=4),
                      _wordpiece_batch),
    "xlnet_squad": (lambda: qa_heads.XLNetSquad(_xlnet_config(), start_n_top=3, end_n_top=2), _xlnet_batch),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_span_model_fits_a_fixed_batch(name):
    tf.keras.utils.set_random_seed(1)
    make, batch = MODELS[name]
    model, features = make(), batch()
    opt = tf.keras.optimizers.Adam(3e-3)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = weighted_loss(model.step_output(features, {}, True).losses)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    first = float(step())
    for _ in range(40):
        last = float(step())
    assert last < 0.3 * first, (first, last)
    out = model.step_output(features, {}, False)
    acc = {k: float(t.total / t.count) for k, t in out.metrics.items()}
    assert acc["start_accuracy"] == 1.0 and acc["end_accuracy"] == 1.0


@pytest.mark.parametrize("name", ["electra_squad", "xlnet_squad"])
def test_beams_are_the_top_k_of_the_teacher_forced_end_logits(name):
    make, batch = MODELS[name]
    model, features = make(), batch()
    out = {k: v.numpy() for k, v in model.predict_outputs(features).items()}
    k1 = out["start_top_index"].shape[1]
    k2 = out["end_top_index"].shape[1] // k1
    starts = {k: v for k, v in features.items() if k != "start_positions"}
    start_logits = model(starts)["start_logits"].numpy()
    np.testing.assert_allclose(np.sort(start_logits, -1)[:, ::-1][:, :k1] - np.log(np.exp(
        start_logits - start_logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - start_logits.max(-1, keepdims=True),
        out["start_top_log_probs"], rtol=1e-4, atol=1e-4)
    for i in range(k1):
        forced = dict(features, start_positions=out["start_top_index"][:, i])
        end_logits = model(forced)["end_logits"].numpy()
        # The beam's ends carry the k2 largest teacher-forced end logits. Compared by value: the beam runs
        # the k1 starts as one batch, whose float rounding may differ in the last bits from this call's,
        # so two near-equal logits can swap places (a tie, not a different beam).
        chosen = np.take_along_axis(end_logits, out["end_top_index"][:, i * k2:(i + 1) * k2], -1)
        np.testing.assert_allclose(chosen, -np.sort(-end_logits, -1)[:, :k2], rtol=1e-5, atol=1e-5)
    if name == "xlnet_squad":  # no start or end on the question, <sep>s or padding (p_mask = 1)
        allowed = set(range(10)) | {14}
    else:  # ELECTRA: context (segment 1, real) or [CLS]
        allowed = set(range(5, 14)) | {0}
    assert set(out["start_top_index"].ravel()) <= allowed
    assert set(out["end_top_index"].ravel()) <= allowed


def _copy_via_tf1_checkpoint(tmp_path, make):
    a, b = make(), make()
    values = {n: v.numpy() for n, v in a.tf1_variable_map().items()}
    path = write_tf1_checkpoint(str(tmp_path / "ckpt"), values)
    load_tf1_checkpoint(path, b.tf1_variable_map())
    return a, b


@pytest.mark.parametrize("name,names", [
    ("bert_squad", ["cls/squad/output_weights", "cls/squad/output_bias", "bert/pooler/dense/kernel"]),
    ("electra_squad", ["task_specific/squad/dense/kernel", "task_specific/squad/qa_hidden/kernel",
                       "task_specific/squad/dense_1/bias", "task_specific/squad/dense_3/kernel",
                       "electra/encoder/layer_1/output/dense/kernel"]),
    ("xlnet_squad", ["start_logits/dense/kernel", "end_logits/dense_0/kernel", "end_logits/LayerNorm/gamma",
                     "end_logits/dense_1/bias", "answer_class/dense_0/kernel", "answer_class/dense_1/kernel",
                     "model/transformer/layer_1/ff/layer_2/kernel"]),
])
def test_original_names_round_trip_through_a_tf1_checkpoint(tmp_path, name, names):
    make, batch = MODELS[name]
    a, b = _copy_via_tf1_checkpoint(tmp_path, make)
    assert set(names) <= set(a.tf1_variable_map())
    assert "answer_class/dense_1/bias" not in a.tf1_variable_map()
    assert len(a.tf1_variable_map()) == len(a.trainable_variables)  # every variable has its original name
    features = batch()
    for k, v in a.predict_outputs(features).items():
        np.testing.assert_allclose(v.numpy(), b.predict_outputs(features)[k].numpy(), rtol=1e-5, atol=1e-5)


def _race_batch(xlnet: bool):
    rng = np.random.default_rng(3)
    ids = rng.integers(9, V, (2, 4 * L)).astype(np.int32)
    mask = np.zeros((2, 4 * L), np.float32) if xlnet else np.ones((2, 4 * L), np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros((2, 4 * L), np.int32),
            "label_ids": np.array([2, 0])}


@pytest.mark.parametrize("xlnet", [False, True])
def test_multiple_choice_scores_each_option_row(tmp_path, xlnet):
    make = (lambda: qa_heads.XLNetRace(_xlnet_config())) if xlnet else (lambda: qa_heads.BertRace(_bert_config()))
    model, features = make(), _race_batch(xlnet)
    logits = model.predict_outputs(features)["logits"].numpy()
    assert logits.shape == (2, 4)
    # swapping options 0 and 2 of every example swaps their logits (one logit per row, same scorer)
    order = [2, 1, 0, 3]
    swapped = {k: (v.reshape(2, 4, L)[:, order].reshape(2, 4 * L) if v.ndim == 2 else v) for k, v in features.items()}
    np.testing.assert_allclose(model.predict_outputs(swapped)["logits"].numpy(), logits[:, order], rtol=1e-5, atol=1e-5)
    out = model.step_output(features, {}, False)
    expected = -np.log(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True))[[0, 1], [2, 0]].sum()
    assert float(out.losses["choice"].total) == pytest.approx(expected, rel=1e-4)
    a, b = _copy_via_tf1_checkpoint(tmp_path, make)
    head = "logits/dense/kernel" if xlnet else "cls/race/output_weights"
    assert head in a.tf1_variable_map()
