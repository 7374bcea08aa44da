"""XLNet's SentencePiece: zihangdai/xlnet's text preprocessing and piece rules, and model training.

Decisions:
- SentencePiece follows zihangdai/xlnet `prepro_utils.py`: `preprocess_text` (whitespace join, `` and
  '' -> ", NFKD and combining marks removed, lower-cased when uncased) and the `encode_pieces` rule that
  re-splits a piece ending in "<digit>," so numbers are not glued to commas. A model whose special
  ids differ from XLNET_SPECIAL_IDS is refused with a message naming the file (XLNet hard-codes them).
  `train_sentencepiece` passes `user_defined_symbols` as a list: the string form is mis-parsed at '"'.
  `encode_batch_flat` (what datagen uses) gives the same ids with one SentencePiece batch call and
  a numpy check for the ids the rule or <unk> touch; combining marks are removed by a regex that
  keeps the BMP marks in one table-lookup class (9x faster than one class of all 912 marks).
"""
from __future__ import annotations

import functools
import itertools
import os
import re
import sys
import unicodedata
from typing import Iterable, Sequence

import numpy as np
from absl import logging

from textrain.framework.encoders.base import EncoderError, atomic_write, iter_text_lines, read_bytes, sha256_of_file

SPIECE_UNDERLINE = "\u2581"
XLNET_SPECIAL_IDS = {"<unk>": 0, "<s>": 1, "</s>": 2, "<cls>": 3, "<sep>": 4, "<pad>": 5,
                     "<mask>": 6, "<eod>": 7, "<eop>": 8}
XLNET_CONTROL_SYMBOLS = ["<cls>", "<sep>", "<pad>", "<mask>", "<eod>"]
XLNET_USER_DEFINED_SYMBOLS = ["<eop>", ".", "(", ")", '"', "-", "\u2013", "\u00a3", "\u20ac"]


def _char_ranges(codepoints: Sequence[int]) -> str:
    """A regex character-class body of sorted code points, as ranges."""
    runs: list[list[int]] = []
    for cp in codepoints:
        if runs and runs[-1][1] == cp - 1:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp])
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                   for a, b in runs)


@functools.lru_cache(maxsize=1)
def _combining_re() -> re.Pattern:
    """Matches every character with a non-zero canonical combining class (built once, ~0.06 s).

    Python's `re` tests a class of BMP characters with one table lookup but walks a list for a class
    that holds characters beyond the BMP (205 combining marks are), so one class of all 912 marks
    costs ~15 us per accented line. Here the BMP marks are one class, and a character beyond the
    BMP (one range test) is checked against the others by a look-behind: 9x faster, same matches.
    """
    marks = [cp for cp in range(0x300, sys.maxunicode + 1)
             if not 0xD800 <= cp <= 0xDFFF and unicodedata.combining(chr(cp))]
    bmp = _char_ranges([cp for cp in marks if cp <= 0xFFFF])
    astral = _char_ranges([cp for cp in marks if cp > 0xFFFF])
    return re.compile(f"[{bmp}]|[\U00010000-\U0010ffff](?<=[{astral}])")


def xlnet_preprocess_text(text: str, lower: bool = False, remove_space: bool = True,
                          keep_accents: bool = False) -> str:
    """XLNet's preprocess_text: join whitespace, `` and '' -> ", NFKD minus combining marks, lower."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if remove_space:
        text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    if not keep_accents and not text.isascii():  # NFKD leaves ASCII alone
        text = _combining_re().sub("", unicodedata.normalize("NFKD", text))
    if lower:
        text = text.lower()
    return text


def _ends_with_digit_comma(piece: str) -> bool:
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


class SentencePieceEncoder:
    """SentencePiece with XLNet's text preprocessing and its `encode_ids` digit-comma rule.

    `encode` gives the ids of XLNet's `encode_ids(sp, preprocess_text(text, lower=uncased))`.
    With `check_xlnet_ids` (the default) a model whose special pieces are not at XLNET_SPECIAL_IDS
    is refused: XLNet's data and model code hard-code those ids.
    """

    def __init__(self, model_file: str, uncased: bool = False, check_xlnet_ids: bool = True) -> None:
        import sentencepiece as spm
        self.model_file = model_file
        self.uncased = uncased
        proto = read_bytes(model_file, "SentencePiece model file")
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.LoadFromSerializedProto(proto)
        except (RuntimeError, OSError) as e:
            raise EncoderError(f"{model_file}: not a SentencePiece model ({e})") from None
        self.vocab_size = self.sp.get_piece_size()
        self.special_ids = self._find_special_ids()
        if check_xlnet_ids:
            self._check_xlnet_ids()
        # Ids whose piece ends in "<digit>," are the only ones the XLNet rule can touch.
        self._digit_comma_ids = frozenset(
            i for i in range(self.vocab_size) if _ends_with_digit_comma(self.sp.id_to_piece(i)))
        # ... plus id 0 (<unk>: its text is unknown, so `encode` goes by pieces), as a bool table.
        self._rule_ids = np.zeros(self.vocab_size, bool)
        self._rule_ids[[0, *self._digit_comma_ids]] = True
        self._fingerprint: str | None = None

    def _find_special_ids(self) -> dict[str, int]:
        found = {}
        for piece in XLNET_SPECIAL_IDS:
            i = self.sp.piece_to_id(piece)
            if self.sp.id_to_piece(i) == piece:
                found[piece] = i
        return found

    def _check_xlnet_ids(self) -> None:
        wrong = {p: self.special_ids.get(p) for p, i in XLNET_SPECIAL_IDS.items()
                 if self.special_ids.get(p) != i}
        if wrong:
            detail = ", ".join(f"{p}: {'missing' if i is None else i} (XLNet needs "
                               f"{XLNET_SPECIAL_IDS[p]})" for p, i in wrong.items())
            raise EncoderError(
                f"{self.model_file}: special ids differ from XLNet's hard-coded ones: {detail}. "
                "Train it with train_sentencepiece (user_defined_symbols as a list), or pass "
                "check_xlnet_ids=False if this model is not for XLNet.")

    # ---- XLNet's encode_pieces rule ------------------------------------------------------------
    def _resplit(self, piece: str) -> list[str]:
        """Re-split "<...digit>," as XLNet does: the number on its own, then the comma."""
        sub = self.sp.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=str)
        if piece[0] != SPIECE_UNDERLINE and sub and sub[0][0] == SPIECE_UNDERLINE:
            # The piece continued a word: drop the word-start mark the re-encoding added.
            sub = sub[1:] if len(sub[0]) == 1 else [sub[0][1:]] + sub[1:]
        return sub + [piece[-1]]

    def _pieces_with_rule(self, text: str) -> list[str]:
        pieces: list[str] = []
        for piece in self.sp.encode(text, out_type=str):
            if _ends_with_digit_comma(piece):
                pieces.extend(self._resplit(piece))
            else:
                pieces.append(piece)
        return pieces

    def preprocess(self, text: str) -> str:
        return xlnet_preprocess_text(text, lower=self.uncased)

    # ---- Encoder protocol ----------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        text = self.preprocess(text)
        ids = self.sp.encode(text)
        if not self._digit_comma_ids.intersection(ids) and 0 not in ids:
            return ids  # nothing the rule touches (an <unk> piece's text is unknown: go by pieces)
        return [self.sp.piece_to_id(p) for p in self._pieces_with_rule(text)]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`[encode(t) for t in texts]`, faster (see `encode_batch_flat`)."""
        ids, lengths = self.encode_batch_flat(texts)
        ends = np.cumsum(lengths).tolist()
        flat = ids.tolist()
        return [flat[end - n:end] for n, end in zip(lengths.tolist(), ends, strict=True)]

    def encode_batch_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of every text, concatenated (int32), and each text's number of ids (int64).

        Same ids as `encode` text by text (tests compare the two). Speed: one SentencePiece call
        for all texts (its C++ batch, one thread: the parallelism is the datagen workers; ~25 % less
        CPU than a call per text), and the digit-comma / <unk> check on the flat ids with numpy, so
        only the (rare) texts holding such an id take the piece-by-piece path.
        """
        if not len(texts):
            return np.zeros([0], np.int32), np.zeros([0], np.int64)
        pre = [xlnet_preprocess_text(t, lower=self.uncased) for t in texts]
        encoded = self.sp.encode(pre, num_threads=1)
        lengths = np.fromiter(map(len, encoded), np.int64, count=len(encoded))
        ends = np.cumsum(lengths)
        flat = np.fromiter(itertools.chain.from_iterable(encoded), np.int32, count=int(ends[-1]))
        suspect = np.flatnonzero(self._rule_ids[flat])
        if suspect.size:
            for i in np.unique(np.searchsorted(ends, suspect, side="right")).tolist():
                encoded[i] = [self.sp.piece_to_id(p) for p in self._pieces_with_rule(pre[i])]
            lengths = np.fromiter(map(len, encoded), np.int64, count=len(encoded))
            flat = np.fromiter(itertools.chain.from_iterable(encoded), np.int32, count=int(lengths.sum()))
        return flat, lengths

    def tokenize(self, text: str) -> list[str]:
        return self._pieces_with_rule(self.preprocess(text))

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode([int(i) for i in ids])

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
        return [self.sp.piece_to_id(t) for t in tokens]

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        out = []
        for i in ids:
            if not 0 <= int(i) < self.vocab_size:
                raise ValueError(f"id {i} is outside the vocabulary of {self.model_file} "
                                 f"(size {self.vocab_size})")
            out.append(self.sp.id_to_piece(int(i)))
        return out

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = sha256_of_file(self.model_file)
        return self._fingerprint


def train_sentencepiece(inputs: str | Sequence[str] | Iterable[str], model_prefix: str,
                        vocab_size: int = 32000, character_coverage: float = 0.99995,
                        model_type: str = "unigram", input_sentence_size: int = 10_000_000,
                        shuffle_input_sentence: bool = True, num_threads: int | None = None,
                        **extra_options) -> str:
    """Train a SentencePiece model with XLNet's recipe; writes {prefix}.model and {prefix}.vocab.

    `inputs`: file paths/globs (.gz ok, gs:// ok) or an iterator of lines (`iter(lines)`: a list is
    read as file names). The lines are streamed to
    the trainer and the model comes back in memory, so it is written atomically through tf.io.gfile.
    `extra_options` go to SentencePieceTrainer as they are (e.g. hard_vocab_limit=False on tiny
    corpora, seed_sentencepiece_size). Returns the path of the .model file.
    """
    import io

    import sentencepiece as spm
    model = io.BytesIO()
    options = dict(
        vocab_size=vocab_size, character_coverage=character_coverage, model_type=model_type,
        control_symbols=XLNET_CONTROL_SYMBOLS,
        user_defined_symbols=XLNET_USER_DEFINED_SYMBOLS,  # a list: the string form breaks at '"'
        input_sentence_size=input_sentence_size, shuffle_input_sentence=shuffle_input_sentence,
        num_threads=num_threads or os.cpu_count() or 1, minloglevel=1)
    options.update(extra_options)
    lines = (line for line in iter_text_lines(inputs) if line.strip())
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=lines, model_writer=model, **options)
    except RuntimeError as e:
        raise ValueError(f"SentencePiece training for {model_prefix} failed: {e}") from None
    proto = model.getvalue()
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    vocab_lines = "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n"
                          for i in range(sp.get_piece_size()))
    atomic_write(model_prefix + ".vocab", vocab_lines.encode("utf-8"))
    atomic_write(model_prefix + ".model", proto)
    logging.info("wrote SentencePiece model %s.model (%d pieces)", model_prefix, sp.get_piece_size())
    return model_prefix + ".model"
