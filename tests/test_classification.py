"""problems/classification.py: GLUE readers on files in the real GLUE layouts, tsv_classification through
the real datagen CLI, the BERT and XLNet layouts worked by hand, and eval-mode reading order."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from textrain.framework import registry
from textrain.framework.encoders import WordpieceEncoder, build_wordpiece_vocab, train_sentencepiece
from textrain.framework.errors import UserError
from textrain.framework.problem import DataParams, ModeKeys
from textrain.problems import glue, layouts, tsv_classification

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMMA = os.path.join(REPO, "tests", "data", "austen_emma.txt")


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("vocab") / "vocab.txt")
    return build_wordpiece_vocab(EMMA, vocab_size=1500, out_file=path)


@pytest.fixture(scope="module")
def spiece(tmp_path_factory) -> str:
    prefix = str(tmp_path_factory.mktemp("sp") / "sp")
    return train_sentencepiece(EMMA, prefix, vocab_size=800, hard_vocab_limit=False, num_threads=1)


def _write(path, rows: list[list[str]]) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join("\t".join(r) + "\n" for r in rows))
    return str(path)


def _read_all(problem, data_dir, split, batch_size=4) -> dict[str, np.ndarray]:
    ds = problem.eval_dataset(data_dir, split, batch_size)
    out: dict[str, list] = {}
    for batch in ds:
        for k, v in batch.items():
            out.setdefault(k, []).append(v.numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


# ----------------------------------------------------------------------------------------------- #
# layouts worked by hand
# ----------------------------------------------------------------------------------------------- #
def test_bert_layout_by_hand():
    # Pair fits: [CLS]=2 a a a [SEP]=3 b b [SEP]; segment 0 up to the first [SEP], 1 after; right padding.
    f = layouts.bert_layout([5, 6, 7], [8, 9], 10, cls_id=2, sep_id=3)
    assert f["input_ids"] == [2, 5, 6, 7, 3, 8, 9, 3, 0, 0]
    assert f["input_mask"] == [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    assert f["segment_ids"] == [0, 0, 0, 0, 0, 1, 1, 1, 0, 0]
    # max 7 leaves 4 for the texts; 3+2=5: the longer (A) loses its last token.
    f = layouts.bert_layout([5, 6, 7], [8, 9], 7, cls_id=2, sep_id=3)
    assert f["input_ids"] == [2, 5, 6, 3, 8, 9, 3]
    # Tie: B loses first. 3+3 into 4 -> A=[5,6], B=[8,9].
    f = layouts.bert_layout([5, 6, 7], [8, 9, 10], 7, cls_id=2, sep_id=3)
    assert f["input_ids"] == [2, 5, 6, 3, 8, 9, 3]
    # Single text truncated to max - 2; an empty B is a single text.
    f = layouts.bert_layout([5, 6, 7, 8], [], 4, cls_id=2, sep_id=3)
    assert f == {"input_ids": [2, 5, 6, 3], "input_mask": [1, 1, 1, 1], "segment_ids": [0, 0, 0, 0]}


def test_xlnet_layout_by_hand():
    # A <sep>=4 B <sep> <cls>=3, LEFT padding with 0; seg A=0, B=1, cls=2, pad=4; mask 1 = padding.
    f = layouts.xlnet_layout([5, 6, 7], [8, 9], 10)
    assert f["input_ids"] == [0, 0, 5, 6, 7, 4, 8, 9, 4, 3]
    assert f["input_mask"] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert f["segment_ids"] == [4, 4, 0, 0, 0, 0, 1, 1, 1, 2]
    f = layouts.xlnet_layout([5, 6, 7, 8, 9], None, 5)
    assert f["input_ids"] == [5, 6, 7, 4, 3] and f["segment_ids"] == [0, 0, 0, 0, 2]
    assert f["input_mask"] == [0.0] * 5


# ----------------------------------------------------------------------------------------------- #
# GLUE readers on the real layouts
# ----------------------------------------------------------------------------------------------- #
def _glue_folders(root) -> dict[str, dict]:
    """Small task folders in the GLUE release layouts; returns {task: {split: (texts_a, texts_b, labels)}}."""
    j = os.path.join
    expected: dict[str, dict] = {}
    # CoLA: headerless train/dev (source, label, mark, sentence); headed test (index, sentence).
    _write(j(root, "CoLA", "train.tsv"), [["gj04", "1", "", "Emma was handsome."],
                                          ["gj04", "0", "*", "Emma handsome was clever the."]])
    _write(j(root, "CoLA", "dev.tsv"), [["cj99", "0", "*", "Was she rich she."], ["cj99", "1", "", "She was rich."],
                                        ["cj99", "1", "", "Emma lived."]])
    _write(j(root, "CoLA", "test.tsv"), [["index", "sentence"], ["0", "Her father was kind."]])
    expected["cola"] = {"train": (["Emma was handsome.", "Emma handsome was clever the."], None, [1, 0]),
                        "dev": (["Was she rich she.", "She was rich.", "Emma lived."], None, [0, 1, 1]),
                        "test": (["Her father was kind."], None, None)}
    _write(j(root, "SST-2", "train.tsv"), [["sentence", "label"], ["a happy disposition ", "1"], ["vex her", "0"]])
    _write(j(root, "SST-2", "dev.tsv"), [["sentence", "label"], ["very little", "0"]])
    _write(j(root, "SST-2", "test.tsv"), [["index", "sentence"], ["0", "the best blessings"]])
    expected["sst2"] = {"train": (["a happy disposition ", "vex her"], None, [1, 0]),
                        "dev": (["very little"], None, [0]), "test": (["the best blessings"], None, None)}
    head = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    _write(j(root, "MRPC", "train.tsv"), [["\ufeff" + head[0]] + head[1:], ["1", "11", "12", "Emma was rich.", "She was rich."],
                                          ["0", "13", "14", "Emma was young.", "Mr. Knightley was old."]])
    _write(j(root, "MRPC", "dev.tsv"), [head, ["1", "15", "16", "Her sister married.", "Isabella married."]])
    _write(j(root, "MRPC", "test.tsv"), [["index"] + head[1:], ["0", "17", "18", "Harriet Smith.", "Miss Smith."]])
    expected["mrpc"] = {"train": (["Emma was rich.", "Emma was young."], ["She was rich.", "Mr. Knightley was old."], [1, 0]),
                        "dev": (["Her sister married."], ["Isabella married."], [1]),
                        "test": (["Harriet Smith."], ["Miss Smith."], None)}
    sts = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2"]
    _write(j(root, "STS-B", "train.tsv"), [sts + ["score"], ["0", "main-captions", "MSRvid", "2012test", "0001",
                                                              "none", "none", "A man plays.", "A man is playing.", "5.000"],
                                           ["1", "main-news", "x", "2012", "2", "none", "none", "Emma.", "Mr. Elton.", "0.8"]])
    _write(j(root, "STS-B", "dev.tsv"), [sts + ["score"], ["0", "g", "f", "y", "o", "s", "s", "Rain.", "Snow.", "1.25"]])
    _write(j(root, "STS-B", "test.tsv"), [sts, ["0", "g", "f", "y", "o", "s", "s", "Tea.", "Coffee."]])
    expected["stsb"] = {"train": (["A man plays.", "Emma."], ["A man is playing.", "Mr. Elton."], [5.0, 0.8]),
                        "dev": (["Rain."], ["Snow."], [1.25]), "test": (["Tea."], ["Coffee."], None)}
    qqp = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    _write(j(root, "QQP", "train.tsv"), [qqp, ["1", "2", "3", "Who is Emma?", "Who is Miss Woodhouse?", "1"]])
    _write(j(root, "QQP", "dev.tsv"), [qqp, ["4", "5", "6", "Is it rain?", "Is it dry?", "0"]])
    _write(j(root, "QQP", "test.tsv"), [["id", "question1", "question2"], ["0", "Why?", "Why not?"]])
    expected["qqp"] = {"train": (["Who is Emma?"], ["Who is Miss Woodhouse?"], [1]),
                       "dev": (["Is it rain?"], ["Is it dry?"], [0]), "test": (["Why?"], ["Why not?"], None)}
    mnli = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
            "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]
    _write(j(root, "MNLI", "train.tsv"), [mnli + ["label1", "gold_label"],
                                          ["0", "1", "1e", "fiction", "( x )", "( y )", "(x)", "(y)", "She smiled.",
                                           "She was happy.", "entailment", "entailment"],
                                          ["1", "2", "2n", "fiction", "b", "b", "p", "p", "It rained.", "It was dry.",
                                           "contradiction", "contradiction"]])
    dev_head = mnli + ["label1", "label2", "label3", "label4", "label5", "gold_label"]
    _write(j(root, "MNLI", "dev_matched.tsv"), [dev_head, ["0", "1", "1", "g", "b", "b", "p", "p", "Emma walked.",
                                                           "Emma moved.", "neutral", "neutral", "neutral", "neutral",
                                                           "neutral", "neutral"]])
    _write(j(root, "MNLI", "dev_mismatched.tsv"), [dev_head, ["0", "1", "1", "g", "b", "b", "p", "p", "A letter came.",
                                                              "No letter came.", "contradiction", "c", "c", "c", "c",
                                                              "contradiction"],
                                                   ["1", "1", "1", "g", "b", "b", "p", "p", "Tea was served.",
                                                    "Tea came.", "entailment", "e", "e", "e", "e", "entailment"]])
    _write(j(root, "MNLI", "test_matched.tsv"), [mnli, ["0", "1", "1", "g", "b", "b", "p", "p", "One.", "Two."]])
    _write(j(root, "MNLI", "test_mismatched.tsv"), [mnli, ["0", "1", "1", "g", "b", "b", "p", "p", "Three.", "Four."]])
    expected["mnli"] = {"train": (["She smiled.", "It rained."], ["She was happy.", "It was dry."], [1, 0]),
                        "dev_matched": (["Emma walked."], ["Emma moved."], [2]),
                        "dev_mismatched": (["A letter came.", "Tea was served."], ["No letter came.", "Tea came."], [0, 1]),
                        "test_matched": (["One."], ["Two."], None), "test_mismatched": (["Three."], ["Four."], None)}
    for task, folder, q, labels in (("qnli", "QNLI", "question", ["not_entailment", "entailment"]),
                                    ("rte", "RTE", "sentence1", ["entailment", "not_entailment"]),
                                    ("wnli", "WNLI", "sentence1", ["1", "0"])):
        second = "sentence" if task == "qnli" else "sentence2"
        _write(j(root, folder, "train.tsv"), [["index", q, second, "label"], ["0", "Who came?", "Emma came.", labels[0]],
                                              ["1", "Who left?", "Nobody.", labels[1]]])
        _write(j(root, folder, "dev.tsv"), [["index", q, second, "label"], ["0", "Why?", "Because.", labels[1]]])
        _write(j(root, folder, "test.tsv"), [["index", q, second], ["0", "When?", "Now."]])
        ids = [glue.Qnli.fixed_labels.index(x) if task != "wnli" else int(x) for x in labels]
        expected[task] = {"train": (["Who came?", "Who left?"], ["Emma came.", "Nobody."], ids),
                          "dev": (["Why?"], ["Because."], [ids[1]]), "test": (["When?"], ["Now."], None)}
    return expected


_FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP", "mnli": "MNLI",
            "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}


def test_every_glue_reader_on_the_real_layouts(tmp_path, vocab):
    expected = _glue_folders(tmp_path / "glue")
    encoder = WordpieceEncoder(vocab)
    for task, splits in expected.items():
        hp = glue.GlueHParams(glue_dir=str(tmp_path / "glue" / _FOLDERS[task]), vocab_file=vocab, max_seq_length=24)
        problem = registry.problem(task, hp)
        data_dir = str(tmp_path / "data")
        problem.generate_data(data_dir, "")
        assert problem.eval_splits() == [s for s in splits if s.startswith("dev")]
        assert problem.predict_splits() == [s for s in splits if s.startswith("test")]
        for split, (texts_a, texts_b, labels) in splits.items():
            got = _read_all(problem, data_dir, split)
            assert got["example_index"].tolist() == list(range(len(texts_a))), (task, split)
            for i, text_a in enumerate(texts_a):
                want = layouts.bert_layout(encoder.encode(text_a), encoder.encode(texts_b[i]) if texts_b else None, 24,
                                       encoder.special_ids["[CLS]"], encoder.special_ids["[SEP]"])
                assert got["input_ids"][i].tolist() == want["input_ids"], (task, split, i)
                assert got["segment_ids"][i].tolist() == want["segment_ids"]
                assert got["input_mask"][i].tolist() == want["input_mask"]
            assert problem.has_labels(data_dir, split) == (labels is not None)
            if labels is None:
                assert not got["label_ids"].any()
            elif task == "stsb":
                assert got["label_ids"].dtype == np.float32
                np.testing.assert_allclose(got["label_ids"], labels, rtol=1e-6)
            else:
                assert got["label_ids"].tolist() == labels, (task, split)
        assert problem.num_labels(data_dir) == (1 if task == "stsb" else len(problem.fixed_labels))
        assert got["is_real_example"].tolist() == [1] * len(texts_a)


def test_glue_errors_name_the_flag_and_file(tmp_path, vocab):
    _glue_folders(tmp_path / "glue")
    with pytest.raises(UserError, match="--glue_dir is required"):
        registry.problem("mrpc", glue.GlueHParams(vocab_file=vocab)).generate_data(str(tmp_path / "d"), "")
    with pytest.raises(UserError, match="--vocab_file is required"):
        registry.problem("mrpc", glue.GlueHParams(glue_dir=str(tmp_path / "glue" / "MRPC"))).generate_data(
            str(tmp_path / "d"), "")
    # A row with a column missing, and a label the task does not have.
    bad = tmp_path / "glue" / "RTE" / "dev.tsv"
    _write(bad, [["index", "sentence1", "sentence2", "label"], ["0", "a", "b", "entailment"], ["1", "a", "maybe"]])
    problem = registry.problem("rte", glue.GlueHParams(glue_dir=str(bad.parent), vocab_file=vocab))
    with pytest.raises(UserError, match=rf"{bad}:3: 3 tab-separated columns, expected 4"):
        problem.generate_data(str(tmp_path / "d2"), "")
    _write(bad, [["index", "sentence1", "sentence2", "label"], ["0", "a", "b", "entailment"], ["1", "a", "b", "maybe"]])
    problem = registry.problem("rte", glue.GlueHParams(glue_dir=str(bad.parent), vocab_file=vocab))
    with pytest.raises(UserError, match=rf"{bad}:3: label 'maybe' is not one of the 2 labels"):
        problem.generate_data(str(tmp_path / "d3"), "")


def test_every_task_problem_refuses_an_unknown_tokenizer_naming_the_flag(vocab):
    from textrain.problems import race, squad

    refused = r"--tokenizer='bpe': use wordpiece \(BERT, ELECTRA\) or sentencepiece \(XLNet\)"
    with pytest.raises(UserError, match=refused):
        tsv_classification.TsvClassification(tsv_classification.TsvHParams(tokenizer="bpe", vocab_file=vocab)).check_hparams()
    for problem_cls, hparams in ((squad.SquadV1, squad.SquadHParams), (race.Race, race.RaceHParams)):
        with pytest.raises(UserError, match=refused):
            problem_cls(hparams(tokenizer="bpe", vocab_file=vocab))


def test_glue_qqp_broken_rows_error_or_skip_and_extra_columns_pass(tmp_path, vocab):
    head = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    folder = tmp_path / "QQP"
    # As in the real QQP train.tsv: a newline inside a question splits one row in two short rows.
    train = _write(folder / "train.tsv", [head, ["1", "2", "3", "Who came?", "Emma.", "1"],
                                          ["4", "5", "6", "Was it"], ["", "rain?", "0"],
                                          ["7", "8", "9", "Why?", "Tea.", "0", "extra column"]])
    _write(folder / "dev.tsv", [head, ["1", "2", "3", "Who?", "Emma.", "1"]])
    hp = glue.GlueHParams(glue_dir=str(folder), vocab_file=vocab, max_seq_length=16)
    with pytest.raises(UserError, match=rf"{train}:3: 4 tab-separated columns, expected 6 .*--on_bad_row=skip"):
        registry.problem("qqp", hp).generate_data(str(tmp_path / "d1"), "")
    problem = registry.problem("qqp", glue.GlueHParams(glue_dir=str(folder), vocab_file=vocab, max_seq_length=16,
                                                      on_bad_row="skip"))
    problem.generate_data(str(tmp_path / "d2"), "")
    got = _read_all(problem, str(tmp_path / "d2"), "train")
    # Two rows kept (the 7-column row too: GLUE readers take columns by position); indexes count kept rows.
    assert sorted(zip(got["example_index"].tolist(), got["label_ids"].tolist())) == [(0, 1), (1, 0)]


# ----------------------------------------------------------------------------------------------- #
# eval-mode reading: every example once, in file order
# ----------------------------------------------------------------------------------------------- #
def test_eval_reading_gives_every_example_once_in_order(tmp_path, vocab):
    rows = [["sentence", "label"]] + [[f"line {i} of Emma", "pos" if i % 3 else "neg"] for i in range(11)]
    train = _write(tmp_path / "train.tsv", rows)
    dev = _write(tmp_path / "dev.tsv", rows)
    problem = tsv_classification.TsvClassification(tsv_classification.TsvHParams(train_file=train, dev_file=dev, vocab_file=vocab, max_seq_length=16))
    data_dir = str(tmp_path / "data")
    problem.generate_data(data_dir, "", num_workers=1)
    for batch_size in (4, 11, 32):  # 4 does not divide 11: the last batch has 3
        batches = list(problem.eval_dataset(data_dir, "dev", batch_size))
        sizes = [int(b["example_index"].shape[0]) for b in batches]
        assert sum(sizes) == 11 and all(s == batch_size for s in sizes[:-1])
        order = np.concatenate([b["example_index"].numpy() for b in batches]).tolist()
        assert order == list(range(11))
    # The plain Problem.dataset in EVAL mode with drop_remainder=False reads the same.
    ds = problem.dataset(ModeKeys.EVAL, data_dir, DataParams(batch_size=4, drop_remainder=False))
    assert np.concatenate([b["example_index"].numpy() for b in ds]).tolist() == list(range(11))
    # Two replicas (MirroredStrategy over the 2 logical CPUs of conftest), global batch 4 = 2 per replica:
    # still every example once; the replicas' batches alternate, so in order replica by replica.
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    dist = strategy.distribute_datasets_from_function(lambda ctx: problem.eval_dataset(data_dir, "dev", 4, ctx))
    seen = [i for batch in dist for part in strategy.experimental_local_results(batch["example_index"])
            for i in part.numpy().tolist()]
    assert seen == list(range(11))
    # Train mode shuffles and repeats: all 11 rows appear over the shards.
    train_ds = problem.dataset(ModeKeys.TRAIN, data_dir, DataParams(batch_size=11, seed=1))
    seen = set()
    for batch in train_ds.take(5):
        seen.update(batch["example_index"].numpy().tolist())
    assert seen == set(range(11))
    assert problem.label_list(data_dir) == ["neg", "pos"]


def test_dev_fraction_holds_out_every_fifth_row_in_file_order(tmp_path, vocab):
    rows = [["sentence", "label"]] + [[f"row {i}", "ab"[i % 2]] for i in range(11)]
    train = _write(tmp_path / "train.tsv", rows)
    problem = tsv_classification.TsvClassification(tsv_classification.TsvHParams(train_file=train, dev_fraction=0.2, vocab_file=vocab,
                                                   max_seq_length=8))
    data_dir = str(tmp_path / "data")
    problem.generate_data(data_dir, "")
    # floor((i+1) * 0.2) > floor(i * 0.2) at i = 4 and 9: two dev rows, nine train rows.
    assert _read_all(problem, data_dir, "dev")["example_index"].tolist() == [4, 9]
    assert sorted(_read_all(problem, data_dir, "train")["example_index"].tolist()) == [0, 1, 2, 3, 5, 6, 7, 8, 10]
    assert problem.has_split(data_dir, "dev") and not problem.has_split(data_dir, "test")
    with pytest.raises(UserError, match="not both"):
        tsv_classification.TsvClassification(tsv_classification.TsvHParams(train_file=train, dev_file=train, dev_fraction=0.2,
                                             vocab_file=vocab)).generate_data(str(tmp_path / "d2"), "")


def test_compute_metrics_per_task_type():
    problem = glue.Mrpc(glue.GlueHParams())
    logits = np.array([[2.0, 1.0], [0.0, 3.0], [1.0, 0.5], [0.2, 0.1]])  # predictions 0, 1, 0, 0
    m = problem.compute_metrics(np.array([0, 1, 1, 0]), logits)
    assert m["accuracy"] == 0.75
    assert m["f1"] == pytest.approx(2 * 1 / (2 * 1 + 0 + 1))  # TP=1 FP=0 FN=1
    sts = glue.Stsb(glue.GlueHParams())
    assert sts.compute_metrics(np.array([1.0, 2.0, 3.0]), np.array([[2.0], [4.0], [6.0]]))["pearson"] == pytest.approx(1.0)
    assert glue.Cola.main_metric == "mcc" and glue.Stsb.main_metric == "pearson" and glue.Qqp.main_metric == "f1"


# ----------------------------------------------------------------------------------------------- #
# XLNet (SentencePiece) records
# ----------------------------------------------------------------------------------------------- #
def test_sentencepiece_records_have_xlnet_layout_and_dtypes(tmp_path, spiece):
    from textrain.framework.encoders import SentencePieceEncoder
    train = _write(tmp_path / "t.tsv", [["s1", "s2", "y"], ["Emma was rich.", "She was clever.", "yes"],
                                        ["Mr. Knightley.", "Her sister.", "no"]])
    hp = tsv_classification.TsvHParams(train_file=train, dev_file=train, text_a_column="s1", text_b_column="s2", label_column="y",
                        tokenizer="sentencepiece", sp_model=spiece, max_seq_length=20)
    problem = tsv_classification.TsvClassification(hp)
    data_dir = str(tmp_path / "data")
    problem.generate_data(data_dir, "")
    got = _read_all(problem, data_dir, "dev")
    enc = SentencePieceEncoder(spiece)
    a, b = enc.encode("Emma was rich."), enc.encode("She was clever.")
    n = len(a) + len(b) + 3
    assert got["input_ids"][0].tolist() == [0] * (20 - n) + a + [4] + b + [4, 3]
    assert got["segment_ids"][0].tolist() == [4] * (20 - n) + [0] * (len(a) + 1) + [1] * (len(b) + 1) + [2]
    assert got["input_mask"].dtype == np.float32
    assert got["input_mask"][0].tolist() == [1.0] * (20 - n) + [0.0] * n
    assert got["label_ids"].tolist() == [1, 0]  # sorted: no, yes
    # The original XLNet input_fn's spec parses these records.
    raw = next(iter(tf.data.TFRecordDataset(problem.data_files(data_dir, "dev"))))
    parsed = tf.io.parse_single_example(raw, {"input_ids": tf.io.FixedLenFeature([20], tf.int64),
                                              "input_mask": tf.io.FixedLenFeature([20], tf.float32),
                                              "segment_ids": tf.io.FixedLenFeature([20], tf.int64),
                                              "label_ids": tf.io.FixedLenFeature([], tf.int64),
                                              "is_real_example": tf.io.FixedLenFeature([], tf.int64)})
    assert int(parsed["is_real_example"]) == 1


# ----------------------------------------------------------------------------------------------- #
# tsv_classification through the real CLI
# ----------------------------------------------------------------------------------------------- #
def _datagen(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TEXTRAIN_VERBOSE", None)
    return subprocess.run([sys.executable, "-m", "textrain.framework.datagen", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _records(path_glob: str, spec: dict) -> list[dict]:
    files = sorted(tf.io.gfile.glob(path_glob))
    return [{k: v.numpy().tolist() for k, v in tf.io.parse_single_example(r, spec).items()}
            for r in tf.data.TFRecordDataset(files)]


def _spec(length: int, label: tf.io.FixedLenFeature) -> dict:
    return {"input_ids": tf.io.FixedLenFeature([length], tf.int64), "segment_ids": tf.io.FixedLenFeature([length], tf.int64),
            "input_mask": tf.io.FixedLenFeature([length], tf.int64), "label_ids": label,
            "example_index": tf.io.FixedLenFeature([], tf.int64)}


def test_tsv_cli_pair_learned_labels_and_unlabelled_test(tmp_path, vocab):
    import gzip
    train = tmp_path / "train.tsv.gz"
    with gzip.open(train, "wt", encoding="utf-8") as f:
        f.write("id\tq\tp\tlab\n1\tWho came?\tEmma came.\tyes\n2\tWho left?\tNobody.\tno\n3\tWhy?\tRain.\tmaybe\n")
    dev = _write(tmp_path / "dev.tsv", [["id", "q", "p", "lab"], ["1", "Why not?", "Sun.", "no"]])
    test = _write(tmp_path / "test.tsv", [["id", "q", "p"], ["1", "Who?", "Harriet."], ["2", "What?", "Tea."]])
    data = str(tmp_path / "data")
    r = _datagen("--problem=tsv_classification", f"--train_file={train}", f"--dev_file={dev}", f"--test_file={test}",
                 "--text_a_column=q", "--text_b_column=p", "--label_column=lab", f"--vocab_file={vocab}",
                 "--max_seq_length=16", f"--data_dir={data}")
    assert r.returncode == 0, r.stderr
    folder = os.path.join(data, "tsv_classification")
    train_manifest = json.load(open(os.path.join(folder, "tsv_classification-train.manifest.json")))
    assert train_manifest["settings"]["label_list"] == ["maybe", "no", "yes"]  # learned, sorted
    assert json.load(open(os.path.join(folder, "tsv_classification-test.manifest.json")))["has_labels"] is False
    enc = WordpieceEncoder(vocab)
    dev_records = _records(os.path.join(folder, "*-dev-*.tfrecord"), _spec(16, tf.io.FixedLenFeature([], tf.int64)))
    want = layouts.bert_layout(enc.encode("Why not?"), enc.encode("Sun."), 16, enc.special_ids["[CLS]"], enc.special_ids["[SEP]"])
    assert dev_records == [dict(want, label_ids=1, example_index=0)]
    test_records = _records(os.path.join(folder, "*-test-*.tfrecord"), _spec(16, tf.io.FixedLenFeature([], tf.int64)))
    assert [t["example_index"] for t in test_records] == [0, 1] and [t["label_ids"] for t in test_records] == [0, 0]


@pytest.mark.slow
def test_tsv_cli_errors_name_file_line_and_label(tmp_path, vocab):
    train = _write(tmp_path / "train.tsv", [["sentence", "label"], ["good", "pos"], ["bad", "neg"]])
    dev = _write(tmp_path / "dev.tsv", [["sentence", "label"], ["fine", "pos"], ["meh", "neutral"]])
    r = _datagen("--problem=tsv_classification", f"--train_file={train}", f"--dev_file={dev}", f"--vocab_file={vocab}",
                 f"--data_dir={tmp_path / 'd1'}")
    assert r.returncode == 1
    assert f"{dev}:3: label 'neutral' is not one of the 2 labels (neg, pos)" in r.stderr
    assert "Traceback" not in r.stderr
    # A malformed row (a stray tab) names file:line; nothing is left behind as a complete split.
    bad = _write(tmp_path / "bad.tsv", [["sentence", "label"], ["good", "pos"], ["bad", "x", "neg"]])
    r = _datagen("--problem=tsv_classification", f"--train_file={bad}", f"--vocab_file={vocab}",
                 f"--data_dir={tmp_path / 'd2'}")
    assert r.returncode == 1 and f"{bad}:3: 3 tab-separated columns, expected 2" in r.stderr
    assert not tf.io.gfile.glob(str(tmp_path / "d2" / "tsv_classification" / "*.manifest.json"))
    # A --test_file that does not exist is an error naming it (not a silently absent split).
    r = _datagen("--problem=tsv_classification", f"--train_file={train}", f"--test_file={tmp_path / 'nope.tsv'}",
                 f"--vocab_file={vocab}", f"--data_dir={tmp_path / 'd5'}")
    assert r.returncode == 1 and f"--test_file={tmp_path / 'nope.tsv'}: no file matches" in r.stderr
    # Bytes that are not UTF-8 name file:line.
    latin1 = tmp_path / "latin1.tsv"
    latin1.write_bytes(b"sentence\tlabel\ngood\tpos\nna\xefve\tneg\n")
    r = _datagen("--problem=tsv_classification", f"--train_file={latin1}", f"--vocab_file={vocab}",
                 f"--data_dir={tmp_path / 'd4'}")
    assert r.returncode == 1 and f"{latin1}:3: bytes that are not UTF-8" in r.stderr


@pytest.mark.slow
def test_tsv_cli_rows_cut_into_partitions(tmp_path, vocab):
    """A train file cut into 10 KB partitions: a bad row or bad bytes far into it name the file's line; with
    --on_bad_row=skip the shards are those of the file without the bad rows (row indexes skip them too)."""
    with open(EMMA, encoding="utf-8") as f:
        lines = [line.strip().replace("\t", " ") for line in f if line.strip()][:1500]
    rows = [[line, "pos" if i % 3 else "neg"] for i, line in enumerate(lines)]
    clean = _write(tmp_path / "clean.tsv", [["sentence", "label"], *rows])
    bad = _write(tmp_path / "bad.tsv", [["sentence", "label"], *rows[:1200], ["a", "stray", "tab"], *rows[1200:],
                                         ["truncated"]])
    common = ["--problem=tsv_classification", f"--vocab_file={vocab}", "--max_seq_length=16", "--partition_mb=0.01",
              "--dev_fraction=0.1"]
    r = _datagen(*common, f"--train_file={bad}", f"--data_dir={tmp_path / 'err'}")
    assert r.returncode == 1 and f"{bad}:1202: 3 tab-separated columns, expected 2" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    latin1 = tmp_path / "latin1.tsv"
    latin1.write_bytes(open(clean, "rb").read() + b"na\xefve\tneg\n")
    r = _datagen(*common, f"--train_file={latin1}", f"--data_dir={tmp_path / 'utf8'}")
    assert r.returncode == 1 and f"{latin1}:1502: bytes that are not UTF-8" in r.stderr, r.stderr[-2000:]
    shards = {}
    for name, path in (("skip", bad), ("clean", clean)):
        out = tmp_path / name
        r = _datagen(*common, f"--train_file={path}", f"--data_dir={out}", "--on_bad_row=skip")
        assert r.returncode == 0, r.stderr[-2000:]
        folder = out / "tsv_classification"
        shards[name] = {f: (folder / f).read_bytes() for f in sorted(os.listdir(folder)) if f.endswith(".tfrecord")}
    assert len(shards["clean"]) == 9 and shards["skip"] == shards["clean"]


@pytest.mark.slow
def test_tsv_cli_single_given_labels_regression_multilabel(tmp_path, vocab):
    folder = lambda d: os.path.join(d, "tsv_classification")  # noqa: E731
    # Headerless single sentence, labels given in order (columns by index).
    train = _write(tmp_path / "s.tsv", [["neg", "awful"], ["pos", "lovely"], ["pos", "charming"]])
    d = str(tmp_path / "single")
    r = _datagen("--problem=tsv_classification", f"--train_file={train}", "--has_header=false", "--text_a_column=1",
                 "--label_column=0", "--labels=pos,neg", f"--vocab_file={vocab}", "--max_seq_length=8",
                 "--dev_fraction=0.34", f"--data_dir={d}")
    assert r.returncode == 0, r.stderr
    recs = _records(os.path.join(folder(d), "*-train-*.tfrecord"), _spec(8, tf.io.FixedLenFeature([], tf.int64)))
    assert sorted((x["example_index"], x["label_ids"]) for x in recs) == [(0, 1), (1, 0)]
    assert all(x["segment_ids"] == [0] * 8 for x in recs)
    # --dev_fraction held out row 2 (floor(3 * 0.34) = 1 row: the first i with floor((i+1)f) > floor(i f)).
    recs = _records(os.path.join(folder(d), "*-dev-*.tfrecord"), _spec(8, tf.io.FixedLenFeature([], tf.int64)))
    assert [(x["example_index"], x["label_ids"]) for x in recs] == [(2, 0)]
    # Regression: float labels; a label that is not a number is an error naming file:line.
    reg = _write(tmp_path / "r.tsv", [["sentence", "score"], ["a", "0.5"], ["b", "4"]])
    d = str(tmp_path / "reg")
    r = _datagen("--problem=tsv_classification", f"--train_file={reg}", "--label_column=score", "--task_type=regression",
                 f"--vocab_file={vocab}", "--max_seq_length=8", f"--data_dir={d}")
    assert r.returncode == 0, r.stderr
    recs = _records(os.path.join(folder(d), "*-train-*.tfrecord"), _spec(8, tf.io.FixedLenFeature([], tf.float32)))
    assert sorted(x["label_ids"] for x in recs) == [0.5, 4.0]
    badreg = _write(tmp_path / "br.tsv", [["sentence", "score"], ["a", "0.5"], ["b", "high"]])
    r = _datagen("--problem=tsv_classification", f"--train_file={badreg}", "--label_column=score",
                 "--task_type=regression", f"--vocab_file={vocab}", f"--data_dir={tmp_path / 'br'}")
    assert r.returncode == 1 and f"{badreg}:3: regression label 'high' is not a number" in r.stderr
    # Multilabel: learned label set, multi-hot targets.
    ml = _write(tmp_path / "m.tsv", [["sentence", "label"], ["a", "sports|news"], ["b", "news"], ["c", ""]])
    d = str(tmp_path / "ml")
    r = _datagen("--problem=tsv_classification", f"--train_file={ml}", f"--dev_file={ml}", "--task_type=multilabel",
                 "--multilabel_separator=|", f"--vocab_file={vocab}", "--max_seq_length=8", f"--data_dir={d}")
    assert r.returncode == 0, r.stderr
    recs = _records(os.path.join(folder(d), "*-dev-*.tfrecord"), _spec(8, tf.io.FixedLenFeature([2], tf.int64)))
    assert [x["label_ids"] for x in recs] == [[1, 1], [1, 0], [0, 0]]  # labels: news, sports
    # A problem built with default settings reads the records as written (bind_data: multilabel, length 8).
    problem = tsv_classification.TsvClassification()
    batch = next(iter(problem.eval_dataset(d, "dev", 8)))
    assert batch["label_ids"].numpy().tolist() == [[1, 1], [1, 0], [0, 0]]
    assert batch["input_ids"].shape == (3, 8) and problem.task_type == "multilabel" and problem.num_labels(d) == 2
    assert problem.hparams.vocab_file == vocab  # the data's vocabulary, for export


@pytest.mark.slow
def test_glue_cli_mnli_writes_its_five_splits(tmp_path, vocab):
    _glue_folders(tmp_path / "glue")
    data = str(tmp_path / "data")
    r = _datagen("--problem=mnli", f"--glue_dir={tmp_path / 'glue' / 'MNLI'}", f"--vocab_file={vocab}",
                 "--max_seq_length=16", f"--data_dir={data}", "--num_workers=2")
    assert r.returncode == 0, r.stderr
    for split, count, labelled in (("train", 2, True), ("dev_matched", 1, True), ("dev_mismatched", 2, True),
                                   ("test_matched", 1, False), ("test_mismatched", 1, False)):
        manifest = json.load(open(os.path.join(data, "mnli", f"mnli-{split}.manifest.json")))
        assert (manifest["num_examples"], manifest["has_labels"]) == (count, labelled), split
        assert manifest["settings"]["label_list"] == ["contradiction", "entailment", "neutral"]
