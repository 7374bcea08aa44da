"""ELECTRA pretraining data: the original ExampleBuilder's rules, on real text, and the problem end to end."""
from __future__ import annotations

import collections
import os
import random

import numpy as np
import pytest

from textrain.problems import electra_pretrain as ep

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
EMMA = os.path.join(DATA, "austen_emma.txt")
CLS, SEP = 2, 3
L = 128


def word_documents(path: str = EMMA, blanks_separate_docs: bool = True) -> list[list[list[int]]]:
    """Emma's documents as sentences of word ids (whitespace words; the builder only sees ids)."""
    vocab: dict[str, int] = {}
    return [[[vocab.setdefault(w, len(vocab) + 5) for w in line.split()] for line in doc]
            for doc in ep.read_text_documents([path], blanks_separate_docs)]


def doc_tagged(docs: list[list[list[int]]]) -> list[list[list[int]]]:
    """Every token of document d becomes id 100 + d, so an example's source documents are visible."""
    return [[[100 + d] * len(s) for s in doc] for d, doc in enumerate(docs)]


def content(example: dict) -> list[int]:
    ids = np.array(example["input_ids"])
    return [int(t) for t in ids[np.array(example["input_mask"]) == 1] if t not in (CLS, SEP)]


def build(docs, seed=0, carry=False, max_length=L) -> tuple[list[dict], ep.ExampleBuilder]:
    builder = ep.ExampleBuilder(max_length, CLS, SEP, random.Random(seed), carry_overflow=carry)
    return list(ep.build_examples(docs, builder)), builder


def test_make_features_layout():
    f = ep.make_features([7, 8], [9], 8, CLS, SEP)
    assert f["input_ids"] == [CLS, 7, 8, SEP, 9, SEP, 0, 0]
    assert f["input_mask"] == [1, 1, 1, 1, 1, 1, 0, 0]
    assert f["segment_ids"] == [0, 0, 0, 0, 1, 1, 0, 0]
    single = ep.make_features([7], [], 4, CLS, SEP)
    assert single == {"input_ids": [CLS, 7, SEP, 0], "input_mask": [1, 1, 1, 0], "segment_ids": [0, 0, 0, 0]}
    with pytest.raises(ValueError, match="max_seq_length"):
        ep.make_features([1] * 5, [], 4, CLS, SEP)


@pytest.mark.parametrize("carry", [False, True])
def test_examples_never_cross_documents_and_fit(carry):
    docs = doc_tagged(word_documents())
    assert len(docs) == 24
    examples, _ = build(docs, carry=carry)
    for ex in examples:
        assert len(ex["input_ids"]) == len(ex["input_mask"]) == len(ex["segment_ids"]) == L
        assert len(set(content(ex))) == 1, "an example mixes two documents"
        n = sum(ex["input_mask"])
        ids = ex["input_ids"]
        assert ids[0] == CLS and ids[n - 1] == SEP and all(t == 0 for t in ids[n:])
        seg = ex["segment_ids"]
        # segment 0 up to and including the first [SEP], then 1 up to the last [SEP], then padding 0
        first_sep = ids.index(SEP)
        assert all(s == 0 for s in seg[:first_sep + 1]) and all(s == 0 for s in seg[n:])
        assert all(s == 1 for s in seg[first_sep + 1:n])
    # documents appear in order, each one's examples contiguous
    order = [content(ex)[0] for ex in examples]
    assert order == sorted(order) and set(order) == set(range(100, 124))


def test_default_drops_overflow_and_carry_keeps_every_token():
    docs = word_documents()
    examples, builder = build(docs)
    # The original's semantics lose the text that overflows an example (~15 % of Emma's words).
    assert 0.08 < builder.stats.dropped_fraction < 0.25
    carried, cbuilder = build(docs, carry=True)
    assert cbuilder.stats.dropped_fraction == 0.0
    assert cbuilder.stats.tokens_in == builder.stats.tokens_in
    # Every token lands in an example exactly once (the original's A/B rule may put a later short sentence
    # in A after a longer one went to B, so the order inside one example is not the text's).
    stream = [t for ex in carried for t in content(ex)]
    assert collections.Counter(stream) == collections.Counter(t for doc in docs for s in doc for t in s)
    single = [ex for ex in carried if 1 not in ex["segment_ids"]]
    assert single and all(content(ex) for ex in single)
    assert all(sum(ex["input_mask"]) <= L for ex in carried)


def test_full_length_examples_and_random_target_rate():
    # One long document of one-token sentences: an example is emitted exactly when the target is reached, so
    # every short example comes from a random target (probability 0.05, target uniform in [5, L]).
    docs = [[[7]] * 300_000]
    examples, _ = build(docs, seed=1)
    lengths = np.array([sum(ex["input_mask"]) for ex in examples])[:-1]  # the last one is a document flush
    short = lengths < L - 3
    assert 0.035 < short.mean() < 0.065, short.mean()
    assert lengths[short].min() >= 5 + 2
    assert (lengths[~short] >= L - 3).all()


def test_single_segment_rate_matches_original_probability():
    rng = random.Random(3)
    sentences = [[7] * 10] * 13  # 130 tokens: always two segments unless the 10 % event fires
    singles = sum(not ep.split_segments(sentences, L, L, rng)[1] for _ in range(5000))
    assert 0.085 < singles / 5000 < 0.115


def test_split_segments_rules():
    class Always:  # rng whose draws never hit a probability event
        def random(self):
            return 0.99

    first, second = ep.split_segments([[1] * 40, [2] * 40, [3] * 40], 128, 128, Always())
    # aim (128-3)//2 = 62: the first sentence always joins A; 40+40 >= 62 and the 0.5 draw fails -> B
    assert first == [1] * 40 and second == [2] * 40 + [3] * 40
    first, second = ep.split_segments([[1] * 200, [2] * 50], 128, 128, Always())
    assert first == [1] * 126 and second == []  # A cut to L-2, nothing left for B

    class Never:
        def random(self):
            return 0.0

    # 0.0 < 0.1: single segment -> everything in A, cut to L-2
    first, second = ep.split_segments([[1] * 40, [2] * 40, [3] * 60], 128, 128, Never())
    assert first == ([1] * 40 + [2] * 40 + [3] * 60)[:126] and second == []


def test_spans_path_makes_the_list_path_s_examples():
    """add_document_spans + range_columns (the datagen's path: sentences as ranges of one id array) give
    the examples of add_document + segment_columns, with the rng consumed alike: random documents (empty
    sentences, sentences longer than an example, one-sentence documents), several lengths and seeds."""
    rng = random.Random(3)
    for trial in range(40):
        max_length = rng.choice([5, 9, 32, 128])
        docs = [[[rng.randrange(5, 999) for _ in range(rng.choice([0, 1, 3, 8, 20, 60, 300]))]
                 for _ in range(rng.randint(1, 12))] for _ in range(rng.randint(1, 8))]
        lists = ep.ExampleBuilder(max_length, CLS, SEP, random.Random(trial), as_segments=True)
        spans = ep.ExampleBuilder(max_length, CLS, SEP, random.Random(trial), as_segments=True)
        pairs = [p for doc in docs for p in lists.add_document(doc)]
        ids = np.array([t for doc in docs for s in doc for t in s], np.int32)
        examples, start = [], 0
        for doc in docs:
            examples += spans.add_document_spans(start, [len(s) for s in doc])
            start += sum(len(s) for s in doc)
        assert len(examples) == len(pairs)
        expected = ep.segment_columns(pairs, max_length, CLS, SEP)
        got = ep.range_columns(ids, examples, max_length, CLS, SEP)
        for name in expected:
            np.testing.assert_array_equal(got[name], expected[name])
        assert spans.stats == lists.stats and lists.rng.random() == spans.rng.random()
    with pytest.raises(ValueError, match="carry"):
        ep.ExampleBuilder(L, CLS, SEP, random.Random(0), carry_overflow=True).add_document_spans(0, [3])


def test_determinism_by_seed():
    docs = word_documents()
    a, _ = build(docs, seed=5)
    b, _ = build(docs, seed=5)
    c, _ = build(docs, seed=6)
    assert a == b
    assert a != c


def test_blanks_separate_docs_false_makes_one_document_per_file(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text("one two three\n\nfour five\n\n\nsix\n")
    assert list(ep.read_text_documents([str(path)], True)) == [["one two three"], ["four five"], ["six"]]
    assert list(ep.read_text_documents([str(path)], False)) == [["one two three", "four five", "six"]]
    with_blanks = word_documents(EMMA, True)
    without = word_documents(EMMA, False)
    assert len(with_blanks) == 24 and len(without) == 1
    assert [s for d in with_blanks for s in d] == without[0]
    # With one document per file, examples span chapter breaks: fewer short flush examples.
    ex_docs, _ = build(with_blanks)
    ex_file, _ = build(without)
    assert len(ex_file) < len(ex_docs)


def test_builder_rejects_tiny_max_length():
    with pytest.raises(ValueError, match="max_seq_length"):
        ep.ExampleBuilder(4, CLS, SEP, random.Random(0))


# ------------------------------------------------------------------------------------------------ #
# The problem end to end: WordPiece vocab built from Emma, records, manifest, reading back
# ------------------------------------------------------------------------------------------------ #
def make_problem(**overrides) -> ep.ElectraPretrain:
    settings = dict(input_file=EMMA, vocab_size=2000, max_seq_length=64)
    settings.update(overrides)
    return ep.ElectraPretrain(ep.ElectraPretrainHParams(**settings))


def read_records(path: str, length: int) -> list[dict]:
    import tensorflow as tf
    spec = {k: tf.io.FixedLenFeature([length], tf.int64) for k in ("input_ids", "input_mask", "segment_ids")}
    return [{k: v.numpy() for k, v in tf.io.parse_single_example(r, spec).items()}
            for r in tf.data.TFRecordDataset(path)]


def test_generate_data_records_manifest_and_reading(tmp_path):
    from textrain.framework.problem import DataParams
    problem = make_problem(dev_fraction=0.3)
    manifests = problem.generate_data(str(tmp_path), str(tmp_path / "tmp"), seed=3)
    train, dev = manifests["train"], manifests["dev"]
    settings = train["settings"]
    special = settings["special_ids"]
    assert special == {"[PAD]": 0, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    assert settings["vocab_size"] <= 2000 and train["feature_max"]["input_ids"] < settings["vocab_size"]
    assert train["num_examples"] > 200 and dev["num_examples"] > 5
    records = [r for f in problem.data_files(str(tmp_path), "train") for r in read_records(f, 64)]
    assert len(records) == train["num_examples"]
    for r in records:
        n = int(r["input_mask"].sum())
        assert r["input_ids"][0] == special["[CLS]"] and r["input_ids"][n - 1] == special["[SEP]"]
        assert (r["input_ids"][n:] == 0).all() and (r["segment_ids"][n:] == 0).all()
        assert special["[MASK]"] not in r["input_ids"]  # masking is the model's job
    two_segments = np.mean([r["segment_ids"].max() == 1 for r in records])
    assert 0.6 < two_segments < 0.95
    batch = next(iter(problem.dataset("train", str(tmp_path), DataParams(batch_size=8, seed=0))))
    assert {k: tuple(v.shape) for k, v in batch.items()} == {k: (8, 64) for k in
                                                             ("input_ids", "input_mask", "segment_ids")}
    assert all(v.dtype.name == "int32" for v in batch.values())


@pytest.fixture(scope="module")
def emma_vocab(tmp_path_factory) -> str:
    """One WordPiece vocab of Emma for the tests that compare runs (vocab building is a separate step)."""
    root = tmp_path_factory.mktemp("vocab")
    make_problem().prepare(str(root), "")
    return str(root / "electra_pretrain" / "vocab.txt")


def test_raw_text_path_makes_the_line_path_s_batches(emma_vocab):
    """build_batches_flat (raw document texts, ids in arrays) == build_batches of encode_lines of
    document_lines (stripped lines): texts whose lines start or end with characters str.strip removes
    (tab, form feed, \\x1c, \\x85, no-break and ideographic spaces, U+2028 / U+2029), blank lines, tiny
    groups and one big group."""
    from textrain.framework import corpus, encoders

    encoder = encoders.WordpieceEncoder(emma_vocab)
    rng = random.Random(7)
    odd = ["\t", "\x0c", "\x1c", "\x85", "\xa0", "\u3000", "\u2028", "\u2029", " ", ""]
    words = ["Emma", "said,", "Mr.", "Knightley", "(who", "was", "there)", "\u00e9t\u00e9", "--", "well"]
    texts = []
    for _ in range(60):
        lines = [rng.choice(odd) + " ".join(rng.choice(words) for _ in range(rng.randint(0, 30))) + rng.choice(odd)
                 for _ in range(rng.randint(1, 6))]
        texts.append("\n".join(lines) + rng.choice(["", "\n"]))
    for group_lines in (1, 7, 10_000):
        for docs in (texts, [t + "\n\n\n" for t in texts]):
            flat = ep.build_batches_flat(docs, encoder, ep.ExampleBuilder(16, CLS, SEP, random.Random(1),
                                                                           as_segments=True), group_lines)
            lists = ep.build_batches((ep.encode_lines(encoder, corpus.document_lines(t)) for t in docs),
                                     ep.ExampleBuilder(16, CLS, SEP, random.Random(1), as_segments=True))
            got = [batch.columns for batch in flat]
            expected = [batch.columns for batch in lists]
            for name in ("input_ids", "input_mask", "segment_ids"):
                np.testing.assert_array_equal(np.concatenate([c[name] for c in got]),
                                              np.concatenate([c[name] for c in expected]))


def test_same_seed_same_bytes_whatever_the_workers(tmp_path, emma_vocab):
    one, two = tmp_path / "one", tmp_path / "two"
    make_problem(vocab_file=emma_vocab).generate_data(str(one), str(tmp_path / "t1"), num_workers=1, seed=7)
    make_problem(vocab_file=emma_vocab).generate_data(str(two), str(tmp_path / "t2"), num_workers=2, seed=7)
    names = sorted(p.name for p in (one / "electra_pretrain").glob("*.tfrecord"))
    assert len(names) == ep.ElectraPretrain.train_shards
    for name in names:
        assert (one / "electra_pretrain" / name).read_bytes() == (two / "electra_pretrain" / name).read_bytes()


def test_problem_blanks_separate_docs_and_carry_overflow(tmp_path, emma_vocab):
    counts = {}
    for key, overrides in {"docs": {}, "file": {"blanks_separate_docs": False},
                           "carry": {"carry_overflow": True}}.items():
        problem = make_problem(vocab_file=emma_vocab, **overrides)
        samples = list(problem.generate_encoded_samples(str(tmp_path), "", "train"))
        counts[key] = (len(samples), sum(sum(s["input_mask"]) for s in samples))
    assert counts["file"][0] < counts["docs"][0]  # chapters no longer end examples
    assert counts["carry"][1] > 1.1 * counts["docs"][1]  # the overflow is kept


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="--max_seq_length"):
        make_problem(max_seq_length=3)
    with pytest.raises(ValueError, match="--dev_fraction"):
        make_problem(dev_fraction=1.5)
    with pytest.raises(ValueError, match="--input_file"):
        ep.ElectraPretrain().input_paths()
    with pytest.raises(ValueError, match="strip_accents"):
        make_problem(strip_accents=False)
    make_problem(strip_accents=False, do_lower_case=False)  # accents only matter when lower-casing
