"""problems/bert_pretrain.py: the semantics of google-research/bert create_pretraining_data.py.

Real text (tests/data/austen_emma.txt, 24 chapters = 24 documents) with a small WordPiece vocab built
here. Statistics are compared with `reference_instances`, a plain re-statement of the original
algorithm (python `random`, token lists, one global document list, per-token shuffle), so the
vectorized, sharded implementation is checked against the original's behaviour, not against itself.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import random

import numpy as np
import pytest
import tensorflow as tf

from textrain.framework import corpus, encoders, records, registry, shuffle
from textrain.framework.problem import DataParams, ModeKeys
from textrain.framework.truncation import truncate_seq_pair
from textrain.problems import bert_pretrain as bp

HERE = os.path.dirname(os.path.abspath(__file__))
EMMA = os.path.join(HERE, "data", "austen_emma.txt")
SEQ = 64      # small max_seq_length keeps the tests fast and makes truncation frequent
PREDS = 10


# ----------------------------------------------------------------------------------------------- #
# fixtures
# ----------------------------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("vocab") / "vocab.txt")
    return encoders.build_wordpiece_vocab(EMMA, vocab_size=1500, out_file=path)


@pytest.fixture(scope="module")
def encoder(vocab_file):
    return encoders.WordpieceEncoder(vocab_file)


@pytest.fixture(scope="module")
def vocab(encoder) -> bp.Vocabulary:
    return bp.Vocabulary.from_encoder(encoder)


def hparams(vocab_file: str, **kw) -> bp.BertPretrainHParams:
    base = dict(input_file=EMMA, vocab_file=vocab_file, max_seq_length=SEQ, max_predictions_per_seq=PREDS,
                dupe_factor=3)
    base.update(kw)
    return bp.BertPretrainHParams(**base)


def run_shards(vocab_file: str, num_shards: int = 1, seed: int = 0, **kw) -> list[dict]:
    """All instances of all shards of the train split, as the driver would get them."""
    problem = bp.BertPretrain(hparams(vocab_file, **kw))
    out = []
    for shard in range(num_shards):
        out.extend(records.iter_samples(problem.generate_shard("unused", "unused", "train", shard, num_shards,
                                                               seed)))
    return out


def stack(instances: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.stack([ex[k] for ex in instances]) for k in bp.FEATURES}


def unmasked_ids(instances: dict[str, np.ndarray]) -> np.ndarray:
    """input_ids with the masked positions' original ids put back."""
    ids = instances["input_ids"].copy()
    rows, cols = np.nonzero(instances["masked_lm_weights"])
    ids[rows, instances["masked_lm_positions"][rows, cols]] = instances["masked_lm_ids"][rows, cols]
    return ids


# ----------------------------------------------------------------------------------------------- #
# the original algorithm, restated plainly (the reference for the statistics)
# ----------------------------------------------------------------------------------------------- #
def reference_instances(docs: list[list[list[str]]], vocab_words: list[str], seq: int, preds: int,
                        dupe: int, short_seq_prob: float, whole_word: bool, seed: int) -> list[dict]:
    rng = random.Random(seed)
    docs = [d for d in docs if d]
    rng.shuffle(docs)
    out = []
    for _ in range(dupe):
        for index in range(len(docs)):
            out.extend(_reference_document(docs, index, seq, preds, short_seq_prob, whole_word,
                                           vocab_words, rng))
    return out


def _reference_document(docs, index, seq, preds, short_seq_prob, whole_word, vocab_words, rng):
    doc = docs[index]
    max_num = seq - 3
    target = rng.randint(2, max_num) if rng.random() < short_seq_prob else max_num
    out, chunk, length, i = [], [], 0, 0
    while i < len(doc):
        chunk.append(doc[i])
        length += len(doc[i])
        if i == len(doc) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            a = [t for s in chunk[:a_end] for t in s]
            b = []
            if len(chunk) == 1 or rng.random() < 0.5:
                random_next = True
                for _ in range(10):
                    other = rng.randint(0, len(docs) - 1)
                    if other != index:
                        break
                start = rng.randint(0, len(docs[other]) - 1)
                for s in docs[other][start:]:
                    b.extend(s)
                    if len(b) >= target - len(a):
                        break
                i -= len(chunk) - a_end
            else:
                random_next = False
                b = [t for s in chunk[a_end:] for t in s]
            while len(a) + len(b) > max_num:
                longer = a if len(a) > len(b) else b
                if rng.random() < 0.5:
                    del longer[0]
                else:
                    longer.pop()
            tokens = ["[CLS]", *a, "[SEP]", *b, "[SEP]"]
            out.append(dict(tokens=tokens, len_a=len(a), random_next=random_next,
                            **_reference_mask(tokens, preds, whole_word, vocab_words, rng)))
            chunk, length = [], 0
        i += 1
    return out


def _reference_mask(tokens, preds, whole_word, vocab_words, rng):
    cand = []
    for i, t in enumerate(tokens):
        if t in ("[CLS]", "[SEP]"):
            continue
        if whole_word and cand and t.startswith("##"):
            cand[-1].append(i)
        else:
            cand.append([i])
    rng.shuffle(cand)
    budget = min(preds, max(1, int(round(len(tokens) * 0.15))))
    out = list(tokens)
    chosen = []
    for group in cand:
        if len(chosen) >= budget:
            break
        if len(chosen) + len(group) > budget:
            continue
        for i in group:
            if rng.random() < 0.8:
                out[i] = "[MASK]"
            elif rng.random() < 0.5:
                pass
            else:
                out[i] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            chosen.append(i)
    return dict(masked_tokens=out, positions=sorted(chosen))


@pytest.fixture(scope="module")
def reference(encoder) -> list[dict]:
    docs = [[encoder.tokenize(line) for line in d] for d in corpus.read_documents(EMMA)]
    docs = [[s for s in d if s] for d in docs]
    vocab_words = encoder.convert_ids_to_tokens(list(range(encoder.vocab_size)))
    return reference_instances(docs, vocab_words, SEQ, PREDS, dupe=3, short_seq_prob=0.1,
                               whole_word=False, seed=7)


def summary(num_tokens: np.ndarray, random_next: np.ndarray, num_masked: np.ndarray) -> dict:
    return dict(random_next=random_next.mean(), full=(num_tokens == SEQ).mean(),
                mean_tokens=num_tokens.mean(), masked_per_token=num_masked.sum() / num_tokens.sum())


def reference_summary(ref: list[dict]) -> dict:
    return summary(np.array([len(r["tokens"]) for r in ref]), np.array([r["random_next"] for r in ref]),
                   np.array([len(r["positions"]) for r in ref]))


def our_summary(inst: dict[str, np.ndarray]) -> dict:
    return summary(inst["input_mask"].sum(1), inst["next_sentence_labels"][:, 0],
                   inst["masked_lm_weights"].sum(1))


# ----------------------------------------------------------------------------------------------- #
# features
# ----------------------------------------------------------------------------------------------- #
ORIGINAL_NAME_TO_FEATURES = {  # google-research/bert run_pretraining.py input_fn
    "input_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
    "input_mask": tf.io.FixedLenFeature([SEQ], tf.int64),
    "segment_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
    "masked_lm_positions": tf.io.FixedLenFeature([PREDS], tf.int64),
    "masked_lm_ids": tf.io.FixedLenFeature([PREDS], tf.int64),
    "masked_lm_weights": tf.io.FixedLenFeature([PREDS], tf.float32),
    "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
}


def test_registered_with_original_flag_names():
    assert registry.problems.get("bert_pretrain") is bp.BertPretrain
    names = [f.name for f in dataclasses.fields(bp.BertPretrainHParams)]
    for flag in ("input_file", "vocab_file", "do_lower_case", "do_whole_word_mask", "max_seq_length",
                 "max_predictions_per_seq", "random_seed", "dupe_factor", "masked_lm_prob",
                 "short_seq_prob", "vocab_size", "on_bad_utf8"):
        assert flag in names
    defaults = bp.BertPretrainHParams()
    assert (defaults.max_seq_length, defaults.max_predictions_per_seq, defaults.dupe_factor,
            defaults.masked_lm_prob, defaults.short_seq_prob, defaults.random_seed,
            defaults.vocab_size) == (128, 20, 10, 0.15, 0.1, 12345, 30522)


def test_bad_settings_name_the_flag():
    with pytest.raises(ValueError, match="--max_seq_length"):
        bp.BertPretrain(bp.BertPretrainHParams(max_seq_length=4))
    with pytest.raises(ValueError, match="--masked_lm_prob"):
        bp.BertPretrain(bp.BertPretrainHParams(masked_lm_prob=0.0))


def test_features_shapes_dtypes_and_original_spec(vocab_file):
    problem = bp.BertPretrain(hparams(vocab_file))
    assert problem.example_reading_spec() == ORIGINAL_NAME_TO_FEATURES
    instances = run_shards(vocab_file, dupe_factor=1)
    assert instances
    for ex in instances[:50]:
        assert list(ex) == list(bp.FEATURES)
        assert {k: v.shape for k, v in ex.items()} == {
            k: tuple(s.shape) for k, s in ORIGINAL_NAME_TO_FEATURES.items()}
        assert ex["masked_lm_weights"].dtype == np.float32
        assert all(np.issubdtype(v.dtype, np.integer) for k, v in ex.items() if k != "masked_lm_weights")
    # Serialized by the records writer, parsed with the original's spec, cast to int32 for the models.
    record = records.to_example(instances[0]).SerializeToString()
    parsed = tf.io.parse_single_example(record, ORIGINAL_NAME_TO_FEATURES)
    np.testing.assert_array_equal(parsed["input_ids"].numpy(), instances[0]["input_ids"])
    ready = problem.preprocess_example(parsed, ModeKeys.TRAIN, DataParams(batch_size=2))
    assert ready["input_ids"].dtype == tf.int32 and ready["masked_lm_weights"].dtype == tf.float32
    assert problem.default_batching() == "fixed"


def test_layout_segment_ids_and_padding(vocab_file, vocab):
    inst = stack(run_shards(vocab_file))
    ids = unmasked_ids(inst)
    for row in range(len(ids)):
        n = int(inst["input_mask"][row].sum())
        assert inst["input_mask"][row, :n].all() and not inst["input_mask"][row, n:].any()
        seps = np.nonzero(ids[row, :n] == vocab.sep_id)[0].tolist()
        assert ids[row, 0] == vocab.cls_id and len(seps) == 2 and seps[1] == n - 1
        expected = np.zeros(SEQ, dtype=np.int64)
        expected[seps[0] + 1:n] = 1  # 0 over [CLS] A [SEP], 1 over B [SEP], 0 on padding
        np.testing.assert_array_equal(inst["segment_ids"][row], expected)
        assert seps[0] >= 2 and n - seps[0] >= 3  # A and B non-empty
        assert not inst["input_ids"][row, n:].any()


def test_masked_positions_sorted_never_special_and_counts_exact(vocab_file, vocab):
    inst = stack(run_shards(vocab_file))
    ids = unmasked_ids(inst)
    n = inst["input_mask"].sum(1)
    counts = inst["masked_lm_weights"].sum(1).astype(int)
    expected = np.minimum(PREDS, np.maximum(1, [int(round(x * 0.15)) for x in n]))
    np.testing.assert_array_equal(counts, expected)
    for row in range(len(ids)):
        pos = inst["masked_lm_positions"][row, :counts[row]]
        assert (np.diff(pos) > 0).all()
        assert not inst["masked_lm_positions"][row, counts[row]:].any()
        assert not inst["masked_lm_ids"][row, counts[row]:].any()
        assert not np.isin(ids[row, pos], [vocab.cls_id, vocab.sep_id]).any()
        assert (pos < n[row]).all()


def test_masked_fraction_is_15_percent_capped(vocab_file):
    inst = stack(run_shards(vocab_file, max_predictions_per_seq=PREDS))
    n = inst["input_mask"].sum(1)
    fraction = inst["masked_lm_weights"].sum() / n.sum()
    assert 0.14 < fraction < 0.16
    capped = stack(run_shards(vocab_file, max_predictions_per_seq=3, dupe_factor=1))
    assert capped["masked_lm_weights"].sum(1).max() == 3


def test_replacement_80_10_10(vocab_file, vocab):
    inst = stack(run_shards(vocab_file, dupe_factor=6))
    w = inst["masked_lm_weights"] > 0
    rows = np.nonzero(w)[0]
    now = inst["input_ids"][rows, inst["masked_lm_positions"][w]]
    label = inst["masked_lm_ids"][w]
    total = len(label)
    assert total > 15000
    is_mask = (now == vocab.mask_id).mean()
    kept = (now == label).mean()
    other = ((now != vocab.mask_id) & (now != label)).mean()
    assert abs(is_mask - 0.8) < 0.015 and abs(kept - 0.1) < 0.01 and abs(other - 0.1) < 0.01
    assert len(np.unique(now[(now != vocab.mask_id) & (now != label)])) > 500  # any vocab id


def test_statistics_match_the_original_algorithm(vocab_file, reference):
    """NSP balance, share of full-length pairs, lengths and masked share, sharded or not, match the
    original's (the random-next document coming from the shard changes none of them)."""
    ref = reference_summary(reference)
    single = our_summary(stack(run_shards(vocab_file, num_shards=1)))
    sharded = our_summary(stack(run_shards(vocab_file, num_shards=4)))
    assert 0.5 < ref["random_next"] < 0.7  # one-sentence chunks are always random-next
    for ours in (single, sharded):
        # 24 documents x 3 passes = 72 target-length draws: the seed-to-seed spread is ~0.03.
        assert abs(ours["random_next"] - ref["random_next"]) < 0.05
        assert abs(ours["full"] - ref["full"]) < 0.07
        assert abs(ours["mean_tokens"] - ref["mean_tokens"]) / ref["mean_tokens"] < 0.03
        assert abs(ours["masked_per_token"] - ref["masked_per_token"]) < 0.005


def test_short_seq_prob_gives_short_targets(vocab_file):
    rng = random.Random(0)
    targets = np.array([bp.sample_target_length(125, 0.1, rng) for _ in range(20000)])
    short = targets[targets < 125]
    assert abs(len(short) / len(targets) - 0.1 * 123 / 124) < 0.01  # randint may also give 125
    assert short.min() >= 2 and abs(short.mean() - 63) < 3  # uniform in [2, 125]
    never = stack(run_shards(vocab_file, short_seq_prob=0.0))["input_mask"].sum(1)
    always = stack(run_shards(vocab_file, short_seq_prob=1.0))["input_mask"].sum(1)
    assert (never == SEQ).mean() > 0.95  # only document ends fall short
    assert (always == SEQ).mean() < 0.7 and always.mean() < 0.92 * never.mean()


def _original_truncation_lengths(la: int, lb: int, max_num_tokens: int) -> tuple[int, int]:
    """The original's loop, without the front/back choice: which side loses each token."""
    while la + lb > max_num_tokens:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    return la, lb


def test_randint_makes_the_draws_of_random_randint():
    """bp.randint(getrandbits, a, b) returns what random.Random.randint(a, b) returns and leaves the
    generator in the same state (n == 1 included: it still consumes a draw)."""
    ours, theirs = random.Random(7), random.Random(7)
    for a, b in [(0, 0), (1, 1), (2, 125), (0, 1), (1, 2), (0, 23), (5, 1 << 20), (0, 127), (0, 128)] * 50:
        assert bp.randint(ours.getrandbits, a, b) == theirs.randint(a, b)
    assert ours.getstate() == theirs.getstate()


def test_flat_tokenization_equals_per_line(encoder):
    """tokenize_documents through encode_flat gives the documents the per-line path gives."""
    class PerLine:  # the encoder without its packed path
        def encode_batch(self, lines):
            return encoder.encode_batch(lines)
    docs = [["Emma was rich.", "\x07\x07", "", "She was  clever ."], ["\x07"], [" Mr. Knightley. "]]
    docs += [d for d in corpus.read_documents(EMMA)][:5]
    flat = list(bp.tokenize_documents(docs, encoder))
    per_line = list(bp.tokenize_documents(docs, PerLine()))
    assert len(flat) == len(per_line) == 7
    for a, b in zip(flat, per_line):
        assert a.ids.dtype == b.ids.dtype == np.int32
        assert a.ids.tolist() == b.ids.tolist() and list(a.bounds) == list(b.bounds)


def test_truncate_seq_pair():
    rng = random.Random(3)
    fronts = backs = 0
    for _ in range(3000):
        la, lb = rng.randint(1, 90), rng.randint(1, 90)
        a_front, a_back, b_front, b_back = truncate_seq_pair(la, lb, 61, rng)
        assert min(a_front, a_back, b_front, b_back) >= 0
        kept = (la - a_front - a_back, lb - b_front - b_back)
        assert kept == _original_truncation_lengths(la, lb, 61)
        fronts += a_front + b_front
        backs += a_back + b_back
    assert abs(fronts / (fronts + backs) - 0.5) < 0.02  # front or back with probability 1/2


def test_truncate_seq_pair_without_rng_cuts_the_ends_as_run_classifier():
    """run_classifier.py's _truncate_seq_pair pops from the end of the longer list (B on a tie)."""
    for la in range(0, 40):
        for lb in range(0, 40):
            a, b = list(range(la)), list(range(lb))
            while len(a) + len(b) > 29:  # the original's loop, on lists
                (a if len(a) > len(b) else b).pop()
            a_front, a_back, b_front, b_back = truncate_seq_pair(la, lb, 29)
            assert (a_front, b_front) == (0, 0)
            assert (list(range(la - a_back)), list(range(lb - b_back))) == (a, b)


def test_put_back_covers_every_sentence_once():
    """Actual-next pairs use the rest of the chunk; random-next pairs put it back. Either way every
    sentence of a document is used exactly once as A or as actual-next B."""
    sentences = [[3 * k + 10, 3 * k + 11, 3 * k + 12] for k in range(40)]
    docs = [bp.TokenizedDocument.from_sentences(sentences),
            bp.TokenizedDocument.from_sentences([[1000 + k] for k in range(30)])]
    rng = random.Random(5)
    for _ in range(20):
        used = []
        for pair in bp.create_pairs_from_document(docs, 0, 15, 0.0, rng):  # no truncation needed
            used.extend(pair.tokens_a.tolist())
            if not pair.is_random_next:
                used.extend(pair.tokens_b.tolist())
            else:
                assert pair.tokens_b.min() >= 1000  # from the other document
        assert used == [t for s in sentences for t in s]


def test_whole_word_masking_masks_whole_words(vocab_file, vocab):
    inst = stack(run_shards(vocab_file, do_whole_word_mask=True))
    ids = unmasked_ids(inst)
    sub = vocab.is_subword
    counts = inst["masked_lm_weights"].sum(1).astype(int)
    n = inst["input_mask"].sum(1)
    budget = np.minimum(PREDS, np.maximum(1, np.rint(n * 0.15)))
    assert (counts <= budget).all() and counts.sum() > 0.9 * budget.sum()
    multi_piece_words = 0
    for row in range(len(ids)):
        masked = set(inst["masked_lm_positions"][row, :counts[row]].tolist())
        for p in masked:
            prev = p - 1 if ids[row, p - 1] != vocab.sep_id else p - 2  # original: groups span [SEP]
            if sub[ids[row, p]] and p > 1:
                assert prev in masked, (row, p)
            nxt = p + 1 if ids[row, p + 1] != vocab.sep_id or p + 2 >= n[row] else p + 2
            if nxt < n[row] - 1 and sub[ids[row, nxt]]:
                assert nxt in masked, (row, p)
                multi_piece_words += 1
    assert multi_piece_words > 100


def test_whole_word_statistics_match_the_original(vocab_file, encoder):
    docs = [[encoder.tokenize(line) for line in d] for d in corpus.read_documents(EMMA)]
    vocab_words = encoder.convert_ids_to_tokens(list(range(encoder.vocab_size)))
    ref = reference_instances(docs, vocab_words, SEQ, PREDS, dupe=3, short_seq_prob=0.1,
                              whole_word=True, seed=11)
    ref_masked = sum(len(r["positions"]) for r in ref) / sum(len(r["tokens"]) for r in ref)
    inst = stack(run_shards(vocab_file, do_whole_word_mask=True))
    ours = inst["masked_lm_weights"].sum() / inst["input_mask"].sum()
    assert abs(ours - ref_masked) < 0.005


def test_deterministic_by_seed(vocab_file):
    first = stack(run_shards(vocab_file, num_shards=2, dupe_factor=1))
    again = stack(run_shards(vocab_file, num_shards=2, dupe_factor=1))
    other_seed = stack(run_shards(vocab_file, num_shards=2, dupe_factor=1, seed=1))
    other_random_seed = stack(run_shards(vocab_file, num_shards=2, dupe_factor=1, random_seed=1))
    for k in bp.FEATURES:
        np.testing.assert_array_equal(first[k], again[k])
    for other in (other_seed, other_random_seed):
        assert (len(other["input_ids"]) != len(first["input_ids"])
                or not np.array_equal(other["input_ids"], first["input_ids"]))


def test_dupes_get_different_masks(vocab_file, tmp_path):
    """Two-sentence documents: every actual-next pair is the same text in each pass; its masks differ."""
    lines = [l for d in corpus.read_documents(EMMA) for l in d][:400]
    path = tmp_path / "pairs.txt"
    path.write_text("\n\n".join(f"{a}\n{b}" for a, b in zip(lines[::2], lines[1::2])) + "\n")
    # max_seq_length 128: two sentences rarely need truncation, whose random cuts would change the text.
    inst = run_shards(vocab_file, input_file=str(path), dupe_factor=2, short_seq_prob=0.0,
                      max_seq_length=128)
    by_text = collections.defaultdict(list)
    ids = unmasked_ids(stack(inst))
    for row, ex in enumerate(inst):
        if not ex["next_sentence_labels"][0]:
            by_text[ids[row].tobytes()].append(tuple(ex["masked_lm_positions"].tolist()))
    repeated = [masks for masks in by_text.values() if len(masks) == 2]
    assert len(repeated) > 40
    assert sum(a != b for a, b in repeated) / len(repeated) > 0.9


def test_lines_and_documents_that_tokenize_to_nothing_are_dropped(encoder):
    docs = [["Emma was rich.", "\x07\x07", "She was clever."], ["\x07"], ["Mr. Knightley."]]
    out = list(bp.tokenize_documents(docs, encoder))
    assert [d.num_sentences for d in out] == [2, 1]
    assert out[0].span(1, 2).tolist() == encoder.encode("She was clever.")
    assert out[1].ids.dtype == np.int32


def test_one_line_document(vocab_file, encoder, tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("Emma Woodhouse, handsome, clever, and rich.\n")
    inst = run_shards(vocab_file, input_file=str(path), dupe_factor=4)
    assert len(inst) == 4  # one pair per pass: a one-sentence chunk, B from the only document
    sentence = encoder.encode("Emma Woodhouse, handsome, clever, and rich.")
    ids = unmasked_ids(stack(inst))
    for row, ex in enumerate(inst):
        assert ex["next_sentence_labels"][0] == 1
        n = len(sentence)
        assert ids[row, 1:n + 1].tolist() == sentence == ids[row, n + 2:2 * n + 2].tolist()


def test_empty_corpus_is_a_clear_error(vocab_file, tmp_path):
    path = tmp_path / "blank.txt"
    path.write_text("\n   \n\n")
    problem = bp.BertPretrain(hparams(vocab_file, input_file=str(path)))
    with pytest.raises(corpus.CorpusError, match="no text"):
        problem.prepare(str(tmp_path / "data"), str(tmp_path / "tmp"))
    with pytest.raises(ValueError, match="--input_file"):
        bp.BertPretrain(hparams(vocab_file, input_file="")).prepare(str(tmp_path), str(tmp_path))


def test_dev_fraction_holds_out_documents(vocab_file):
    problem = bp.BertPretrain(hparams(vocab_file, dev_fraction=0.25))
    assert problem.dataset_splits() == [("train", 8), ("dev", 1)]
    assert bp.BertPretrain(hparams(vocab_file)).dataset_splits() == [("train", 8)]
    texts = list(shuffle.all_texts(problem.document_corpus("")))
    held = [t for t in texts if shuffle.assign(t, 0.25, {"train": 1, "dev": 1})[0] == "dev"]
    dev = problem.shard_documents("unused", "dev", 0, 1)
    train = problem.shard_documents("unused", "train", 0, 1)
    # The split is a hash of each document's text: an expected share of a quarter, the same documents
    # whatever the partitioning.
    assert 0 < len(dev) == len(held) < len(texts) == len(dev) + len(train)


def test_through_the_driver(vocab_file, tmp_path):
    """generate_data writes TFRecords the original's input_fn reads; the vocab is built and reused."""
    data_dir, tmp_dir = str(tmp_path / "data"), str(tmp_path / "tmp")
    problem = bp.BertPretrain(hparams("", vocab_size=800, dupe_factor=1))
    manifests = problem.generate_data(data_dir, tmp_dir, num_workers=1, seed=3,
                                      num_shards={"train": 2})
    manifest = manifests["train"]
    vocab_path = os.path.join(data_dir, "bert_pretrain", "vocab.txt")
    vocab_lines = open(vocab_path).read().split()
    settings = manifest["settings"]
    assert settings["vocab_size"] == len(vocab_lines) <= 800
    assert settings["vocab_fingerprint"] == encoders.sha256_of_file(vocab_path)
    for key in ("max_seq_length", "max_predictions_per_seq", "do_lower_case", "do_whole_word_mask",
                "masked_lm_prob", "dupe_factor"):
        assert key in settings
    files = problem.data_files(data_dir, "train")
    parsed = [tf.io.parse_single_example(r, ORIGINAL_NAME_TO_FEATURES)
              for r in tf.data.TFRecordDataset(files)]
    assert len(parsed) == manifest["num_examples"] > 100
    assert manifest["feature_max"]["input_ids"] < settings["vocab_size"]
    ds = problem.dataset(ModeKeys.TRAIN, data_dir, DataParams(batch_size=8, seed=1))
    batch = next(iter(ds))
    assert batch["input_ids"].shape == (8, SEQ) and batch["input_ids"].dtype == tf.int32
    assert batch["masked_lm_weights"].shape == (8, PREDS)
    # A second run reuses the vocab and the complete split.
    mtime = os.path.getmtime(vocab_path)
    problem.generate_data(data_dir, tmp_dir, num_workers=1, seed=3, num_shards={"train": 2})
    assert os.path.getmtime(vocab_path) == mtime


@pytest.mark.slow
def test_two_workers_write_the_same_shards(vocab_file, tmp_path):
    """Worker processes (spawned, each importing TF) write byte-identical shards to a 1-worker run."""
    problem = bp.BertPretrain(hparams(vocab_file, dupe_factor=1))
    runs = {}
    for workers in (1, 2):
        data_dir = str(tmp_path / f"w{workers}")
        problem.generate_data(data_dir, str(tmp_path / "tmp"), num_workers=workers, seed=5,
                              num_shards={"train": 2})
        runs[workers] = [open(f, "rb").read() for f in problem.data_files(data_dir, "train")]
    assert len(runs[1]) == 2 and runs[1] == runs[2]
