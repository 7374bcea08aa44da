"""models/transformer.py, models/beam_search.py, the rsqrt_decay schedule, token batching and BLEU."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import tensorflow as tf

from textrain.framework import bleu, pipeline
from textrain.models import beam_search
from textrain.models.transformer import (
    Transformer,
    parse_hparams,
    smoothed_cross_entropy,
    timing_signal,
    vocab_from_manifest,
)
from textrain.trainers.optimization import RsqrtDecaySchedule, create_optimizer

TINY = "hidden_size=32,filter_size=64,num_heads=4,num_hidden_layers=2"


def tiny_model(input_vocab: int = 11, target_vocab: int = 7, seed: int = 0, **overrides) -> Transformer:
    tf.keras.utils.set_random_seed(seed)
    extra = "".join(f",{k}={v}" for k, v in overrides.items())
    return Transformer(parse_hparams("transformer_tiny", TINY + extra), input_vocab, target_vocab)


# ------------------------------------------------------------------------------------------ hparams
def test_hparams_sets_are_tensor2tensors():
    base = parse_hparams("transformer_base", "")
    assert (base.hidden_size, base.filter_size, base.num_heads, base.num_hidden_layers) == (512, 2048, 8, 6)
    assert (base.layer_prepostprocess_dropout, base.attention_dropout, base.relu_dropout) == (0.1, 0.1, 0.1)
    assert (base.label_smoothing, base.learning_rate_constant, base.learning_rate_warmup_steps) == (0.1, 2.0, 8000)
    assert (base.optimizer_adam_beta2, base.optimizer_adam_epsilon, base.batch_size) == (0.997, 1e-9, 4096)
    big = parse_hparams("transformer_big", "")
    assert (big.hidden_size, big.filter_size, big.num_heads, big.layer_prepostprocess_dropout,
            big.batch_size) == (1024, 4096, 16, 0.3, 2048)
    small = parse_hparams("transformer_small", "hidden_size=128,label_smoothing=0.2")
    assert (small.num_hidden_layers, small.hidden_size, small.filter_size, small.num_heads,
            small.label_smoothing) == (2, 128, 1024, 4, 0.2)
    with pytest.raises(ValueError, match="known:"):
        parse_hparams("transformer_small", "hiden_size=3")
    with pytest.raises(ValueError, match="must be int"):
        parse_hparams("transformer_small", "hidden_size=big")
    with pytest.raises(ValueError, match="not a transformer set"):
        parse_hparams("transformer_huge", "")


def test_vocab_sharing_follows_the_manifest():
    settings = {"inputs_vocab_size": 9, "targets_vocab_size": 7, "inputs_vocab_fingerprint": "a",
                "targets_vocab_fingerprint": "b"}
    assert vocab_from_manifest({"settings": settings}) == (9, 7, False)
    same = dict(settings, targets_vocab_fingerprint="a", targets_vocab_size=9)
    assert vocab_from_manifest({"settings": same}) == (9, 9, True)
    with pytest.raises(ValueError, match="largest targets id is 7"):
        vocab_from_manifest({"settings": settings, "feature_max": {"targets": 7}})
    separate = tiny_model()
    assert separate.input_embedding is not separate.target_embedding
    assert separate.softmax is separate.target_embedding  # t2t: shared_embedding_and_softmax_weights
    tf.keras.utils.set_random_seed(0)
    shared = Transformer(parse_hparams("transformer_tiny", TINY), 7, 7, shared_vocab=True)
    assert shared.input_embedding is shared.target_embedding
    assert len(shared.trainable_variables) == len(separate.trainable_variables) - 1


def test_checkpoint_holds_every_variable(tmp_path):
    """Every variable is reachable from the model in the object graph (Keras 3 lists are not), so a
    model-only tf.train.Checkpoint (decoding) saves and restores all of them."""
    model = tiny_model()
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    saved = [name for name, _ in tf.train.list_variables(path) if name.startswith("model/")]
    assert len(saved) == len(model.trainable_variables)
    other = tiny_model(seed=1)
    tf.train.Checkpoint(model=other).read(path).assert_existing_objects_matched()
    features = {"inputs": tf.constant([[3, 4, 1]]), "targets": tf.constant([[2, 1]])}
    np.testing.assert_allclose(other(features).numpy(), model(features).numpy(), atol=1e-6)


def test_timing_signal_is_sin_then_cos():
    signal = timing_signal(5, 8).numpy()
    inv = np.exp(np.arange(4) * -math.log(1e4) / 3)
    pos = np.arange(5)[:, None] * inv[None]
    np.testing.assert_allclose(signal, np.concatenate([np.sin(pos), np.cos(pos)], 1), atol=1e-6)
    np.testing.assert_allclose(timing_signal(1, 8, start=3).numpy(), signal[3:4], atol=1e-6)


# --------------------------------------------------------------------------------------------- loss
def test_label_smoothing_as_tensor2tensor():
    logits = tf.constant([[2.0, -1.0, 0.5, 0.0]])
    labels = tf.constant([2])
    ls, vocab = 0.1, 4
    soft = np.full(vocab, ls / (vocab - 1))
    soft[2] = 1 - ls
    log_probs = tf.nn.log_softmax(logits).numpy()[0]
    entropy = -np.sum(soft * np.log(soft))
    expected = -np.sum(soft * log_probs) - entropy  # t2t subtracts the normalising constant
    np.testing.assert_allclose(smoothed_cross_entropy(logits, labels, ls).numpy(), [expected], rtol=1e-6)
    np.testing.assert_allclose(smoothed_cross_entropy(logits, labels, 0.0).numpy(), [-log_probs[2]], rtol=1e-6)


def test_loss_counts_only_target_tokens():
    model = tiny_model()
    features = {"inputs": tf.constant([[3, 4, 1, 0]]), "targets": tf.constant([[2, 3, 1, 0, 0]])}
    out = model.step_output(features, {}, training=False)
    assert float(out.losses["cross_entropy"].count) == 3.0
    longer = {"inputs": features["inputs"], "targets": tf.pad(features["targets"], [[0, 0], [0, 4]])}
    again = model.step_output(longer, {}, training=False)  # more padding changes nothing
    np.testing.assert_allclose(float(again.losses["cross_entropy"].total),
                               float(out.losses["cross_entropy"].total), rtol=1e-5)


# ----------------------------------------------------------------------------------------- decoding
def test_incremental_decoding_equals_full_recomputation():
    model = tiny_model()
    inputs = tf.constant([[3, 4, 5, 9, 1], [6, 2, 1, 0, 0]])
    targets = tf.constant([[2, 3, 4, 5, 6, 1], [4, 4, 1, 0, 0, 0]])
    full = model({"inputs": inputs, "targets": targets}).numpy()
    cache = model.decoding_cache(inputs, 6)
    previous = tf.zeros([2], tf.int32)
    for i in range(6):
        logits, cache = model.decode_step(previous, tf.constant(i), cache)
        np.testing.assert_allclose(logits.numpy(), full[:, i], atol=1e-5, rtol=0)
        previous = targets[:, i]


def test_length_penalty_values():
    assert float(beam_search.length_penalty(1, 0.6)) == pytest.approx(1.0)
    assert float(beam_search.length_penalty(7, 0.6)) == pytest.approx(2.0 ** 0.6)
    assert float(beam_search.length_penalty(10, 1.0)) == pytest.approx(2.5)
    assert float(beam_search.length_penalty(25, 0.0)) == pytest.approx(1.0)


def _sequence_log_prob(model, source, sequence) -> float:
    logits = model({"inputs": source, "targets": tf.constant([list(sequence)])})
    log_probs = tf.nn.log_softmax(logits)[0].numpy()
    return float(sum(log_probs[j, s] for j, s in enumerate(sequence)))


def _exhaustive_best(log_prob_fn, vocab: int, length: int, alpha: float):
    """Best (score, sequence) over every EOS-terminated sequence of at most `length` tokens."""
    non_eos = [t for t in range(vocab) if t != 1]
    scored = []
    for n in range(1, length + 1):
        for prefix in itertools.product(non_eos, repeat=n - 1):
            seq = prefix + (1,)
            scored.append((log_prob_fn(seq) / float(beam_search.length_penalty(n, alpha)), seq))
    return max(scored)


def _check_beam(ids, score, best_score, best_seq):
    got = ids.numpy().tolist()
    assert got[:len(best_seq)] == list(best_seq) and not any(got[len(best_seq):])
    assert float(score) == pytest.approx(best_score, abs=1e-4)


def test_beam_search_as_wide_as_the_hypotheses_is_exhaustive():
    """vocab 5 (EOS = 1), length <= 3: a beam of 40 keeps all (V-1)^2 = 16 alive prefixes and all 80
    extensions of them, so it must return the best EOS-terminated sequence of them all. On the tiny
    Transformer, and on a tiny Markov model (logits from the step and the last token) whose EOS is made
    unlikely early, so the best sequences are long ones."""
    vocab, length, alpha = 5, 3, 0.6
    for seed in range(2):
        model = tiny_model(target_vocab=vocab, seed=seed)
        source = tf.constant([[3, 4, 5, 1]]) if seed == 0 else tf.constant([[7, 2, 1, 0]])
        best_score, best_seq = _exhaustive_best(lambda seq: _sequence_log_prob(model, source, seq), vocab,
                                                length, alpha)
        ids, score = model.infer(source, length, beam_size=40, alpha=alpha)
        _check_beam(ids[0], score[0], best_score, best_seq)

    longer = 0
    for seed in range(4):
        rng = np.random.default_rng(seed)
        table = rng.normal(0, 2, size=(length, vocab, vocab)).astype(np.float32)
        table[:2, :, 1] -= 3.0  # EOS unlikely at steps 0 and 1
        log_probs = tf.nn.log_softmax(table).numpy()

        def markov_log_prob(seq):
            last, total = 0, 0.0
            for i, t in enumerate(seq):
                total += log_probs[i, last, t]
                last = t
            return total

        def logits_fn(ids, i, cache):
            return tf.gather(tf.constant(table)[i], ids), {"steps": cache["steps"] + 1}

        best_score, best_seq = _exhaustive_best(markov_log_prob, vocab, length, alpha)
        cache = {"steps": tf.zeros([1], tf.int32)}
        ids, scores = beam_search.beam_search(logits_fn, 1, 40, length, vocab, alpha, cache)
        _check_beam(ids[0, 0], scores[0, 0], best_score, best_seq)
        longer += len(best_seq) > 1
    assert longer >= 2, "the Markov cases must exercise sequences longer than EOS alone"


def test_greedy_and_beam_are_batched_and_stop_after_eos():
    model = tiny_model(seed=3)
    inputs = tf.constant([[3, 4, 5, 1], [6, 2, 1, 0], [8, 1, 0, 0]])
    greedy, _ = model.infer(inputs, 8, beam_size=1)
    beam, _ = model.infer(inputs, 8, beam_size=4, alpha=0.6)
    for ids in (greedy.numpy(), beam.numpy()):
        assert ids.shape == (3, 8)
        for row in ids:
            row = row.tolist()
            if 1 in row:
                assert not any(row[row.index(1) + 1:])
    for b in range(3):  # batching changes nothing
        alone, _ = model.infer(inputs[b:b + 1], 8, beam_size=4, alpha=0.6)
        assert alone.numpy()[0].tolist() == beam.numpy()[b].tolist()


# ----------------------------------------------------------------------------------------- schedule
def test_rsqrt_decay_schedule_is_tensor2tensors():
    schedule = RsqrtDecaySchedule(2.0, 8000, hidden_size=512)
    for step in (0, 1, 4000, 8000, 20000):
        expected = 2.0 * min(1.0, step / 8000) * max(step, 8000) ** -0.5 * 512 ** -0.5
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-6)
    assert float(RsqrtDecaySchedule(1.0, 100)(400)) == pytest.approx(0.05)
    opt = create_optimizer(2.0, 0, 8000, optimizer="adam", decay="rsqrt_decay", lr_hidden_size=512)
    assert float(opt.learning_rate(8000)) == pytest.approx(2.0 / math.sqrt(8000 * 512), rel=1e-6)


# ----------------------------------------------------------------------------------- token batching
def _variable_length_dataset(lengths):
    def gen():
        for n in lengths:
            yield {"inputs": np.arange(1, n + 1, dtype=np.int32), "targets": np.ones(max(1, n // 2), np.int32)}

    spec = {"inputs": tf.TensorSpec([None], tf.int32), "targets": tf.TensorSpec([None], tf.int32)}
    return tf.data.Dataset.from_generator(gen, output_signature=spec)


def _length(ex):
    return tf.maximum(tf.shape(ex["inputs"])[0], tf.shape(ex["targets"])[0])


def test_token_batching_scheme_as_tensor2tensor():
    boundaries, sizes = pipeline.token_batching_scheme(4096, 256)
    assert boundaries[:6] == [8, 9, 10, 11, 12, 13] and boundaries[-1] < 256
    assert len(sizes) == len(boundaries) + 1
    window = max(n for n in pipeline.HIGHLY_COMPOSITE_NUMBERS if n <= 3 * 512)
    assert window == 1260 and all(window % s == 0 for s in sizes)
    for bound, size in zip(boundaries + [256], sizes):
        assert size * bound <= 4096
    assert sizes[0] == 420 and sizes[-1] == 15  # 4096 // 8 = 512 -> 420; 4096 // 256 = 16 -> 15 (divisors of 1260)
    with pytest.raises(ValueError, match="exceeds the batch"):
        pipeline.token_batching_scheme(100, 256)


def test_token_batches_stay_within_budget_and_pad_less_than_pad_to_max():
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(3.0, 0.6, size=3000).astype(int), 1, 120).tolist()
    tokens, max_length = 1024, 100
    real = padded = 0
    batches = pipeline.batch(_variable_length_dataset(lengths), "tokens", tokens, max_length=max_length,
                             length_fn=_length, drop_remainder=False)
    seen = 0
    for b in batches:
        rows, width = b["inputs"].shape
        assert rows * width <= tokens and rows * b["targets"].shape[1] <= tokens
        real += int(tf.reduce_sum(tf.cast(b["inputs"] > 0, tf.int32)))
        padded += rows * width
        seen += rows
    assert seen == sum(n <= max_length for n in lengths)  # longer ones were dropped, none lost
    waste = 1 - real / padded
    fixed_waste = 1 - real / (seen * max_length)
    assert waste < 0.15 and waste < fixed_waste / 3, (waste, fixed_waste)
    fixed = pipeline.batch(_variable_length_dataset(lengths), "tokens_fixed", tokens, max_length=max_length,
                           length_fn=_length)
    shapes = {tuple(b["inputs"].shape) for b in fixed}
    assert shapes == {(tokens // max_length, max_length)}  # static shapes for TPU


def test_token_batching_per_replica():
    from textrain.framework.problem import DataParams  # noqa: F401  (the reading side's knobs)

    ctx = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2)
    per_replica = ctx.get_per_replica_batch_size(2048)
    batches = pipeline.batch(_variable_length_dataset([30] * 200), "tokens", per_replica, max_length=64,
                             length_fn=_length)
    for b in batches:
        assert b["inputs"].shape[0] * b["inputs"].shape[1] <= 1024


# --------------------------------------------------------------------------------------------- BLEU
def test_bleu_hand_checked():
    # 1..4-gram precisions 5/6, 3/5, 2/4, 1/3; equal lengths (BP = 1).
    score = bleu.corpus_bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
    assert score.score == pytest.approx(100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25, abs=1e-6)
    assert bleu.corpus_bleu(["a b c d e"], ["a b c d e"]).score == pytest.approx(100.0)


def test_bleu_zh_tokenizes_characters():
    # 4 of 7 characters, all n-grams right: BLEU = BP = exp(1 - 7/4).
    score = bleu.corpus_bleu(["我爱北京"], ["我爱北京天安门"], target_language="zh")
    assert score.score == pytest.approx(100 * math.exp(1 - 7 / 4), abs=1e-6)
    assert bleu.corpus_bleu(["我爱北京"], ["我爱北京天安门"], target_language="en").score == 0.0  # one 13a token
    assert bleu.tokenizer_for("zh") == "zh" and bleu.tokenizer_for("de") == "13a"
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        bleu.corpus_bleu(["a", "b"], ["a"])
