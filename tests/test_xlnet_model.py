"""XLNet model: exact semantics against a time-major NumPy transcription of the original
`modeling.transformer_xl` + `lm_loss`, two-stream visibility, memories, bi_data, checkpoints,
recompute and bf16. Tiny sizes throughout."""
import json
import types

import numpy as np
import pytest
import tensorflow as tf

from textrain.framework.registry import models as model_registry
from textrain.models.checkpoints import CheckpointMismatchError, load_tf1_checkpoint, write_tf1_checkpoint
from textrain.models.xlnet import XLNetConfig, XLNetPretrainer
from textrain.trainers.strategy import make_strategy  # noqa: E402
from textrain.trainers.trainer_flags import model_settings_from_flags

B, L, P, V = 2, 8, 3, 50


def tiny(**kw) -> XLNetConfig:
    return XLNetConfig.preset("tiny", n_token=V, **kw)


def perm_mask_from_ranks(ranks: np.ndarray) -> np.ndarray:
    """XLNet-style factorisation order: i may attend to j only if j comes strictly earlier."""
    return (ranks[None, :] >= ranks[:, None]).astype(np.float32)


def make_features(seed=0, batch=B, length=L, num_predict=P):
    rng = np.random.default_rng(seed)
    perm = np.stack([perm_mask_from_ranks(rng.permutation(length)) for _ in range(batch)])
    tgt_pos = np.stack([rng.choice(length, num_predict, replace=False) for _ in range(batch)])
    tm = np.zeros((batch, num_predict, length), np.float32)
    for b in range(batch):
        tm[b, np.arange(num_predict), tgt_pos[b]] = 1.0
    input_k = rng.integers(0, V, (batch, length)).astype(np.int32)
    seg = np.zeros((batch, length), np.int32)
    seg[:, length // 2:] = 1
    seg[:, -1] = 2  # <cls>
    input_q = tm.sum(1)
    return dict(input_k=input_k, input_q=input_q.astype(np.float32), seg_id=seg, perm_mask=perm,
                target_mapping=tm, target=np.take_along_axis(input_k, tgt_pos, 1).astype(np.int32),
                target_mask=np.ones((batch, num_predict), np.float32))


def weights(model) -> dict:
    return {name: var.numpy() for name, var in model.tf1_variable_map().items()}


def copy_weights(src, dst) -> None:
    for name, var in dst.tf1_variable_map().items():
        var.assign(src.tf1_variable_map()[name])


# ----------------------------------------------------------------------------------------------
# Time-major reference, written from the original modeling.py's equations (float64).


def _ln(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * gamma + beta


def _act(x, kind):
    if kind == "relu":
        return np.maximum(x, 0)
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _rel_shift(x, klen):  # x [qlen, R, B, n]
    q, r = x.shape[:2]
    x = x.reshape(r, q, *x.shape[2:])[1:]
    return x.reshape(q, r - 1, *x.shape[2:])[:, :klen]


def reference_logits(W, c: XLNetConfig, f: dict, mems: list) -> tuple[np.ndarray, list]:
    pre = "model/transformer"
    inp = f["input_k"].T
    seg = f["seg_id"].T
    pm = f["perm_mask"].transpose(1, 2, 0).astype(np.float64)
    tm = f["target_mapping"].transpose(1, 2, 0).astype(np.float64)
    mems_t = [m.transpose(1, 0, 2).astype(np.float64) for m in mems]
    qlen, bsz = inp.shape
    mlen = mems_t[0].shape[0]
    klen = mlen + qlen
    attn_mask = np.concatenate([np.zeros((qlen, mlen, bsz)), pm], 1)[:, :, :, None]
    if c.attn_type == "uni":
        ones = np.ones((qlen, qlen))
        causal = np.concatenate([np.zeros((qlen, mlen)), np.triu(ones, 1)], 1)
        if c.same_length:
            causal[:, :qlen] += np.tril(ones, -1)
        attn_mask = attn_mask + causal[:, :, None, None]
    attn_mask = (attn_mask > 0).astype(np.float64)
    non_tgt = np.concatenate([np.zeros((qlen, mlen)), -np.eye(qlen)], 1)
    non_tgt_mask = ((attn_mask + non_tgt[:, :, None, None]) > 0).astype(np.float64)

    table = W[f"{pre}/word_embedding/lookup_table"].astype(np.float64)
    h = table[inp]
    g = np.tile(W[f"{pre}/mask_emb/mask_emb"].astype(np.float64), [tm.shape[0], bsz, 1])
    cat_ids = np.concatenate([np.zeros((mlen, bsz), np.int64), seg], 0)
    seg_mat = np.eye(2)[(seg[:, None] != cat_ids[None, :]).astype(np.int64)]  # [q, k, b, 2]

    inv_freq = 1 / (10000 ** (np.arange(0, c.d_model, 2.0) / c.d_model))
    end = -qlen if c.attn_type == "bi" else -1
    fwd = np.arange(klen, end, -1.0)
    bwd = np.arange(-klen, -end, 1.0)
    if c.clamp_len > 0:
        fwd, bwd = np.clip(fwd, -c.clamp_len, c.clamp_len), np.clip(bwd, -c.clamp_len, c.clamp_len)

    def emb(pos, n):
        s = np.einsum("i,d->id", pos, inv_freq)
        return np.tile(np.concatenate([np.sin(s), np.cos(s)], -1)[:, None], [1, n, 1])

    pos_emb = (np.concatenate([emb(fwd, bsz // 2), emb(bwd, bsz // 2)], 1) if c.bi_data
               else emb(fwd, bsz))

    def bias(name, i):
        v = W[f"{pre}/{name}"].astype(np.float64)
        return v[i] if c.untie_r else v

    new_mems = []
    for i in range(c.n_layer):
        lp = f"{pre}/layer_{i}"
        w = {k: W[f"{lp}/rel_attn/{k}/kernel"].astype(np.float64) for k in "qkvro"}
        cur = h[:c.reuse_len] if c.reuse_len else h
        new_mems.append(np.concatenate([mems_t[i], cur], 0)[-c.mem_len:].transpose(1, 0, 2))
        cat = np.concatenate([mems_t[i], h], 0)
        k_h = np.einsum("ibh,hnd->ibnd", cat, w["k"])
        v_h = np.einsum("ibh,hnd->ibnd", cat, w["v"])
        k_r = np.einsum("ibh,hnd->ibnd", pos_emb, w["r"])
        seg_embed = W[f"{pre}/seg_embed"][i].astype(np.float64)

        def core(q, mask):
            ac = np.einsum("ibnd,jbnd->ijbn", q + bias("r_w_bias", i), k_h)
            bd = _rel_shift(np.einsum("ibnd,jbnd->ijbn", q + bias("r_r_bias", i), k_r), klen)
            ef = np.einsum("ibnd,snd->ibns", q + bias("r_s_bias", i), seg_embed)
            ef = np.einsum("ijbs,ibns->ijbn", seg_mat, ef)
            score = (ac + bd + ef) / np.sqrt(c.d_head) - 1e30 * mask
            score = np.exp(score - score.max(1, keepdims=True))
            return np.einsum("ijbn,jbnd->ibnd", score / score.sum(1, keepdims=True), v_h)

        def post(x, vec):
            out = np.einsum("ibnd,hnd->ibh", vec, w["o"])
            return _ln(out + x, W[f"{lp}/rel_attn/LayerNorm/gamma"], W[f"{lp}/rel_attn/LayerNorm/beta"])

        def ffn(x):
            y = _act(x @ W[f"{lp}/ff/layer_1/kernel"] + W[f"{lp}/ff/layer_1/bias"], c.ff_activation)
            y = y @ W[f"{lp}/ff/layer_2/kernel"] + W[f"{lp}/ff/layer_2/bias"]
            return _ln(y + x, W[f"{lp}/ff/LayerNorm/gamma"], W[f"{lp}/ff/LayerNorm/beta"])

        h_new = post(h, core(np.einsum("ibh,hnd->ibnd", h, w["q"]), non_tgt_mask))
        q_g = np.einsum("mbnd,mlb->lbnd", np.einsum("ibh,hnd->ibnd", g, w["q"]), tm)
        g = post(g, np.einsum("lbnd,mlb->mbnd", core(q_g, attn_mask), tm))
        h, g = ffn(h_new), ffn(g)
    logits = np.einsum("ibd,nd->ibn", g, table) + W["model/lm_loss/bias"]
    return logits.transpose(1, 0, 2), new_mems


@pytest.mark.parametrize("overrides", [
    dict(untie_r=True, bi_data=True, clamp_len=5, ff_activation="gelu"),
    dict(untie_r=False, bi_data=False, ff_activation="relu"),
    dict(untie_r=True, attn_type="uni", same_length=True),
], ids=["untied-bidata-clamp", "tied-relu", "uni-same_length"])
def test_matches_time_major_reference(overrides):
    c = tiny(mem_len=5, reuse_len=4, **overrides)
    model = XLNetPretrainer(c)
    f = make_features(1)
    mems = np.random.default_rng(2).normal(size=(c.n_layer, B, 5, c.d_model)).astype(np.float32)
    out = model(f, mems=tf.constant(mems))
    want_logits, want_mems = reference_logits(weights(model), c, f, list(mems))
    np.testing.assert_allclose(out["logits"].numpy(), want_logits, atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(out["new_mems"].numpy(), np.stack(want_mems), atol=1e-5)


def test_step_output_shapes_and_terms():
    c = tiny(mem_len=6, reuse_len=4)
    model = XLNetPretrainer(c)
    assert model_registry.get("xlnet") is XLNetPretrainer
    state = model.initial_state(B)
    assert state["mems"].shape == (c.n_layer, B, 6, c.d_model)
    f = make_features()
    f["target_mask"][0, -1] = 0.0
    out = model.step_output(f, state, training=False)
    logits = model(f, mems=state["mems"])["logits"].numpy()
    assert logits.shape == (B, P, V)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(f["target"], logits).numpy()
    assert out.losses["lm"].count.numpy() == 5.0
    np.testing.assert_allclose(out.losses["lm"].total.numpy(), (ce * f["target_mask"]).sum(), rtol=1e-5)
    acc = ((logits.argmax(-1) == f["target"]) * f["target_mask"]).sum()
    assert out.metrics["lm_accuracy"].total.numpy() == acc
    assert out.state["mems"].shape == state["mems"].shape and out.state["mems"].dtype == tf.float32
    assert XLNetPretrainer(tiny()).initial_state(B) == {}


def test_query_stream_sees_only_earlier_tokens_in_the_permutation():
    c = tiny()
    enc = XLNetPretrainer(c).transformer
    rng = np.random.default_rng(3)
    ranks = rng.permutation(L)
    ids = rng.integers(0, V, (1, L)).astype(np.int32)
    perm = perm_mask_from_ranks(ranks)[None]
    tm = np.eye(L, dtype=np.float32)[None]  # every position is a query, in order

    def query_stream(token_ids):
        return enc(token_ids, seg_ids=np.zeros((1, L), np.int32), perm_mask=perm, target_mapping=tm,
                   inp_q=np.ones((1, L), np.float32))["output"].numpy()[0]

    base = query_stream(ids)
    i = int(np.where(ranks == L // 2)[0][0])  # a position in the middle of the order
    hidden = [k for k in range(L) if ranks[k] >= ranks[i]]  # itself and later ones
    shown = [k for k in range(L) if ranks[k] < ranks[i]]
    for k in hidden:
        changed = ids.copy()
        changed[0, k] = (ids[0, k] + 1) % V
        np.testing.assert_array_equal(query_stream(changed)[i], base[i])
    for k in shown:
        changed = ids.copy()
        changed[0, k] = (ids[0, k] + 1) % V
        assert np.abs(query_stream(changed)[i] - base[i]).max() > 1e-4, f"token {k} is visible to {i}"


def test_memories_carry_segment_one_into_segment_two():
    c = tiny(mem_len=6, reuse_len=4)
    model = XLNetPretrainer(c)
    f1, f2 = make_features(4), make_features(5)
    state0 = model.initial_state(B)
    state1 = model.step_output(f1, state0, training=False).state
    logits2 = model(f2, mems=state1["mems"])["logits"].numpy()

    # The memory by hand: the last 6 of [zeros; layer input over the first reuse_len positions].
    enc = model.transformer(f1["input_k"], seg_ids=f1["seg_id"], mems=state0["mems"],
                            perm_mask=f1["perm_mask"], target_mapping=f1["target_mapping"],
                            inp_q=f1["input_q"], return_layer_inputs=True)
    explicit = np.stack([np.concatenate([np.zeros((B, 6, c.d_model)), x.numpy()[:, :4]], 1)[:, -6:]
                         for x in enc["layer_inputs"]]).astype(np.float32)
    np.testing.assert_allclose(state1["mems"].numpy(), explicit, atol=1e-6)
    np.testing.assert_allclose(model(f2, mems=tf.constant(explicit))["logits"].numpy(), logits2, atol=1e-5)
    without = model(f2, mems=state0["mems"])["logits"].numpy()
    assert np.abs(without - logits2).max() > 1e-4, "memories had no effect"
    # Step 3 keeps the newest 6: the last 2 of step 1's reuse part, then step 2's 4.
    state2 = model.step_output(f2, state1, training=False).state
    np.testing.assert_allclose(state2["mems"].numpy()[:, :, :2], state1["mems"].numpy()[:, :, -2:])


def test_bi_data_second_half_reads_positions_backwards():
    x = np.random.default_rng(6).integers(0, V, (1, L)).astype(np.int32)
    batch = np.concatenate([x, x[:, ::-1]], 0)
    bi_model = XLNetPretrainer(tiny(bi_data=True, init_std=0.3))  # strong position term
    bi = bi_model.transformer
    out = bi(batch)["output"].numpy()  # content stream, no memory, no masks
    np.testing.assert_allclose(out[1, ::-1], out[0], atol=1e-5)
    one_dir = XLNetPretrainer(tiny(bi_data=False, init_std=0.3))
    copy_weights(bi_model, one_dir)  # same weights, forward distances for both rows
    out = one_dir.transformer(batch)["output"].numpy()
    assert np.abs(out[1, ::-1] - out[0]).max() > 1e-3  # so the check above is not trivially true
    with pytest.raises(ValueError, match="even"):
        bi(batch[:1])


def test_tf1_checkpoint_round_trip(tmp_path):
    c = tiny(mem_len=4, reuse_len=4)
    a = XLNetPretrainer(c)
    values = weights(a)
    trainable = {id(v.value) for v in a.trainable_variables}
    assert {id(v) for v in a.tf1_variable_map().values()} == trainable
    assert "model/transformer/layer_1/rel_attn/q/kernel" in values
    assert values["model/transformer/layer_0/rel_attn/o/kernel"].shape == (c.d_model, c.n_head, c.d_head)
    assert values["model/transformer/r_w_bias"].shape == (c.n_layer, c.n_head, c.d_head)
    assert values["model/transformer/seg_embed"].shape == (c.n_layer, 2, c.n_head, c.d_head)
    values["global_step"] = np.array(1000, np.int64)
    path = write_tf1_checkpoint(str(tmp_path / "xlnet_model.ckpt"), values)

    b = XLNetPretrainer(c)
    f = make_features(7)
    mems = tf.zeros([c.n_layer, B, 4, c.d_model])
    assert np.abs(b(f, mems=mems)["logits"].numpy() - a(f, mems=mems)["logits"].numpy()).max() > 1e-4
    load_tf1_checkpoint(path, b.tf1_variable_map())
    np.testing.assert_array_equal(b(f, mems=mems)["logits"].numpy(), a(f, mems=mems)["logits"].numpy())

    with pytest.raises(CheckpointMismatchError, match="layer_1/kernel"):
        load_tf1_checkpoint(path, XLNetPretrainer(tiny(d_inner=48)).tf1_variable_map())
    with pytest.raises(CheckpointMismatchError, match="r_w_bias"):  # tied biases are [n_head, d_head]
        load_tf1_checkpoint(path, XLNetPretrainer(tiny(untie_r=False)).tf1_variable_map())


def test_recompute_gives_the_same_gradients_with_dropout():
    f = make_features(8)
    seed = tf.constant([3, 4], tf.int64)
    mems = tf.random.stateless_normal([2, B, 4, 32], seed=[1, 1])
    grads, losses = [], []
    values = None
    for recompute in (False, True):
        model = XLNetPretrainer(tiny(mem_len=4, reuse_len=4, dropout=0.2, dropatt=0.2, recompute=recompute))
        if values is None:
            values = model
        copy_weights(values, model)
        with tf.GradientTape() as tape:
            logits = model(f, mems=mems, training=True, seed=seed)["logits"]
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(f["target"], logits))
        grads.append(tape.gradient(loss, model.trainable_variables))
        losses.append(loss.numpy())
    eval_logits = model(f, mems=mems)["logits"]
    eval_loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(f["target"], eval_logits))
    assert abs(eval_loss.numpy() - losses[0]) > 1e-3  # dropout really was on
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    for g0, g1, v in zip(grads[0], grads[1], model.trainable_variables):
        assert g0 is not None and g1 is not None, v.path
        np.testing.assert_allclose(tf.convert_to_tensor(g1).numpy(), tf.convert_to_tensor(g0).numpy(),
                                   atol=1e-5, err_msg=v.path)


def test_bf16_forward_is_finite_and_close_to_fp32():
    f = make_features(9)
    ref_model = XLNetPretrainer(tiny(mem_len=4, reuse_len=4))
    ref = ref_model.step_output(f, ref_model.initial_state(B), training=False)
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = XLNetPretrainer(tiny(mem_len=4, reuse_len=4, dropout=0.1, dropatt=0.1))
        copy_weights(ref_model, model)
        assert model.transformer.lookup_table.dtype == tf.float32
        out = model.step_output(f, model.initial_state(B), training=False)
        train_out = model.step_output(f, model.initial_state(B), training=True)
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    assert np.isfinite(train_out.losses["lm"].total.numpy())
    assert np.isfinite(out.state["mems"].numpy()).all() and out.state["mems"].dtype == tf.float32
    assert out.losses["lm"].total.numpy() == pytest.approx(ref.losses["lm"].total.numpy(), rel=0.05)


def build_from_flags(flags, manifest):
    """As the trainers build `--model=xlnet`: the flags' settings, the one constructor."""
    return XLNetPretrainer.from_settings(manifest=manifest, **model_settings_from_flags(flags))


def test_build_from_flags(tmp_path):
    cfg_path = tmp_path / "xlnet_config.json"
    cfg_path.write_text(json.dumps(dict(n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32,
                                        ff_activation="relu", untie_r=False, n_token=V)))
    flags = types.SimpleNamespace(model_config_path=str(cfg_path), mem_len=8, reuse_len=4, bi_data=True,
                                  seq_len=8, num_predict=P, dropout=0.0, dropatt=0.0, clamp_len=-1)
    manifest = {"problem": "xlnet_pretrain", "split": "train",
                "settings": {"seq_len": 8, "reuse_len": 4, "bi_data": True, "num_predict": P}}
    model = build_from_flags(flags, manifest)
    assert (model.config.n_layer, model.config.d_model, model.config.mem_len) == (1, 16, 8)
    assert not model.config.untie_r and model.config.bi_data
    out = model.step_output(make_features(10), model.initial_state(B), training=True)
    assert np.isfinite(out.losses["lm"].total.numpy())

    from_flags = build_from_flags(types.SimpleNamespace(n_layer=2, d_model=16, n_head=2, d_head=8,
                                                        d_inner=24, n_token=V, d_embed=16), manifest)
    assert (from_flags.config.d_inner, from_flags.config.reuse_len) == (24, 4)  # reuse_len from the data
    with pytest.raises(ValueError, match="seq_len"):
        build_from_flags(types.SimpleNamespace(**{**vars(flags), "seq_len": 16}), manifest)
    with pytest.raises(ValueError, match="reuse_len"):
        build_from_flags(types.SimpleNamespace(**{**vars(flags), "reuse_len": 2}), manifest)
    cfg_path.write_text(json.dumps(dict(n_layer=1, d_model=16)))
    with pytest.raises(ValueError, match="xlnet_config.json.*n_head"):
        build_from_flags(flags, manifest)


@pytest.mark.slow
def test_two_replicas_xla_and_recompute_train_with_carried_memories():
    """The trainers' shapes of use: MirroredStrategy over the 2 logical CPUs, memories carried
    between steps per replica, recompute + dropout inside tf.function, and an XLA-compiled step."""
    strategy = make_strategy("mirrored", 2)  # one MirroredStrategy per process (trainers/core.py)
    with strategy.scope():
        model = XLNetPretrainer(tiny(mem_len=4, reuse_len=4, dropout=0.1, dropatt=0.1, recompute=True,
                                     bi_data=True))
    f = make_features(11, batch=4)
    dist = iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(f).repeat()
                                                         .unbatch().batch(4)))
    state = strategy.run(lambda: model.initial_state(2))

    @tf.function
    def step(features, state):
        def replica_fn(feat, st):
            with tf.GradientTape() as tape:
                out = model.step_output(feat, st, training=True)
            grads = tape.gradient(out.losses["lm"].total, model.trainable_variables)
            return out.losses["lm"].total, tf.linalg.global_norm(grads), out.state
        return strategy.run(replica_fn, args=(features, state))

    for _ in range(2):
        loss, norm, state = step(next(dist), state)
    for t in strategy.experimental_local_results(loss) + strategy.experimental_local_results(norm):
        assert np.isfinite(t.numpy()) and t.numpy() > 0
    mems = strategy.experimental_local_results(state["mems"])
    assert mems[0].shape == (2, 2, 4, 32) and np.abs(mems[0].numpy()).max() > 0

    single = XLNetPretrainer(tiny(mem_len=4, reuse_len=4, dropout=0.1, dropatt=0.1, recompute=True,
                                  bi_data=True))
    feats = {k: tf.constant(v[:2]) for k, v in f.items()}

    @tf.function(jit_compile=True)
    def xla_step(features, mems):
        with tf.GradientTape() as tape:
            out = single(features, mems=mems, training=True, seed=tf.constant([5, 6], tf.int64))
            loss = tf.reduce_sum(out["logits"])
        return loss, tape.gradient(loss, single.trainable_variables)

    loss, grads = xla_step(feats, tf.zeros([2, 2, 4, 32]))
    assert np.isfinite(loss.numpy()) and all(g is not None for g in grads)


@pytest.mark.parametrize("with_ef, with_mask, dtype", [(True, True, tf.float32), (False, False, tf.float32),
                                                      (True, False, tf.bfloat16)])
def test_fused_attention_probs_match_op_by_op(with_ef, with_mask, dtype):
    """The XLA-fused score -> softmax chain (fusable training shapes) gives the op-by-op values and gradients."""
    from textrain.models.layers import relative_attention as ra
    from textrain.models.layers.softmax import masked_softmax
    b, n, q, k = 2, 4, 64, 192  # 98k elements: fusable
    g = tf.random.Generator.from_seed(3)
    ac, bd = tf.cast(g.normal([b, n, q, k]), dtype), tf.cast(g.normal([b, n, q, k + q]), dtype)
    ef = tf.cast(g.normal([b, n, q, 2]), dtype) if with_ef else None
    seg = g.uniform([b, q, k]) > 0.5 if with_ef else None
    mask = g.uniform([b, 1, q, k]) > 0.3 if with_mask else None
    weights = g.normal([b, n, q, k])
    inputs = [ac, bd] + ([ef] if with_ef else [])

    def value_and_grads(fn):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            probs = fn(*inputs, *([] if with_ef else [None]))
            loss = tf.reduce_sum(tf.cast(probs, tf.float32) * weights)
        return [probs] + tape.gradient(loss, inputs)

    fused = value_and_grads(lambda a, d, e: ra.attention_probs(a, d, e, seg, mask, 0.125, k))
    plain = value_and_grads(lambda a, d, e: tf.cast(masked_softmax(ra._scores(a, d, e, seg, 0.125, k), mask), dtype))
    tol = 1e-7 if dtype == tf.float32 else 2e-3
    for x, y in zip(fused, plain):
        np.testing.assert_allclose(tf.cast(x, tf.float32).numpy(), tf.cast(y, tf.float32).numpy(), atol=tol)
