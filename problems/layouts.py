"""Model input layouts of a sentence (pair) for the classifiers: BERT/ELECTRA's and XLNet's.

Pure functions of token ids (no tokenizer, no files); framework/graph_wordpiece.py restates
`bert_layout` in the graph and its tests compare the two.
- `bert_layout` (WordPiece: BERT, ELECTRA), as google-research/bert run_classifier.py:
  `[CLS] A [SEP] B [SEP]`, segment ids 0 for [CLS] A [SEP] and 1 for B [SEP], input_mask 1 on real
  tokens, right-padded with 0.
- `xlnet_layout` (SentencePiece: XLNet), as zihangdai/xlnet classifier_utils.py: `A <sep> B <sep> <cls>`,
  LEFT-padded with id 0; segment ids A=0 (its <sep> too), B=1 (its <sep> too), <cls>=2, padding=4;
  input_mask is FLOAT with 1 on padding and 0 on real tokens (XLNet's convention).
Both truncate a pair longest-first (one token at a time from the end of the longer side, B on a tie)
to max_seq_length - 3, a single text to max_seq_length - 2.
"""
from __future__ import annotations

from typing import Sequence

from textrain.framework import encoders
from textrain.framework.truncation import truncate_seq_pair

# XLNet classifier_utils.py segment ids.
XLNET_SEG_A, XLNET_SEG_B, XLNET_SEG_CLS, XLNET_SEG_PAD = 0, 1, 2, 4


def _truncate(ids_a: Sequence[int], ids_b: Sequence[int] | None,
              max_seq_length: int) -> tuple[list[int], list[int]]:
    a, b = list(ids_a), list(ids_b or [])
    if b:  # run_classifier.py's _truncate_seq_pair: every cut from the end
        _, a_back, _, b_back = truncate_seq_pair(len(a), len(b), max_seq_length - 3)
        a, b = a[:len(a) - a_back], b[:len(b) - b_back]
    else:
        a = a[:max_seq_length - 2]
    return a, b


def bert_layout(ids_a: Sequence[int], ids_b: Sequence[int] | None, max_seq_length: int,
                cls_id: int, sep_id: int) -> dict[str, list]:
    """`[CLS] A [SEP] B [SEP]`, right-padded with 0; input_mask 1 = real token."""
    a, b = _truncate(ids_a, ids_b, max_seq_length)
    input_ids = [cls_id] + a + [sep_id]
    segment_ids = [0] * len(input_ids)
    if b:
        input_ids += b + [sep_id]
        segment_ids += [1] * (len(b) + 1)
    pad = max_seq_length - len(input_ids)
    return {"input_ids": input_ids + [0] * pad, "input_mask": [1] * len(input_ids) + [0] * pad,
            "segment_ids": segment_ids + [0] * pad}


def xlnet_layout(ids_a: Sequence[int], ids_b: Sequence[int] | None, max_seq_length: int,
                 cls_id: int = encoders.XLNET_SPECIAL_IDS["<cls>"],
                 sep_id: int = encoders.XLNET_SPECIAL_IDS["<sep>"]) -> dict[str, list]:
    """`A <sep> B <sep> <cls>`, LEFT-padded with id 0; float input_mask 1 = padding, 0 = real."""
    a, b = _truncate(ids_a, ids_b, max_seq_length)
    input_ids = a + [sep_id]
    segment_ids = [XLNET_SEG_A] * len(input_ids)
    if b:
        input_ids += b + [sep_id]
        segment_ids += [XLNET_SEG_B] * (len(b) + 1)
    input_ids.append(cls_id)
    segment_ids.append(XLNET_SEG_CLS)
    pad = max_seq_length - len(input_ids)
    return {"input_ids": [0] * pad + input_ids, "input_mask": [1.0] * pad + [0.0] * len(input_ids),
            "segment_ids": [XLNET_SEG_PAD] * pad + segment_ids}
