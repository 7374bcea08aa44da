"""Shared Transformer layers: activations, embeddings, attention, block, encoder (tiny sizes)."""
import math

import numpy as np
import pytest
import tensorflow as tf

from textrain.models.layers.activations import get_activation
from textrain.models.layers.attention import MultiHeadAttention
from textrain.models.layers.dense import Dense
from textrain.models.layers.embeddings import TransformerEmbeddings
from textrain.models.layers.softmax import masked_softmax
from textrain.models.layers.transformer import TransformerEncoder

TINY = dict(vocab_size=40, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
            max_position_embeddings=12, type_vocab_size=2)


@pytest.fixture
def bf16_policy():
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    yield
    tf.keras.mixed_precision.set_global_policy("float32")


def _ids(batch=2, length=6, seed=0):
    rng = np.random.default_rng(seed)
    return tf.constant(rng.integers(1, TINY["vocab_size"], size=(batch, length)), tf.int32)


def test_gelu_variants_match_their_formulas():
    x = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 2.5], np.float32)
    tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    erf_form = 0.5 * x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x]))
    np.testing.assert_allclose(get_activation("gelu")(x).numpy(), tanh_form, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(get_activation("gelu_exact")(x).numpy(), erf_form, rtol=1e-6, atol=1e-6)
    # They really are different functions (the original BERT vs ELECTRA distinction).
    assert abs(get_activation("gelu")(1.0).numpy() - get_activation("gelu_exact")(1.0).numpy()) > 1e-4
    np.testing.assert_allclose(get_activation("swish")(x).numpy(), x / (1 + np.exp(-x)), rtol=1e-6)
    np.testing.assert_allclose(get_activation("relu")(x).numpy(), np.maximum(x, 0))


@pytest.mark.parametrize("name", ["gelu", "gelu_exact"])
def test_gelu_hand_written_gradient_matches_autodiff(name):
    x = tf.constant(np.linspace(-6, 6, 101), tf.float32)
    if name == "gelu":
        reference = lambda v: 0.5 * v * (1 + tf.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    else:
        reference = lambda v: 0.5 * v * (1 + tf.math.erf(v / math.sqrt(2)))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours, ref = get_activation(name)(x), reference(x)
    np.testing.assert_allclose(tape.gradient(ours, x).numpy(), tape.gradient(ref, x).numpy(), atol=1e-6)
    bf16 = get_activation(name)(tf.cast(x, tf.bfloat16))
    assert bf16.dtype == tf.bfloat16


def test_unknown_activation_lists_known_names():
    with pytest.raises(ValueError, match="gelu_exact"):
        get_activation("gelu2")


def test_masked_softmax_fully_padded_row_is_zero_not_nan():
    logits = tf.constant([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    mask = tf.constant([[1, 1, 0], [0, 0, 0]])
    probs = masked_softmax(logits, mask).numpy()
    assert np.all(np.isfinite(probs))
    np.testing.assert_allclose(probs[1], 0.0)
    assert probs[0, 2] == 0.0
    np.testing.assert_allclose(probs[0].sum(), 1.0, rtol=1e-6)


def test_attention_ignores_padded_keys_and_survives_all_padding():
    layer = MultiHeadAttention(hidden_size=8, num_heads=2, attention_dropout=0.0)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 8)).astype(np.float32)
    mask = tf.constant([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    out, probs = layer(tf.constant(x), attention_mask=mask, return_probs=True)
    assert out.shape == (2, 5, 8)
    assert np.all(probs.numpy()[0, :, :, 3:] == 0.0)
    assert np.all(np.isfinite(out.numpy()))
    # A fully padded example attends to nothing: context 0, so the output is the output bias.
    np.testing.assert_allclose(out.numpy()[1], np.broadcast_to(layer.output_dense.bias.numpy(), (5, 8)))
    x2 = x.copy()
    x2[0, 3:] += 5.0  # change the padded keys/values
    out2 = layer(tf.constant(x2), attention_mask=mask)
    np.testing.assert_allclose(out2.numpy()[0, :3], out.numpy()[0, :3], rtol=1e-5, atol=1e-6)


def test_attention_rejects_bad_head_count():
    with pytest.raises(ValueError, match="multiple"):
        MultiHeadAttention(hidden_size=10, num_heads=3)


def test_embeddings_shapes_and_length_check():
    emb = TransformerEmbeddings(vocab_size=40, embedding_size=8, max_position_embeddings=6, dropout_rate=0.0)
    out = emb(_ids(length=6), tf.ones([2, 6], tf.int32))
    assert out.shape == (2, 6, 8)
    # LayerNorm at init (gamma 1, beta 0): each vector is normalised.
    np.testing.assert_allclose(out.numpy().mean(-1), 0.0, atol=1e-5)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        emb(_ids(length=7))
    assert emb.attend(out).shape == (2, 6, 40)


def test_encoder_shapes_all_layers_and_padding_invariance():
    enc = TransformerEncoder(**TINY, hidden_dropout=0.0, attention_dropout=0.0)
    ids = _ids()
    mask = tf.constant([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    seg = tf.constant([[0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1]])
    out = enc(ids, mask, seg)
    assert out.shape == (2, 6, 16)
    layers = enc(ids, mask, seg, output_all_layers=True)
    assert len(layers) == 2
    np.testing.assert_allclose(layers[-1].numpy(), out.numpy())
    perturbed = ids.numpy().copy()
    perturbed[0, 4:] = [7, 9]  # padded positions get other ids
    out2 = enc(tf.constant(perturbed), mask, seg)
    np.testing.assert_allclose(out2.numpy()[0, :4], out.numpy()[0, :4], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out2.numpy()[1], out.numpy()[1], rtol=1e-5, atol=1e-5)


def test_factorised_embeddings_project_and_sharing():
    """ELECTRA's layout: a generator encoder reads the discriminator's embeddings via its own projection."""
    disc = TransformerEncoder(**TINY, embedding_size=8, name="discriminator")
    small = {**TINY, "hidden_size": 4, "intermediate_size": 8, "num_heads": 1}
    gen = TransformerEncoder(**small, embeddings=disc.embeddings, name="generator")
    assert disc.embeddings_project is not None and gen.embeddings_project is not None
    ids = _ids()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(disc(ids) ** 2) + tf.reduce_sum(gen(ids) ** 2)
    table = disc.embedding_table
    grad = tape.gradient(loss, table)
    assert grad is not None
    names = gen.tf1_variable_map("generator", embeddings_scope="electra/embeddings")
    assert "generator/embeddings_project/kernel" in names
    assert names["electra/embeddings/word_embeddings"] is table
    assert "electra/embeddings_project/kernel" in disc.tf1_variable_map("electra")
    assert tuple(names["generator/encoder/layer_1/intermediate/dense/kernel"].shape) == (4, 8)
    # A model holding both encoders counts the shared table once.
    holder = tf.keras.Model()
    holder.disc, holder.gen = disc, gen
    ids_of_vars = [id(v) for v in holder.trainable_variables]
    assert len(ids_of_vars) == len(set(ids_of_vars))
    with pytest.raises(ValueError, match="embedding_size"):
        TransformerEncoder(**small, embedding_size=5, embeddings=disc.embeddings)


def test_encoder_under_bf16_policy_is_finite(bf16_policy):
    enc = TransformerEncoder(**TINY)
    out = enc(_ids(), tf.constant([[1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]]), training=True)
    assert out.dtype == tf.bfloat16
    assert np.all(np.isfinite(tf.cast(out, tf.float32).numpy()))
    assert all(v.dtype == tf.float32 for v in enc.trainable_variables)



def _fused_and_plain(fn, inputs, variables=()):
    """(value, gradients) of `fn` on a training-step-sized input: fused path, then op-by-op path."""
    from textrain.models.layers import fused
    results = []
    for min_size in (fused.FUSE_MIN_SIZE, 1 << 62):  # fusable, then never fusable
        old, fused.FUSE_MIN_SIZE = fused.FUSE_MIN_SIZE, min_size
        try:
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                y = fn(*inputs)
                loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.random.stateless_normal(y.shape, [1, 2]))
            results.append((y, tape.gradient(loss, list(inputs) + list(variables))))
        finally:
            fused.FUSE_MIN_SIZE = old
    return results


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_fused_elementwise_chains_equal_the_op_by_op_ones(dtype):
    """GELU (both), Keras-compatible LayerNorm, the masked softmax, attention (fused head transposes and
    softmax) and Dense (bias gradient as a GEMV): the fused forward and gradient of a large tensor give
    the op-by-op values (a fully padded example included)."""
    from textrain.models.layers import fused
    x = tf.cast(tf.random.stateless_normal([4, 64, 256], [3, 4]) * 3, dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == tf.float32 else dict(rtol=2e-2, atol=2e-2)
    policy = "mixed_bfloat16" if dtype == tf.bfloat16 else "float32"
    norm = fused.LayerNormalization(epsilon=1e-12, dtype=policy)
    norm.build((None, None, 256))
    norm.gamma.assign(tf.random.stateless_normal([256], [5, 6]))
    norm.beta.assign(tf.random.stateless_normal([256], [7, 8]))
    mask = tf.constant(np.random.default_rng(0).random((4, 1, 256)) > 0.3)
    mask = tf.concat([mask[:3], tf.zeros_like(mask[:1])], 0)  # the last example is all padding
    dense = Dense(128, dtype=policy)
    dense.build((None, None, 256))
    dense.bias.assign(tf.random.stateless_normal([128], [9, 10]))
    attention = MultiHeadAttention(256, 4, dtype=policy)  # head transposes, q scale, softmax rows
    attention.build((None, None, 256))
    key_mask = tf.reshape(tf.cast(mask, tf.int32), [4, 256])[:, :64]
    cases = [(get_activation("gelu"), ()), (get_activation("gelu_exact"), ()), (norm, norm.trainable_variables),
             (lambda v: masked_softmax(tf.cast(v, tf.float32), mask), ()),
             (lambda v: attention(v, attention_mask=key_mask), attention.trainable_variables)]
    for fn, variables in cases:
        (y1, g1), (y2, g2) = _fused_and_plain(fn, (x,), variables)
        assert y1.dtype == y2.dtype
        np.testing.assert_allclose(tf.cast(y1, tf.float32).numpy(), tf.cast(y2, tf.float32).numpy(), **tol)
        for a, b, v in zip(g1, g2, [None] + list(variables)):
            a, b = tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy()
            if dtype == tf.bfloat16 and v is not None and v.shape.rank == 1 and fn is not norm:
                continue  # the op-by-op bf16 bias sums are ~10x off the exact ones (checked for Dense below)
            # Sums over hundreds of rounded terms (a weight gradient sums 4 x 64 positions) in another order:
            # the error scales with the largest entry (float32: 2^-16 of it, ~100 ulps; bf16: 2^-7).
            ulps = 2.0 ** -16 if dtype == tf.float32 else 2.0 ** -7
            atol = max(tol["atol"], ulps * np.max(np.abs(b)))
            np.testing.assert_allclose(a, b, rtol=tol["rtol"], atol=atol)
    # Dense: value, input and kernel gradients as the op-by-op ones; the bias gradient (a GEMV accumulating
    # in float32) against the exact sum of the output gradient, which Keras' bf16 sum misses by ~10x more.
    (y1, g1), (y2, g2) = _fused_and_plain(dense, (x,), dense.trainable_variables)
    for a, b in zip([y1] + g1[:2], [y2] + g2[:2]):
        np.testing.assert_allclose(tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy(), **tol)
    dy = tf.cast(tf.cast(tf.random.stateless_normal(y1.shape, [1, 2]), y1.dtype), tf.float64)  # d loss / d y
    np.testing.assert_allclose(g1[2].numpy(), tf.reduce_sum(tf.reshape(dy, [-1, 128]), 0).numpy(),
                               rtol=1e-5 if dtype == tf.float32 else 2 ** -7, atol=1e-4)
    probs = masked_softmax(tf.cast(x, tf.float32), mask).numpy()
    assert np.all(probs[3] == 0.0)
    assert np.all(probs[:3][~np.broadcast_to(mask[:3].numpy(), probs[:3].shape)] == 0.0)


@pytest.mark.parametrize("compiled", [False, True])
def test_row_reductions_equal_tensorflows(compiled):
    """fused.row_max and fused.row_sums (the forms XLA's CPU backend fuses) are reduce_max and reduce_sum
    over the last axis, kept as size 1: odd, even and power-of-two lengths, eager and XLA-compiled."""
    from textrain.models.layers import fused
    wrap = fused.xla if compiled else (lambda f: f)
    for n in (1, 6, 7, 128, 768, 1000):
        t = tf.random.stateless_normal([3, 5, n], [n, 1]) * 10
        np.testing.assert_array_equal(wrap(fused.row_max)(t).numpy(), tf.reduce_max(t, -1, keepdims=True).numpy())
        np.testing.assert_allclose(wrap(fused.row_sums)(t).numpy(), tf.reduce_sum(t, -1, keepdims=True).numpy(),
                                   rtol=1e-5, atol=1e-4)


def _dropped(layer_or_fn, x, dy):
    """(output, input gradient) of one training call."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer_or_fn(x)
    return y, tape.gradient(y, x, output_gradients=tf.cast(dy, y.dtype))


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_fused_dropout_rate_scale_gradient_and_reproducibility(dtype):
    """The fused Dropout drops a Bernoulli(rate) set, scales the rest by 1/(1-rate) as Keras does, sends the
    gradient through the same set, draws fresh decisions per call and repeats them for the same seed."""
    from textrain.models.layers import fused
    x = tf.random.stateless_normal([4, 64, 256], [3, 4])
    dy = tf.random.stateless_normal([4, 64, 256], [5, 6])
    assert fused.fusable(x)
    layer = fused.Dropout(0.1, seed=7, dtype=dtype)
    xin = tf.cast(x, layer.compute_dtype)
    y, dx = _dropped(lambda v: layer(v, training=True), xin, dy)
    kept = y.numpy() != 0
    n = kept.size
    assert abs(float(np.mean(~kept)) - 0.1) < 5 * np.sqrt(0.09 / n)
    scale = tf.constant(1 / 0.9, xin.dtype)
    np.testing.assert_array_equal(y.numpy()[kept], (xin * scale).numpy()[kept])
    np.testing.assert_array_equal(dx.numpy()[kept], (tf.cast(dy, xin.dtype) * scale).numpy()[kept])
    assert np.all(dx.numpy()[~kept] == 0)
    # Next call: fresh decisions, independent of the first (overlap of the dropped sets ~ rate^2).
    again = layer(xin, training=True).numpy() != 0
    assert abs(float(np.mean(~kept & ~again)) - 0.01) < 5 * np.sqrt(0.0099 / n)
    # Same seed, new layer: the same decisions; inference: identity.
    replay = fused.Dropout(0.1, seed=7, dtype=dtype)(xin, training=True).numpy() != 0
    np.testing.assert_array_equal(replay, kept)
    np.testing.assert_array_equal(layer(xin, training=False).numpy(), xin.numpy())


def test_fused_softmax_dropout_is_softmax_then_dropout():
    """Attention's fused softmax + dropout: in float32 exactly masked_softmax followed by the fused dropout
    with the same seed (values and gradient, a fully padded example included); bf16 scores in give bf16
    probabilities out within bf16 rounding of that float32 result; rate 0 is the softmax alone."""
    from textrain.models.layers import fused
    from textrain.models.layers.softmax import fusable_softmax_dropout, masked_softmax_dropout
    scores = tf.random.stateless_normal([4, 4, 64, 64], [1, 2]) * 3
    dy = tf.random.stateless_normal(scores.shape, [3, 4])
    mask = tf.constant(np.random.default_rng(0).random((4, 1, 1, 64)) > 0.3)
    mask = tf.concat([mask[:3], tf.zeros_like(mask[:1])], 0)
    seed = tf.constant([5, 6])
    assert fusable_softmax_dropout(scores, mask)

    def value_and_grad(fn, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return y, tape.gradient(y, x, output_gradients=tf.cast(dy, y.dtype))

    plain = lambda x: fused.stateless_dropout(masked_softmax(x, mask), 0.1, seed)  # noqa: E731
    y_ref, g_ref = value_and_grad(plain, scores)
    y, g = value_and_grad(lambda x: masked_softmax_dropout(x, mask, 0.1, seed), scores)
    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g.numpy(), g_ref.numpy(), rtol=1e-5, atol=1e-6)
    assert np.all(y.numpy()[3] == 0) and np.all(g.numpy()[3] == 0)
    assert 0.05 < float(np.mean(y.numpy()[:3][np.broadcast_to(mask[:3].numpy(), y[:3].shape)] == 0)) < 0.15
    narrow = tf.cast(scores, tf.bfloat16)  # the reference sees the same rounded scores
    y_ref, g_ref = value_and_grad(plain, tf.cast(narrow, tf.float32))
    yb, gb = value_and_grad(lambda x: masked_softmax_dropout(x, mask, 0.1, seed), narrow)
    assert yb.dtype == gb.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(yb, tf.float32).numpy(), y_ref.numpy(), rtol=1e-2, atol=1e-3)
    np.testing.assert_allclose(tf.cast(gb, tf.float32).numpy(), g_ref.numpy(), rtol=2e-2, atol=2e-2)
    np.testing.assert_array_equal(masked_softmax_dropout(scores, mask).numpy(), masked_softmax(scores, mask).numpy())


def test_fused_residual_dropout_layer_norm_is_the_op_by_op_sub_layer_output():
    """The post-LN block's LN(x + dropout(y)) as one fused loop: in float32 the op-by-op LayerNorm of x plus
    the fused dropout of y with the same seed (values and the gradients of x, y, gamma and beta); under
    mixed_bfloat16 within bf16 rounding of that float32 result on the same (rounded) inputs (the op-by-op
    bf16 path's own distance to it is of the same size)."""
    from textrain.models.layers import fused
    x = tf.random.stateless_normal([4, 64, 256], [1, 2])
    y = tf.random.stateless_normal([4, 64, 256], [3, 4])
    dy = tf.cast(tf.cast(tf.random.stateless_normal([4, 64, 256], [5, 6]), tf.bfloat16), tf.float32)
    seed = tf.constant([7, 8])
    results = {}
    for name, policy, fuse in (("ref", "float32", False), ("f32", "float32", True), ("bf16", "mixed_bfloat16", True)):
        norm = fused.LayerNormalization(epsilon=1e-12, dtype=policy)
        norm.build((None, None, 256))
        norm.gamma.assign(tf.random.stateless_normal([256], [9, 10]))
        norm.beta.assign(tf.random.stateless_normal([256], [11, 12]))
        drop = fused.Dropout(0.1, dtype=policy)
        drop.draw_seed = lambda: seed  # noqa: E731  the same decisions on every path
        xs, ys = (tf.cast(tf.cast(t, tf.bfloat16), norm.compute_dtype) for t in (x, y))
        with tf.GradientTape() as tape:
            tape.watch([xs, ys])
            if fuse:
                out = norm.residual(xs, ys, drop, training=True)
            else:
                out = norm(xs + fused.stateless_dropout(ys, 0.1, seed))
        grads = tape.gradient(out, [xs, ys] + norm.trainable_variables, output_gradients=tf.cast(dy, out.dtype))
        assert out.dtype == norm.compute_dtype
        results[name] = [tf.cast(t, tf.float32).numpy() for t in [out] + grads]
    for a, b in zip(results["f32"], results["ref"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(results["bf16"], results["ref"]):  # within two bf16 ulps of the largest element
        np.testing.assert_allclose(a, b, rtol=0, atol=2.0 ** -7 * np.max(np.abs(b)))


def test_stateless_dropout_decisions_are_independent_across_positions_and_seeds():
    """The counter hash behind the fused dropout: no correlation between an element and its neighbours at
    the strides of a [batch, heads, query, key] tensor, nor between seeds that differ in one bit; int64
    seeds (XLNet's fold_in) use all their bits."""
    from textrain.models.layers import fused
    x = tf.ones([8, 4, 128, 128])
    drop = lambda seed: (fused.stateless_dropout(x, 0.1, tf.constant(seed)).numpy() == 0).ravel()  # noqa: E731
    a = drop([1, 2]).astype(np.float64)
    bound = 5 / np.sqrt(a.size)
    for stride in (1, 2, 128, 129, 128 * 128, 4 * 128 * 128):
        assert abs(np.corrcoef(a[:-stride], a[stride:])[0, 1]) < bound, stride
    for other in ([1, 3], [0, 2]):
        assert abs(np.corrcoef(a, drop(other))[0, 1]) < bound, other
    np.testing.assert_array_equal(drop([1, 2]), a.astype(bool))
    high = drop(np.array([1 << 40, 2], np.int64))
    assert abs(np.corrcoef(high, drop(np.array([0, 2], np.int64)))[0, 1]) < bound
    assert abs(float(np.mean(high)) - 0.1) < 5 * np.sqrt(0.09 / a.size)


def test_fused_cross_entropy_equals_tensorflows():
    """The fused MLM cross-entropy: TensorFlow's loss and gradient (2-D and 3-D logits, large logits)."""
    from textrain.models.layers import fused
    for shape in ([64, 2048], [4, 16, 1024]):
        logits = tf.random.stateless_normal(shape, [1, 2]) * 8
        labels = tf.random.stateless_uniform(shape[:-1], [3, 4], 0, shape[-1], tf.int32)
        weights = tf.random.stateless_uniform(shape[:-1], [5, 6])
        assert fused.fusable(logits)
        results = []
        for fn in (fused.sparse_softmax_cross_entropy,
                   lambda y, x: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x)):
            with tf.GradientTape() as tape:
                tape.watch(logits)
                ce = fn(labels, logits)
                loss = tf.reduce_sum(ce * weights)
            results.append((ce.numpy(), tape.gradient(loss, logits).numpy()))
        assert results[0][0].shape == tuple(shape[:-1])
        np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-5, atol=1e-6)
