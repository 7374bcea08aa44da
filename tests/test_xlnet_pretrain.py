"""xlnet_pretrain: the original data_utils.py semantics, checked against per-record references that
transcribe the original's loops (fed the same random numbers), plus layout, continuity, determinism
and the parse-time permutation."""
from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from textrain.framework import records
from textrain.framework.encoders import train_sentencepiece
from textrain.framework.problem import DataParams
from textrain.problems import xlnet_permutation as xperm
from textrain.problems import xlnet_pretrain as xp

HERE = os.path.dirname(os.path.abspath(__file__))
EMMA = os.path.join(HERE, "data", "austen_emma.txt")


# ------------------------------------------------------------------------------------------------
# References: the original's per-record loops, with the random numbers passed in.
def ref_split_a_and_b(sent, begin, tot_len, u_label, u_cut, u_b):
    data_len = len(sent)
    end_idx, cut_points = begin + 1, []
    while end_idx < data_len:
        if sent[end_idx] != sent[end_idx - 1]:
            if end_idx - begin >= tot_len:
                break
            cut_points.append(end_idx)
        end_idx += 1
    a_begin = begin
    if not cut_points or u_label < 0.5:
        label = 0
        a_end = end_idx if not cut_points else cut_points[int(u_cut * len(cut_points))]
        b_len = max(1, tot_len - (a_end - a_begin))
        b_begin = int(u_b * (data_len - b_len))  # randint(0, data_len - 1 - b_len)
        b_end = b_begin + b_len
        while b_begin > 0 and sent[b_begin - 1] == sent[b_begin]:
            b_begin -= 1
        while b_end < data_len - 1 and sent[b_end - 1] == sent[b_end]:
            b_end += 1
    else:
        label = 1
        a_end = cut_points[int(u_cut * len(cut_points))]
        b_begin, b_end = a_end, end_idx
    while a_end - a_begin + b_end - b_begin > tot_len:
        if a_end - a_begin > b_end - b_begin:
            a_end -= 1
        else:
            b_end -= 1
    if a_end >= data_len or b_end >= data_len:
        return None
    return a_begin, a_end, b_begin, b_end, label


def ref_sample_mask(is_start, reverse, goal, alpha, beta, ngrams, ctx_u, keys):
    seg_len = len(is_start)
    st = list(is_start[::-1]) if reverse else list(is_start)
    mask = np.zeros(seg_len, bool)
    num, cur, step = 0, 0, 0
    while cur < seg_len:
        if num >= goal:
            break
        n = min(int(ngrams[step]), goal - num)
        ctx = n * alpha // beta
        l_ctx = int(ctx_u[step] * ctx)
        step += 1
        beg = cur + l_ctx
        while beg < seg_len and not st[beg]:
            beg += 1
        if beg >= seg_len:
            break
        end, cnt = beg + 1, 1
        while end < seg_len:
            if st[beg]:  # sic: the original tests seg[beg], not seg[end]
                cnt += 1
                if cnt > n:
                    break
            end += 1
        if end >= seg_len:
            break
        mask[beg:end] = True
        num += end - beg
        cur = end + ctx - l_ctx
    free = sorted((k, i) for i, k in enumerate(keys) if not mask[i])
    for _, i in free[:goal - num]:
        mask[i] = True
    return mask[::-1] if reverse else mask


def random_sent_ids(rng, length, mean_sentence=7):
    flips = rng.random(length) < 1.0 / mean_sentence
    return (np.cumsum(flips) % 2).astype(bool)


# ------------------------------------------------------------------------------------------------
def test_trim_pair_is_the_original_loop():
    def loop(a, b, t):
        while a + b > t:
            if a > b:
                a -= 1
            else:
                b -= 1
        return a, b

    a, b = np.meshgrid(np.arange(40), np.arange(40))
    for tot in (1, 2, 7, 30):
        got_a, got_b = xp.trim_pair(a.ravel(), b.ravel(), tot)
        want = [loop(int(x), int(y), tot) for x, y in zip(a.ravel(), b.ravel())]
        assert list(zip(got_a.tolist(), got_b.tolist())) == want


def test_split_a_and_b_matches_the_original():
    rng = np.random.default_rng(0)
    num_rows, row_len, tot_len = 6, 300, 20
    sent = np.stack([random_sent_ids(rng, row_len, m) for m in (3, 7, 15, 40, 90, 7)])
    boundaries = xp.sentence_boundaries(sent)
    rows = np.repeat(np.arange(num_rows), 200)
    begin = rng.integers(0, row_len - tot_len - 3, size=rows.size)
    draw_rng = np.random.default_rng(7)
    ab = xp.split_a_and_b(boundaries, rows * row_len, row_len, begin, tot_len, np.random.default_rng(7))
    u_label, u_cut, u_b = draw_rng.random([3, rows.size])
    labels = []
    for i, (r, b) in enumerate(zip(rows, begin)):
        want = ref_split_a_and_b(sent[r], int(b), tot_len, u_label[i], u_cut[i], u_b[i])
        if want is None:
            assert not ab.ok[i]
            continue
        assert ab.ok[i]
        got = (ab.a_begin[i], ab.a_begin[i] + ab.a_len[i], ab.b_begin[i], ab.b_begin[i] + ab.b_len[i],
               ab.label[i])
        assert tuple(int(x) for x in got) == want, (i, r, b)
        assert ab.a_len[i] + ab.b_len[i] == tot_len
        labels.append(want[-1])
    assert 0.3 < np.mean(labels) < 0.6  # both kinds of pairs occur


@pytest.mark.parametrize("reverse", [False, True])
def test_sample_span_masks_matches_the_original(reverse):
    rng = np.random.default_rng(1)
    num, seg_len, goal, alpha, beta = 300, 64, 11, 6, 1
    is_start = rng.random([num, seg_len]) < 0.7
    rev = np.full(num, reverse)
    got = xp.sample_span_masks(is_start, rev, goal, alpha, beta, np.random.default_rng(3))
    draw = np.random.default_rng(3)
    ngrams = draw.choice(xp.MAX_GRAM, size=[num, goal], p=xp._NGRAM_P) + 1
    ctx_u = draw.random([num, goal])
    keys = draw.random([num, seg_len])
    for r in range(num):
        want = ref_sample_mask(is_start[r], reverse, goal, alpha, beta, ngrams[r], ctx_u[r], keys[r])
        np.testing.assert_array_equal(got[r], want)
    assert (got.sum(axis=1) == goal).all()


def test_smallest_keys_is_a_stable_ranking_even_with_ties():
    rng = np.random.default_rng(5)
    keys = np.round(rng.random([400, 24]), 1)  # many equal keys: every row takes the tie path
    taken = rng.random([400, 24]) < 0.3
    need = rng.integers(1, (~taken).sum(axis=1) + 1)
    got = xp.smallest_keys(keys, taken, need)
    for r in range(400):
        free = [i for i in np.argsort(keys[r], kind="stable") if not taken[r, i]][:need[r]]
        assert sorted(np.flatnonzero(got[r]).tolist()) == sorted(free)
    distinct = rng.random([50, 24])  # the common case, without ties
    got = xp.smallest_keys(distinct, np.zeros([50, 24], bool), np.full(50, 5))
    np.testing.assert_array_equal(got, distinct <= np.sort(distinct, axis=1)[:, 4:5])


def test_span_masks_are_word_aligned_ngrams():
    """Spans start at word starts; their lengths follow p(n) ∝ 1/n (before the top-up)."""
    rng = np.random.default_rng(2)
    is_start = np.ones([2000, 64], bool)  # every piece a word: spans are exactly n pieces
    mask = xp.sample_span_masks(is_start, np.zeros(2000, bool), 32, 6, 1, rng)
    runs = []
    for row in mask:
        edges = np.diff(np.concatenate([[0], row.astype(int), [0]]))
        runs += (np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)).tolist()
    hist = np.bincount(runs, minlength=6)[1:6] / len(runs)
    assert hist[0] > hist[1] > hist[2] > hist[3] > hist[4] > 0


def test_impossible_num_predict_is_a_clear_error():
    with pytest.raises(ValueError, match=r"--num_predict=70 is impossible.*--reuse_len=32.*#217"):
        xp.XlnetPretrain(xp.XlnetPretrainHParams(seq_len=64, reuse_len=32, num_predict=70,
                                                 bsz_per_host=4, num_core_per_host=1))
    with pytest.raises(ValueError, match="cannot mask 9 of 8"):
        xp.sample_span_masks(np.ones([1, 8], bool), np.zeros(1, bool), 9, 6, 1, np.random.default_rng())
    with pytest.raises(ValueError, match="--bsz_per_host=6 must be a multiple of 2 \\* --num_core_per_host=2"):
        xp.validate_hparams(xp.XlnetPretrainHParams(bsz_per_host=6, num_core_per_host=2))
    with pytest.raises(ValueError, match="--perm_size=48 must be in"):
        xp.resolve_perm_size(xp.XlnetPretrainHParams(seq_len=128, reuse_len=32, perm_size=48))


# ------------------------------------------------------------------------------------------------
def test_sentence_ids_per_line_eod_and_file_join_flip():
    encoded = iter([[10, 11], [12], [13, 14, 15]])
    ids, sent = xp.encode_document(["a b", "c", "", "", "d e f"], encoded, use_eod=True)
    assert ids.tolist() == [10, 11, 12, xp.EOD_ID, xp.EOD_ID, 13, 14, 15]
    # lines alternate; each <eod> keeps the id of the line before it
    assert sent.tolist() == [True, True, False, False, False, True, True, True]
    ids, sent = xp.encode_document(["", "a"], iter([[5]]), use_eod=True)
    assert sent.tolist() == [False, True]  # a leading blank line: the original's flip-then-emit
    ids, sent = xp.encode_document(["a", "", "b"], iter([[5], [6]]), use_eod=False)
    assert ids.tolist() == [5, 6] and sent.tolist() == [True, False]

    # joining: a piece starting with the previous piece's last id is flipped
    a = (np.array([1, 2, 3]), np.array([True, True, False]))
    b = (np.array([4, 5]), np.array([True, False]))
    c = (np.array([6]), np.array([True]))
    data, sent = xp.join_streams([a, b, c])
    assert data.tolist() == [1, 2, 3, 4, 5, 6]
    assert sent.tolist() == [True, True, False, True, False, True]
    data, sent = xp.join_streams([b, c])  # b ends False, c starts True: kept
    assert sent.tolist() == [True, False, True]
    data, sent = xp.join_streams([c, c])  # True then True: the second is flipped
    assert sent.tolist() == [True, False]


def test_documents_are_the_corpus_documents_each_ended_by_one_eod(tmp_path):
    """A shuffled document is read as the original reads a file whose documents are each followed by one
    blank line: encoding document by document and joining equals the original's one loop over it."""
    from textrain.framework import shuffle
    path = tmp_path / "t.txt"
    path.write_text("\n".join(["", "s1", " s2 ", "", "", "s3", "", "s4"]) + "\n")
    texts = list(shuffle.all_texts(shuffle.DocumentCorpus((str(path),))))
    docs = [xp.shuffled_document(t) for t in texts]
    assert [d.lines for d in docs] == [["s1", "s2", ""], ["s3", ""], ["s4", ""]]
    lines = ["s1", "s2", "", "s3", "", "s4", ""]
    ids_of = {f"s{i}": [100 + i] for i in range(1, 5)}
    whole = xp.encode_document(lines, iter([ids_of[x] for x in lines if x]), True)
    parts = [xp.encode_document(d.lines, iter([ids_of[x] for x in d.lines if x]), True) for d in docs]
    joined = xp.join_streams(parts)
    np.testing.assert_array_equal(joined[0], whole[0])
    np.testing.assert_array_equal(joined[1], whole[1])


def test_documents_from_ids_equals_the_per_line_loop():
    rng = np.random.default_rng(4)
    words = ["a", "b c", "", "  ", "d e f", "\t", "g"]
    docs = [xp.Document([words[j] for j in rng.integers(0, len(words), rng.integers(1, 9))]) for _ in range(8)]
    ids_of = {w: [100 + k for k in range(len(w.split()))] for w in words}
    for use_eod in (True, False):
        texts = [ln.strip() for d in docs for ln in d.lines if ln.strip()]
        flat = np.array([i for t in texts for i in ids_of[t]], np.int32)
        got = xp.documents_from_ids(docs, flat, np.array([len(ids_of[t]) for t in texts]), use_eod)
        for d, (ids, sent) in zip(docs, got):
            want_ids, want_sent = xp.encode_document(d.lines, iter([ids_of[ln.strip()] for ln in d.lines
                                                                     if ln.strip()]), use_eod)
            np.testing.assert_array_equal(ids, want_ids)
            np.testing.assert_array_equal(sent, want_sent)


def test_shards_split_the_documents_in_corpus_order(tmp_path, sp_model):
    """Every document is in exactly one shard, in corpus order there; --dev_input_file's go to dev."""
    from textrain.framework import shuffle
    dev = tmp_path / "dev.txt"
    dev.write_text("one dev document.\n\nand another.\n")
    problem = xp.XlnetPretrain(small_hparams(sp_model, dev_input_file=str(dev)))
    spec = problem.document_corpus("")
    every = [t for t in shuffle.all_texts(spec)]
    train = {k: list(shuffle.shard_texts(spec, "train", k, 5)) for k in range(5)}
    assert sorted(t for v in train.values() for t in v) == sorted(every[:-2])
    for texts in train.values():
        assert texts == [t for t in every if t in set(texts)]
    assert list(shuffle.shard_texts(spec, "dev", 0, 1)) == every[-2:]
    assert [xp.shuffled_document(t).lines for t in every[-2:]] == [["one dev document.", ""], ["and another.", ""]]


@pytest.mark.parametrize("num_cores", [1, 2, 4])
def test_bi_data_per_core_forward_then_backward(num_cores):
    bsz, length = 8, 50
    data = np.arange(bsz // 2 * length + 3)
    rows, sent, reverse = xp.host_rows(data, data % 2 == 0, bsz, num_cores, bi_data=True)
    fwd = data[:bsz // 2 * length].reshape(bsz // 2, length)
    per_core = bsz // num_cores
    for core in range(num_cores):
        mine = rows[core * per_core:(core + 1) * per_core]
        my_fwd = fwd[core * per_core // 2:(core + 1) * per_core // 2]
        np.testing.assert_array_equal(mine[:per_core // 2], my_fwd)
        np.testing.assert_array_equal(mine[per_core // 2:], my_fwd[:, ::-1])
        assert reverse[core * per_core:(core + 1) * per_core].tolist() == \
            [False] * (per_core // 2) + [True] * (per_core // 2)
    np.testing.assert_array_equal(sent, rows % 2 == 0)
    rows, _, reverse = xp.host_rows(data, data % 2 == 0, bsz, num_cores, bi_data=False)
    np.testing.assert_array_equal(rows, data[:bsz * (len(data) // bsz)].reshape(bsz, -1))
    assert not reverse.any()


# ------------------------------------------------------------------------------------------------
# Real text through a tiny SentencePiece model.
@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("sp") / "spiece")
    return train_sentencepiece(EMMA, prefix, vocab_size=1000, hard_vocab_limit=False)


def small_hparams(sp_model, **kw):
    base = dict(input_file=EMMA, sp_model=sp_model, seq_len=64, reuse_len=32, bsz_per_host=8,
                num_core_per_host=2, num_predict=11, perm_size=16)
    base.update(kw)
    return xp.XlnetPretrainHParams(**base)


def shard_records(problem, seed=0, shard_id=0, num_shards=1):
    recs = list(records.iter_samples(problem.generate_shard("unused", "", "train", shard_id, num_shards, seed)))
    return {k: np.stack([r[k] for r in recs]) for k in recs[0]}


def test_records_layout_targets_and_masks(sp_model):
    hp = small_hparams(sp_model)
    problem = xp.XlnetPretrain(hp)
    recs = shard_records(problem)
    n = len(recs["input"])
    assert n > 0 and n % hp.bsz_per_host == 0
    assert (recs["is_masked"].sum(axis=1) == hp.num_predict).all()
    assert (recs["is_masked"][:, :hp.reuse_len].sum(axis=1) == 6).all()  # ceil(11/2) on the reuse part
    for inp, tgt, seg in zip(recs["input"], recs["target"], recs["seg_id"]):
        seps = np.flatnonzero(inp == xp.SEP_ID)
        assert inp[-1] == xp.CLS_ID and seps[-1] == hp.seq_len - 2
        sep_1 = seps[-2]
        assert seg[:sep_1 + 1].tolist() == [0] * (sep_1 + 1)
        assert seg[sep_1 + 1:-1].tolist() == [1] * (hp.seq_len - sep_1 - 2) and seg[-1] == 2
        # target = next token (the first <sep> predicts B's first token), <cls> on the last two
        assert (tgt[:hp.reuse_len - 1] == inp[1:hp.reuse_len]).all()
        assert (tgt[hp.reuse_len:sep_1 - 1] == inp[hp.reuse_len + 1:sep_1]).all()
        assert tgt[sep_1] == inp[sep_1 + 1]
        assert (tgt[sep_1 + 1:-3] == inp[sep_1 + 2:-2]).all()
        assert tgt[-2] == tgt[-1] == xp.CLS_ID
    labels = recs["label"].ravel()
    assert set(labels.tolist()) == {0, 1} and recs["label"].shape == (n, 1)


def test_rows_continue_across_batches(sp_model):
    from textrain.framework import shuffle
    hp = small_hparams(sp_model, bi_data=True, num_core_per_host=2)
    recs = shard_records(xp.XlnetPretrain(hp))
    batches = recs["input"].reshape(-1, hp.bsz_per_host, hp.seq_len)
    targets = recs["target"].reshape(-1, hp.bsz_per_host, hp.seq_len)
    reuse = hp.reuse_len
    # the reuse parts of consecutive batches tile each row
    for t in range(len(batches) - 1):
        np.testing.assert_array_equal(batches[t + 1, :, 0], targets[t, :, reuse - 1])
    # and a forward row's reversal is its core's backward row: the row streams match token for token
    streams = batches[:, :, :reuse].transpose(1, 0, 2).reshape(hp.bsz_per_host, -1)
    per_core = hp.bsz_per_host // hp.num_core_per_host
    enc = xp.XlnetPretrain(hp).encoder("unused")
    data, _ = xp.join_streams(xp.encode_documents(
        map(xp.shuffled_document, shuffle.all_texts(xp.XlnetPretrain(hp).document_corpus(""))),
        enc.encode_batch, True))
    row_len = len(data) // (hp.bsz_per_host // 2)
    fwd = data[:row_len * (hp.bsz_per_host // 2)].reshape(hp.bsz_per_host // 2, row_len)
    for core in range(hp.num_core_per_host):
        for j in range(per_core // 2):
            f = fwd[core * per_core // 2 + j]
            np.testing.assert_array_equal(streams[core * per_core + j], f[:streams.shape[1]])
            np.testing.assert_array_equal(streams[core * per_core + per_core // 2 + j],
                                          f[::-1][:streams.shape[1]])


def test_deterministic_by_seed_and_passes_differ(sp_model):
    problem = xp.XlnetPretrain(small_hparams(sp_model, num_passes=2))
    a, b, c = shard_records(problem, seed=3), shard_records(problem, seed=3), shard_records(problem, seed=4)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["is_masked"], c["is_masked"])
    half = len(a["input"]) // 2
    assert np.array_equal(a["input"][:half, :32], a["input"][half:, :32])  # one file: same stream
    assert not np.array_equal(a["is_masked"][:half], a["is_masked"][half:])  # new masks per pass
    # shards split the documents; each shard only needs its own
    s0 = shard_records(problem, seed=3, shard_id=0, num_shards=2)
    s1 = shard_records(problem, seed=3, shard_id=1, num_shards=2)
    assert not np.array_equal(s0["input"][:8], s1["input"][:8])


# ------------------------------------------------------------------------------------------------
def test_local_perm_mask_is_consistent_with_the_order(sp_model):
    hp = small_hparams(sp_model)
    recs = shard_records(xp.XlnetPretrain(hp))
    for i in (0, 5, 13):
        example = {k: tf.constant(v[i]) for k, v in recs.items()}
        inputs = example["input"]
        is_masked = tf.cast(example["is_masked"], tf.bool)
        # the order itself, as local_perm samples it, for the second part
        seed = tf.constant([11, i], tf.int64)
        pm, new_tgt, tmask, k_in, q_in = xperm.local_perm(inputs[32:], example["target"][32:],
                                                          is_masked[32:], 16, 32, seed)
        index = xperm._shuffled_block_index(32, 16, seed).numpy()
        pm, tmask = pm.numpy(), tmask.numpy()
        inp = inputs[32:].numpy()
        msk = is_masked[32:].numpy()
        func = (inp == xp.SEP_ID) | (inp == xp.CLS_ID)
        np.testing.assert_array_equal(tmask, (msk & ~func).astype(np.float32))
        np.testing.assert_array_equal(new_tgt.numpy()[msk & ~func], inp[msk & ~func])
        for a in range(32):
            for b in range(32):
                seen = pm[a, b] == 0
                if not (msk[b] or func[b]):
                    assert seen  # ordinary context is visible to everyone
                elif msk[a] and not func[a]:
                    assert seen == (index[b] < index[a])  # strictly earlier in the order
                elif func[a]:
                    assert seen == (index[b] <= index[a])  # <sep>/<cls>: earlier, and itself
                else:
                    assert not seen  # unmasked context never sees what is predicted
        assert all(pm[a, a] == 1 for a in range(32) if msk[a] and not func[a])
        # the permutation is one order of perm_size applied to both blocks
        assert sorted(index[:16]) == list(range(16)) and (index[16:] - 16 == index[:16]).all()


def test_preprocess_example_matches_the_original_parser(sp_model):
    hp = small_hparams(sp_model)
    problem = xp.XlnetPretrain(hp)
    recs = shard_records(problem)
    example = {k: tf.constant(v[3]) for k, v in recs.items()}
    params = DataParams(batch_size=8, seed=5)
    out = problem.preprocess_example(dict(example), "train", params)
    again = problem.preprocess_example(dict(example), "train", params)
    assert sorted(out) == ["input_k", "input_q", "label", "perm_mask", "seg_id", "target",
                           "target_mapping", "target_mask"]
    for k in out:
        np.testing.assert_array_equal(out[k].numpy(), again[k].numpy())  # deterministic by seed
    assert out["perm_mask"].shape == (64, 64) and out["target_mapping"].shape == (11, 64)
    assert out["target"].dtype == tf.int32 and out["input_k"].dtype == tf.int32
    inp, msk = recs["input"][3], recs["is_masked"][3].astype(bool)
    predicted = msk & (inp != xp.SEP_ID) & (inp != xp.CLS_ID)
    k = int(predicted.sum())
    tm = out["target_mapping"].numpy()
    np.testing.assert_array_equal(tm[:k].argmax(axis=1), np.flatnonzero(predicted))
    assert (tm[k:] == 0).all() and (tm.sum(axis=1)[:k] == 1).all()
    np.testing.assert_array_equal(out["target"].numpy()[:k], inp[predicted])
    np.testing.assert_array_equal(out["target_mask"].numpy(), [1.0] * k + [0.0] * (11 - k))
    np.testing.assert_array_equal(out["input_q"].numpy(), predicted.astype(np.float32))
    pm = out["perm_mask"].numpy()
    assert (pm[:32, 32:] == 1).all() and (pm[32:, :32] == 0).all()


def test_generate_data_and_read_back(sp_model, tmp_path):
    hp = small_hparams("", vocab_size=600)
    problem = xp.XlnetPretrain(hp)
    data_dir = str(tmp_path / "data")
    manifests = problem.generate_data(data_dir, str(tmp_path / "tmp"), num_shards={"train": 2}, seed=1)
    m = manifests["train"]
    assert os.path.exists(os.path.join(problem.problem_dir(data_dir), "spiece.model"))
    assert m["settings"]["num_predict"] == 11 and m["settings"]["bsz_per_host"] == 8
    assert m["settings"]["vocab_fingerprint"] and m["settings"]["vocab_size"] <= 600
    assert all(s["count"] % 8 == 0 for s in m["shards"])
    [info_path] = glob.glob(os.path.join(problem.problem_dir(data_dir), "record_info-train-0-0.bsz-8."
                                         "seqlen-64.reuse-32.bi.alpha-6.beta-1.fnp-11.json"))
    info = json.load(open(info_path))
    assert info["num_batch"] == m["num_examples"] // 8 and len(info["filenames"]) == 2
    assert json.load(open(os.path.join(problem.problem_dir(data_dir), "corpus_info.json")))["seq_len"] == 64

    ds = problem.dataset("train", data_dir, DataParams(batch_size=8, seed=0))
    batch = next(iter(ds))
    assert batch["perm_mask"].shape == (8, 64, 64) and batch["target"].shape == (8, 11)
    with pytest.raises(ValueError, match="batch_size=4 must equal --bsz_per_host=8"):
        problem.dataset("train", data_dir, DataParams(batch_size=4))
    other = xp.XlnetPretrain(small_hparams("", vocab_size=600, reuse_len=16, perm_size=16))
    with pytest.raises(ValueError, match="reuse_len"):
        other.dataset("train", data_dir, DataParams(batch_size=8))


# ------------------------------------------------------------------------------------------------
# Records pinned byte for byte.
#
# GOLDEN_SHA256 was first made before the speed work (docs/HISTORY.md) and made again, once, when
# datagen began to read the corpus once and shuffle each document to the shard a hash of its text
# picks (the shards' documents changed, deliberately), by running `golden_run` below with one worker:
# the sha256 of every shard file and of the encoded id streams. The corpus is built here from Emma plus lines written to hit
# every special case of the text path (whitespace runs and Unicode spaces, `` '' quotes, accents and
# NFKD ligatures, CJK and emoji that the model does not know (<unk>: the piece path), "<digit>,"
# pieces, lines that preprocess to nothing, leading/trailing blank lines, two files); the
# SentencePiece model is shipped (tests/data/xlnet_spiece_1200.model) because training one is not
# bit-reproducible across thread counts. A faster implementation must give these exact bytes.
XLNET_SP = os.path.join(HERE, "data", "xlnet_spiece_1200.model")
TRICKY_LINES = [
    "  Leading and trailing   spaces\tand\ttabs  ",
    "``Quoted,'' she said, ``twice.''",
    "Prices rose in 1815, 1,250, 3,000, and 42, all told; 7, 8, 9, then 10,000,000.",
    "naïve café façade Ångström ﬁne ① ² Ｆｕｌｌｗｉｄｔｈ ÉCOLE",
    "Greek ΟΔΟΣ σοφία, Russian Москва, Chinese 北京大学, emoji 😀🤣 and more.",
    "zero\u200bwidth, nbsp\u00a0here, line\u2028separator, ideographic\u3000space, nel\x85end",
    "e\u0301 a\u0300 o\u0308 combining marks",
    "\u0301\u0308",
    "\u200b",
    " \x1c ",
    "<eop>",
    "A line with <eop> inside it.",
    "...",
    "- \u2013 \u2014 \u00a3 \u20ac",
    "ALL CAPS LINE FOR THE UNCASED SETTING, 1,234,",
]
GOLDEN = {
    "bi": dict(seq_len=64, reuse_len=32, bsz_per_host=8, num_core_per_host=2, num_predict=11,
               bi_data=True, num_passes=2, shards=3, seed=7),
    "uni_uncased_noeod": dict(seq_len=48, reuse_len=16, bsz_per_host=4, num_core_per_host=1,
                              num_predict=9, bi_data=False, uncased=True, use_eod=False, mask_alpha=4,
                              mask_beta=2, num_passes=1, shards=2, seed=11),
}


def golden_corpus(directory):
    """Two files (paths, comma-joined) from Emma's first 1600 lines and TRICKY_LINES."""
    with open(EMMA, encoding="utf-8") as f:
        emma = [line.rstrip("\n") for line in f][:1600]
    first = ["", ""] + emma[:300] + TRICKY_LINES + emma[300:900] + ["", "", ""] + TRICKY_LINES[::-1]
    second = TRICKY_LINES + [""] + emma[900:] + [" ".join(emma[950:970]) * 3, "", "last line"]
    paths = []
    for i, lines in enumerate([first, second]):
        path = os.path.join(directory, f"golden_{i}.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + ("\n" if i == 0 else ""))  # the second file has no final newline
        paths.append(path)
    return ",".join(paths)


def golden_run(name, directory, workers=1):
    """sha256 of every shard file and of each shard's encoded stream, for the setting `name`."""
    import hashlib
    settings = dict(GOLDEN[name])
    shards, seed = settings.pop("shards"), settings.pop("seed")
    hp = xp.XlnetPretrainHParams(input_file=golden_corpus(directory), sp_model=XLNET_SP, **settings)
    problem = xp.XlnetPretrain(hp)
    data_dir = os.path.join(directory, "data")
    problem.generate_data(data_dir, "", num_workers=workers, seed=seed, num_shards={"train": shards})
    out = {}
    for path in sorted(glob.glob(os.path.join(problem.problem_dir(data_dir), "*.tfrecord"))):
        out[os.path.basename(path)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    for shard in range(shards):
        h = hashlib.sha256()
        for ids, sent in problem.shard_stream_documents(data_dir, "train", shard, shards):
            h.update(np.asarray(ids, "<i8").tobytes() + np.asarray(sent, np.uint8).tobytes())
        out[f"ids-{shard}"] = h.hexdigest()
    return out


GOLDEN_SHA256 = {
    "bi": {
        "xlnet_pretrain-train-00000-of-00003.tfrecord":
            "33e6098a7671af96082ca3d26007ea2773777c62f7c9216a9f0ad31511946e89",
        "xlnet_pretrain-train-00001-of-00003.tfrecord":
            "c011887c4c76247a371ea5ef3bd22df6e7a25e0eef8f43b1ada751afa9ccbf09",
        "xlnet_pretrain-train-00002-of-00003.tfrecord":
            "34e6e76d2234a0308db64c4e988cf47270507dd0bee542a96b0908ae98ef92a2",
        "ids-0":
            "d1c03f974202db39743930a87f4ad6e6b2316ce7f7516e364ec63944d599fdc8",
        "ids-1":
            "d0338ae252624657dd65c11b3e1a2f421640854d79038c1be192f7fe4e90e351",
        "ids-2":
            "a40365c7fd2ac803a045ddada983774f01c15964d0f95af47dbe316d93e79474",
    },
    "uni_uncased_noeod": {
        "xlnet_pretrain-train-00000-of-00002.tfrecord":
            "e49d100309ac90639e1af5518de75e17f5effa30eeb81c69e8764997bc97d329",
        "xlnet_pretrain-train-00001-of-00002.tfrecord":
            "544af1b4a31cdc2efc6c93782c15a449d4f7010194318bd8e5b6d8f471961fba",
        "ids-0":
            "38ea104ef99a7683e19cfd7910434f6e22f01672e80abc67d7c7479232e088cd",
        "ids-1":
            "0d0005779ea13e9f32b344843a13a89cec919604a16d4f2c1c6c0b9b9cac31e9",
    },
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_records_identical_to_the_pinned_bytes(name, tmp_path):
    assert golden_run(name, str(tmp_path)) == GOLDEN_SHA256[name]


def test_records_identical_with_two_worker_processes(tmp_path):
    """Determinism across worker counts: two real worker processes write the same bytes."""
    assert golden_run("bi", str(tmp_path), workers=2) == GOLDEN_SHA256["bi"]
