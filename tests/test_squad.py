"""SQuAD feature building (hand-worked windows, max-context, offsets, XLNet alignment), the official
metrics, n-best post-processing, and datagen -> records + sidecar -> predictions through the CLI."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import qa_fixtures

from textrain.framework import encoders
from textrain.framework.problem import DataParams, DatasetSplit, ModeKeys
from textrain.problems import qa_postprocess as qp
from textrain.problems import squad

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def wp(tmp_path_factory):
    path = qa_fixtures.write_vocab(str(tmp_path_factory.mktemp("wp") / "vocab.txt"))
    return encoders.WordpieceEncoder(path)


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    return encoders.SentencePieceEncoder(qa_fixtures.train_spm(str(tmp_path_factory.mktemp("sp") / "sp")))


def _example(context, question, answer, impossible=False):
    answers = [] if answer is None else [{"text": answer, "answer_start": context.index(answer)}]
    return {"qas_id": "x", "question": question, "context": context, "answers": answers,
            "is_impossible": impossible}


# ---------------------------------------------------------------------------------------------- #
# WordPiece feature building
# ---------------------------------------------------------------------------------------------- #
def test_whitespace_words_and_char_offsets_with_unicode_spaces():
    words, offsets = squad.whitespace_words("Caf\u00e9  na\u00efve\u202fx\ty")
    assert words == ["Caf\u00e9", "na\u00efve", "x", "y"]
    # a whitespace character belongs to the word before it
    assert offsets == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 3]


def test_doc_windows_and_max_context_as_the_original_docstring():
    # "the man went to the store and bought a gallon of milk": windows of 5 with stride 3
    spans = squad.doc_windows(12, 5, 3)
    assert spans == [(0, 5), (3, 5), (6, 5), (9, 3)]
    # 'bought' (7): window 1 gives it 4 left / 0 right, window 2 gives 1 left / 3 right -> window 2
    assert [squad.is_max_context(spans, i, 7) for i in range(4)] == [False, False, True, False]
    assert squad.doc_windows(5, 10, 3) == [(0, 5)]


def test_improve_answer_span_finds_the_tight_span():
    doc = ["the", "leader", "(", "1895", "-", "1943", ")", "."]
    assert squad.improve_answer_span(doc, 2, 7, ["1895"]) == (3, 3)
    assert squad.improve_answer_span(doc, 2, 7, ["1900"]) == (2, 7)


def test_wordpiece_windows_hand_worked(wp):
    ex = _example("The leader was John Smith (1895-1943).", "What year was John Smith born?", "1895")
    feats, entry = squad.wordpiece_features(ex, 3, wp, max_seq_length=16, doc_stride=3,
                                            max_query_length=64, training=True)
    # 11 context tokens, 6 per window (16 - 7 question tokens - 3), stride 3: windows 0-5, 3-8, 6-10
    assert [f["doc_len"] for f in entry["features"]] == [6, 6, 5]
    assert [f["unique_ids"] for f in feats] == [3000, 3001, 3002]
    w1 = feats[1]
    tokens = wp.convert_ids_to_tokens(w1["input_ids"])
    assert tokens == ["[CLS]", "what", "year", "was", "john", "smith", "born", "?", "[SEP]",
                      "john", "smith", "(", "1895", "-", "1943", "[SEP]"]
    assert w1["segment_ids"] == [0] * 9 + [1] * 7 and w1["input_mask"] == [1] * 16
    # "(1895-1943)." is one whitespace word; the improved span is the "1895" sub-token
    assert [(f["start_positions"], f["end_positions"]) for f in feats] == [(0, 0), (12, 12), (9, 9)]
    side = entry["features"][1]
    assert side["doc_offset"] == 9 and side["orig_index"] == [3, 4, 5, 5, 5, 5]
    assert side["max_context"] == "001110"
    assert entry["doc_tokens"] == ["The", "leader", "was", "John", "Smith", "(1895-1943)."]
    # padding: right, zeros
    feats, _ = squad.wordpiece_features(ex, 0, wp, 32, 128, 64, True)
    assert feats[0]["input_ids"][-3:] == [0, 0, 0] and feats[0]["input_mask"][-1] == 0


def test_wordpiece_skips_a_training_answer_not_in_the_text_but_keeps_dev(wp):
    ex = _example("John Smith was born.", "Who?", "John")
    ex["answers"][0]["answer_start"] = 5  # points into "Smith": the text is not "John"
    assert squad.wordpiece_features(ex, 0, wp, 32, 8, 8, training=True) is None
    feats, entry = squad.wordpiece_features(ex, 0, wp, 32, 8, 8, training=False)
    assert feats[0]["start_positions"] == 0 and entry["answers"] == ["John"]


def test_wordpiece_impossible_points_at_cls(wp):
    ex = _example("John Smith was born.", "Who?", None, impossible=True)
    feats, _ = squad.wordpiece_features(ex, 0, wp, 32, 8, 8, training=True)
    assert (feats[0]["start_positions"], feats[0]["end_positions"], feats[0]["is_impossible"]) == (0, 0, 1)


# ---------------------------------------------------------------------------------------------- #
# SentencePiece (XLNet)
# ---------------------------------------------------------------------------------------------- #
def test_lcs_alignment_skips_what_the_pieces_dropped():
    raw, cat = "a  b``c", " a b\"c"
    raw_to_tok, tok_to_raw, score = squad.lcs_alignment(raw, cat, lambda i, j: raw[i] == cat[j])
    assert score == 4  # a, one space, b, c
    assert raw_to_tok[0] == 1 and raw_to_tok[3] == 3 and raw_to_tok[6] == 5
    assert tok_to_raw[4] is None  # the '"' that replaced `` is not in the raw text


@pytest.mark.parametrize("para", range(len(qa_fixtures.PARAGRAPHS)))
def test_sentencepiece_pieces_map_back_to_the_answer_characters(sp, para):
    context = qa_fixtures.PARAGRAPHS[para]["context"]
    for question, answer in qa_fixtures.PARAGRAPHS[para]["qas"]:
        if answer is None:
            continue
        feats, entry = squad.sentencepiece_features(_example(context, question, answer), 0, sp, 96, 32, 16, True)
        spans = [(f, s) for f, s in zip(feats, entry["features"]) if f["is_impossible"] == 0.0]
        assert spans, f"no window holds {answer!r}"
        for f, side in spans:
            text = qp.span_text(entry, side, f["start_positions"], f["end_positions"])
            assert answer in text and len(text) <= len(answer) + 2, (answer, text)


def test_sentencepiece_layout(sp):
    context = qa_fixtures.PARAGRAPHS[1]["context"]
    ex = _example(context, "Where did he live?", "Highbury")
    feats, entry = squad.sentencepiece_features(ex, 0, sp, 64, 32, 16, True)
    f, side = feats[0], entry["features"][0]
    n_ctx, q = side["doc_len"], sp.encode("Where did he live?")
    real = n_ctx + len(q) + 3
    ids = sp.special_ids
    assert f["input_ids"][n_ctx] == ids["<sep>"] and f["input_ids"][real - 2] == ids["<sep>"]
    assert f["input_ids"][real - 1] == ids["<cls>"] and f["cls_index"] == real - 1
    assert f["input_ids"][n_ctx + 1:real - 2] == q
    assert f["segment_ids"][:real] == [0] * (n_ctx + 1) + [1] * (len(q) + 1) + [2]
    assert set(f["segment_ids"][real:]) == {3} and f["input_ids"][real:] == [0] * (64 - real)
    assert f["p_mask"][:real] == [0.0] * n_ctx + [1.0] * (len(q) + 2) + [0.0]
    assert f["input_mask"] == [0.0] * real + [1.0] * (64 - real) and set(f["p_mask"][real:]) == {1.0}
    # an impossible question points at the <cls>
    feats, _ = squad.sentencepiece_features(_example(context, "Who?", None, True), 0, sp, 64, 32, 16, True)
    assert feats[0]["start_positions"] == feats[0]["cls_index"] and feats[0]["is_impossible"] == 1.0


# ---------------------------------------------------------------------------------------------- #
# Official metrics
# ---------------------------------------------------------------------------------------------- #
def test_normalize_answer_as_the_official_scripts():
    assert qp.normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert qp.normalize_answer("an apple a day") == "apple day"
    assert qp.normalize_answer("Theatre (An) A-Z") == "theatre az"  # articles only as whole words
    assert qp.normalize_answer("  ") == ""


def test_f1_and_exact_hand_checked():
    assert qp.f1_score("the cat sat on the mat", "cat on mat") == pytest.approx(2 * 1 * 0.75 / 1.75)
    assert qp.f1_score("x b b", "b b b") == pytest.approx(2 * (2 / 3) * (2 / 3) / (4 / 3))
    assert qp.f1_score("a b b", "b b b") == pytest.approx(0.8)  # "a" is an article: gold is "b b"
    assert qp.exact_score("The Cat.", "cat") == 1
    assert qp.f1_score("", "") == 1.0 and qp.f1_score("x", "") == 0.0  # v2: empty sides
    m = qp.squad_v1_metrics({"a": ["Cat", "the dog"], "b": ["x"], "c": ["y"]}, {"a": "dog", "b": "x y"})
    # a: max(EM 0/1) = 1, F1 1; b: EM 0, F1 2*.5*1/1.5; c: missing -> 0
    assert m["exact_match"] == pytest.approx(100 / 3)
    assert m["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)


def test_v2_metrics_and_best_threshold_hand_checked():
    gold = {"q1": ["a b"], "q2": [], "q3": ["c"]}
    preds = {"q1": "a b", "q2": "x", "q3": "d"}
    na = {"q1": 0.1, "q2": 0.9, "q3": 0.5}
    m = qp.squad_v2_metrics(gold, preds, na)
    assert m["exact"] == pytest.approx(100 / 3) and m["HasAns_exact"] == 50.0 and m["NoAns_exact"] == 0.0
    assert m["HasAns_total"] == 2 and m["NoAns_total"] == 1
    # abstaining above 0.1 answers q1 only and abstains on q2 (right) and q3 (wrong): 2 / 3
    assert m["best_exact"] == pytest.approx(200 / 3) and m["best_exact_thresh"] == 0.1
    assert m["best_f1"] == pytest.approx(200 / 3) and m["best_f1_thresh"] == 0.1
    m = qp.squad_v2_metrics(gold, preds, na, na_prob_thresh=0.4)  # abstain on q2 and q3
    assert m["exact"] == pytest.approx(200 / 3)
    # gold answers that normalise to "" are dropped; a v2 empty prediction matches no-answer
    assert qp.v2_raw_scores({"q": ["the", "Cat"]}, {"q": "cat"})[0]["q"] == 1
    assert qp.v2_raw_scores({"q": []}, {"q": ""})[1]["q"] == 1.0


# ---------------------------------------------------------------------------------------------- #
# Post-processing
# ---------------------------------------------------------------------------------------------- #
def test_get_final_text_maps_back_to_the_original_characters():
    assert qp.get_final_text("steve smith", "Steve Smith's", True) == "Steve Smith"
    assert qp.get_final_text("1895", "(1895-1943).", True) == "1895"
    assert qp.get_final_text("cafe", "Caf\u00e9!", True) == "Caf\u00e9"
    assert qp.get_final_text("nowhere", "Steve", True) == "Steve"  # not found: the whole text


def _wordpiece_entry(wp, context, question, length=64):
    feats, entry = squad.wordpiece_features(_example(context, question, None), 0, wp, length, 128, 64, False)
    tokens = wp.convert_ids_to_tokens(feats[0]["input_ids"])
    return entry, tokens


def test_logits_nbest_on_hand_made_logits(wp):
    entry, tokens = _wordpiece_entry(wp, "The leader was John Smith (1895-1943).", "Who?")
    pos = {t: i for i, t in reversed(list(enumerate(tokens)))}  # first occurrence
    L = len(tokens)
    start, end = np.zeros(L), np.zeros(L)
    start[pos["john"]], end[pos["smith"]] = 4.0, 4.0
    start[pos["1895"]], end[pos["1943"]] = 3.0, 3.5
    start[pos["the"]], end[pos["the"]] = -20.0, 9.0   # before every good start
    start[1] = 9.0          # inside the question: invalid
    results = {entry["features"][0]["unique_id"]: {"start_logits": start, "end_logits": end}}
    nbest, null = qp.logits_nbest(entry, results, n_best_size=3, max_answer_length=30)
    assert [e["text"] for e in nbest] == ["John Smith", "John Smith (1895-1943", "1895-1943"]
    assert [e["start_logit"] + e["end_logit"] for e in nbest] == [8.0, 7.5, 6.5]
    assert sum(e["probability"] for e in nbest) == pytest.approx(1.0)
    assert null is None
    # max_answer_length 1 leaves only one-token spans
    nbest, _ = qp.logits_nbest(entry, results, n_best_size=30, max_answer_length=1)
    assert [e["text"] for e in nbest[:4]] == ["John", "Smith", "1943", "1895"]
    # v2: the null span scores start[0] + end[0]; odds = null - best non-null
    start[0], end[0] = 3.0, 3.0
    preds, all_nbest, odds = qp.predict_answers([entry], results, with_negative=True,
                                                null_score_diff_threshold=0.0)
    assert preds["x"] == "John Smith" and odds["x"] == pytest.approx(6.0 - 8.0)
    assert "" in [e["text"] for e in all_nbest["x"]]
    preds, _, _ = qp.predict_answers([entry], results, with_negative=True, null_score_diff_threshold=-3.0)
    assert preds["x"] == ""


def test_beam_nbest_on_hand_made_beams(sp):
    context = qa_fixtures.PARAGRAPHS[1]["context"]
    feats, entry = squad.sentencepiece_features(_example(context, "Where?", "Highbury"), 0, sp, 64, 32, 16, True)
    s, e = feats[0]["start_positions"], feats[0]["end_positions"]
    cls = feats[0]["cls_index"]
    result = {"start_top_log_probs": [-0.1, -2.0], "start_top_index": [cls, s],
              # start 0 (the <cls>, not context) has ends; start 1's best end is before it (invalid)
              "end_top_log_probs": [-0.1, -0.2, -0.3, -0.4], "end_top_index": [cls, 1, s - 1, e],
              "cls_logits": 1.5}
    preds, nbest, odds = qp.predict_answers([entry], {entry["features"][0]["unique_id"]: result},
                                            with_negative=True, null_score_diff_threshold=None)
    assert preds["x"] == "Highbury" and odds["x"] == 1.5
    assert nbest["x"][0]["start_logit"] == -2.0 and nbest["x"][0]["end_logit"] == -0.4


# ---------------------------------------------------------------------------------------------- #
# Through the CLI: datagen -> records + sidecar -> oracle outputs -> predictions and EM/F1
# ---------------------------------------------------------------------------------------------- #
def _datagen(tmp_path, problem, *flags):
    cmd = [sys.executable, "-m", "textrain.framework.datagen", f"--problem={problem}", f"--data_dir={tmp_path}/data",
           f"--tmp_dir={tmp_path}/tmp", *flags]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(tmp_path / "data")


def _dev_arrays(problem, data_dir):
    ds = problem.dataset(ModeKeys.EVAL, data_dir, DataParams(batch_size=8, drop_remainder=False))
    arrays = {}
    for batch in ds:
        for k, v in batch.items():
            arrays.setdefault(k, []).append(v.numpy())
    return {k: np.concatenate(v) for k, v in arrays.items()}


def test_cli_wordpiece_v2_oracle_logits_score_100(tmp_path, wp):
    path = qa_fixtures.write_squad(str(tmp_path / "squad.json"), with_negative=True)
    data_dir = _datagen(tmp_path, "squad_v2", f"--train_file={path}", f"--predict_file={path}",
                        f"--vocab_file={wp.vocab_file}", "--max_seq_length=32", "--doc_stride=8")
    problem = squad.SquadV2(squad.SquadHParams(train_file=path, predict_file=path, vocab_file=wp.vocab_file,
                                               max_seq_length=32, doc_stride=8))
    manifest = problem.read_manifest(data_dir, DatasetSplit.EVAL)
    assert manifest["sidecar"]["num_questions"] == 10
    arrays = _dev_arrays(problem, data_dir)
    assert len(arrays["unique_ids"]) == manifest["num_examples"]
    # oracle: one-hot logits at the gold positions ([CLS] when the answer is elsewhere or absent)
    L = 32
    outputs = {"unique_ids": arrays["unique_ids"],
               "start_logits": 10.0 * np.eye(L)[arrays["start_positions"]],
               "end_logits": 10.0 * np.eye(L)[arrays["end_positions"]]}
    metrics = problem.compute_metrics(None, outputs)
    assert metrics["exact_match"] == 100.0 and metrics["f1"] == 100.0
    assert metrics["NoAns_total"] == 1 and metrics["HasAns_total"] == 9
    preds, _, odds, _ = problem.predict(outputs, data_dir, output_dir=str(tmp_path / "out"))
    assert preds["q1-0"] == "1895" and preds["q0-3"] == ""
    for name in ("predictions.json", "nbest_predictions.json", "null_odds.json"):
        assert os.path.exists(tmp_path / "out" / name)
    assert json.load(open(tmp_path / "out" / "predictions.json")) == preds


def test_cli_sentencepiece_v1_oracle_beams_score_100(tmp_path, sp):
    path = qa_fixtures.write_squad(str(tmp_path / "squad.json"))
    data_dir = _datagen(tmp_path, "squad_v1", f"--predict_file={path}", "--tokenizer=sentencepiece",
                        f"--sp_model={sp.model_file}", "--max_seq_length=48", "--doc_stride=16")
    problem = squad.SquadV1(squad.SquadHParams(predict_file=path, tokenizer="sentencepiece",
                                               sp_model=sp.model_file, max_seq_length=48, doc_stride=16))
    arrays = _dev_arrays(problem, data_dir)
    n = len(arrays["unique_ids"])
    k = 2
    start_idx = np.stack([arrays["start_positions"], arrays["cls_index"]], 1)
    end_idx = np.stack([arrays["end_positions"], arrays["cls_index"]] * k, 1)
    # windows without the answer point at the <cls>: low log-probability, never valid spans
    good = np.where(arrays["is_impossible"] == 0.0, 0.0, -50.0)
    outputs = {"unique_ids": arrays["unique_ids"],
               "start_top_log_probs": np.stack([good, np.full(n, -60.0)], 1), "start_top_index": start_idx,
               "end_top_log_probs": np.stack([good, np.full(n, -60.0)] * k, 1), "end_top_index": end_idx,
               "cls_logits": np.zeros(n)}
    metrics = problem.compute_metrics(None, outputs)
    assert metrics["exact_match"] == 100.0 and metrics["f1"] == 100.0 and metrics["total"] == 9


def test_squad_errors_name_the_file_and_question(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "abc", "qas": [
        {"id": "q7", "question": "?", "answers": [{"text": "z", "answer_start": 9}]}]}]}]}))
    with pytest.raises(squad.SquadFormatError, match=r"bad.json: question 'q7'.*answer_start 9"):
        squad.read_squad_examples(str(bad), False)
    bad.write_text("{not json")
    with pytest.raises(squad.SquadFormatError, match=r"bad.json:1: not valid JSON"):
        squad.read_squad_examples(str(bad), False)


def test_xlnet_serving_features_rebuild_p_mask_and_cls_index_from_the_ids(sp):
    """The exported ids signature has no p_mask / cls_index: the model derives them; they must equal
    the records'."""
    from textrain.models.qa_heads import XLNetSquad
    from textrain.models.xlnet import XLNetConfig

    context = qa_fixtures.PARAGRAPHS[2]["context"]
    feats, _ = squad.sentencepiece_features(_example(context, "Who lived there?", "Miss Jane Fairfax"), 0, sp,
                                            40, 16, 16, True)
    assert len(feats) > 1
    model = XLNetSquad(XLNetConfig.preset("tiny", n_token=sp.vocab_size))
    cols = {k: np.array([f[k] for f in feats]) for k in ("input_ids", "input_mask", "segment_ids", "p_mask", "cls_index")}
    served = model.serving_features(cols["input_ids"].astype(np.int32), cols["input_mask"].astype(np.int32),
                                    cols["segment_ids"].astype(np.int32))
    np.testing.assert_array_equal(served["p_mask"].numpy(), cols["p_mask"])
    np.testing.assert_array_equal(served["cls_index"].numpy(), cols["cls_index"])


def test_squad_like_corpus_gold_scores_100_and_every_question_maps_back(corpora_dir, sp, tmp_path):
    """The acceptance check of ../shared/corpora/qa/squad_like.json (benchmarks/bench_squad.py part A),
    with small vocabularies learned from Emma: gold answers score 100; each question's windows map back
    to text containing its answer, for both tokenizers."""
    path = os.path.join(corpora_dir, "qa", "squad_like.json")
    examples = squad.read_squad_examples(path, False)
    gold = qp.gold_pairs_from_dataset(json.load(open(path)))
    assert len(examples) == len(gold) > 0  # repeated ids are scored once per question, as evaluate-v1.1.py
    m = qp.squad_v1_metrics(gold, {q: a[0] for q, a in gold})
    assert m["exact_match"] == 100.0 and m["f1"] == 100.0 and m["total"] == len(examples)
    vocab = encoders.build_wordpiece_vocab(iter(qa_fixtures.emma_lines()), vocab_size=2000,
                                           out_file=str(tmp_path / "vocab.txt"))
    for encoder, featurize in ((encoders.WordpieceEncoder(vocab), squad.wordpiece_features),
                               (sp, squad.sentencepiece_features)):
        for i, ex in enumerate(examples):
            feats, entry = featurize(ex, i, encoder, 384, 128, 64, True)
            null = [f.get("cls_index", 0) for f in feats]
            texts = [qp.span_text(entry, side, f["start_positions"], f["end_positions"])
                     for f, side, n in zip(feats, entry["features"], null) if f["start_positions"] != n]
            answer = qp.normalize_answer(ex["answers"][0]["text"])
            assert texts and all(answer in qp.normalize_answer(t) for t in texts), (ex["qas_id"], texts)
