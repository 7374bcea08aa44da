"""ELECTRA model: sizes, in-graph masking and sampling, losses, original checkpoint layout, and learning."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import tensorflow as tf

from textrain.models import electra
from textrain.models.base import weighted_loss
from textrain.models.checkpoints import write_tf1_checkpoint
from textrain.trainers.trainer_flags import model_settings_from_flags

PAD, CLS, SEP, MASK = 0, 2, 3, 4
SPECIAL = {"[PAD]": PAD, "[CLS]": CLS, "[SEP]": SEP, "[MASK]": MASK}
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            embedding_size=16, generator_hidden_size=0.5, max_position_embeddings=64)


def tiny_config(vocab_size: int = 50, **overrides) -> electra.ElectraConfig:
    return electra.ElectraConfig(vocab_size=vocab_size, **{**TINY, **overrides})


def batch_of(lengths: list[int], seq_len: int = 32, vocab: int = 50, seed: int = 0) -> dict[str, tf.Tensor]:
    """[CLS] tokens [SEP] rows padded to seq_len; token ids in [5, vocab)."""
    rs = np.random.RandomState(seed)
    ids = np.zeros([len(lengths), seq_len], np.int32)
    for row, n in enumerate(lengths):
        ids[row, :n] = [CLS] + list(rs.randint(5, vocab, size=n - 2)) + [SEP]
    mask = (np.arange(seq_len)[None] < np.array(lengths)[:, None]).astype(np.int32)
    return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
            "segment_ids": tf.zeros_like(tf.constant(ids))}


# ------------------------------------------------------------------------------------------------ #
# Sizes
# ------------------------------------------------------------------------------------------------ #
@pytest.mark.parametrize("size,disc,gen", [
    ("small", (256, 12, 4, 1024, 128), (64, 12, 1, 256)),
    ("base", (768, 12, 12, 3072, 768), (256, 12, 4, 1024)),
    ("large", (1024, 24, 16, 4096, 1024), (256, 24, 4, 1024)),
])
def test_released_sizes(size, disc, gen):
    config = electra.ElectraConfig.preset(size)
    d, g = config.discriminator_config(), config.generator_config()
    assert (d.hidden_size, d.num_hidden_layers, d.num_attention_heads, d.intermediate_size,
            d.embedding_size) == disc
    assert (g.hidden_size, g.num_hidden_layers, g.num_attention_heads, g.intermediate_size) == gen
    assert g.embedding_size == disc[4]  # tied: the generator reads the discriminator's embeddings
    assert d.hidden_act == "gelu_exact"
    assert electra.ElectraObjective(mask_prob=electra.SIZES[size]["mask_prob"]).max_predictions(128) == (
        19 if size != "large" else 32)


def test_config_from_dict_reads_gelu_as_erf_and_rejects_bad_values():
    config = electra.ElectraConfig.from_dict({"vocab_size": 10, "hidden_size": 64, "num_attention_heads": 1,
                                              "intermediate_size": 256, "hidden_act": "gelu"})
    assert config.hidden_act == "gelu_exact" and config.embedding_size is None
    with pytest.raises(ValueError, match="generator_hidden_size"):
        tiny_config(generator_hidden_size=1.5)
    with pytest.raises(ValueError, match="mask_prob"):
        electra.ElectraObjective(mask_prob=0.0)


# ------------------------------------------------------------------------------------------------ #
# Masking
# ------------------------------------------------------------------------------------------------ #
def test_mask_tokens_counts_exclusions_and_proportions():
    lengths = [32, 20, 9, 3, 2]
    f = batch_of(lengths * 40)
    n = electra.ElectraObjective().max_predictions(32)  # int(0.155 * 32) = 4
    rng = tf.random.Generator.from_seed(1)
    m = electra.mask_tokens(f["input_ids"], f["input_mask"], num_predictions=n, mask_prob=0.15, mask_id=MASK,
                            ignore_ids=[PAD, CLS, SEP, MASK], rng=rng)
    ids, masked = f["input_ids"].numpy(), m.input_ids.numpy()
    positions, labels, weights = m.positions.numpy(), m.label_ids.numpy(), m.weights.numpy()
    assert positions.shape == (200, n)
    shown_mask = kept = 0
    for row, length in enumerate(lengths * 40):
        quota = min(max(1, min(n, round(length * 0.15))), length - 2)  # capped by the candidates
        used = weights[row] == 1
        assert used.sum() == quota and used[:quota].all()
        chosen = positions[row][used]
        assert len(set(chosen)) == len(chosen), "positions are drawn without replacement"
        assert ((chosen >= 1) & (chosen <= length - 2)).all(), "[CLS], [SEP] and padding are never chosen"
        assert (labels[row][used] == ids[row][chosen]).all()
        assert (positions[row][~used] == 0).all() and (labels[row][~used] == 0).all()
        changed = np.nonzero(masked[row] != ids[row])[0]
        assert set(changed) <= set(chosen) and (masked[row][changed] == MASK).all()
        shown_mask += len(changed)
        kept += len(chosen) - len(changed)
    assert 0.75 < shown_mask / (shown_mask + kept) < 0.95  # 85 % [MASK], 15 % left as they were


def test_mask_positions_are_uniform_over_candidates():
    f = batch_of([12] * 2000, seq_len=12)
    m = electra.mask_tokens(f["input_ids"], f["input_mask"], num_predictions=1, mask_prob=0.15, mask_id=MASK,
                            ignore_ids=[PAD, CLS, SEP, MASK], rng=tf.random.Generator.from_seed(2))
    counts = np.bincount(m.positions.numpy().ravel(), minlength=12)
    assert counts[0] == 0 and counts[11] == 0
    assert counts[1:11].min() > 140 and counts[1:11].max() < 260  # 200 expected each


def test_sampling_replacement_and_labels():
    input_ids = tf.constant([[CLS, 10, 11, 12, 13, SEP, PAD]])
    masked = electra.MaskedInputs(input_ids=input_ids, positions=tf.constant([[1, 3, 4, 0]]),
                                  label_ids=tf.constant([[10, 12, 13, 0]]),
                                  weights=tf.constant([[1.0, 1.0, 1.0, 0.0]]))
    sampled = tf.constant([[20, 12, 21, 99]])  # the second sample happens to equal the original
    fake, labels = electra.replace_tokens(input_ids, masked, sampled)
    assert fake.numpy().tolist() == [[CLS, 20, 11, 12, 21, SEP, PAD]]  # weight-0 slot ignored
    assert labels.numpy().tolist() == [[0, 1, 0, 0, 1, 0, 0]]  # a sample equal to the original is "real"

    logits = tf.constant([[[0.0, 8.0, 0.0]] * 4])
    rng = tf.random.Generator.from_seed(0)
    assert (electra.sample_tokens(logits, 0.01, rng=rng).numpy() == 1).all()  # cold -> argmax
    allowed = electra.sample_tokens(tf.tile(logits, [50, 1, 1]), 1.0, tf.ones([50, 4], tf.int32), rng=rng)
    assert (allowed.numpy() != 1).all()  # disallow_correct
    frequencies = np.bincount(electra.sample_tokens(tf.zeros([1, 3000, 3]), rng=rng).numpy().ravel()) / 3000
    np.testing.assert_allclose(frequencies, [1 / 3] * 3, atol=0.04)  # Gumbel-max samples the softmax


def test_discriminator_sees_generator_samples_and_loss_terms():
    tf.random.set_seed(0)
    model = electra.ElectraPretrainer(tiny_config(), special_ids=SPECIAL)
    f = batch_of([32, 25, 10, 7], seed=3)
    out = model(f, training=False, rng=tf.random.Generator.from_seed(5))
    masked = out["masked"]
    ids = f["input_ids"].numpy()
    fake, sampled, labels = out["fake_ids"].numpy(), out["sampled_ids"].numpy(), out["disc_labels"].numpy()
    for row in range(4):
        used = masked.weights.numpy()[row] == 1
        pos = masked.positions.numpy()[row][used]
        assert (fake[row][pos] == sampled[row][used]).all()
        others = np.setdiff1d(np.arange(32), pos)
        assert (fake[row][others] == ids[row][others]).all()
        assert (labels[row] == (fake[row] != ids[row])).all()
    assert labels.sum() > 0
    losses, metrics = electra.electra_terms(out, model.objective)
    assert losses["disc"].weight == 50.0 and losses["mlm"].weight == 1.0
    assert float(losses["disc"].count) == f["input_mask"].numpy().sum()
    assert float(losses["mlm"].count) == masked.weights.numpy().sum()
    # An untrained generator's MLM loss is about log(vocab).
    assert abs(float(losses["mlm"].total / losses["mlm"].count) - math.log(50)) < 0.5
    assert float(metrics["replaced_fraction"].total) == labels.sum()


def test_no_gradient_reaches_the_generator_through_its_samples():
    model = electra.ElectraPretrainer(tiny_config(), special_ids=SPECIAL)
    f = batch_of([32, 20])
    with tf.GradientTape() as tape:
        out = model(f, training=True)
        losses, _ = electra.electra_terms(out, model.objective)
        disc_loss = losses["disc"].total
    shared = {id(v) for v in model.embeddings.trainable_variables}
    generator_only = [v for v in model.generator.trainable_variables + model.generator_head.trainable_variables
                      if id(v) not in shared]
    assert len(generator_only) == 2 * 16 + 5  # two blocks (no projection here), head dense + LayerNorm + bias
    grads = tape.gradient(disc_loss, generator_only + [model.embeddings.word_embeddings])
    assert all(g is None for g in grads[:-1])
    assert grads[-1] is not None  # the shared embeddings learn from the discriminator


def test_embeddings_shared_or_untied():
    tied = electra.ElectraPretrainer(tiny_config(), special_ids=SPECIAL)
    assert tied.generator.embeddings is tied.discriminator.embeddings
    assert tied.generator.embeddings_project is None  # embeddings 16 wide = the generator's 0.5 * 32
    assert tied.discriminator.embeddings_project is not None
    untied = electra.ElectraPretrainer(tiny_config(untied_generator_embeddings=True), special_ids=SPECIAL)
    assert untied.generator.embeddings is not untied.discriminator.embeddings
    names = untied.tf1_variable_map()
    assert names["generator/embeddings/word_embeddings"].shape == (50, 16)
    assert len({id(v) for v in names.values()}) == len(names) == len(untied.trainable_variables)


# ------------------------------------------------------------------------------------------------ #
# The released checkpoints' layout, checked against a numpy transcription of the original forward pass
# ------------------------------------------------------------------------------------------------ #
def original_names(layers_disc: int, layers_gen: int, project_disc: bool, project_gen: bool) -> list[str]:
    """Variable names as the original's scopes create them (modeling.py, run_pretraining.py)."""
    names = [f"electra/embeddings/{n}" for n in ("word_embeddings", "token_type_embeddings",
                                                  "position_embeddings", "LayerNorm/beta", "LayerNorm/gamma")]
    layer = ["attention/self/query/kernel", "attention/self/query/bias", "attention/self/key/kernel",
             "attention/self/key/bias", "attention/self/value/kernel", "attention/self/value/bias",
             "attention/output/dense/kernel", "attention/output/dense/bias", "attention/output/LayerNorm/beta",
             "attention/output/LayerNorm/gamma", "intermediate/dense/kernel", "intermediate/dense/bias",
             "output/dense/kernel", "output/dense/bias", "output/LayerNorm/beta", "output/LayerNorm/gamma"]
    for scope, n, project in (("electra", layers_disc, project_disc), ("generator", layers_gen, project_gen)):
        if project:
            names += [f"{scope}/embeddings_project/kernel", f"{scope}/embeddings_project/bias"]
        names += [f"{scope}/encoder/layer_{i}/{v}" for i in range(n) for v in layer]
    names += ["generator_predictions/dense/kernel", "generator_predictions/dense/bias",
              "generator_predictions/LayerNorm/beta", "generator_predictions/LayerNorm/gamma",
              "generator_predictions/output_bias", "discriminator_predictions/dense/kernel",
              "discriminator_predictions/dense/bias", "discriminator_predictions/dense_1/kernel",
              "discriminator_predictions/dense_1/bias"]
    return names


def _ln(x, w, scope):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w[f"{scope}/gamma"] + w[f"{scope}/beta"]


_erf = np.vectorize(math.erf)  # numpy has no erf; the arrays here are tiny


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _dense(x, w, scope):
    return x @ w[f"{scope}/kernel"] + w[f"{scope}/bias"]


def reference_encoder(w, scope, ids, mask, segments, heads):
    """The original BertModel forward (eval mode) in numpy."""
    x = w["electra/embeddings/word_embeddings"][ids]
    x = x + w["electra/embeddings/token_type_embeddings"][segments]
    x = x + w["electra/embeddings/position_embeddings"][: ids.shape[1]][None]
    x = _ln(x, w, "electra/embeddings/LayerNorm")
    if f"{scope}/embeddings_project/kernel" in w:
        x = _dense(x, w, f"{scope}/embeddings_project")
    adder = (1.0 - mask[:, None, None, :]) * -10000.0
    i = 0
    while f"{scope}/encoder/layer_{i}/output/dense/kernel" in w:
        p = f"{scope}/encoder/layer_{i}"
        B, L, H = x.shape
        d = H // heads

        def split(t):
            return t.reshape(B, L, heads, d).transpose(0, 2, 1, 3)

        q, k, v = (split(_dense(x, w, f"{p}/attention/self/{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + adder
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(B, L, H)
        x = _ln(x + _dense(context, w, f"{p}/attention/output/dense"), w, f"{p}/attention/output/LayerNorm")
        ffn = _dense(_gelu(_dense(x, w, f"{p}/intermediate/dense")), w, f"{p}/output/dense")
        x = _ln(x + ffn, w, f"{p}/output/LayerNorm")
        i += 1
    return x


def test_tf1_checkpoint_imports_and_reproduces_logits(tmp_path):
    config = tiny_config(vocab_size=40)
    model = electra.ElectraPretrainer(config, special_ids=SPECIAL)
    names = original_names(2, 2, project_disc=True, project_gen=False)  # emb 16: disc 32 projects, gen 16 does not
    mapping = model.tf1_variable_map()
    assert sorted(mapping) == sorted(names), "every variable of the original layout, and nothing else"
    assert len(mapping) == len(model.trainable_variables)
    rs = np.random.RandomState(0)
    values = {n: (rs.normal(0, 0.3, mapping[n].shape) + (1.0 if n.endswith("gamma") else 0.0)).astype(np.float32)
              for n in names}
    values["global_step"] = np.int64(1000)
    path = write_tf1_checkpoint(str(tmp_path / "model.ckpt"), values)
    model.load_tf1_checkpoint(path)

    f = batch_of([16, 11, 5], seq_len=16, vocab=40, seed=4)
    f["segment_ids"] = tf.constant((np.arange(16)[None] >= 8).astype(np.int32).repeat(3, 0))
    ids, mask, seg = (f[k].numpy() for k in ("input_ids", "input_mask", "segment_ids"))
    hidden = reference_encoder(values, "electra", ids, mask.astype(np.float32), seg, heads=2)
    want = _dense(_gelu(_dense(hidden, values, "discriminator_predictions/dense")), values,
                  "discriminator_predictions/dense_1")[..., 0]
    got = model.discriminator_logits(f["input_ids"], f["input_mask"], f["segment_ids"]).numpy()
    real = mask == 1
    np.testing.assert_allclose(got[real], want[real], rtol=1e-4, atol=1e-4)

    positions = tf.constant([[1, 2, 3], [4, 5, 6], [1, 2, 3]])
    gen_hidden = reference_encoder(values, "generator", ids, mask.astype(np.float32), seg, heads=1)
    gathered = np.take_along_axis(gen_hidden, positions.numpy()[..., None], axis=1)
    h = _ln(_gelu(_dense(gathered, values, "generator_predictions/dense")), values, "generator_predictions/LayerNorm")
    want_mlm = h @ values["electra/embeddings/word_embeddings"].T + values["generator_predictions/output_bias"]
    got_mlm = model.generator_logits(f["input_ids"], f["input_mask"], f["segment_ids"], positions).numpy()
    np.testing.assert_allclose(got_mlm, want_mlm, rtol=1e-4, atol=1e-4)


def test_checkpoint_with_missing_or_extra_names_is_refused(tmp_path):
    from textrain.models.checkpoints import CheckpointMismatchError
    model = electra.ElectraPretrainer(tiny_config(), special_ids=SPECIAL)
    values = {n: v.numpy() for n, v in model.tf1_variable_map().items()}
    del values["generator_predictions/output_bias"]
    values["cls/predictions/output_bias"] = np.zeros(3, np.float32)
    path = write_tf1_checkpoint(str(tmp_path / "bad.ckpt"), values)
    with pytest.raises(CheckpointMismatchError, match="generator_predictions/output_bias"):
        model.load_tf1_checkpoint(path)


# ------------------------------------------------------------------------------------------------ #
# Precision, XLA, flags
# ------------------------------------------------------------------------------------------------ #
@pytest.mark.slow
def test_step_compiles_with_xla():
    f = batch_of([32, 20, 12, 6])
    model = electra.ElectraPretrainer(tiny_config(num_hidden_layers=1), special_ids=SPECIAL)
    step = tf.function(lambda x: model.step_output(x, {}, training=True), jit_compile=True)
    out = step(f)
    assert np.isfinite(float(out.losses["disc"].total)) and float(out.losses["mlm"].count) > 0


def test_bfloat16_policy_keeps_tables_and_logits_float32():
    f = batch_of([32, 20, 12, 6])
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        bf = electra.ElectraPretrainer(tiny_config(), special_ids=SPECIAL)
        result = bf(f, training=True)
        assert result["mlm_logits"].dtype == tf.float32 and result["disc_logits"].dtype == tf.float32
        assert bf.discriminator.embeddings.word_embeddings.dtype == tf.float32
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


def test_flags_choose_size_objective_vocab_and_special_ids(tmp_path):
    class Flags:
        model_size = "small"
        mask_prob = None  # not given: the size's default
        disc_weight = 20.0
        generator_hidden_size = 0.5

    manifest = {"settings": {"vocab_size": 120, "max_seq_length": 32, "special_ids": SPECIAL},
                "feature_max": {"input_ids": 119}}
    settings = model_settings_from_flags(Flags())
    generator = {k: settings.get(k) for k in ("generator_hidden_size", "generator_layers", "embedding_size",
                                              "untied_generator_embeddings")}
    config, _ = electra.pretraining_config(settings.get("size"), None, None, generator, manifest)
    assert config.vocab_size == 120 and config.hidden_size == 256 and config.generator_config().hidden_size == 128

    config_file = tmp_path / "electra_config.json"
    config_file.write_text('{"vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 1, '
                           '"num_attention_heads": 2, "intermediate_size": 64, "embedding_size": 16}')
    Flags.electra_config_file = str(config_file)
    model = build_from_flags(Flags(), manifest)
    assert model.special_ids == SPECIAL and model.config.vocab_size == 120
    assert model.config.generator_config().hidden_size == 16 and model.objective.mask_prob == 0.15
    assert model.objective.disc_weight == 20.0 and model.objective.gen_weight == 1.0
    Flags.model_size = "large"  # mask_prob not given: the size's (0.25 for large)
    assert build_from_flags(Flags(), manifest).objective.mask_prob == 0.25
    manifest["feature_max"]["input_ids"] = 500
    with pytest.raises(ValueError, match="vocab_size"):
        build_from_flags(Flags(), manifest)


def build_from_flags(flags, manifest):
    """As the trainers build `--model=electra`: the flags' settings, the one constructor."""
    return electra.ElectraPretrainer.from_settings(manifest=manifest, **model_settings_from_flags(flags))


# ------------------------------------------------------------------------------------------------ #
# Learning on real text
# ------------------------------------------------------------------------------------------------ #
@pytest.mark.slow
def test_tiny_electra_learns_on_emma(tmp_path):
    """Both losses fall and the discriminator beats the all-original baseline (1 - replaced fraction).

    Sampling temperature 4 (ELECTRA's `temperature` knob) keeps the replacements varied while the generator learns:
    a tiny model then needs a few hundred steps, not thousands, to flag replaced tokens with probability > 0.5.
    At temperature 1 the same run stays at the baseline for 1000 steps (its disc loss falls below the label
    entropy only slowly), which is the expected early phase, but too long for a test."""
    from textrain.framework.problem import DataParams
    from textrain.problems.electra_pretrain import ElectraPretrain, ElectraPretrainHParams
    emma = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "austen_emma.txt")
    problem = ElectraPretrain(ElectraPretrainHParams(input_file=emma, vocab_size=1000, max_seq_length=64))
    manifest = problem.generate_data(str(tmp_path), str(tmp_path / "tmp"), seed=0)["train"]
    settings = manifest["settings"]
    tf.random.set_seed(0)
    config = electra.ElectraConfig(vocab_size=settings["vocab_size"], hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, intermediate_size=128, embedding_size=64,
                                   generator_hidden_size=0.5, max_position_embeddings=64)
    model = electra.ElectraPretrainer(config, electra.ElectraObjective(temperature=4.0),
                                      special_ids=settings["special_ids"])
    optimizer = tf.keras.optimizers.Adam(2e-3)
    data = iter(problem.dataset("train", str(tmp_path), DataParams(batch_size=32, seed=0)))

    @tf.function
    def train_step(features):
        with tf.GradientTape() as tape:
            out = model.step_output(features, {}, training=True)
            loss = weighted_loss(out.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return {k: t.total / t.count for k, t in {**out.losses, **out.metrics}.items()}

    history = [train_step(next(data)) for _ in range(400)]

    def mean(key, part):
        return float(np.mean([float(h[key]) for h in part]))

    first, last = history[:20], history[-100:]
    assert mean("mlm", last) < mean("mlm", first) - 0.8
    assert mean("disc", last) < mean("disc", first) - 0.03
    baseline = 1.0 - mean("replaced_fraction", last)
    assert mean("disc_accuracy", last) > baseline + 0.003, (mean("disc_accuracy", last), baseline)
    assert mean("disc_recall", last) > 0.03

    evaluation = electra.evaluate(model, problem.dataset("eval", str(tmp_path), DataParams(batch_size=32),
                                                         split="train"), num_batches=3)
    assert evaluation["disc_auc"] > 0.7 and evaluation["disc_accuracy"] > 0.8
