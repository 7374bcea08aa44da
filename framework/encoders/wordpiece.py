"""BERT WordPiece, the fast encoder: FullTokenizer's ids (encoders/reference.py) at C speed.

Decisions:
- The default encoder (backend="regex") splits a text at " " only (one C-level split) and looks each
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
"""
from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import json
import os
import re
import sys
import unicodedata
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from textrain.framework.encoders.base import sha256_of_file
from textrain.framework.encoders.reference import (
    BERT_SPECIAL_TOKENS,
    MAX_INPUT_CHARS_PER_WORD,
    ReferenceWordpieceTokenizer,
    bert_basic_tokenize,
    is_cjk,
    load_wordpiece_vocab,
)


def hf_bert_pipeline(tokenizer, do_lower_case: bool) -> None:
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
        cjk=lambda cp, cat: is_cjk(cp))


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
        hf_bert_pipeline(self._hf, do_lower_case)
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
            for i, enc in zip(fast_idx, encodings, strict=True):
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
