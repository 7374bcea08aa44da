"""SQuAD v1.1 / v2.0 extractive question answering: the originals' feature building, records and
a sidecar of what post-processing needs.

Feature building follows google-research/bert `run_squad.py` (WordPiece: BERT, ELECTRA) and
zihangdai/xlnet `run_squad.py` (SentencePiece: XLNet); the code is our own.

WordPiece (`--tokenizer=wordpiece`):
- The context is split on whitespace (" ", tab, CR, LF, U+202F) into words with a character ->
  word map; each word is WordPiece-tokenised; an answer's character span becomes a word span, then a
  sub-token span, then `_improve_answer_span`'s tightest sub-token span whose text equals the
  tokenised answer ("(1895-1943)." -> "1895").
- Windows of at most `max_seq_length - len(query) - 3` context tokens, each starting `doc_stride`
  tokens after the previous one; a token's "max context" window is the one where
  min(left, right context) + 0.01 * window length is largest.
- Layout `[CLS] query [SEP] context [SEP]`, segment 0 then 1, input_mask 1 on real tokens, right
  padding with 0. Positions are 0 (the [CLS]) when the answer is not inside the window or the question
  is impossible (v2).
- Training questions whose answer text cannot be found in the whitespace words are skipped (the
  original's "Could not find answer"); dev questions are never skipped.

SentencePiece (`--tokenizer=sentencepiece`, XLNet):
- The context is preprocessed and cut into pieces; the concatenated pieces ("▁" as space) are aligned
  to the raw context characters by a banded longest-common-subsequence (the original's `_lcs_match`,
  band |len difference| + 5, doubled once if less than 80 % of the characters align; below that the
  question is skipped). Each piece gets its first and last raw character (unaligned characters take
  the nearest aligned neighbour, as the original's `_convert_index`).
- Layout `context <sep> query <sep> <cls>` (P before Q, "because during pretraining B is shorter");
  segment ids P=0 (context and its <sep>), Q=1 (query and its <sep>), CLS=2, PAD=3; `input_mask` 0 on
  real tokens and 1 on padding (XLNet's convention), right padding with id 0; `p_mask` 1 where no answer
  may start (<sep>, query, padding), 0 on the context and the <cls>; `cls_index` the <cls> position.
  Out-of-window and impossible answers point at `cls_index` and set the float `is_impossible`.

Records keep the originals' feature names: `unique_ids`, `input_ids`, `input_mask`, `segment_ids`,
`start_positions`, `end_positions`, `is_impossible` (+ XLNet's `p_mask`, `cls_index`). Every split
gets positions (the first gold answer on dev), so the eval loop can report a loss too.

Sidecar: the maps back to the text (per window: sub-tokens and their word index, or character offsets;
max-context flags; the context words or text; gold answers) must survive datagen. They are written as
`{name}-{split}.examples.jsonl` (one JSON line per question, see problems/qa_postprocess.py) beside the
records by `after_split`, atomically (temp name + rename) and before the manifest, which records the
file name and its line count. A window's `unique_ids` is `1000 * question index + window index`, a
function of the question alone, so it joins records and sidecar whatever the sharding.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterator, Sequence

import numpy as np
from absl import logging

from textrain.framework import encoders, fileio
from textrain.framework.lazy_tf import tf
from textrain.framework.problem import DatasetSplit, ModeKeys
from textrain.framework.registry import register_problem
from textrain.framework.settings import help_text
from textrain.framework.tasks import FinetuneTask, check_tokenizer
from textrain.problems import qa_postprocess

SEG_ID_P, SEG_ID_Q, SEG_ID_CLS, SEG_ID_PAD = 0, 1, 2, 3
MAX_WINDOWS = 1000  # unique_ids = 1000 * question + window


class SquadFormatError(ValueError):
    """A SQuAD json that does not have the expected layout; the message names the file and question."""


# =============================================================================================== #
# Reading the json
# =============================================================================================== #
def read_squad_examples(path: str, with_negative: bool) -> list[dict[str, Any]]:
    """Every question of a SQuAD json as {qas_id, question, context, answers: [{text, answer_start}],
    is_impossible}, in file order."""
    try:
        with fileio.open_file(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise SquadFormatError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise SquadFormatError(f"{path}: expected a SQuAD json object with a 'data' list")
    examples = []
    for a, article in enumerate(data["data"]):
        for p, para in enumerate(article.get("paragraphs", [])):
            context = para.get("context")
            if not isinstance(context, str):
                raise SquadFormatError(f"{path}: data[{a}].paragraphs[{p}] has no 'context' string")
            for qa in para.get("qas", []):
                where = f"{path}: question {qa.get('id', '?')!r} (data[{a}].paragraphs[{p}])"
                if "id" not in qa or "question" not in qa:
                    raise SquadFormatError(f"{where} lacks 'id' or 'question'")
                impossible = bool(qa.get("is_impossible", False)) if with_negative else False
                answers = qa.get("answers", [])
                for ans in answers:
                    start = ans.get("answer_start")
                    if not isinstance(start, int) or not 0 <= start <= len(context):
                        raise SquadFormatError(f"{where}: answer_start {start!r} outside the context "
                                               f"(length {len(context)})")
                examples.append({"qas_id": qa["id"], "question": qa["question"], "context": context,
                                 "answers": answers, "is_impossible": impossible})
    return examples


# =============================================================================================== #
# WordPiece features (BERT, ELECTRA)
# =============================================================================================== #
def _is_whitespace(ch: str) -> bool:
    return ch in " \t\r\n" or ord(ch) == 0x202F


def whitespace_words(context: str) -> tuple[list[str], list[int]]:
    """(words, char_to_word_offset): words split at whitespace; each character's word index (a
    whitespace character belongs to the word before it)."""
    words: list[str] = []
    offsets: list[int] = []
    prev_space = True
    for ch in context:
        if _is_whitespace(ch):
            prev_space = True
        else:
            if prev_space:
                words.append(ch)
            else:
                words[-1] += ch
            prev_space = False
        offsets.append(len(words) - 1)
    return words, offsets


def doc_windows(num_tokens: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) windows covering `num_tokens` tokens, as the originals' doc_spans."""
    spans = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, stride)
    return spans


def is_max_context(spans: Sequence[tuple[int, int]], span_index: int, position: int) -> bool:
    """Whether window `span_index` is the one giving token `position` the most context."""
    best_score, best = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best = score, i
    return best == span_index


def max_context_flags(spans: Sequence[tuple[int, int]], span_index: int) -> str:
    """"1"/"0" per token of window `span_index`: whether this window is its max-context one (a
    string: the sidecar stays small)."""
    start, length = spans[span_index]
    return "".join("1" if is_max_context(spans, span_index, start + i) else "0" for i in range(length))


def improve_answer_span(doc_tokens: Sequence[str], start: int, end: int, answer_tokens: Sequence[str]
                        ) -> tuple[int, int]:
    """The first (leftmost start, then longest) sub-span of [start, end] whose tokens equal the
    tokenised answer; [start, end] itself if none does."""
    target = " ".join(answer_tokens)
    for s in range(start, end + 1):
        for e in range(end, s - 1, -1):
            if " ".join(doc_tokens[s:e + 1]) == target:
                return s, e
    return start, end


def _answer_word_span(example: dict, offsets: list[int], words: list[str]) -> tuple[int, int] | None:
    """Word span of the first answer, or None when its text is not in those words."""
    answer = example["answers"][0]
    text, start = answer["text"], answer["answer_start"]
    if start + len(text) - 1 >= len(offsets) or not text:
        return None
    first, last = offsets[start], offsets[start + len(text) - 1]
    actual = " ".join(words[first:last + 1]).lower()
    if actual.find(" ".join(text.split()).lower()) == -1:
        return None
    return first, last


def wordpiece_features(example: dict, example_index: int, encoder: encoders.WordpieceEncoder,
                       max_seq_length: int, doc_stride: int, max_query_length: int, training: bool
                       ) -> tuple[list[dict], dict] | None:
    """(records, sidecar entry) of one question, or None when a training question's answer is not in
    the text."""
    ids = encoder.special_ids
    words, offsets = whitespace_words(example["context"])
    query = encoder.encode(example["question"])[:max_query_length]
    tok_to_orig, orig_to_tok, doc_tokens = [], [], []
    for i, word in enumerate(words):
        orig_to_tok.append(len(doc_tokens))
        for piece in encoder.tokenize(word):
            tok_to_orig.append(i)
            doc_tokens.append(piece)
    has_answer = not example["is_impossible"] and bool(example["answers"])
    tok_start = tok_end = None
    if has_answer:
        span = _answer_word_span(example, offsets, words)
        if span is None:
            if training:
                logging.warning("skipping question %s: answer %r not found in its context",
                                example["qas_id"], example["answers"][0]["text"])
                return None
            has_answer = False
        else:
            tok_start = orig_to_tok[span[0]]
            tok_end = orig_to_tok[span[1] + 1] - 1 if span[1] < len(words) - 1 else len(doc_tokens) - 1
            tok_start, tok_end = improve_answer_span(
                doc_tokens, tok_start, tok_end, encoder.tokenize(example["answers"][0]["text"]))
    max_doc = max_seq_length - len(query) - 3
    if max_doc <= 0:
        raise ValueError(f"--max_seq_length={max_seq_length} leaves no room for the context after a "
                         f"{len(query)}-token question; raise it or lower --max_query_length")
    spans = doc_windows(len(doc_tokens), max_doc, doc_stride)
    if len(spans) > MAX_WINDOWS:
        raise ValueError(f"question {example['qas_id']}: {len(spans)} windows (more than {MAX_WINDOWS}); "
                         f"raise --doc_stride")
    piece_ids = encoder.convert_tokens_to_ids(doc_tokens)
    doc_offset = len(query) + 2
    out, side = [], []
    for si, (start, length) in enumerate(spans):
        input_ids = [ids["[CLS]"], *query, ids["[SEP]"], *piece_ids[start:start + length], ids["[SEP]"]]
        segment_ids = [0] * doc_offset + [1] * (length + 1)
        n = len(input_ids)
        pad = max_seq_length - n
        if has_answer and start <= tok_start and tok_end <= start + length - 1:
            s_pos, e_pos = tok_start - start + doc_offset, tok_end - start + doc_offset
        else:
            s_pos = e_pos = 0
        unique_id = example_index * MAX_WINDOWS + si
        out.append({"unique_ids": unique_id, "input_ids": input_ids + [0] * pad,
                    "input_mask": [1] * n + [0] * pad, "segment_ids": segment_ids + [0] * pad,
                    "start_positions": s_pos, "end_positions": e_pos,
                    "is_impossible": int(example["is_impossible"])})
        side.append({"unique_id": unique_id, "doc_offset": doc_offset, "doc_len": length,
                     "tokens": doc_tokens[start:start + length],
                     "orig_index": tok_to_orig[start:start + length],
                     "max_context": max_context_flags(spans, si)})
    entry = {"example_index": example_index, "qas_id": example["qas_id"], "doc_tokens": words,
             "answers": [a["text"] for a in example["answers"]],
             "is_impossible": example["is_impossible"], "features": side}
    return out, entry


# =============================================================================================== #
# SentencePiece features (XLNet)
# =============================================================================================== #
def lcs_alignment(raw: str, pieces_text: str, same: Any) -> tuple[list[int | None], list[int | None], int]:
    """Banded longest common subsequence of `raw` and `pieces_text`, as XLNet's `_lcs_match`.

    `same(i, j)`: whether raw character i equals pieces character j (after preprocessing). Returns
    (raw -> pieces index or None, pieces -> raw index or None, number of aligned characters)."""
    n, m = len(raw), len(pieces_text)
    best: tuple[list, list, int] = ([None] * n, [None] * m, 0)
    band = abs(n - m) + 5
    for _ in range(2):
        f = np.zeros((n, m), dtype=np.int32) if n * m <= 4_000_000 else None
        score, back = _lcs_banded(n, m, band, same, f)
        raw_to_tok, tok_to_raw = [None] * n, [None] * m
        i, j = n - 1, m - 1
        while i >= 0 and j >= 0 and (i, j) in back:
            step = back[(i, j)]
            if step == 2:
                raw_to_tok[i], tok_to_raw[j] = j, i
                i, j = i - 1, j - 1
            elif step == 1:
                j -= 1
            else:
                i -= 1
        best = (raw_to_tok, tok_to_raw, score)
        if score > 0.8 * n:
            break
        band *= 2
    return best


def _lcs_banded(n: int, m: int, band: int, same: Any, f: np.ndarray | None) -> tuple[int, dict]:
    """f[i, j] = max(f[i-1, j], f[i, j-1], f[i-1, j-1] + same(i, j)) inside |i - j| < band (cells
    outside the band stay 0, as in the original); back-pointers 0 = up, 1 = left, 2 = diagonal."""
    table: dict[tuple[int, int], int] = {}
    get = (lambda i, j: int(f[i, j])) if f is not None else (lambda i, j: table.get((i, j), 0))
    back: dict[tuple[int, int], int] = {}
    for i in range(n):
        for j in range(max(0, i - band), min(m, i + band)):
            value = 0
            if i > 0:
                back[(i, j)] = 0
                value = get(i - 1, j)
            if j > 0 and get(i, j - 1) > value:
                back[(i, j)] = 1
                value = get(i, j - 1)
            prev = get(i - 1, j - 1) if i > 0 and j > 0 else 0
            if same(i, j) and prev + 1 > value:
                back[(i, j)] = 2
                value = prev + 1
            if f is not None:
                f[i, j] = value
            else:
                table[(i, j)] = value
    return (get(n - 1, m - 1) if n and m else 0), back


def _nearest(index: Sequence[int | None], pos: int, limit: int | None = None, is_start: bool = True) -> int:
    """An aligned index for `pos` when `index[pos]` is None, as XLNet's `_convert_index`: between two
    aligned neighbours a start takes front + 1 and an end rear - 1; at the edges, the one neighbour."""
    if index[pos] is not None:
        return index[pos]
    n = len(index)
    rear = pos
    while rear < n - 1 and index[rear] is None:
        rear += 1
    front = pos
    while front > 0 and index[front] is None:
        front -= 1
    if index[front] is None:
        if index[rear] >= 1:
            return 0 if is_start else index[rear] - 1
        return index[rear]
    if index[rear] is None:
        if limit is not None and index[front] < limit - 1:
            return index[front] + 1 if is_start else limit - 1
        return index[front]
    if index[rear] > index[front] + 1:
        return index[front] + 1 if is_start else index[rear] - 1
    return index[rear] if is_start else index[front]


def align_pieces(context: str, pieces: Sequence[str], uncased: bool
                 ) -> tuple[list[int], list[int], list[int | None], list[int]] | None:
    """(piece -> first raw char, piece -> last raw char, raw char -> pieces-text char, pieces-text
    char -> piece) or None when under 80 % of the raw characters align."""
    cat = "".join(pieces).replace(encoders.SPIECE_UNDERLINE, " ")
    chartok_to_tok, starts, ends = [], [], []
    count = 0
    for i, piece in enumerate(pieces):
        chartok_to_tok.extend([i] * len(piece))
        starts.append(count)
        count += len(piece)
        ends.append(count - 1)
    norm = [encoders.xlnet_preprocess_text(ch, lower=uncased, remove_space=False) for ch in context]
    raw_to_tok, tok_to_raw, score = lcs_alignment(context, cat, lambda i, j: norm[i] == cat[j])
    n = len(context)
    if not n or all(v is None for v in raw_to_tok) or score < 0.8 * n:
        return None
    start_orig = [_nearest(tok_to_raw, s, n, True) for s in starts]
    end_orig = [_nearest(tok_to_raw, e, n, False) for e in ends]
    return start_orig, end_orig, raw_to_tok, chartok_to_tok


def sentencepiece_features(example: dict, example_index: int, encoder: encoders.SentencePieceEncoder,
                           max_seq_length: int, doc_stride: int, max_query_length: int, training: bool,
                           alignment: tuple | None = None) -> tuple[list[dict], dict] | None:
    """(records, sidecar entry) of one question in XLNet's layout, or None when the pieces do not
    align with the context. `alignment`: a cached `(pieces, align_pieces(...))` of this context."""
    ids = encoder.special_ids
    query = encoder.encode(example["question"])[:max_query_length]
    if alignment is None:
        pieces = encoder.tokenize(example["context"])
        alignment = (pieces, align_pieces(example["context"], pieces, encoder.uncased))
    pieces, aligned = alignment
    if aligned is None:
        logging.warning("skipping question %s: its context and SentencePiece pieces do not align",
                        example["qas_id"])
        return None
    start_orig, end_orig, raw_to_tok, chartok_to_tok = aligned
    has_answer = not example["is_impossible"] and bool(example["answers"])
    tok_start = tok_end = None
    if has_answer:
        answer = example["answers"][0]
        first = answer["answer_start"]
        last = first + len(answer["text"]) - 1
        if not answer["text"] or last >= len(example["context"]):
            has_answer = False
        else:
            tok_start = chartok_to_tok[_nearest(raw_to_tok, first, is_start=True)]
            tok_end = chartok_to_tok[_nearest(raw_to_tok, last, is_start=False)]
    piece_ids = encoder.convert_tokens_to_ids(pieces)
    max_doc = max_seq_length - len(query) - 3
    if max_doc <= 0:
        raise ValueError(f"--max_seq_length={max_seq_length} leaves no room for the context after a "
                         f"{len(query)}-token question; raise it or lower --max_query_length")
    spans = doc_windows(len(piece_ids), max_doc, doc_stride)
    out, side = [], []
    for si, (start, length) in enumerate(spans):
        input_ids = [*piece_ids[start:start + length], ids["<sep>"], *query, ids["<sep>"], ids["<cls>"]]
        segment_ids = [SEG_ID_P] * (length + 1) + [SEG_ID_Q] * (len(query) + 1) + [SEG_ID_CLS]
        p_mask = [0.0] * length + [1.0] * (len(query) + 2) + [0.0]
        cls_index = len(input_ids) - 1
        pad = max_seq_length - len(input_ids)
        inside = has_answer and start <= tok_start and tok_end <= start + length - 1
        s_pos, e_pos = (tok_start - start, tok_end - start) if inside else (cls_index, cls_index)
        unique_id = example_index * MAX_WINDOWS + si
        out.append({"unique_ids": unique_id, "input_ids": input_ids + [0] * pad,
                    "input_mask": [0.0] * len(input_ids) + [1.0] * pad,
                    "segment_ids": segment_ids + [SEG_ID_PAD] * pad, "p_mask": p_mask + [1.0] * pad,
                    "cls_index": cls_index, "start_positions": s_pos, "end_positions": e_pos,
                    "is_impossible": 0.0 if inside else 1.0})
        side.append({"unique_id": unique_id, "doc_offset": 0, "doc_len": length,
                     "start_orig": start_orig[start:start + length],
                     "end_orig": end_orig[start:start + length],
                     "max_context": max_context_flags(spans, si)})
    entry = {"example_index": example_index, "qas_id": example["qas_id"],
             "paragraph_text": example["context"], "answers": [a["text"] for a in example["answers"]],
             "is_impossible": example["is_impossible"], "features": side}
    return out, entry


# =============================================================================================== #
# The problems
# =============================================================================================== #
def results_by_unique_id(outputs: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Batched model outputs (numpy, first axis = windows, with `unique_ids`) -> {unique_id: row}."""
    ids = np.asarray(outputs["unique_ids"]).reshape(-1)
    rows = {k: np.asarray(v) for k, v in outputs.items() if k != "unique_ids"}
    return {int(u): {k: v[i] for k, v in rows.items()} for i, u in enumerate(ids)}


@dataclasses.dataclass
class SquadHParams:
    train_file: str = dataclasses.field(default="", metadata=help_text(
        "SQuAD json of the train split (empty: no train split)."))
    predict_file: str = dataclasses.field(default="", metadata=help_text(
        "SQuAD json of the dev split: evaluated and predicted (empty: no dev split)."))
    tokenizer: str = dataclasses.field(default="wordpiece", metadata=help_text(
        "wordpiece (BERT, ELECTRA: --vocab_file, --do_lower_case) or sentencepiece (XLNet: "
        "--sp_model, --uncased)."))
    vocab_file: str = ""
    do_lower_case: bool = True
    sp_model: str = dataclasses.field(default="", metadata=help_text(
        "SentencePiece model of the pretrained XLNet (run_squad.py's --spiece_model_file; sp_model is the "
        "name every textrain problem uses)."))
    uncased: bool = False
    max_seq_length: int = 384
    doc_stride: int = dataclasses.field(default=128, metadata=help_text(
        "Tokens between the starts of two windows over a long context."))
    max_query_length: int = dataclasses.field(default=64, metadata=help_text(
        "Question tokens kept (the rest are cut)."))
    train_shards: int = dataclasses.field(default=4, metadata=help_text("Shards of the train split."))
    # Post-processing (run_squad.py's flags): read at evaluation, not data settings (kept out of the manifest).
    n_best_size: int = dataclasses.field(default=20, metadata=help_text(
        "Post-processing: spans kept per question (nbest_predictions.json)."))
    max_answer_length: int = dataclasses.field(default=30, metadata=help_text(
        "Post-processing: longest answer, in (sub-)tokens."))
    null_score_diff_threshold: float = dataclasses.field(default=0.0, metadata=help_text(
        "SQuAD v2: answer '' when the null odds exceed this (the v2 metrics also report the best "
        "threshold on dev, best_f1_thresh)."))


POSTPROCESS_SETTINGS = ("n_best_size", "max_answer_length", "null_score_diff_threshold")


class SquadProblem(FinetuneTask):
    """SQuAD json -> windows (records) + a sidecar; v2 when `with_negative`.

    As a fine-tuning task (framework/tasks.py): task_type "span_extraction", main metric "f1"; it
    overrides the contract's `metrics` and `write_predictions`, which get every window's outputs,
    because EM/F1 come from post-processing all windows of a question against the sidecar, not from
    labels; no label list, so no label output in an export."""

    HParams = SquadHParams
    with_negative: bool = False
    task_type = "span_extraction"
    main_metric = "f1"

    def __init__(self, hparams=None):
        super().__init__(hparams)
        check_tokenizer(self.hparams.tokenizer)
        self._eval_source: tuple[str, str] | None = None

    # ---------------------------------------------------------------- generation
    def input_file(self, split: str) -> str:
        return self.hparams.train_file if split == DatasetSplit.TRAIN else self.hparams.predict_file

    def dataset_splits(self) -> list[tuple[str, int]]:
        splits = []
        if self.hparams.train_file:
            splits.append((DatasetSplit.TRAIN, self.hparams.train_shards))
        if self.hparams.predict_file:
            splits.append((DatasetSplit.EVAL, 1))
        return splits

    def prepare(self, data_dir: str, tmp_dir: str) -> None:
        hp = self.hparams
        if not hp.train_file and not hp.predict_file:
            raise ValueError(f"{self.name}: give --train_file and/or --predict_file (SQuAD json files)")
        for flag, path in (("--train_file", hp.train_file), ("--predict_file", hp.predict_file)):
            if path and not fileio.exists(path):
                raise FileNotFoundError(f"{flag}={path} does not exist")
        self.encoder()  # fails early on a missing vocab / model

    def feature_encoders(self, data_dir: str) -> dict:
        return {"input_ids": self.encoder()}

    def manifest_settings(self, data_dir: str) -> dict:
        settings = {k: v for k, v in super().manifest_settings(data_dir).items() if k not in POSTPROCESS_SETTINGS}
        settings.update(with_negative=self.with_negative, vocab_size=int(self.encoder().vocab_size))
        return settings

    def featurize(self, split: str, shard_id: int = 0, num_shards: int = 1) -> Iterator[tuple[list[dict], dict]]:
        """(records, sidecar entry) of every kept question of a split, in file order; with `num_shards`,
        only question i with i % num_shards == shard_id (each shard featurizes its own questions)."""
        hp = self.hparams
        training = split == DatasetSplit.TRAIN
        encoder = self.encoder()
        examples = read_squad_examples(self.input_file(split), self.with_negative)
        cache: tuple[str, Any] | None = None
        for index, example in enumerate(examples):
            if index % num_shards != shard_id:
                continue
            if hp.tokenizer == "wordpiece":
                result = wordpiece_features(example, index, encoder, hp.max_seq_length, hp.doc_stride,
                                            hp.max_query_length, training)
            else:
                if cache is None or cache[0] != example["context"]:
                    pieces = encoder.tokenize(example["context"])
                    cache = (example["context"],
                             (pieces, align_pieces(example["context"], pieces, encoder.uncased)))
                result = sentencepiece_features(example, index, encoder, hp.max_seq_length, hp.doc_stride,
                                                hp.max_query_length, training, alignment=cache[1])
            if result is not None:
                yield result

    def generate_shard(self, data_dir, tmp_dir, split, shard_id, num_shards, seed) -> Iterator[dict]:
        """Question i's windows go to shard i % num_shards (a question's windows stay together)."""
        for feats, _ in self.featurize(split, shard_id, num_shards):
            yield from feats

    def sidecar_filename(self, split: str) -> str:
        return f"{self.name}-{split}.examples.jsonl"

    def after_split(self, data_dir: str, split: str, manifest: dict) -> None:
        """Write the split's sidecar (dev/test: what post-processing needs) and name it in the manifest."""
        if split == DatasetSplit.TRAIN:
            return
        path = os.path.join(self.problem_dir(data_dir), self.sidecar_filename(split))
        lines = [json.dumps(entry, ensure_ascii=False) for _, entry in self.featurize(split)]
        fileio.write_text_atomic(path, "\n".join(lines) + "\n")
        manifest["sidecar"] = {"file": os.path.basename(path), "num_questions": len(lines)}

    # ---------------------------------------------------------------- reading
    def example_reading_spec(self) -> dict:
        L = self.hparams.max_seq_length
        f = tf.io.FixedLenFeature
        if self.hparams.tokenizer == "wordpiece":
            return {"unique_ids": f([], tf.int64), "input_ids": f([L], tf.int64), "input_mask": f([L], tf.int64),
                    "segment_ids": f([L], tf.int64), "start_positions": f([], tf.int64),
                    "end_positions": f([], tf.int64), "is_impossible": f([], tf.int64)}
        return {"unique_ids": f([], tf.int64), "input_ids": f([L], tf.int64), "input_mask": f([L], tf.float32),
                "segment_ids": f([L], tf.int64), "p_mask": f([L], tf.float32), "cls_index": f([], tf.int64),
                "start_positions": f([], tf.int64), "end_positions": f([], tf.int64),
                "is_impossible": f([], tf.float32)}

    def dataset(self, mode, data_dir, params, input_context=None, split=None):
        # Remembered for compute_metrics: the sidecar of the split being evaluated.
        self._eval_source = (data_dir, split or (DatasetSplit.TRAIN if mode == ModeKeys.TRAIN
                                                 else DatasetSplit.EVAL))
        return super().dataset(mode, data_dir, params, input_context, split)

    # ---------------------------------------------------------------- evaluation
    def read_sidecar(self, data_dir: str, split: str = DatasetSplit.EVAL) -> list[dict]:
        manifest = self.read_manifest(data_dir, split)
        info = manifest.get("sidecar")
        if not info:
            raise FileNotFoundError(f"the {split} manifest of {self.name} in {data_dir} names no sidecar; "
                                    f"re-run datagen")
        path = os.path.join(self.problem_dir(data_dir), info["file"])
        with fileio.open_file(path) as f:
            entries = [json.loads(line) for line in f if line.strip()]
        if len(entries) != info["num_questions"]:
            raise ValueError(f"{path}: {len(entries)} questions, the manifest says {info['num_questions']}; "
                             f"re-run datagen with --overwrite")
        return entries

    def predict(self, outputs: dict[str, Any], data_dir: str, split: str = DatasetSplit.EVAL,
                output_dir: str | None = None) -> tuple[dict, dict, dict, dict[str, float]]:
        """(predictions, nbest, null_odds, metrics) of the split's questions from the model outputs of
        its windows; writes the three json files of run_squad.py to `output_dir` when given."""
        cfg = self.hparams
        examples = self.read_sidecar(data_dir, split)
        results = results_by_unique_id(outputs)
        missing = [f["unique_id"] for ex in examples for f in ex["features"] if f["unique_id"] not in results]
        if missing:
            raise ValueError(f"{len(missing)} windows of {self.name}-{split} have no model output (e.g. "
                             f"unique_id {missing[0]}): the eval loop must not drop a partial last batch")
        preds, nbest, odds = qa_postprocess.predict_answers(
            examples, results, n_best_size=cfg.n_best_size, max_answer_length=cfg.max_answer_length,
            with_negative=self.with_negative, null_score_diff_threshold=cfg.null_score_diff_threshold,
            do_lower_case=self.hparams.do_lower_case)
        metrics = qa_postprocess.evaluate_examples(examples, preds, odds, self.with_negative)
        if output_dir:
            qa_postprocess.write_prediction_files(output_dir, preds, nbest, odds if self.with_negative else None)
        return preds, nbest, odds, metrics

    # ---------------------------------------------------------------- the fine-tuning task API
    def shuffle_split(self, split: str) -> bool:
        return split == DatasetSplit.TRAIN

    def eval_splits(self) -> list[str]:
        return [DatasetSplit.EVAL] if self.hparams.predict_file else []

    def predict_splits(self) -> list[str]:
        """--do_predict writes run_squad.py's predictions for the predict_file (the dev split)."""
        return self.eval_splits()

    def num_labels(self, data_dir: str) -> int:
        """Span extraction has no label set (the trainer passes this to the model, which ignores it)."""
        return 0

    def label_list(self, data_dir: str) -> list[str]:
        """No names: an answer is a span of its context."""
        return []

    def metrics(self, data_dir: str, split: str, outputs: dict[str, Any]) -> dict[str, float]:
        """Official EM/F1 (v2: + HasAns/NoAns, best threshold) of one evaluated split."""
        return self.predict(outputs, data_dir, split)[3]

    def write_predictions(self, data_dir: str, split: str, outputs: dict[str, Any], base_path: str) -> str:
        """predictions.json, nbest_predictions.json (and null_odds.json for v2) in the folder `base_path`
        (run_squad.py's files)."""
        self.predict(outputs, data_dir, split, output_dir=base_path)
        return os.path.join(base_path, "predictions.json")

    def compute_metrics(self, labels: Any, outputs: dict[str, Any]) -> dict[str, float]:
        """Official EM/F1 of the split last read through `dataset` (its sidecar), from the gathered
        model outputs (`predict_outputs` of every window, with `unique_ids`). `labels` are unused: the
        gold answers are the sidecar's."""
        if self._eval_source is None:
            raise ValueError(f"{self.name}.compute_metrics needs the split read by dataset() first")
        data_dir, split = self._eval_source
        return self.predict(outputs, data_dir, split)[3]


@register_problem(name="squad_v1")
class SquadV1(SquadProblem):
    """SQuAD v1.1: every question has an answer."""


@register_problem(name="squad_v2")
class SquadV2(SquadProblem):
    """SQuAD v2.0: `is_impossible` questions (answer: the [CLS] / <cls> position)."""

    with_negative = True
