"""BERT WordPiece, the pure-Python reference: google-research/bert `tokenization.FullTokenizer` semantics.

Decisions:
- WordPiece ids are those of google-research/bert `tokenization.FullTokenizer`.
  `ReferenceWordpieceTokenizer` re-implements FullTokenizer in pure Python (the oracle of the tests,
  with google-research/bert's own tokenization.py where ../shared/originals is present, and of the fast
  encoder's fallback, encoders/wordpiece.py).
- `max_input_chars_per_word` is 200, as in google-research/bert (HF's own BertTokenizer uses 100).
- Vocab files: one token per line, id = line number (0-based), stripped, as bert's `load_vocab`.
  A duplicate token is an error naming the file and both lines (bert would silently give the token
  its last line while HF keeps the first, so the ids would be ambiguous).
"""
from __future__ import annotations

import unicodedata
from typing import Mapping

from textrain.framework.encoders.base import EncoderError, decode_utf8, read_bytes

BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_INPUT_CHARS_PER_WORD = 200  # google-research/bert's WordpieceTokenizer default


def _is_bert_whitespace(char: str) -> bool:
    if char in " \t\n\r":
        return True
    return unicodedata.category(char) == "Zs"


def _is_bert_control(char: str) -> bool:
    if char in "\t\n\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_bert_punctuation(char: str) -> bool:
    cp = ord(char)
    # All non-alphanumeric printable ASCII counts, even "$", "^", "`" which Unicode does not call P*.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_cjk(cp: int) -> bool:
    """The CJK Unified Ideographs blocks (not Hangul, Hiragana or Katakana)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def bert_clean_text(text: str) -> str:
    """Drop NUL, U+FFFD and control characters; every whitespace character becomes a space."""
    out = []
    for char in text:
        if char == "\x00" or char == "\ufffd" or _is_bert_control(char):
            continue
        out.append(" " if _is_bert_whitespace(char) else char)
    return "".join(out)


def _space_out_cjk(text: str) -> str:
    return "".join(f" {c} " if is_cjk(ord(c)) else c for c in text)


def _strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


def _split_on_punctuation(word: str) -> list[str]:
    pieces: list[str] = []
    current: list[str] = []
    for char in word:
        if _is_bert_punctuation(char):
            if current:
                pieces.append("".join(current))
                current = []
            pieces.append(char)
        else:
            current.append(char)
    if current:
        pieces.append("".join(current))
    return pieces


def bert_basic_tokenize(text: str | bytes, do_lower_case: bool = True) -> list[str]:
    """BERT's BasicTokenizer: clean, space out CJK, (lower + strip accents), split punctuation."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "ignore")  # as bert's convert_to_unicode
    text = _space_out_cjk(bert_clean_text(text))
    words: list[str] = []
    for word in text.split():
        if do_lower_case:
            word = _strip_accents(word.lower())
        words.extend(_split_on_punctuation(word))
    # A word may have become empty or gained separators (e.g. only accents): split again.
    return " ".join(words).split()


def wordpiece_split(word: str, vocab: Mapping[str, int], unk_token: str = "[UNK]",
                    max_chars: int = MAX_INPUT_CHARS_PER_WORD) -> list[str]:
    """Greedy longest-match-first split of one word; [UNK] if too long or not coverable."""
    if len(word) > max_chars:
        return [unk_token]
    pieces: list[str] = []
    start = 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
            end -= 1
        else:
            return [unk_token]
        pieces.append(piece)
        start = end
    return pieces


class ReferenceWordpieceTokenizer:
    """Pure-Python google-research/bert FullTokenizer; the reference for the fast path."""

    def __init__(self, vocab: Mapping[str, int], do_lower_case: bool = True,
                 unk_token: str = "[UNK]") -> None:
        self.vocab = vocab
        self.do_lower_case = do_lower_case
        self.unk_token = unk_token

    def tokenize(self, text: str) -> list[str]:
        out: list[str] = []
        for word in bert_basic_tokenize(text, self.do_lower_case):
            out.extend(wordpiece_split(word, self.vocab, self.unk_token))
        return out

    def encode(self, text: str) -> list[int]:
        vocab = self.vocab
        return [vocab[t] for t in self.tokenize(text)]


def load_wordpiece_vocab(vocab_file: str) -> dict[str, int]:
    """bert-style vocab.txt -> {token: id}; id is the 0-based line number."""
    text = decode_utf8(read_bytes(vocab_file, "WordPiece vocab file"), vocab_file)
    vocab: dict[str, int] = {}
    for lineno, line in enumerate(text.split("\n"), start=1):
        token = line.strip()
        if not token:
            if lineno == text.count("\n") + 1:  # the empty remainder after the final newline
                break
            raise EncoderError(f"{vocab_file}:{lineno}: empty line in WordPiece vocab file")
        if token in vocab:
            raise EncoderError(f"{vocab_file}:{lineno}: token {token!r} already on line "
                               f"{vocab[token] + 1}; a vocab file must list each token once")
        vocab[token] = len(vocab)
    if "[UNK]" not in vocab:
        raise EncoderError(f"{vocab_file}: WordPiece vocab file has no [UNK] token "
                           f"({len(vocab)} tokens read) - is this a bert vocab.txt?")
    return vocab
