"""trainers/optimization.py: schedules, AdamW (BERT semantics), LAMB, layer-wise LR decay, skip."""
import numpy as np
import pytest
import tensorflow as tf

from textrain.trainers import optimization as opt


def _lr(schedule, step):
    return float(schedule(tf.constant(step)))


def test_warmup_then_linear_decay_bert_style():
    s = opt.WarmupDecaySchedule(1.0, num_train_steps=100, num_warmup_steps=10)
    assert _lr(s, 0) == 0.0
    assert _lr(s, 5) == pytest.approx(0.5)
    # BERT: the decay runs over all num_train_steps from step 0; warmup only overrides its start.
    assert _lr(s, 10) == pytest.approx(0.9)
    assert _lr(s, 50) == pytest.approx(0.5)
    assert _lr(s, 100) == pytest.approx(0.0)
    assert _lr(s, 150) == pytest.approx(0.0)


def test_polynomial_cosine_end_lr_and_offset():
    poly = opt.WarmupDecaySchedule(1.0, 100, 0, decay="polynomial", power=2.0, end_lr=0.1)
    assert _lr(poly, 50) == pytest.approx(0.9 * 0.25 + 0.1)
    cos = opt.WarmupDecaySchedule(1.0, 110, 10, decay="cosine", end_lr=0.0, offset_warmup=True)
    assert _lr(cos, 10) == pytest.approx(1.0)
    assert _lr(cos, 60) == pytest.approx(0.5, abs=1e-6)
    assert _lr(cos, 110) == pytest.approx(0.0, abs=1e-6)
    xl = opt.WarmupDecaySchedule(2.0, 110, 10, offset_warmup=True, end_lr=0.2)  # XLNet: decay after warmup
    assert _lr(xl, 60) == pytest.approx(1.1)
    with pytest.raises(ValueError, match="unknown learning-rate decay"):
        opt.WarmupDecaySchedule(1.0, 10, decay="step")


def _build(optimizer, variables):
    optimizer.build(variables)
    return optimizer


def test_adamw_matches_bert_formula_without_bias_correction():
    w = tf.Variable([1.0, -2.0, 3.0], name="dense/kernel")
    o = _build(opt.AdamW(0.1, weight_decay=0.01), [w])
    w_ref, m, v = np.array([1.0, -2.0, 3.0]), np.zeros(3), np.zeros(3)
    for g in ([0.5, 0.1, -1.0], [0.2, -0.3, 0.4], [1.0, 1.0, 1.0]):
        g = np.array(g)
        o.apply_gradients([(tf.constant(g, tf.float32), w)])
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        w_ref = w_ref - 0.1 * (m / (np.sqrt(v) + 1e-6) + 0.01 * w_ref)
    np.testing.assert_allclose(w.numpy(), w_ref, rtol=1e-5)
    assert int(o.iterations.numpy()) == 3


def test_adamw_excludes_layer_norm_and_bias_from_decay():
    kernel = tf.Variable(np.ones((2, 2), np.float32), name="encoder/dense/kernel")
    ln = tf.Variable(np.ones(2, np.float32), name="encoder/LayerNorm/gamma")
    ln2 = tf.Variable(np.ones(2, np.float32), name="encoder/layer_norm/gamma")
    bias = tf.Variable(np.ones(2, np.float32), name="encoder/dense/bias")
    dense = tf.keras.layers.Dense(2, name="head")  # Keras 3 variables: excluded by their path "head/bias"
    dense.build((None, 2))
    variables = [kernel, ln, ln2, bias] + list(dense.trainable_variables)
    o = _build(opt.AdamW(0.5, weight_decay=0.1), variables)
    before = [v.numpy().copy() for v in variables]
    # Zero gradients: only the decay moves a variable, by exactly lr * wd * param.
    o.apply_gradients([(tf.zeros_like(v), v) for v in variables])
    np.testing.assert_allclose(kernel.numpy(), before[0] * (1 - 0.5 * 0.1), rtol=1e-6)
    for i in (1, 2, 3, 5):
        np.testing.assert_array_equal(variables[i].numpy(), before[i])
    np.testing.assert_allclose(variables[4].numpy(), before[4] * 0.95, rtol=1e-6)
    assert [o.uses_weight_decay(v) for v in variables] == [True, False, False, False, True, False]


def test_layerwise_lr_decay_is_a_per_variable_learning_rate():
    names = ["electra/embeddings/word_embeddings", "electra/encoder/layer_0/dense/kernel",
             "electra/encoder/layer_1/dense/kernel", "task_specific/classifier/kernel"]
    variables = [tf.Variable(np.zeros(3, np.float32), name=n) for n in names]
    depth = opt.electra_depth_fn(n_layers=2)
    assert [depth(v) for v in variables] == [0, 1, 2, 4]
    o = opt.create_optimizer(1.0, 100, 0, decay="constant", weight_decay=0.0, layerwise_lr_decay=0.5,
                             depth_fn=depth)
    o.build(variables)
    # Gradients of very different scales: Adam normalises them, so the step size is the LR alone.
    scales = (0.1, 1.0, 10.0, 1e3)
    grads = [tf.constant([1.0, 1.0, 1.0]) * s for s in scales]
    o.apply_gradients(zip(grads, variables))
    steps = [float(np.abs(v.numpy()).mean()) for v in variables]
    # First AdamW step without bias correction: |update| = 0.1 g / (sqrt(0.001) g + eps) ~ 3.1623 times the LR.
    adam = [0.1 * s / (np.sqrt(0.001) * s + 1e-6) for s in scales]
    np.testing.assert_allclose(steps, [adam[0] * 0.5 ** 4, adam[1] * 0.5 ** 3, adam[2] * 0.5 ** 2, adam[3]],
                               rtol=1e-5)
    assert [o.lr_multiplier(v) for v in variables] == [0.0625, 0.125, 0.25, 1.0]


def test_layerwise_needs_depth_fn_and_valid_depths():
    with pytest.raises(ValueError, match="depth_fn"):
        opt.create_optimizer(1.0, 10, layerwise_lr_decay=0.8)
    v = tf.Variable(1.0, name="x")
    with pytest.raises(ValueError, match="outside"):
        opt.layerwise_lr_multipliers([v], lambda _: 5, 0.5, top_depth=3)


def test_lamb_trust_ratio_and_exclusions():
    w = tf.Variable(np.full(4, 2.0, np.float32), name="dense/kernel")
    b = tf.Variable(np.full(4, 2.0, np.float32), name="dense/bias")
    o = _build(opt.LAMB(0.01, weight_decay=0.0), [w, b])
    g = tf.constant([1.0, -2.0, 3.0, -4.0])
    o.apply_gradients([(g, w), (g, b)])
    # Adapted: the step's norm is lr * ||w|| (= 0.01 * 4); excluded (bias): lr * ||adam update|| (~ 0.01 * 2).
    np.testing.assert_allclose(np.linalg.norm(w.numpy() - 2.0), 0.01 * 4.0, rtol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(b.numpy() - 2.0), 0.01 * 2.0, rtol=1e-3)


def test_skip_leaves_everything_untouched_and_none_grads_ignored():
    w = tf.Variable([1.0, 2.0], name="w")
    u = tf.Variable([5.0], name="unused")
    o = _build(opt.AdamW(0.1), [w, u])
    o.apply_gradients([(tf.constant([1.0, 1.0]), w), (None, u)], skip=tf.constant(True))
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])
    assert int(o.iterations.numpy()) == 0 and float(tf.reduce_sum(o.slots["m"][0])) == 0.0
    o.apply_gradients([(tf.constant([1.0, 1.0]), w), (None, u)])
    assert w.numpy()[0] < 1.0 and u.numpy()[0] == 5.0 and int(o.iterations.numpy()) == 1


def test_checkpoint_roundtrip_of_slots(tmp_path):
    w = tf.Variable([1.0, 2.0], name="w")
    o = _build(opt.AdamW(0.1), [w])
    o.apply_gradients([(tf.constant([1.0, -1.0]), w)])
    path = tf.train.Checkpoint(opt=o, w=w).save(str(tmp_path / "c"))
    w2 = tf.Variable([0.0, 0.0], name="w")
    o2 = _build(opt.AdamW(0.1), [w2])
    tf.train.Checkpoint(opt=o2, w=w2).restore(path).assert_consumed()
    np.testing.assert_array_equal(o2.slots["v"][0].numpy(), o.slots["v"][0].numpy())
    assert int(o2.iterations.numpy()) == 1


def test_adam_with_bias_correction_matches_the_textbook_formula():
    """optimizer="adam" (XLNet's): bias-corrected moments, decoupled decay."""
    w = tf.Variable([1.0, -2.0, 3.0], name="dense/kernel")
    o = _build(opt.create_optimizer(0.1, 100, optimizer="adam", decay="constant", weight_decay=0.01,
                                    epsilon=1e-8), [w])
    w_ref, m, v = np.array([1.0, -2.0, 3.0]), np.zeros(3), np.zeros(3)
    for t, g in enumerate(([0.5, 0.1, -1.0], [0.2, -0.3, 0.4], [1.0, 1.0, 1.0]), 1):
        g = np.array(g)
        o.apply_gradients([(tf.constant(g, tf.float32), w)])
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        m_hat, v_hat = m / (1 - 0.9 ** t), v / (1 - 0.999 ** t)
        w_ref = w_ref - 0.1 * (m_hat / (np.sqrt(v_hat) + 1e-8) + 0.01 * w_ref)
        if t == 1:  # the first step moves each weight by ~lr (plus decay), not by lr * 3.16 as without
            np.testing.assert_allclose(np.abs(w.numpy() - np.array([1.0, -2.0, 3.0]) + 0.1 * 0.01 *
                                              np.array([1.0, -2.0, 3.0])), 0.1, rtol=1e-4)
    np.testing.assert_allclose(w.numpy(), w_ref, rtol=1e-5)


def test_fused_update_is_the_same_formula():
    """The XLA-fused per-variable update (jit_update, variables >= JIT_MIN_SIZE) gives the op-by-op values."""
    rng = np.random.default_rng(0)
    init = rng.normal(size=(opt.JIT_MIN_SIZE,)).astype(np.float32)
    grads = [rng.normal(size=init.shape).astype(np.float32) for _ in range(3)]
    results = {}
    for name, jit in (("fused", True), ("plain", False)):
        for kind in ("adamw", "adam", "lamb"):
            w = tf.Variable(init, name="dense/kernel")
            o = opt.create_optimizer(0.1, 100, 0, optimizer=kind, weight_decay=0.01)
            o.jit_update = jit
            o.build([w])
            step = tf.function(lambda g, o=o, w=w: o.apply_gradients([(g, w)]))
            for g in grads:
                step(tf.constant(g))
            results[name, kind] = w.numpy()
    for kind in ("adamw", "adam", "lamb"):
        assert not np.array_equal(results["plain", kind], init)
        np.testing.assert_allclose(results["fused", kind], results["plain", kind], rtol=1e-5, atol=1e-6)
