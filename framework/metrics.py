"""Evaluation metrics of the fine-tuning tasks (GLUE's official ones), in numpy only.

No scipy/sklearn dependency: each function restates the definition that GLUE's reference code
(sklearn / scipy) computes, and tests/test_metrics.py checks it against hand-worked arithmetic.

Decisions:
- Inputs are label arrays (ints, or floats for regression); callers pass real examples only.
- `f1_binary`: F1 of the positive class (id 1), as sklearn's `f1_score` for MRPC/QQP. When there is no
  true and no predicted positive, precision and recall are undefined: 0.0, as sklearn (zero_division).
- `macro_f1`: unweighted mean of per-class F1 over the classes present in labels or predictions
  (sklearn's default `labels`), or over `range(num_classes)` when given.
- `matthews_corrcoef`: sklearn's multi-class formula from the confusion matrix,
  (c*s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t)), where t/p are true/predicted counts per class, c the
  correct count, s the total; 0.0 when the denominator is 0 (e.g. one class predicted everywhere),
  as sklearn and GLUE's CoLA report it.
- `pearson` and `spearman` (Pearson of the average ranks, ties sharing their mean rank, as
  scipy.stats.spearmanr) return 0.0 when a side has zero variance (scipy gives nan): an undefined
  correlation must not win best-checkpoint selection.
- `multilabel_micro_f1`: 2*TP / (2*TP + FP + FN) over every (example, label) cell; 0.0 when nothing is
  true or predicted.
- `conll_chunks` / `entity_scores`: CoNLL's conlleval (and seqeval's default mode): a tag is `O` or
  `PREFIX-TYPE` (prefix B, I, E, S; a tag without a hyphen is its own prefix with an empty type); a
  chunk starts and ends by conlleval's startOfChunk / endOfChunk rules, so an I- (or E-) that follows O
  or another type starts a chunk (IOB1 and a model's stray I- are read as conlleval reads them), and a
  sentence boundary ends every chunk. A predicted chunk is correct when a gold chunk has exactly its
  first word, last word and type. precision / recall / f1 are fractions (conlleval prints percent);
  0.0 when undefined.
"""
from __future__ import annotations

import numpy as np


def _flat(x) -> np.ndarray:
    return np.asarray(x).reshape(-1)


def accuracy(labels, predictions) -> float:
    labels, predictions = _flat(labels), _flat(predictions)
    if labels.size == 0:
        return 0.0
    return float(np.mean(labels == predictions))


def _f1(tp: float, fp: float, fn: float) -> float:
    denominator = 2 * tp + fp + fn
    return float(2 * tp / denominator) if denominator > 0 else 0.0


def f1_binary(labels, predictions, positive: int = 1) -> float:
    """F1 of class `positive` (2PR/(P+R) = 2TP/(2TP+FP+FN))."""
    labels, predictions = _flat(labels), _flat(predictions)
    tp = np.sum((predictions == positive) & (labels == positive))
    fp = np.sum((predictions == positive) & (labels != positive))
    fn = np.sum((predictions != positive) & (labels == positive))
    return _f1(tp, fp, fn)


def macro_f1(labels, predictions, num_classes: int | None = None) -> float:
    labels, predictions = _flat(labels), _flat(predictions)
    classes = (np.arange(num_classes) if num_classes is not None
               else np.union1d(np.unique(labels), np.unique(predictions)))
    if classes.size == 0:
        return 0.0
    return float(np.mean([f1_binary(labels, predictions, positive=c) for c in classes]))


def matthews_corrcoef(labels, predictions) -> float:
    labels, predictions = _flat(labels), _flat(predictions)
    classes, encoded = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    n = labels.size
    if n == 0:
        return 0.0
    k = classes.size
    confusion = np.zeros((k, k), dtype=np.float64)
    np.add.at(confusion, (encoded[:n], encoded[n:]), 1)
    t = confusion.sum(axis=1)  # true count per class
    p = confusion.sum(axis=0)  # predicted count per class
    c = np.trace(confusion)
    s = confusion.sum()
    numerator = c * s - np.dot(t, p)
    denominator = np.sqrt((s * s - np.dot(p, p)) * (s * s - np.dot(t, t)))
    return float(numerator / denominator) if denominator > 0 else 0.0


def pearson(x, y) -> float:
    x, y = _flat(x).astype(np.float64), _flat(y).astype(np.float64)
    if x.size < 2:
        return 0.0
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.sum(dx * dx) * np.sum(dy * dy))
    return float(np.sum(dx * dy) / denominator) if denominator > 0 else 0.0


def average_ranks(x) -> np.ndarray:
    """1-based ranks; tied values share the mean of the ranks they span (scipy's rankdata 'average')."""
    x = _flat(x)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    # Start of each run of equal values, and the average rank of that run.
    starts = np.concatenate([[True], sorted_x[1:] != sorted_x[:-1]])
    run_id = np.cumsum(starts) - 1
    run_starts = np.flatnonzero(starts)
    run_ends = np.concatenate([run_starts[1:], [x.size]])  # exclusive
    run_rank = (run_starts + 1 + run_ends) / 2.0            # mean of ranks start+1 .. end
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = run_rank[run_id]
    return ranks


def spearman(x, y) -> float:
    return pearson(average_ranks(x), average_ranks(y))


def multilabel_micro_f1(labels, predictions) -> float:
    """`labels`, `predictions`: multi-hot arrays of the same shape [N, num_labels]."""
    labels, predictions = np.asarray(labels).astype(bool), np.asarray(predictions).astype(bool)
    tp = np.sum(labels & predictions)
    fp = np.sum(~labels & predictions)
    fn = np.sum(labels & ~predictions)
    return _f1(tp, fp, fn)


def mean_squared_error(x, y) -> float:
    x, y = _flat(x).astype(np.float64), _flat(y).astype(np.float64)
    return float(np.mean((x - y) ** 2)) if x.size else 0.0


def _split_tag(tag: str) -> tuple[str, str]:
    """conlleval's split of a tag: ("B", "PER") for "B-PER", ("O", "") for "O", (tag, "") without a hyphen."""
    prefix, dash, kind = tag.partition("-")
    return (prefix, kind) if dash else (tag, "")


def _chunk_ends(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    """conlleval's endOfChunk: whether the chunk open at the previous word ends before this word."""
    if prev in ("E", "S"):
        return True
    if prev in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev != "O" and prev_type != kind


def _chunk_starts(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    """conlleval's startOfChunk: whether a chunk starts at this word."""
    if tag in ("B", "S"):
        return True
    if prev in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag != "O" and prev_type != kind


def conll_chunks(tags: list[str]) -> list[tuple[int, int, str]]:
    """The chunks of one sentence's tags as (first word, last word, type), in order."""
    chunks: list[tuple[int, int, str]] = []
    prev, prev_type, start = "O", "", None
    for i, tag in enumerate(list(tags) + ["O"]):  # the sentence end closes an open chunk
        prefix, kind = _split_tag(tag)
        if start is not None and _chunk_ends(prev, prefix, prev_type, kind):
            chunks.append((start, i - 1, prev_type))
            start = None
        if i < len(tags) and _chunk_starts(prev, prefix, prev_type, kind):
            start = i
        prev, prev_type = prefix, kind
    return chunks


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """Entity-level precision, recall, f1 (exact span and type, conlleval's chunks) and token_accuracy
    (every word, O included) over sentences of tags; both lists hold the same sentences' tags."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    correct = found = wanted = words = right = 0
    for g, p in zip(gold, predicted, strict=True):
        if len(g) != len(p):
            raise ValueError(f"a sentence of {len(g)} gold tags has {len(p)} predicted")
        gold_chunks, pred_chunks = set(conll_chunks(g)), set(conll_chunks(p))
        correct += len(gold_chunks & pred_chunks)
        found += len(pred_chunks)
        wanted += len(gold_chunks)
        words += len(g)
        right += sum(a == b for a, b in zip(g, p, strict=True))
    precision = correct / found if found else 0.0
    recall = correct / wanted if wanted else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1,
            "token_accuracy": right / words if words else 0.0}
