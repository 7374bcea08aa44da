"""Extractive QA post-processing (n-best spans -> answer text) and the official SQuAD metrics.

Semantics follow google-research/bert `run_squad.py` (`write_predictions`, `get_final_text`),
zihangdai/xlnet `run_squad.py` (beam post-processing over `start_top_*`/`end_top_*`, `cls_logits`)
and the official evaluation scripts `evaluate-v1.1.py` / `evaluate-v2.0.py`; the code is our own.

Decisions:
- One example record (what `problems/squad.py` writes to its sidecar, one JSON line per question)
  carries what post-processing needs: `qas_id`, the gold `answers` (texts), `is_impossible`, the
  context as whitespace words (`doc_tokens`, WordPiece) or characters (`paragraph_text`,
  SentencePiece), and per window (`features`): `unique_id`, `doc_offset` (position of the first
  context token in the input), `doc_len`, `max_context` (BERT's `token_is_max_context` over the
  window's context tokens, a string of "1"/"0"), and either `tokens` + `orig_index` (WordPiece: sub-tokens and their
  whitespace-word index) or `start_orig` + `end_orig` (SentencePiece: each piece's first and last
  character in the raw context, XLNet's `tok_start_to_orig_index` / `tok_end_to_orig_index`).
- Two ways to propose spans, as the originals: from full start/end logits (BERT; top `n_best_size`
  starts x ends) or from beams (XLNet and ELECTRA: `start_n_top` starts, `end_n_top` ends per start,
  log-probabilities). A span must lie inside the window's context, start on a max-context token, end
  at or after its start and be at most `max_answer_length` tokens.
- XLNet's original drops spans that start or end on the window's LAST context token
  (`index >= paragraph_len - 1`); that is an off-by-one, we accept the last token.
- The null (no-answer) score of an example is the MINIMUM over its windows, as the originals: BERT's
  `start_logit[0] + end_logit[0]` (the [CLS] span) and the odds `score_null - best_non_null`; XLNet/
  ELECTRA's `cls_logits` (answer-class logit) is the odds itself. The answer is "" when the odds
  exceed `null_score_diff_threshold` (None: never, XLNet's choice, the evaluation then finds the best
  threshold on dev as the official v2 script's `best_f1_thresh`).
- Metrics are the official ones: normalisation lower-case, drop ASCII punctuation, drop the articles
  a/an/the as whole words, collapse whitespace. v1.1: max over all gold answers; a question with no
  prediction counts 0. v2.0: gold answers that normalise to "" are dropped and a question without
  answers has the gold [""]; an empty prediction or gold gives F1 = EM = (both empty).
"""
from __future__ import annotations

import collections
import json
import math
import re
import string
from typing import Any, Iterable, Mapping, Sequence

from textrain.framework import encoders, fileio

# ----------------------------------------------------------------------------------------------- #
# Official metrics
# ----------------------------------------------------------------------------------------------- #
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, remove punctuation, articles and extra whitespace (the official scripts' order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text: str) -> list[str]:
    return normalize_answer(text).split() if text else []


def exact_score(gold: str, pred: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(pred))


def f1_score(gold: str, pred: str) -> float:
    """Token-overlap F1 of the v2.0 script (v1.1 is the same except when one side is empty)."""
    gold_toks, pred_toks = answer_tokens(gold), answer_tokens(pred)
    if not gold_toks or not pred_toks:
        return float(gold_toks == pred_toks)
    return _overlap_f1(gold_toks, pred_toks)


def _f1_v1(gold: str, pred: str) -> float:
    """evaluate-v1.1.py's f1_score: no special case for empty sides (0 when nothing overlaps)."""
    return _overlap_f1(normalize_answer(gold).split(), normalize_answer(pred).split())


def _overlap_f1(gold_toks: list[str], pred_toks: list[str]) -> float:
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def gold_pairs_from_dataset(data: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """(qas_id, [answer texts]) of every question of a SQuAD json (the object or its "data" list), in file
    order, repeated ids kept (the v1.1 script scores every question it reads)."""
    articles = data["data"] if isinstance(data, Mapping) else data
    return [(qa["id"], [a["text"] for a in qa.get("answers", [])])
            for article in articles for para in article["paragraphs"] for qa in para["qas"]]


def gold_from_dataset(data: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """{qas_id: [answer texts]} (a repeated id keeps its last question, as the v2 script's dicts)."""
    return dict(gold_pairs_from_dataset(data))


def squad_v1_metrics(gold: Mapping[str, Sequence[str]] | Sequence[tuple[str, Sequence[str]]],
                     predictions: Mapping[str, str]) -> dict[str, float]:
    """evaluate-v1.1.py: {"exact_match", "f1"} in percent over every gold question (a dict, or (id, answers)
    pairs in which a repeated id counts each time, as the script); a missing prediction scores 0."""
    pairs = list(gold.items()) if isinstance(gold, Mapping) else list(gold)
    em = f1 = 0.0
    for qid, answers in pairs:
        if qid not in predictions:
            continue
        pred = predictions[qid]
        em += max((exact_score(a, pred) for a in answers), default=0)
        f1 += max((_f1_v1(a, pred) for a in answers), default=0.0)
    total = max(len(pairs), 1)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total, "total": len(pairs)}


def v2_raw_scores(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
                  ) -> tuple[dict[str, int], dict[str, float]]:
    """Per-question exact and F1 of evaluate-v2.0.py's get_raw_scores (missing predictions skipped)."""
    exact, f1 = {}, {}
    for qid, answers in gold.items():
        if qid not in predictions:
            continue
        golds = [a for a in answers if normalize_answer(a)] or [""]
        pred = predictions[qid]
        exact[qid] = max(exact_score(a, pred) for a in golds)
        f1[qid] = max(f1_score(a, pred) for a in golds)
    return exact, f1


def _apply_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                     has_ans: Mapping[str, bool], thresh: float) -> dict[str, float]:
    return {qid: (float(not has_ans[qid]) if na_probs[qid] > thresh else s) for qid, s in scores.items()}


def _mean_dict(exact: Mapping[str, float], f1: Mapping[str, float], qids: Iterable[str] | None = None
               ) -> dict[str, float]:
    qids = list(exact) if qids is None else list(qids)
    n = len(qids)
    return {"exact": 100.0 * sum(exact[q] for q in qids) / n if n else 0.0,
            "f1": 100.0 * sum(f1[q] for q in qids) / n if n else 0.0, "total": n}


def best_threshold(predictions: Mapping[str, str], scores: Mapping[str, float],
                   na_probs: Mapping[str, float], has_ans: Mapping[str, bool]) -> tuple[float, float]:
    """evaluate-v2.0.py's find_best_thresh: (best score in percent, the na_prob threshold giving it).

    Questions are taken in increasing no-answer odds; answering every question up to the threshold
    (and abstaining above it) is scored incrementally, starting from abstaining on all.
    """
    cur = best = sum(1 for q in has_ans if not has_ans[q])
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):
        if qid not in scores:
            continue
        if has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions[qid] else 0
        cur += diff
        if cur > best:
            best, best_thresh = cur, na_probs[qid]
    return 100.0 * best / max(len(scores), 1), best_thresh


def squad_v2_metrics(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                     na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0
                     ) -> dict[str, float]:
    """evaluate-v2.0.py: exact/f1/total, HasAns_*/NoAns_*, and with `na_probs` best_exact(_thresh),
    best_f1(_thresh). `na_probs` are the no-answer odds (null_odds.json); without them every
    question's odds are 0."""
    na = dict(na_probs) if na_probs is not None else {q: 0.0 for q in gold}
    has_ans = {q: bool(answers) for q, answers in gold.items()}  # the v2 script: a non-empty answer list
    exact_raw, f1_raw = v2_raw_scores(gold, predictions)
    exact = _apply_threshold(exact_raw, na, has_ans, na_prob_thresh)
    f1 = _apply_threshold(f1_raw, na, has_ans, na_prob_thresh)
    out = _mean_dict(exact, f1)
    for name, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in exact if has_ans[q] == wanted]
        if qids:
            part = _mean_dict(exact, f1, qids)
            out.update({f"{name}_{k}": v for k, v in part.items()})
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = best_threshold(predictions, exact_raw, na, has_ans)
        out["best_f1"], out["best_f1_thresh"] = best_threshold(predictions, f1_raw, na, has_ans)
    return out


# ----------------------------------------------------------------------------------------------- #
# Mapping predicted sub-tokens back to the original text
# ----------------------------------------------------------------------------------------------- #
def _strip_spaces(text: str) -> tuple[str, dict[int, int]]:
    """Text without spaces, and each kept character's index in `text`."""
    kept, where = [], {}
    for i, ch in enumerate(text):
        if ch == " ":
            continue
        where[len(kept)] = i
        kept.append(ch)
    return "".join(kept), where


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool) -> str:
    """The part of `orig_text` (whitespace words of the context) that the de-tokenised prediction
    `pred_text` covers, as bert's get_final_text: BERT-basic-tokenise `orig_text`, find `pred_text`
    in it, and map the character span back through the space-free alignment of both. When the two
    do not align (normalisation changed the length) the whole `orig_text` is returned."""
    tok_text = " ".join(encoders.bert_basic_tokenize(orig_text, do_lower_case))
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    orig_ns, orig_map = _strip_spaces(orig_text)
    tok_ns, tok_map = _strip_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        return orig_text
    tok_to_ns = {v: k for k, v in tok_map.items()}
    if start not in tok_to_ns or end not in tok_to_ns:
        return orig_text
    orig_start, orig_end = orig_map.get(tok_to_ns[start]), orig_map.get(tok_to_ns[end])
    if orig_start is None or orig_end is None:
        return orig_text
    return orig_text[orig_start:orig_end + 1]


def span_text(example: Mapping[str, Any], feature: Mapping[str, Any], start: int, end: int,
              do_lower_case: bool = True) -> str:
    """Answer text of the context span [start, end] (positions in the model input)."""
    i, j = start - feature["doc_offset"], end - feature["doc_offset"]
    if "paragraph_text" in example:  # SentencePiece: character offsets into the raw context
        return example["paragraph_text"][feature["start_orig"][i]:feature["end_orig"][j] + 1].strip()
    tok_text = " ".join(feature["tokens"][i:j + 1]).replace(" ##", "").replace("##", "")
    tok_text = " ".join(tok_text.split())
    orig_text = " ".join(example["doc_tokens"][feature["orig_index"][i]:feature["orig_index"][j] + 1])
    return get_final_text(tok_text, orig_text, do_lower_case)


# ----------------------------------------------------------------------------------------------- #
# n-best
# ----------------------------------------------------------------------------------------------- #
Prelim = collections.namedtuple("Prelim", ["feature_index", "start", "end", "start_score", "end_score"])


def _valid_span(feature: Mapping[str, Any], start: int, end: int, max_answer_length: int) -> bool:
    off, n = feature["doc_offset"], feature["doc_len"]
    if not (off <= start < off + n and off <= end < off + n):
        return False
    if feature["max_context"][start - off] in ("0", False, 0):
        return False
    return start <= end and end - start + 1 <= max_answer_length


def top_indexes(values: Sequence[float], n: int) -> list[int]:
    """Indices of the n largest values, largest first (ties: lower index first)."""
    return sorted(range(len(values)), key=lambda i: (-values[i], i))[:n]


def softmax(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def _nbest_from_prelims(example: Mapping[str, Any], prelims: list[Prelim], n_best_size: int,
                        do_lower_case: bool, null: Prelim | None) -> list[dict[str, Any]]:
    """Distinct answer texts of the best spans (and "" for `null`), each with probability."""
    if null is not None:
        prelims = prelims + [null]
    prelims.sort(key=lambda p: p.start_score + p.end_score, reverse=True)
    seen: set[str] = set()
    nbest = []
    for p in prelims:
        if len(nbest) >= n_best_size:
            break
        if p is null:
            text = ""
        else:
            text = span_text(example, example["features"][p.feature_index], p.start, p.end, do_lower_case)
            if text in seen:
                continue
        seen.add(text)
        nbest.append({"text": text, "start_logit": float(p.start_score), "end_logit": float(p.end_score)})
    if null is not None and "" not in seen:
        nbest.append({"text": "", "start_logit": float(null.start_score), "end_logit": float(null.end_score)})
    if not nbest:  # no valid span at all (rare): the originals' placeholder
        nbest.append({"text": "", "start_logit": -1e6, "end_logit": -1e6})
    probs = softmax([e["start_logit"] + e["end_logit"] for e in nbest])
    for e, p in zip(nbest, probs):
        e["probability"] = p
    return nbest


def logits_nbest(example: Mapping[str, Any], results: Mapping[int, Mapping[str, Sequence[float]]],
                 n_best_size: int = 20, max_answer_length: int = 30, with_negative: bool = False,
                 do_lower_case: bool = True) -> tuple[list[dict[str, Any]], float | None]:
    """BERT's n-best from `start_logits`/`end_logits` per window; returns (nbest, null score) where
    the null score is the smallest [CLS]-span score over the windows (None for v1)."""
    prelims: list[Prelim] = []
    null: Prelim | None = None
    for fi, feature in enumerate(example["features"]):
        r = results[feature["unique_id"]]
        starts, ends = list(r["start_logits"]), list(r["end_logits"])
        if with_negative:
            score = starts[0] + ends[0]
            if null is None or score < null.start_score + null.end_score:
                null = Prelim(fi, 0, 0, starts[0], ends[0])
        for s in top_indexes(starts, n_best_size):
            for e in top_indexes(ends, n_best_size):
                if _valid_span(feature, s, e, max_answer_length):
                    prelims.append(Prelim(fi, s, e, starts[s], ends[e]))
    nbest = _nbest_from_prelims(example, prelims, n_best_size, do_lower_case, null)
    return nbest, (None if null is None else float(null.start_score + null.end_score))


def beam_nbest(example: Mapping[str, Any], results: Mapping[int, Mapping[str, Sequence[Any]]],
               n_best_size: int = 20, max_answer_length: int = 30, do_lower_case: bool = True
               ) -> tuple[list[dict[str, Any]], float | None]:
    """XLNet's (and ELECTRA's) n-best from beams: `start_top_log_probs`/`start_top_index` [k1] and
    `end_top_log_probs`/`end_top_index` [k1 * k2] (row i: the ends of start i), plus optional
    `cls_logits` (ELECTRA: `answerable_logit`); returns (nbest, the smallest over windows or None)."""
    prelims: list[Prelim] = []
    null_score = None
    for fi, feature in enumerate(example["features"]):
        r = results[feature["unique_id"]]
        null_key = "cls_logits" if "cls_logits" in r else "answerable_logit"  # XLNet / ELECTRA
        if null_key in r:
            c = float(r[null_key])
            null_score = c if null_score is None else min(null_score, c)
        s_lp, s_idx = list(r["start_top_log_probs"]), [int(i) for i in r["start_top_index"]]
        e_lp, e_idx = list(r["end_top_log_probs"]), [int(i) for i in r["end_top_index"]]
        k2 = len(e_idx) // max(len(s_idx), 1)
        for i, s in enumerate(s_idx):
            for j in range(k2):
                e = e_idx[i * k2 + j]
                if _valid_span(feature, s, e, max_answer_length):
                    prelims.append(Prelim(fi, s, e, s_lp[i], e_lp[i * k2 + j]))
    nbest = _nbest_from_prelims(example, prelims, n_best_size, do_lower_case, None)
    return nbest, null_score


def predict_answers(examples: Iterable[Mapping[str, Any]], results: Mapping[int, Mapping[str, Any]],
                    *, n_best_size: int = 20, max_answer_length: int = 30, with_negative: bool = False,
                    null_score_diff_threshold: float | None = 0.0, do_lower_case: bool = True
                    ) -> tuple[dict[str, str], dict[str, list], dict[str, float]]:
    """(predictions, nbest, null_odds) for every example, as run_squad.py's write_predictions.

    `results`: unique_id -> that window's outputs; with `start_logits` the BERT n-best is used, with
    `start_top_index` the beam n-best. v2 (`with_negative`): the answer is "" when the null odds exceed
    `null_score_diff_threshold` (None: never; the threshold is then chosen on dev by the metrics)."""
    predictions, all_nbest, null_odds = {}, {}, {}
    for ex in examples:
        first = results[ex["features"][0]["unique_id"]]
        if "start_top_index" in first:
            nbest, null = beam_nbest(ex, results, n_best_size, max_answer_length, do_lower_case)
            odds = null
        else:
            nbest, null = logits_nbest(ex, results, n_best_size, max_answer_length, with_negative,
                                       do_lower_case)
            best = next((e for e in nbest if e["text"]), None)
            odds = None if null is None else (
                null - (best["start_logit"] + best["end_logit"]) if best else math.inf)
        best_text = next((e["text"] for e in nbest if e["text"]), "")
        qid = ex["qas_id"]
        all_nbest[qid] = nbest
        if with_negative and odds is not None:
            null_odds[qid] = float(odds)
            if null_score_diff_threshold is not None and odds > null_score_diff_threshold:
                best_text = ""
        predictions[qid] = best_text if with_negative else nbest[0]["text"]
    return predictions, all_nbest, null_odds


def evaluate_examples(examples: Sequence[Mapping[str, Any]], predictions: Mapping[str, str],
                      null_odds: Mapping[str, float] | None, with_negative: bool) -> dict[str, float]:
    """Official v1.1 or v2.0 metrics of `predictions` against the examples' gold answers.

    The result always has "exact_match" and "f1" (percent); v2 adds the v2 script's keys."""
    if not with_negative:
        return squad_v1_metrics([(ex["qas_id"], list(ex["answers"])) for ex in examples], predictions)
    gold = {ex["qas_id"]: list(ex["answers"]) for ex in examples}
    out = squad_v2_metrics(gold, predictions, null_odds or None)
    out["exact_match"] = out["exact"]
    return out


def write_squad_json(path: str, obj: Any) -> None:
    """JSON (indent 4, as run_squad.py; fileio.write_json_atomic sorts keys) through tf.io.gfile, written to a temp name then renamed."""
    tmp = path + ".incomplete"
    with fileio.open_file(tmp, "w") as f:
        f.write(json.dumps(obj, indent=4) + "\n")
    fileio.rename(tmp, path, overwrite=True)


def write_prediction_files(output_dir: str, predictions: Mapping[str, str], nbest: Mapping[str, list],
                           null_odds: Mapping[str, float] | None) -> list[str]:
    """predictions.json, nbest_predictions.json and (v2) null_odds.json in `output_dir`."""
    import os
    fileio.makedirs(output_dir)
    paths = []
    files = [("predictions.json", predictions), ("nbest_predictions.json", nbest)]
    if null_odds:
        files.append(("null_odds.json", null_odds))
    for name, obj in files:
        path = os.path.join(output_dir, name)
        write_squad_json(path, obj)
        paths.append(path)
    return paths

