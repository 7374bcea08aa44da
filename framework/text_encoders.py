"""Text encoders: BERT WordPiece, XLNet SentencePiece and tensor2tensor's SubwordTextEncoder.

All three implement one `Encoder` protocol (encode/decode/tokenize, token<->id conversion,
`vocab_size`, `special_ids`, `fingerprint()`), so problems can treat them alike and record the
vocabulary's sha256 in their manifests.

Decisions:
- WordPiece ids are those of google-research/bert `tokenization.FullTokenizer`.
  `ReferenceWordpieceTokenizer` re-implements FullTokenizer in pure Python (the oracle of the tests,
  with google-research/bert's own tokenization.py where ../shared/originals is present).
  The default encoder (backend="regex") splits a text at " " only (one C-level split) and looks each
  raw chunk up in a bounded cache chunk -> ids (`_ChunkCache`): BERT's basic tokenisation never acts
  across a space, so a text's ids are its chunks' ids concatenated, and on real text almost every
  chunk is a hit (a line costs one split and a dict look-up per chunk). A miss does the same basic
  tokenisation with whole-chunk C-level operations (str.lower, unicodedata.normalize, regular
  expressions whose character classes come from Python's own unicodedata, so they are BERT's by
  construction) and a per-word pieces cache. Both caches are bounded (emptied when full), so memory
  does not grow with the corpus. `encode_flat` / `encode_lines_flat` (datagen) split many texts at once:
  the reserved chunk "\\n" marks a text's end in the id stream (texts' own newlines become spaces, which
  changes no id), so one split, one look-up pass and one numpy scan give every text's ids and length.
  Measured on one core it beats HF `tokenizers` (which also tracks
  offsets), see benchmarks/bench_wordpiece.py, so HF is the optional backend="hf" and the vocabulary trainer.
  HF differs from FullTokenizer on some inputs (tests audit the characters): it drops private-use
  (Co) characters that BERT keeps, its Unicode tables are of another version (recent punctuation,
  CJK Extension E/F, some Mn/Cf), and it lower-cases character by character, so a word-final
  capital sigma becomes "σ" where Python's `str.lower` (BERT's) gives "ς". backend="hf" therefore
  audits each new character once against the reference and sends any text holding a character
  where they disagree to the reference, so ids stay identical.
- `max_input_chars_per_word` is 200, as in google-research/bert (HF's own BertTokenizer uses 100).
- Vocab files: one token per line, id = line number (0-based), stripped, as bert's `load_vocab`.
  A duplicate token is an error naming the file and both lines (bert would silently give the token
  its last line while HF keeps the first, so the ids would be ambiguous).
- `build_wordpiece_vocab` uses HF's WordPieceTrainer behind the same normaliser and pre-tokeniser,
  writes [PAD] [UNK] [CLS] [SEP] [MASK] as ids 0-4 (no [unused*] rows), atomically.
- SentencePiece follows zihangdai/xlnet `prepro_utils.py`: `preprocess_text` (whitespace join, `` and
  '' -> ", NFKD and combining marks removed, lower-cased when uncased) and the `encode_pieces` rule that
  re-splits a piece ending in "<digit>," so numbers are not glued to commas. A model whose special
  ids differ from XLNET_SPECIAL_IDS is refused with a message naming the file (XLNet hard-codes them).
  `train_sentencepiece` passes `user_defined_symbols` as a list: the string form is mis-parsed at '"'.
  `encode_batch_flat` (what datagen uses) gives the same ids with one SentencePiece batch call and
  a numpy check for the ids the rule or <unk> touch; combining marks are removed by a regex that
  keeps the BMP marks in one table-lookup class (9x faster than one class of all 912 marks).
- SubwordTextEncoder keeps tensor2tensor's vocab file format (one quoted escaped subtoken per line,
  `<pad>_`=0 and `<EOS>_`=1), its tokenizer, escaping and greedy segmentation, so a vocab file gives
  the same ids in both. Speed: tokens are found by one regular expression instead of a per-character
  loop, every token's ids are cached; vocab building escapes each token once instead of once per
  iteration, counts substrings in C (tokens grouped by count), and shares the first iteration's
  counts across build_to_target_size's bisection steps. One deliberate difference when building: "\n" never enters the alphabet (t2t puts it in
  and then writes a vocab line that breaks the file in two; encoding always escapes "\n" anyway).
- Files go through `tf.io.gfile` (gs:// works); everything written goes to a temporary name first and
  is renamed into place, so a reader never sees half a vocabulary.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import gc
import heapq
import hashlib
import itertools
import json
import os
import re
import sys
import unicodedata
import uuid
from typing import Callable, Iterable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np
from absl import logging

from textrain.framework import fileio
from textrain.framework.errors import UserError
from textrain.framework.lazy_tf import tf


class EncoderError(UserError, ValueError):
    """A missing or malformed vocabulary/model file; the message names the file."""


@runtime_checkable
class Encoder(Protocol):
    """What every text encoder offers to problems."""

    vocab_size: int
    special_ids: dict[str, int]

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    def tokenize(self, text: str) -> list[str]: ...
    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]: ...
    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]: ...
    def fingerprint(self) -> str: ...


# --------------------------------------------------------------------------------------------------
# File helpers (tf.io.gfile so that gs:// paths work).

def _require_file(path: str, what: str) -> None:
    if not path:
        raise EncoderError(f"no {what} given")
    if not fileio.exists(path):
        raise EncoderError(f"{what} {path} does not exist")
    if fileio.isdir(path):
        raise EncoderError(f"{what} {path} is a directory, not a file")


def _read_bytes(path: str, what: str) -> bytes:
    _require_file(path, what)
    with fileio.open_file(path, "rb") as f:
        return f.read()


def _decode_utf8(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise EncoderError(f"{path}:{line}: not UTF-8 ({data[e.start:e.start + 4]!r})") from None


def sha256_of_file(path: str) -> str:
    """Hex sha256 of a (possibly gs://) file; the fingerprint recorded in manifests."""
    h = hashlib.sha256()
    with fileio.open_file(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_write(path: str, data: bytes) -> None:
    """Write to a unique temporary name next to `path`, then rename over it."""
    parent = os.path.dirname(path)
    if parent and not fileio.exists(parent):
        fileio.makedirs(parent)
    tmp = f"{path}.incomplete-{uuid.uuid4().hex[:8]}"
    try:
        with fileio.open_file(tmp, "wb") as f:
            f.write(data)
        fileio.rename(tmp, path, overwrite=True)
    finally:
        if fileio.exists(tmp):
            fileio.remove(tmp)


def _iter_text_lines(inputs: str | Sequence[str] | Iterable[str]) -> Iterator[str]:
    """Lines of text from files or from an iterator.

    A str (comma-separated paths/globs) or a list/tuple of them names files (.gz/.bz2 ok, gs:// ok);
    anything else (a generator, `iter(list_of_lines)`, a file object) yields the lines themselves.
    """
    if isinstance(inputs, (str, list, tuple)):
        from textrain.framework import corpus  # lazy: only needed when reading files
        if not all(isinstance(p, str) for p in inputs):
            raise TypeError(f"file names must be strings, got {inputs!r:.200}")
        pattern = inputs if isinstance(inputs, str) else ",".join(inputs)
        for path in corpus.expand_paths(pattern):
            for _, line in corpus.iter_lines(path):
                yield line
    else:
        yield from inputs


# --------------------------------------------------------------------------------------------------
# BERT WordPiece: the pure-Python reference (FullTokenizer semantics).

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


def _is_cjk(cp: int) -> bool:
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
    return "".join(f" {c} " if _is_cjk(ord(c)) else c for c in text)


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
    text = _decode_utf8(_read_bytes(vocab_file, "WordPiece vocab file"), vocab_file)
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


# --------------------------------------------------------------------------------------------------
# BERT WordPiece: the fast encoder.

def _hf_bert_pipeline(tokenizer, do_lower_case: bool) -> None:
    """Give an HF tokenizer BERT's normaliser and pre-tokeniser (no post-processor: no [CLS]/[SEP])."""
    from tokenizers import normalizers, pre_tokenizers
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case,
        lowercase=do_lower_case)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()


# ASCII after BERT's cleaning: control characters vanish (they can join two words), whitespace
# separates, every printable non-alphanumeric character is punctuation and stands alone.
# One str.translate pass deletes the control characters and pads each punctuation mark with spaces;
# str.split then gives BERT's words (measured faster than a findall regex).
_ASCII_TABLE = {**{c: None for c in (*range(0, 9), 11, 12, *range(14, 32), 127)},
                **{c: f" {chr(c)} " for c in (*range(33, 48), *range(58, 65), *range(91, 97),
                                               *range(123, 127))}}
# A printable ASCII chunk (no control character, and no space: chunks are cut at spaces) is BERT's words
# by one findall: runs of letters and digits, and every other character (punctuation) alone. Measured
# faster than the translate + split above, which stays for chunks with control or whitespace characters.
_ASCII_PRINTABLE_WORDS = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9]")
_WORD_CACHE_LIMIT = 1 << 20    # SubwordTextEncoder's token cache
_PIECE_CACHE_LIMIT = 1 << 17   # WordPiece: basic-tokenised word -> piece ids (fills chunk-cache misses)
_CHUNK_CACHE_LIMIT = 1 << 18   # WordPiece: raw space-separated chunk -> ids (bounded: memory must not
                               # grow with the corpus; ~60 MB when full, see benchmarks/bench_wordpiece.py)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a while (back on after, if it was on).

    Encoding a batch allocates a list per text that survives the batch; every ~700 of them trigger a
    collection, and the full ones traverse every object of the process (hundreds of thousands once
    TensorFlow is imported): measured as a third of the default WordPiece encoder's time on one core.
    The lists hold ints only and make no reference cycles, so nothing is left for later that the
    collector would have freed now."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _ChunkCache(dict):
    """Raw chunk of text (between two " ") -> its WordPiece ids, computed on a miss by `compute`.

    Why a text's ids are the concatenation of its chunks' ids: " " is one of BERT's whitespace
    characters, which `_clean_text` turns into a word separator, and every later step of FullTokenizer
    acts inside a whitespace-separated token (CJK spacing and the control-character deletion act per
    character; lower-casing, accent stripping, punctuation splitting and WordPiece act per token). So
    splitting the raw text at " " first never joins or splits anything BERT would not. The split is at
    " " only, not at Python's `str.split()` set, which also splits at characters BERT DELETES as
    control characters (\x0b \x0c \x1c-\x1f \x85; deleting them joins their neighbours): a chunk may
    hold any other character, tabs or Zs spaces included, and the miss path handles it whole.
    An empty chunk (two spaces in a row, a leading or trailing space) has no ids.

    Bounded: when `limit` entries are reached the cache is emptied and refills with the current text's
    chunks (simple, and on a Zipf-distributed corpus the frequent chunks are back within a few lines).
    The ids never depend on the cache's state. `__missing__` makes hits pure C (`map(cache.__getitem__,
    ...)`).

    The chunk "\n" is reserved: it gives `_TEXT_END` and marks where one text ends and the next begins
    when `encode_flat` splits many texts at once. No text's own chunk is ever "\n": every caller replaces
    a text's newlines by spaces first (both are BERT whitespace, so that changes no id)."""

    BASE = {"": (), "\n": (-1,)}

    def __init__(self, compute: Callable[[str], tuple[int, ...]], limit: int) -> None:
        super().__init__(self.BASE)
        self.compute, self.limit = compute, limit

    def __missing__(self, chunk: str) -> tuple[int, ...]:
        ids = self.compute(chunk)
        if len(self) >= self.limit:
            self.clear()
            self.update(self.BASE)
        self[chunk] = ids
        return ids


_TEXT_END = _ChunkCache.BASE["\n"][0]  # the id-stream marker between two texts in encode_flat (no real id)


def _char_classes(**predicates: Callable[[int, str], bool]) -> dict[str, str]:
    """Regex character-class bodies (as ranges), one per predicate(cp, category), in one scan."""
    ranges: dict[str, list[list[int]]] = {name: [] for name in predicates}
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        cat = unicodedata.category(chr(cp))
        for name, predicate in predicates.items():
            if predicate(cp, cat):
                r = ranges[name]
                if r and r[-1][1] == cp - 1:
                    r[-1][1] = cp
                else:
                    r.append([cp, cp])
    return {name: "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                          for a, b in r) for name, r in ranges.items()}


_CHAR_CLASSES_VERSION = 1  # bump when the predicates below change


def _bert_char_classes() -> dict[str, str]:
    return _char_classes(
        dropped=lambda cp, cat: cp in (0, 0xFFFD) or (cat in ("Cc", "Cf") and cp not in (9, 10, 13)),
        marks=lambda cp, cat: cat == "Mn",
        punct=lambda cp, cat: cat[0] == "P" or 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96
        or 123 <= cp <= 126,
        cjk=lambda cp, cat: _is_cjk(cp))


def _cached_bert_char_classes() -> dict[str, str]:
    """The classes cost a scan of every code point (~1-2 s); every datagen worker process needs them,
    so they are cached on disk per Unicode version (a cache that cannot be written is skipped)."""
    cache_dir = os.environ.get("TEXTRAIN_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "textrain"))
    path = os.path.join(cache_dir, f"bert_char_classes.v{_CHAR_CLASSES_VERSION}."
                                   f"unicode{unicodedata.unidata_version}.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    classes = _bert_char_classes()
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.incomplete"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(classes, f)
        os.replace(tmp, path)
    except OSError:
        pass
    return classes


@functools.lru_cache(maxsize=1)
def _bert_unicode_res() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """BERT's character classes as regular expressions, from Python's own unicodedata (so the
    result is FullTokenizer's by construction): (dropped chars, Mn marks, word splitter).
    Built on first use of non-ASCII text (~1 s)."""
    c = _cached_bert_char_classes()
    cjk, punct = c["cjk"], c["punct"]
    # A word is a CJK character, a punctuation character, or a run of anything else but whitespace
    # (str.split's whitespace: BERT turns Zs into spaces, then splits with str.split).
    splitter = re.compile(f"[{cjk}]|[{punct}]|[^\\s{cjk}{punct}]+")
    return re.compile(f"[{c['dropped']}]"), re.compile(f"[{c['marks']}]"), splitter


def bert_words_fast(text: str, do_lower_case: bool = True) -> list[str]:
    """bert_basic_tokenize with whole-text C-level operations; same words.

    Lower-casing and NFD over the whole text equal BERT's per-word ones: whitespace is neither cased
    nor case-ignorable (so final-sigma context stops there) and has combining class 0 (so canonical
    reordering never crosses it); CJK characters are uncased with combining class 0 too.
    """
    dropped, marks, splitter = _bert_unicode_res()
    text = dropped.sub("", text)
    if do_lower_case:
        text = marks.sub("", unicodedata.normalize("NFD", text.lower()))
    return splitter.findall(text)


def _char_probe(char: str) -> str:
    """A text that puts `char` inside, at the start, alone, at the end of words and by punctuation."""
    return f"ab{char}cd {char} x{char}.{char}{char} {char}A"


class WordpieceEncoder:
    """BERT WordPiece with google-research/bert FullTokenizer ids.

    backend="regex" (default): the text is split at " " and each chunk's ids come from a bounded cache
    (`_ChunkCache`); a miss runs BERT's basic tokenisation on the chunk as a few whole-chunk regular
    expressions and unicodedata calls (a str.translate for ASCII), then each word's pieces from a
    per-word cache; measured fastest on one core (benchmarks/bench_wordpiece.py).
    backend="hf": HF `tokenizers` (Rust) does the work. Each distinct non-ASCII character is audited
    once (HF's normaliser and pre-tokeniser against the Python reference on a probe text); a text
    holding a character where they disagree is encoded by the reference, so ids stay identical.
    """

    BACKENDS = ("regex", "hf")

    def __init__(self, vocab_file: str, do_lower_case: bool = True, backend: str = "regex") -> None:
        from tokenizers import Tokenizer, models
        if backend not in self.BACKENDS:
            raise ValueError(f"backend must be one of {self.BACKENDS}, got {backend!r}")
        self.backend = backend
        self.vocab_file = vocab_file
        self.do_lower_case = do_lower_case
        self.vocab = load_wordpiece_vocab(vocab_file)
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        self.vocab_size = len(self.vocab)
        self.special_ids = {t: self.vocab[t] for t in BERT_SPECIAL_TOKENS if t in self.vocab}
        self.reference = ReferenceWordpieceTokenizer(self.vocab, do_lower_case)
        self._hf = Tokenizer(models.WordPiece(
            self.vocab, unk_token="[UNK]", max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
        _hf_bert_pipeline(self._hf, do_lower_case)
        self._safe_chars: set[str] = set()
        self._unsafe_chars: set[str] = set()
        self._ascii_safe = self._audit(map(chr, range(128))) == 0
        self._word_cache: dict[str, tuple[int, ...]] = {}
        # For _wordpiece_ids: "##" pieces by their text without the prefix, and each table's longest
        # entry (no longer piece can match, so the greedy search starts there).
        self._continuations = {t[2:]: i for t, i in self.vocab.items() if t.startswith("##") and len(t) > 2}
        self._longest_piece = max(map(len, self.vocab))
        self._longest_continuation = max(map(len, self._continuations), default=0)
        self._chunks = _ChunkCache(self._chunk_ids, _CHUNK_CACHE_LIMIT)
        self._fingerprint: str | None = None
        self.fallback_texts = 0  # texts that needed the reference (for benchmarks and logs)

    # ---- the per-character audit -----------------------------------------------------------------
    def _hf_words(self, text: str) -> list[str]:
        normalized = self._hf.normalizer.normalize_str(text)
        return [w for w, _ in self._hf.pre_tokenizer.pre_tokenize_str(normalized)]

    def _audit(self, chars: Iterable[str]) -> int:
        """Classify not yet seen characters as safe/unsafe for HF; returns how many are unsafe."""
        unsafe = 0
        for char in chars:
            if char in self._safe_chars or char in self._unsafe_chars:
                continue
            probe = _char_probe(char)
            if bert_basic_tokenize(probe, self.do_lower_case) == self._hf_words(probe):
                self._safe_chars.add(char)
            else:
                self._unsafe_chars.add(char)
                unsafe += 1
        return unsafe

    def _hf_safe(self, text: str) -> bool:
        if text.isascii() and self._ascii_safe:
            return True
        unknown = set(text) - self._safe_chars
        if not unknown:
            return True
        return not (unknown & self._unsafe_chars) and self._audit(unknown) == 0

    # ---- the chunk cache (backend "regex") -------------------------------------------------------
    def _wordpiece_ids(self, word: str) -> tuple[int, ...]:
        """`[vocab[p] for p in wordpiece_split(word, vocab)]` (greedy longest match first, [UNK] for a word
        too long or not coverable), faster: "##" pieces are looked up in a table keyed without the prefix
        (no string concatenation per try), and each search starts at the longest piece the table has."""
        n = len(word)
        if n > MAX_INPUT_CHARS_PER_WORD:
            return (self.vocab["[UNK]"],)
        table, longest = self.vocab, self._longest_piece
        ids = []
        start = 0
        while start < n:
            end = min(n, start + longest)
            while end > start:
                i = table.get(word[start:end])
                if i is not None:
                    break
                end -= 1
            else:
                return (self.vocab["[UNK]"],)
            ids.append(i)
            start = end
            table, longest = self._continuations, self._longest_continuation
        return tuple(ids)

    def _new_word_ids(self, word: str) -> tuple[int, ...]:
        """A basic-tokenised word's piece ids (a word-cache miss), stored in the bounded word cache."""
        ids = self._wordpiece_ids(word)
        if len(self._word_cache) >= _PIECE_CACHE_LIMIT:
            self._word_cache.clear()
        self._word_cache[word] = ids
        return ids

    def _chunk_ids(self, chunk: str) -> tuple[int, ...]:
        """Ids of one space-free chunk by BERT's rules (a chunk-cache miss): words, then their pieces."""
        if chunk.isascii():
            if self.do_lower_case:
                chunk = chunk.lower()
            if chunk.isalnum():  # letters and digits only: one word as it is (the common miss)
                ids = self._word_cache.get(chunk)
                return self._new_word_ids(chunk) if ids is None else ids
            # Printable: one findall; else delete controls and space out punctuation in one translate.
            words = (_ASCII_PRINTABLE_WORDS.findall(chunk) if chunk.isprintable()
                     else chunk.translate(_ASCII_TABLE).split())
        else:
            words = bert_words_fast(chunk, self.do_lower_case)
        get = self._word_cache.get
        out: tuple[int, ...] = ()
        for word in words:
            ids = get(word)
            out += self._new_word_ids(word) if ids is None else ids
        return out

    def _encode_regex(self, text: str) -> list[int]:
        # One C-level split at " " (a BERT separator), then one dict look-up per chunk; see
        # _ChunkCache for why the ids of a text are the concatenation of its chunks' ids (and why "\n"
        # becomes " ").
        if "\n" in text:
            text = text.replace("\n", " ")
        return list(itertools.chain.from_iterable(map(self._chunks.__getitem__, text.split(" "))))

    # ---- Encoder protocol ----------------------------------------------------------------------
    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of many texts (backend "hf" batches them on RAYON_NUM_THREADS threads)."""
        texts = [t.decode("utf-8", "ignore") if isinstance(t, bytes) else t for t in texts]
        if self.backend == "regex":
            with _gc_paused():
                return [self._encode_regex(t) for t in texts]
        out: list[list[int] | None] = [None] * len(texts)
        fast_idx = []
        for i, text in enumerate(texts):
            if self._hf_safe(text):
                fast_idx.append(i)
            else:
                out[i] = self.reference.encode(text)
                self.fallback_texts += 1
        if fast_idx:
            encodings = self._hf.encode_batch_fast([texts[i] for i in fast_idx],
                                                   add_special_tokens=False)
            for i, enc in zip(fast_idx, encodings):
                out[i] = enc.ids
        return out  # type: ignore[return-value]

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """`encode_batch` packed: every text's ids in one int32 array, and each text's number of ids
        (int64 [len(texts)]). No list per text: what a datagen that keeps ids in arrays wants.

        backend "regex": the texts are joined with " \\n " and split at " " once; the chunk "\\n" gives
        the marker `_TEXT_END` (see _ChunkCache), so the ids of all texts come out of one C-level chain
        with a marker between two texts, and numpy finds the markers (each text's length) and drops them.
        Joining adds a chunk boundary between two texts and merges none."""
        texts = [t.decode("utf-8", "ignore") if isinstance(t, bytes) else t for t in texts]
        if self.backend != "regex" or not texts:
            per_text = self.encode_batch(texts)
            lengths = np.fromiter(map(len, per_text), np.int64, len(per_text))
            return (np.fromiter(itertools.chain.from_iterable(per_text), np.int32, int(lengths.sum())),
                    lengths)
        joined = " \n ".join(texts)
        if joined.count("\n") != len(texts) - 1:  # a text holds newlines of its own: spaces to BERT
            joined = " \n ".join([t.replace("\n", " ") for t in texts])
        return self._flat_of_marked(joined)

    def encode_lines_flat(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """`encode_flat(text.split("\\n"))` without making the lines (each line as it is: not stripped)."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "ignore")
        if self.backend != "regex":
            return self.encode_flat(text.split("\n"))
        return self._flat_of_marked(text.replace("\n", " \n "))

    def _flat_of_marked(self, joined: str) -> tuple[np.ndarray, np.ndarray]:
        """Ids and per-text lengths of texts joined by " \\n " (the text-end chunk, see _ChunkCache)."""
        ids = np.fromiter(itertools.chain.from_iterable(map(self._chunks.__getitem__, joined.split(" "))),
                          np.int32)
        ends = np.flatnonzero(ids == _TEXT_END)
        lengths = np.diff(ends, prepend=-1, append=len(ids)) - 1
        return (np.delete(ids, ends) if len(ends) else ids), lengths.astype(np.int64)

    def encode(self, text: str) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "ignore")
        if self.backend == "regex":
            return self._encode_regex(text)
        if self._hf_safe(text):
            return self._hf.encode(text, add_special_tokens=False).ids
        self.fallback_texts += 1
        return self.reference.encode(text)

    def tokenize(self, text: str) -> list[str]:
        return self.convert_ids_to_tokens(self.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        """Tokens joined by spaces with "##" continuations glued on; [PAD] dropped."""
        pad = self.special_ids.get("[PAD]")
        tokens = self.convert_ids_to_tokens([i for i in ids if i != pad])
        return " ".join(tokens).replace(" ##", "")

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
        unk = self.vocab["[UNK]"]
        return [self.vocab.get(t, unk) for t in tokens]

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        try:
            return [self.inv_vocab[int(i)] for i in ids]
        except KeyError as e:
            raise ValueError(f"id {e.args[0]} is outside the vocabulary of {self.vocab_file} "
                             f"(size {self.vocab_size})") from None

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = sha256_of_file(self.vocab_file)
        return self._fingerprint


def build_wordpiece_vocab(inputs: str | Sequence[str] | Iterable[str], vocab_size: int,
                          out_file: str, do_lower_case: bool = True, min_frequency: int = 2,
                          limit_alphabet: int = 1000) -> str:
    """Learn a WordPiece vocabulary and write a bert-style vocab.txt; returns out_file.

    `inputs`: file paths/globs (a str or list of str; .gz ok; gs:// ok) or an iterator of lines
    (pass `iter(lines)` for text in memory: a list is read as file names).
    Words are those FullTokenizer looks up (BERT's normaliser and pre-tokeniser, via HF's Rust
    implementation); the pieces are learned by `learn_wordpiece` — deterministic, unlike HF's trainer,
    whose ties fall to hash order, so the same corpus always gives the same vocab (and datagen's
    byte-identical shards hold from raw text on). [PAD] [UNK] [CLS] [SEP] [MASK] get ids 0-4.
    """
    from tokenizers import Tokenizer, models
    if vocab_size <= len(BERT_SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must exceed {len(BERT_SPECIAL_TOKENS)}, got {vocab_size}")
    tokenizer = Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
    _hf_bert_pipeline(tokenizer, do_lower_case)
    normalize, pre_tokenize = tokenizer.normalizer.normalize_str, tokenizer.pre_tokenizer.pre_tokenize_str
    word_counts: collections.Counter = collections.Counter()
    for line in _iter_text_lines(inputs):
        if line.strip():
            # A word longer than MAX_INPUT_CHARS_PER_WORD is [UNK] when encoding, so it has nothing to
            # teach; skipping it also keeps learning linear in the input (merging inside one
            # 20,000-character word is quadratic in its length).
            word_counts.update(w for w, _ in pre_tokenize(normalize(line)) if len(w) <= MAX_INPUT_CHARS_PER_WORD)
    if not word_counts:
        raise ValueError(f"no text to build a WordPiece vocab from ({inputs!r})")
    pieces = learn_wordpiece(word_counts, vocab_size - len(BERT_SPECIAL_TOKENS), min_frequency,
                             limit_alphabet)
    tokens = list(BERT_SPECIAL_TOKENS) + [p for p in pieces if p not in BERT_SPECIAL_TOKENS]
    _atomic_write(out_file, ("\n".join(tokens) + "\n").encode("utf-8"))
    logging.info("wrote %d WordPiece tokens to %s", len(tokens), out_file)
    return out_file


def learn_wordpiece(word_counts: Mapping[str, int], size: int, min_frequency: int = 2,
                    limit_alphabet: int = 1000) -> list[str]:
    """Up to `size` WordPiece pieces learned bottom-up from word counts (BPE merges with `##`
    continuation pieces, as HF's WordPieceTrainer learns them), deterministically: the most frequent
    pair is merged first, ties broken by the pieces' text. Words with a character outside the
    `limit_alphabet` most frequent ones are left out (they become [UNK], as with HF). Callers pass
    words of at most MAX_INPUT_CHARS_PER_WORD characters (longer ones are [UNK] anyway); the merging is
    linear in the number of words but quadratic in one word's length."""
    char_counts: collections.Counter = collections.Counter()
    for word, count in word_counts.items():
        for ch in word:
            char_counts[ch] += count
    alphabet = set(sorted(char_counts, key=lambda ch: (-char_counts[ch], ch))[:limit_alphabet])
    words, counts = [], []
    for word, count in sorted(word_counts.items()):
        if set(word) <= alphabet:
            words.append([word[0]] + ["##" + ch for ch in word[1:]])
            counts.append(count)
    symbol_counts: collections.Counter = collections.Counter()
    for syms, count in zip(words, counts):
        for sym in syms:
            symbol_counts[sym] += count
    vocab = sorted(symbol_counts, key=lambda sym: (-symbol_counts[sym], sym))[:size]
    known = set(vocab)

    pair_counts: collections.Counter = collections.Counter()
    where: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    for i, (syms, count) in enumerate(zip(words, counts)):
        for pair in zip(syms, syms[1:]):
            pair_counts[pair] += count
            where[pair].add(i)
    heap = [(-c, a, b) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)
    while len(vocab) < size and heap:
        neg, a, b = heapq.heappop(heap)
        current = pair_counts.get((a, b), 0)
        if current != -neg:  # stale entry: its count dropped since it was pushed
            if current > 0:
                heapq.heappush(heap, (-current, a, b))
            continue
        if current < min_frequency:
            break
        merged = a + b[2:]
        if merged not in known:
            known.add(merged)
            vocab.append(merged)
        for i in sorted(where.pop((a, b), ())):
            syms, count = words[i], counts[i]
            out, j, changed = [], 0, False
            while j < len(syms):
                if j + 1 < len(syms) and syms[j] == a and syms[j + 1] == b:
                    out.append(merged)
                    j += 2
                    changed = True
                else:
                    out.append(syms[j])
                    j += 1
            if not changed:
                continue
            for pair in zip(syms, syms[1:]):
                pair_counts[pair] -= count
            for pair in zip(out, out[1:]):
                pair_counts[pair] += count
                where[pair].add(i)
                heapq.heappush(heap, (-pair_counts[pair], *pair))
            words[i] = out
        pair_counts.pop((a, b), None)
    return vocab


# --------------------------------------------------------------------------------------------------
# XLNet SentencePiece.

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
        proto = _read_bytes(model_file, "SentencePiece model file")
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
        return [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]

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
    lines = (line for line in _iter_text_lines(inputs) if line.strip())
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=lines, model_writer=model, **options)
    except RuntimeError as e:
        raise ValueError(f"SentencePiece training for {model_prefix} failed: {e}") from None
    proto = model.getvalue()
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    vocab_lines = "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n"
                          for i in range(sp.get_piece_size()))
    _atomic_write(model_prefix + ".vocab", vocab_lines.encode("utf-8"))
    _atomic_write(model_prefix + ".model", proto)
    logging.info("wrote SentencePiece model %s.model (%d pieces)", model_prefix, sp.get_piece_size())
    return model_prefix + ".model"


# --------------------------------------------------------------------------------------------------
# tensor2tensor SubwordTextEncoder.

PAD = "<pad>"
EOS = "<EOS>"
RESERVED_TOKENS = [PAD, EOS]
PAD_ID = 0
EOS_ID = 1
_ESCAPE_CHARS = set("\\_u;0123456789")
_UNESCAPE_RE = re.compile(r"\\u|\\\\|\\([0-9]+);")


# t2t's alphanumeric set is Unicode L* and N*, which is exactly what `[^\W_]` matches (Python's \w is
# str.isalnum() plus "_"; tests check the equality over every code point). sre matches it with a
# fast category test, where a class of the ~1400 L/N ranges would be scanned range by range.
_T2T_TOKEN_RE = re.compile(r"[^\W_]+|[\W_]+")


def _t2t_token_re() -> re.Pattern:
    return _T2T_TOKEN_RE


def t2t_tokenize(text: str) -> list[str]:
    """tensor2tensor tokenizer.encode: split where alphanumeric-ness changes; a single space between
    two alphanumeric tokens is dropped (kept when it is the first or the last token)."""
    tokens = _t2t_token_re().findall(text)
    if len(tokens) > 2:
        middle = [t for t in tokens[1:-1] if t != " "]
        tokens = [tokens[0], *middle, tokens[-1]]
    return tokens


def t2t_detokenize(tokens: Sequence[str]) -> str:
    """tensor2tensor tokenizer.decode: a space between two adjacent alphanumeric tokens."""
    out: list[str] = []
    prev_alnum = False
    for i, token in enumerate(tokens):
        alnum = bool(token) and _is_alnum_char(token[0])
        if i > 0 and prev_alnum and alnum:
            out.append(" ")
        out.append(token)
        prev_alnum = alnum
    return "".join(out)


def _is_alnum_char(char: str) -> bool:
    return unicodedata.category(char)[0] in "LN" and ord(char) < sys.maxunicode


def count_tokens(lines: Iterable[str]) -> collections.Counter:
    """Token counts of text lines, the input of build_from_token_counts (t2t's corpus counts)."""
    counts: collections.Counter = collections.Counter()
    for line in lines:
        counts.update(t2t_tokenize(line))
    return counts


def _escape_token(token: str, alphabet: set[str]) -> str:
    """Escape "\\" and "_", write characters outside the alphabet (and "\\n") as "\\<code>;", end in "_"."""
    token = token.replace("\\", "\\\\").replace("_", "\\u")
    return "".join(c if c in alphabet and c != "\n" else f"\\{ord(c)};" for c in token) + "_"


def _unescape_token(escaped: str) -> str:
    def match(m: re.Match) -> str:
        if m.group(1) is None:
            return "_" if m.group(0) == "\\u" else "\\"
        try:
            return chr(int(m.group(1)))
        except (ValueError, OverflowError):
            return "\u3013"  # GETA MARK: t2t's stand-in for an impossible code point
    trimmed = escaped[:-1] if escaped.endswith("_") else escaped
    return _UNESCAPE_RE.sub(match, trimmed)


class SubwordTextEncoder:
    """tensor2tensor's invertible subword encoder, same vocab files and ids.

    Text -> tokens (t2t_tokenize) -> each token escaped and ended with "_" -> greedy longest-prefix
    subtokens. Reserved: "<pad>_" = 0, "<EOS>_" = 1. `decode(encode(x)) == x` for any text.
    """

    def __init__(self, filename: str | None = None) -> None:
        self.filename = filename
        self._alphabet: set[str] = set()
        self._all_subtoken_strings: list[str] = []
        self._subtoken_to_id: dict[str, int] = {}
        self._max_subtoken_len = 0
        self._cache: dict[str, list[int]] = {}
        self._fingerprint: str | None = None
        if filename is not None:
            self._load_from_file(filename)

    # ---- vocabulary state ------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self._all_subtoken_strings)

    @property
    def special_ids(self) -> dict[str, int]:
        return {PAD: PAD_ID, EOS: EOS_ID}

    @property
    def all_subtoken_strings(self) -> tuple[str, ...]:
        return tuple(self._all_subtoken_strings)

    def _init_subtokens(self, subtokens: list[str], reserved_tokens: Sequence[str] = ()) -> None:
        self._all_subtoken_strings = list(reserved_tokens) + list(subtokens)
        self._max_subtoken_len = max((len(s) for s in subtokens), default=0)
        offset = len(reserved_tokens)
        # As in t2t: a later duplicate wins and the empty string never matches.
        self._subtoken_to_id = {s: i + offset for i, s in enumerate(subtokens) if s}
        self._cache = {}
        self._fingerprint = None

    def _init_alphabet(self, tokens: Iterable[str]) -> None:
        self._alphabet = {c for token in tokens for c in token} | _ESCAPE_CHARS

    # ---- encoding ----------------------------------------------------------------------------
    def _escaped_to_subtokens(self, escaped: str) -> list[str]:
        """Greedy longest-prefix segmentation of an escaped token."""
        out = []
        start, n = 0, len(escaped)
        to_id, max_len = self._subtoken_to_id, self._max_subtoken_len
        while start < n:
            for end in range(min(n, start + max_len), start, -1):
                if escaped[start:end] in to_id:
                    out.append(escaped[start:end])
                    start = end
                    break
            else:
                raise EncoderError(
                    f"cannot segment {escaped!r} with the vocabulary of {self.filename}: "
                    "a character of the alphabet has no subtoken (a corrupt vocab file?)")
        return out

    def _token_ids(self, token: str) -> list[int]:
        ids = self._cache.get(token)
        if ids is None:
            to_id = self._subtoken_to_id
            ids = [to_id[s] for s in self._escaped_to_subtokens(_escape_token(token, self._alphabet))]
            if len(self._cache) >= _WORD_CACHE_LIMIT:
                self._cache.clear()
            self._cache[token] = ids
        return ids

    def _check_ready(self) -> None:
        if not self._subtoken_to_id:
            raise EncoderError("SubwordTextEncoder has no vocabulary: load a file or build one")

    def encode(self, text: str) -> list[int]:
        self._check_ready()
        if isinstance(text, bytes):
            text = text.decode("utf-8", "ignore")
        ids: list[int] = []
        for token in t2t_tokenize(text):
            ids.extend(self._token_ids(token))
        return ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_without_tokenizing(self, token_text: str) -> list[int]:
        self._check_ready()
        return list(self._token_ids(token_text))

    def decode(self, ids: Sequence[int], strip_extraneous: bool = False) -> str:
        ids = [int(i) for i in ids]
        if strip_extraneous:
            while ids and ids[-1] in (PAD_ID, EOS_ID):
                ids.pop()
        return t2t_detokenize(self._ids_to_tokens(ids))

    def _ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        joined = "".join(self._id_to_subtoken(i) for i in ids)
        tokens = []
        for part in joined.split("_"):
            if part:
                token = _unescape_token(part + "_")
                if token:
                    tokens.append(token)
        return tokens

    def _id_to_subtoken(self, i: int) -> str:
        return self._all_subtoken_strings[i] if 0 <= i < self.vocab_size else ""

    def tokenize(self, text: str) -> list[str]:
        """The subtoken strings of `text` (escaped form, as in the vocab file)."""
        return self.convert_ids_to_tokens(self.encode(text))

    def decode_list(self, ids: Sequence[int]) -> list[str]:
        return [self._id_to_subtoken(int(i)) for i in ids]

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return self.decode_list(ids)

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
        try:
            return [self._subtoken_to_id[t] for t in tokens]
        except KeyError as e:
            raise ValueError(f"subtoken {e.args[0]!r} is not in the vocabulary "
                             f"of {self.filename}") from None

    def fingerprint(self) -> str:
        """sha256 of the vocab file; of the subtoken list when built in memory and not stored."""
        if self._fingerprint is None:
            if self.filename is not None:
                self._fingerprint = sha256_of_file(self.filename)
            else:
                self._fingerprint = hashlib.sha256(self._file_bytes()).hexdigest()
        return self._fingerprint

    # ---- building ----------------------------------------------------------------------------
    def build_from_token_counts(self, token_counts: Mapping[str, int], min_count: int,
                                num_iterations: int = 4,
                                reserved_tokens: Sequence[str] | None = None,
                                max_subtoken_length: int | None = None,
                                _prepared: "_BuildInputs | None" = None) -> None:
        """t2t's iterative vocabulary: count the substrings of every token that start at a current
        subtoken boundary, keep those seen >= min_count (longest first, discounting their
        prefixes), always keep the alphabet; repeat."""
        prep = _prepared or _BuildInputs(token_counts, reserved_tokens, max_subtoken_length)
        self._alphabet = set(prep.alphabet)
        min_count = max(min_count, 1)
        for i in range(num_iterations):
            if i == 0:  # every character is a boundary: the same counts whatever min_count is
                counts = prep.first_counts()
            else:
                counts = self._count_candidate_subtokens(prep.escaped_by_count, max_subtoken_length)
            new_subtokens = self._select_subtokens(counts, min_count)
            self._init_subtokens(prep.escaped_reserved + new_subtokens)
            logging.info("subword iteration %d: vocab_size = %d", i, self.vocab_size)

    def _count_candidate_subtokens(self, escaped_by_count: list[tuple[int, list[str]]],
                                   max_subtoken_length: int | None) -> dict[str, int]:
        """Count every substring that starts at a current subtoken boundary, weighted by the token's
        count. Tokens are grouped by count so the substrings of a group are counted in C
        (Counter over itertools.accumulate prefixes) and weighted once per group."""
        counts: collections.Counter = collections.Counter()
        for weight, tokens in escaped_by_count:  # weight 1 first: the bulk, merged at dict speed
            substrings: list[str] = []
            for esc in tokens:
                n, start = len(esc), 0
                for sub in self._escaped_to_subtokens(esc):
                    # t2t counts esc[start:end] for end < start + max_subtoken_length.
                    stop = n if max_subtoken_length is None else min(n, start + max_subtoken_length - 1)
                    substrings.extend(itertools.accumulate(esc[start:stop]))
                    start += len(sub)
            group = collections.Counter(substrings)
            if weight == 1:
                counts.update(group)
            else:
                for sub, c in group.items():
                    counts[sub] += c * weight
        return counts

    def _select_subtokens(self, counts: dict[str, int], min_count: int) -> list[str]:
        by_len: dict[int, list[str]] = collections.defaultdict(list)
        for sub, count in counts.items():
            if count >= min_count:
                by_len[len(sub)].append(sub)
        chosen: list[tuple[int, str]] = []
        # Longest first, so accepting a string can take its count away from its prefixes.
        for length in sorted(by_len, reverse=True):
            for sub in by_len[length]:
                count = counts[sub]
                if count >= min_count:
                    if sub not in self._alphabet:
                        chosen.append((count, sub))
                    for k in range(1, length):
                        counts[sub[:k]] -= count
        chosen.extend((counts.get(a, 0), a) for a in self._alphabet)
        chosen.sort(reverse=True)
        return [sub for _, sub in chosen]

    @classmethod
    def build_to_target_size(cls, target_size: int, token_counts: Mapping[str, int],
                             min_val: int, max_val: int,
                             max_subtoken_length: int | None = None,
                             reserved_tokens: Sequence[str] | None = None,
                             num_iterations: int = 4) -> "SubwordTextEncoder":
        """Binary search on min_count for a vocab within 1% of target_size (t2t's bisection).

        When no min_count in [min_val, max_val] gets there, the closest vocab is returned with a
        warning (t2t returns it silently)."""
        if min_val > max_val:
            raise ValueError(f"min_val {min_val} is greater than max_val {max_val}")
        if target_size < 1:
            raise ValueError(f"target_size must be positive, got {target_size}")

        prepared = _BuildInputs(token_counts, reserved_tokens, max_subtoken_length)

        def bisect(lo: int, hi: int) -> "SubwordTextEncoder":
            present = (lo + hi) // 2
            enc = cls()
            enc.build_from_token_counts(token_counts, present, num_iterations,
                                        reserved_tokens=reserved_tokens,
                                        max_subtoken_length=max_subtoken_length,
                                        _prepared=prepared)
            logging.info("min_count %d: vocab_size %d (target %d)", present, enc.vocab_size,
                         target_size)
            if abs(enc.vocab_size - target_size) * 100 < target_size or lo >= hi or present < 2:
                return enc
            other = bisect(present + 1, hi) if enc.vocab_size > target_size else bisect(lo, present - 1)
            if abs(other.vocab_size - target_size) < abs(enc.vocab_size - target_size):
                return other
            return enc

        enc = bisect(int(min_val), int(max_val))
        if abs(enc.vocab_size - target_size) * 100 >= target_size:
            logging.warning(
                "SubwordTextEncoder: vocab size %d is not within 1%% of the target %d for any "
                "min_count in [%d, %d]; using the closest (the corpus may be too small)",
                enc.vocab_size, target_size, min_val, max_val)
        return enc

    @classmethod
    def build_from_generator(cls, generator: Iterable[str], target_size: int,
                             max_subtoken_length: int | None = None,
                             reserved_tokens: Sequence[str] | None = None) -> "SubwordTextEncoder":
        """t2t's build_from_generator: count the tokens of the texts, then build_to_target_size."""
        return cls.build_to_target_size(target_size, count_tokens(generator), 1, 1000,
                                        max_subtoken_length=max_subtoken_length,
                                        reserved_tokens=reserved_tokens)

    # ---- files ---------------------------------------------------------------------------------
    def _file_bytes(self, add_single_quotes: bool = True) -> bytes:
        q = "'" if add_single_quotes else ""
        return "".join(f"{q}{s}{q}\n" for s in self._all_subtoken_strings).encode("utf-8")

    def store_to_file(self, filename: str, add_single_quotes: bool = True) -> None:
        """Write the t2t vocab file (one subtoken a line, single-quoted) atomically."""
        bad = [s for s in self._all_subtoken_strings if "\n" in s]
        if bad:
            raise EncoderError(f"cannot store subtokens holding a newline to {filename}: {bad[:3]}")
        _atomic_write(filename, self._file_bytes(add_single_quotes))

    def _load_from_file(self, filename: str) -> None:
        text = _decode_utf8(_read_bytes(filename, "subword vocab file"), filename)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the final newline
        subtokens = []
        for line in lines:
            s = line.rstrip()
            # t2t accepts both quoted ('x' or "x") and bare subtokens.
            if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
                s = s[1:-1]
            subtokens.append(s)
        if len(subtokens) < len(RESERVED_TOKENS):
            raise EncoderError(f"{filename}: {len(subtokens)} lines; a subword vocab file lists "
                               "<pad>_ and <EOS>_ and then the subtokens")
        _check_subword_vocab(subtokens, filename)
        self._init_subtokens(subtokens)
        self._init_alphabet(subtokens)



def _check_subword_vocab(subtokens: list[str], filename: str) -> None:
    """A t2t vocab starts with the reserved tokens, and every character in it is a subtoken."""
    for i, reserved in enumerate(RESERVED_TOKENS):
        if subtokens[i] not in (reserved, reserved + "_"):
            raise EncoderError(
                f"{filename}:{i + 1}: expected {reserved + '_'!r} (tensor2tensor subword vocab "
                f"files start with <pad>_ and <EOS>_), found {subtokens[i]!r}")
    present = set(subtokens)
    needed = {c for s in subtokens[len(RESERVED_TOKENS):] for c in s} | _ESCAPE_CHARS
    missing = sorted(needed - present)
    if missing:
        raise EncoderError(
            f"{filename}: not a complete subword vocab file: the characters "
            f"{''.join(missing[:20])!r} are used but have no subtoken of their own, so some text "
            "could not be encoded")


class _BuildInputs:
    """What every build_from_token_counts call over the same counts shares: the alphabet, the escaped
    tokens grouped by count, and the first iteration's substring counts (computed once, copied per
    use; build_to_target_size's bisection would otherwise recount them for every min_count)."""

    def __init__(self, token_counts: Mapping[str, int], reserved_tokens: Sequence[str] | None,
                 max_subtoken_length: int | None) -> None:
        self.reserved = _check_reserved(reserved_tokens)
        alphabet = {c for t in (*token_counts.keys(), *self.reserved) for c in t} | _ESCAPE_CHARS
        # "\n" is always escaped when encoding; keeping it out of the alphabet keeps the file valid.
        alphabet.discard("\n")
        self.alphabet = frozenset(alphabet)
        by_count: dict[int, list[str]] = collections.defaultdict(list)
        for tok, count in token_counts.items():
            by_count[int(count)].append(_escape_token(tok, alphabet))
        self.escaped_by_count = sorted(by_count.items())
        self.escaped_reserved = [_escape_token(t, alphabet) for t in self.reserved]
        self.max_subtoken_length = max_subtoken_length
        self._first_counts: dict[str, int] | None = None

    def first_counts(self) -> dict[str, int]:
        if self._first_counts is None:
            initial = SubwordTextEncoder()
            initial._alphabet = set(self.alphabet)
            initial._init_subtokens(sorted(self.alphabet), reserved_tokens=self.reserved)
            self._first_counts = initial._count_candidate_subtokens(
                self.escaped_by_count, self.max_subtoken_length)
        return collections.Counter(self._first_counts)  # a copy: selection decrements it


def _check_reserved(reserved_tokens: Sequence[str] | None) -> list[str]:
    if reserved_tokens is None:
        return list(RESERVED_TOKENS)
    for default, proposed in zip(RESERVED_TOKENS, reserved_tokens):
        if default != proposed:
            raise ValueError(f"reserved_tokens must start with {RESERVED_TOKENS}, "
                             f"got {list(reserved_tokens)}")
    return list(reserved_tokens)
