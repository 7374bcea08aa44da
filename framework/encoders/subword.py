"""tensor2tensor's SubwordTextEncoder: its vocab file format, tokenizer, escaping and segmentation.

Decisions:
- SubwordTextEncoder keeps tensor2tensor's vocab file format (one quoted escaped subtoken per line,
  `<pad>_`=0 and `<EOS>_`=1), its tokenizer, escaping and greedy segmentation, so a vocab file gives
  the same ids in both. Speed: tokens are found by one regular expression instead of a per-character
  loop, every token's ids are cached; vocab building escapes each token once instead of once per
  iteration, counts substrings in C (tokens grouped by count), and shares the first iteration's
  counts across build_to_target_size's bisection steps. One deliberate difference when building: "\n"
  never enters the alphabet (t2t puts it in and then writes a vocab line that breaks the file in two;
  encoding always escapes "\n" anyway).
"""
from __future__ import annotations

import collections
import hashlib
import itertools
import re
import sys
import unicodedata
from typing import Iterable, Mapping, Sequence

from absl import logging

from textrain.framework.encoders.base import EncoderError, atomic_write, decode_utf8, read_bytes, sha256_of_file

_WORD_CACHE_LIMIT = 1 << 20  # tokens -> ids cache of an encoder (emptied when full)


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
        atomic_write(filename, self._file_bytes(add_single_quotes))

    def _load_from_file(self, filename: str) -> None:
        text = decode_utf8(read_bytes(filename, "subword vocab file"), filename)
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
    for default, proposed in zip(RESERVED_TOKENS, reserved_tokens, strict=False):  # a prefix
        if default != proposed:
            raise ValueError(f"reserved_tokens must start with {RESERVED_TOKENS}, "
                             f"got {list(reserved_tokens)}")
    return list(reserved_tokens)
