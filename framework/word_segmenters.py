"""Word segmentation for whole-word masking of Chinese (and other CJK) text.

BERT's tokenizer splits every CJK character into its own token, so the `##` rule of whole-word masking finds no
words in Chinese. Chinese-BERT-wwm (Cui et al., 2019) keeps the character tokens (the ids are those of
character-level tokenisation) and groups them by the words of a segmenter: a character that continues the
previous character's word is masked together with it. This module computes that per-token flag.

Segmenter: jieba (`--word_segmenter=jieba`). Chinese-BERT-wwm used LTP, which needs PyTorch and a model
download of hundreds of MB (its HF port, `run_chinese_ref.py`, does too); jieba is pure Python (MIT), bundles
its dictionary, is deterministic (dictionary DAG + a fixed HMM for unknown words) and is the most used
Chinese segmenter on PyPI. Its dictionary decides the data, so the manifest records jieba's version. It is
imported only when a problem asks for it (datagen time; the trainers never need it).

Alignment, exactly: a CJK character (bert's `_is_chinese_char` ranges) is always one token, and the text
between two CJK characters tokenizes the same alone as in the line (CJK characters are spaced out before
WordPiece). So the line's tokens are: tokens of the text before the first CJK character, that character,
tokens of the text up to the next one, and so on. A CJK character is flagged as continuing when it is not the
first character of its segmenter word and the character before it (in the same word) is CJK as well (mixed
words such as "T恤衫" group only their CJK part, as the original groups only all-Chinese words). If a line's
token count ever disagrees with this reconstruction, the line gets no flags (character-level groups) and is
counted in `WordContinuation.misaligned_lines`; the ids are never changed.
"""
from __future__ import annotations

import logging as std_logging  # jieba.setLogLevel takes a standard-library level (absl's differ)
from typing import Any, Callable, Sequence

import numpy as np

from textrain.framework.encoders import is_cjk  # bert's _is_chinese_char ranges

SEGMENTERS = ("jieba",)
# A token id with this bit set is a token that continues the previous token's word. Problems carry the flag in
# the ids from tokenisation to where the groups are used (bert_pretrain's masking, electra_pretrain's
# `word_start` feature): it travels through pair making, truncation and overflow cuts with the token itself,
# without a second array to slice alike, and is taken off before anything is written (vocabularies are far
# below 2**30 ids).
WORD_CONTINUES_BIT = 1 << 30


def _is_cjk(char: str) -> bool:
    return is_cjk(ord(char))


def load_segmenter(name: str) -> tuple[Callable[[str], list[str]], str]:
    """(segment(text) -> words that concatenate back to text, "name version")."""
    if name not in SEGMENTERS:
        raise ValueError(f"--word_segmenter must be one of {SEGMENTERS} (or empty), got {name!r}")
    try:
        import jieba
    except ImportError:
        raise ValueError("--word_segmenter=jieba needs the jieba package: pip install 'textrain[zh]' "
                         "(or pip install jieba)") from None
    jieba.setLogLevel(std_logging.WARNING)  # it announces every dictionary load
    tokenizer = jieba.Tokenizer()  # own instance: no shared global state between problems

    def segment(text: str) -> list[str]:
        return list(tokenizer.cut(text, HMM=True))

    return segment, f"jieba {jieba.__version__}"


def cjk_continuation(text: str, words: Sequence[str]) -> tuple[list[str], list[bool]]:
    """The non-CJK text runs around each CJK character of `text`, and each CJK character's flag.

    Returns (runs, flags): runs[k] is the text before CJK character k (after character k - 1), runs[-1]
    the text after the last one (len(runs) == len(flags) + 1).
    """
    runs: list[str] = []
    flags: list[bool] = []
    current: list[str] = []
    for word in words:
        previous_cjk = False
        for i, char in enumerate(word):
            if _is_cjk(char):
                runs.append("".join(current))
                current = []
                flags.append(i > 0 and previous_cjk)
                previous_cjk = True
            else:
                current.append(char)
                previous_cjk = False
    runs.append("".join(current))
    return runs, flags


class WordContinuation:
    """Per-token "continues the previous token's word" flags of encoded lines (see the module docstring)."""

    def __init__(self, segmenter: str, encoder: Any):
        self.segment, self.version = load_segmenter(segmenter)
        self.encoder = encoder
        self.misaligned_lines = 0

    def flags(self, lines: Sequence[str], ids: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """bool [len(ids[k])] for each line k; `ids` are the lines' token ids (from the same encoder)."""
        per_line = []
        all_runs: list[str] = []
        for line in lines:
            words = self.segment(line)
            if "".join(words) != line:  # a segmenter must only cut, never change, the text
                raise ValueError(f"word segmenter {self.version} changed the text of {line[:40]!r}")
            runs, flags = cjk_continuation(line, words)
            per_line.append((len(all_runs), runs, flags))
            all_runs.extend(runs)
        run_ids = _encode(self.encoder, all_runs) if all_runs else []
        out = []
        for (first, _runs, flags), line_ids in zip(per_line, ids, strict=True):
            mask = np.zeros(len(line_ids), dtype=bool)
            if flags:
                pos, ok = 0, True
                for k, flag in enumerate(flags):
                    pos += len(run_ids[first + k])
                    if pos >= len(mask):
                        ok = False
                        break
                    mask[pos] = flag
                    pos += 1
                if not ok or pos + len(run_ids[first + len(flags)]) != len(mask):
                    self.misaligned_lines += 1
                    mask[:] = False
            out.append(mask)
        return out


def _encode(encoder: Any, texts: list[str]) -> list[list[int]]:
    batch = getattr(encoder, "encode_batch", None)
    return list(batch(texts)) if batch is not None else [encoder.encode(t) for t in texts]


def mark_continuations(ids: Sequence[Sequence[int]], flags: Sequence[np.ndarray]) -> list[list[int]]:
    """The lines' ids with WORD_CONTINUES_BIT set where `flags` is True (other ids unchanged)."""
    return [np.where(f, np.asarray(line, dtype=np.int64) | WORD_CONTINUES_BIT, line).tolist() if len(line)
            else list(line) for line, f in zip(ids, flags, strict=True)]


def split_continuations(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids without the bit, bool array: the token continues the previous token's word)."""
    ids = np.asarray(ids, dtype=np.int64)
    return ids & ~WORD_CONTINUES_BIT, (ids & WORD_CONTINUES_BIT) != 0
