"""ELECTRA pretraining data: google-research/electra `build_pretraining_dataset.py`, deterministic and parallel.

Each example is `[CLS] A [SEP] (B [SEP])` padded to `max_seq_length`, written as the original's three int64
features `input_ids`, `input_mask`, `segment_ids` (so the original `pretrain_data.py` reads our records). Masking is
NOT done here: ELECTRA masks dynamically in the graph (models/electra.py). Whole-word masking (not in the original;
`do_whole_word_mask`, with `word_segmenter="jieba"` for Chinese as Chinese-BERT-wwm) therefore needs the word groups
in the records: a fourth int64 feature `word_start` (1 = the token starts a word; 0 = a `##` piece or a CJK character
inside a segmenter word), which the reader adds when the manifest says so and the model then masks by.

Semantics kept from the original `ExampleBuilder` (facts, re-implemented):
- Sentences (lines) of one document are accumulated until their token count reaches the target length, then one
  example is made from everything accumulated; the end of a document (a blank line when `blanks_separate_docs`, and
  always the end of a file) flushes what is left as a (shorter) example. Examples never cross documents.
- Target length: `max_seq_length`; after each example, with probability 0.05 the NEXT target is
  `randint(5, max_seq_length)` instead.
- With probability 0.1 an example has one segment only; otherwise the first segment aims at
  `(target - 3) // 2` tokens: a sentence joins A when A is empty or stays under that aim, or -- only while B is empty
  and A is still under the aim -- with probability 0.5 when it would put A over it; everything after goes to B.
- A is cut to `max_seq_length - 2` tokens, B to what is left after `[CLS] A [SEP]` and its own `[SEP]`; an empty B
  gives a single-segment example. The text that overflows is dropped (~17 % of the tokens on Jane Austen's novels,
  DESIGN.md §7) -- the documented option `carry_overflow=True` instead carries it into the next example of the same
  document (cut at the example's content capacity `target - 3`; the carried part may start mid-word, as the
  original's cut does).
- `blanks_separate_docs=False` (one-sentence-per-line corpora without document breaks, e.g. OpenWebText): blank lines
  are skipped and a document is a whole file. This is a real bool here: the original's `type=bool` argparse flag
  turned "False" into True (google-research/electra#84).

Decisions that differ from the original, on purpose:
- Determinism and parallelism: the original shuffles its file list with an unseeded `random` and parallelises per
  input file only. Here the corpus is read once and each document goes to the shard a hash of its text names
  (framework/shuffle.py), in corpus order within the shard; each shard runs its own builder seeded by
  `framework.generator.shard_rng(seed, split, shard)`. The same seed and corpus give byte-identical shards whatever
  the number of workers, tasks or runner.
- Splits: with `dev_fraction` f > 0, each document joins the dev split with probability f by that hash (bert_pretrain's
  rule); the original has no held-out split, and f = 0 (the default) makes none.
- `strip_accents=False` with lower-casing needs an encoder option framework.encoders does not offer (it always
  strips when lower-casing, as BERT does); that combination is refused up front rather than silently ignored.
- The manifest records the vocab's real size, its sha256, and the ids of [PAD] [CLS] [SEP] [MASK]: the model masks
  in the graph and reads them from there (a vocab built here has them at 0-4, Google's at 0/101/102/103).
- Speed: the corpus is read once per datagen run (framework/shuffle.py), ids kept in arrays on the default
  path; the measurements and both paths are described in docs/HISTORY.md.
"""
from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
from absl import logging

from textrain.framework import corpus, corpus_formats, records, word_segmenters
from textrain.framework.generator import shard_rng
from textrain.framework.lazy_tf import tf
from textrain.framework.problem import DatasetSplit, ModeKeys
from textrain.framework.registry import register_problem
from textrain.framework.settings import help_text
from textrain.framework.text_problems import WordpieceCorpusProblem

# Probabilities and constants of the original builder (build_pretraining_dataset.py).
SINGLE_SEGMENT_PROB = 0.1
RANDOM_TARGET_PROB = 0.05
MIN_RANDOM_TARGET = 5
OVER_AIM_JOIN_PROB = 0.5
_NO_SECOND_SEGMENT = 100_000  # "first segment target" that makes every sentence join A


@dataclasses.dataclass
class BuilderStats:
    """Token accounting of one builder: what came in, what landed in examples (the rest was dropped)."""

    examples: int = 0
    tokens_in: int = 0
    tokens_kept: int = 0
    single_segment: int = 0

    @property
    def dropped_fraction(self) -> float:
        return 0.0 if not self.tokens_in else 1.0 - self.tokens_kept / self.tokens_in


def make_features(first: Sequence[int], second: Sequence[int], max_length: int, cls_id: int,
                  sep_id: int) -> dict[str, list[int]]:
    """`[CLS] first [SEP] (second [SEP])` with input mask and segment ids, zero-padded to `max_length`."""
    input_ids = [cls_id, *first, sep_id]
    segment_ids = [0] * len(input_ids)
    if second:
        input_ids += [*second, sep_id]
        segment_ids += [1] * (len(second) + 1)
    if len(input_ids) > max_length:
        raise ValueError(f"example of {len(input_ids)} tokens exceeds max_seq_length={max_length}")
    pad = max_length - len(input_ids)
    return {"input_ids": input_ids + [0] * pad,
            "input_mask": [1] * len(input_ids) + [0] * pad,
            "segment_ids": segment_ids + [0] * pad}


def choose_segments(lengths: Sequence[int], target_length: int, rng: random.Random) -> tuple[list[int], list[int]]:
    """The original's choice of segments from the accumulated sentences' token counts: the indices of the
    sentences of A and of B (the one statement of the rule; `split_segments` and `segment_ranges` cut them)."""
    if rng.random() < SINGLE_SEGMENT_PROB:
        aim = _NO_SECOND_SEGMENT
    else:
        aim = (target_length - 3) // 2  # 3 = [CLS] and two [SEP] not yet in the text
    first: list[int] = []
    second: list[int] = []
    first_len = second_len = 0  # the original tests its token lists; empty list <=> no token
    for i, n in enumerate(lengths):
        # Same order of tests as the original, so the rng is consumed under the same conditions.
        if (not first_len or first_len + n < aim
                or (not second_len and first_len < aim and rng.random() < OVER_AIM_JOIN_PROB)):
            first.append(i)
            first_len += n
        else:
            second.append(i)
            second_len += n
    return first, second


def split_segments(sentences: Sequence[Sequence[int]], target_length: int, max_length: int,
                   rng: random.Random) -> tuple[list[int], list[int]]:
    """The original's segments A and B from the accumulated sentences (`choose_segments`), cut to fit
    `max_length`: A to max_length - 2 tokens, B to what is left after [CLS] A [SEP] and its own [SEP]."""
    a, b = choose_segments([len(s) for s in sentences], target_length, rng)
    first = list(itertools.islice(itertools.chain.from_iterable(sentences[i] for i in a), max_length - 2))
    second = list(itertools.islice(itertools.chain.from_iterable(sentences[i] for i in b),
                                   max(0, max_length - len(first) - 3)))
    return first, second


def _cut_ranges(starts: Sequence[int], lengths: Sequence[int], chosen: list[int], cap: int
                ) -> tuple[list[int], int]:
    """The chosen sentences (start, length in one id array) as ranges [s0, e0, s1, e1, ...] holding their
    first `cap` tokens (adjacent sentences make one range), and that token count."""
    out: list[int] = []
    n = 0
    for i in chosen:
        if n >= cap:
            break
        start = starts[i]
        take = min(lengths[i], cap - n)
        if out and out[-1] == start:
            out[-1] = start + take
        else:
            out += (start, start + take)
        n += take
    return out, n


def segment_ranges(starts: Sequence[int], lengths: Sequence[int], target_length: int, max_length: int,
                   rng: random.Random) -> tuple[list[int], int, list[int], int]:
    """`split_segments` of sentences held in one id array (sentence i = ids[starts[i]:starts[i] + lengths[i]]):
    A and B as ranges of that array, already cut, with their token counts (A ranges, A count, B ranges, B
    count). The same choice and cut, no id copied."""
    a, b = choose_segments(lengths, target_length, rng)
    first, first_len = _cut_ranges(starts, lengths, a, max_length - 2)
    second, second_len = _cut_ranges(starts, lengths, b, max(0, max_length - first_len - 3))
    return first, first_len, second, second_len


class ExampleBuilder:
    """Turns a stream of tokenised sentences, document by document, into ELECTRA examples.

    `add_sentence` and `end_document` return the examples they complete (a list: with `carry_overflow` one long
    sentence can complete several): feature dicts, or with `as_segments` the (A, B) id lists that
    `segment_columns` turns into features many at a time (the datagen's path: no per-example dict or padding).
    """

    def __init__(self, max_length: int, cls_id: int, sep_id: int, rng: random.Random,
                 carry_overflow: bool = False, as_segments: bool = False):
        if max_length < MIN_RANDOM_TARGET:
            raise ValueError(f"max_seq_length must be at least {MIN_RANDOM_TARGET}, got {max_length}")
        self.max_length = max_length
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.rng = rng
        self.carry_overflow = carry_overflow
        self.as_segments = as_segments
        self.stats = BuilderStats()
        self._sentences: list[list[int]] = []
        self._length = 0
        self._target = max_length

    def add_sentence(self, token_ids: Sequence[int]) -> list:
        """Adds one sentence of the current document."""
        if not len(token_ids):  # an empty sentence changes nothing in the original either
            return []
        self.stats.tokens_in += len(token_ids)
        # The builder never changes a sentence in place (cuts make new lists), so a list is kept as given.
        self._sentences.append(token_ids if type(token_ids) is list else list(token_ids))
        self._length += len(token_ids)
        examples = []
        while self._length >= self._target:
            carried = self._take_overflow() if self.carry_overflow else []
            examples.append(self._create_example())
            if carried:
                self._sentences, self._length = [carried], len(carried)
        return examples

    def add_document(self, sentences: Iterable[Sequence[int]]) -> list:
        """`add_sentence` of each sentence, then `end_document`: the examples of a whole document. Without
        carry_overflow the accumulation runs in one local loop (the per-sentence method calls were a third
        of the builder's time); the examples and the rng's use are the same."""
        if self.carry_overflow:
            examples = [e for sentence in sentences for e in self.add_sentence(sentence)]
            return examples + self.end_document()
        examples = []
        accumulated, length, target, tokens = self._sentences, self._length, self._target, 0
        for sentence in sentences:
            n = len(sentence)
            if not n:
                continue
            tokens += n
            accumulated.append(sentence if type(sentence) is list else list(sentence))
            length += n
            if length >= target:
                self._sentences, self._length = accumulated, length
                examples.append(self._create_example())
                accumulated, length, target = self._sentences, 0, self._target
        self._sentences, self._length = accumulated, length
        self.stats.tokens_in += tokens
        return examples + self.end_document()

    def end_document(self) -> list:
        """Flushes what the document left as one (shorter) example."""
        return [self._create_example()] if self._length else []

    def add_document_spans(self, start: int, lengths: Sequence[int]) -> list[tuple[list[int], int, list[int], int]]:
        """`add_document` of a document whose sentences lie one after another in an id array from `start`
        (sentence i has lengths[i] ids): the same examples, as `segment_ranges` of that array (what
        `range_columns` turns into features). Not with carry_overflow (it cuts sentences)."""
        if self.carry_overflow or self._length:
            raise ValueError("add_document_spans starts a document and does not carry overflow: use add_document")
        examples = []
        starts: list[int] = []
        lens: list[int] = []
        length, target, tokens = 0, self._target, 0
        for n in lengths:
            if n:
                starts.append(start)
                lens.append(n)
                length += n
                tokens += n
                if length >= target:
                    examples.append(self._create_span_example(starts, lens))
                    starts, lens, length, target = [], [], 0, self._target
            start += n
        if lens:
            examples.append(self._create_span_example(starts, lens))
        self.stats.tokens_in += tokens
        return examples

    def _create_span_example(self, starts: list[int], lengths: list[int]) -> tuple[list[int], int, list[int], int]:
        example = segment_ranges(starts, lengths, self._target, self.max_length, self.rng)
        self._next_target(example[1], example[3])
        return example

    def _next_target(self, first_len: int, second_len: int) -> None:
        """After an example: the next target length (the original's rng call) and the statistics."""
        if self.rng.random() < RANDOM_TARGET_PROB:
            self._target = self.rng.randint(MIN_RANDOM_TARGET, self.max_length)
        else:
            self._target = self.max_length
        self.stats.examples += 1
        self.stats.tokens_kept += first_len + second_len
        self.stats.single_segment += not second_len

    def _take_overflow(self) -> list[int]:
        """Cuts the accumulated text at the example's content capacity; returns the cut-off tail."""
        capacity = max(1, min(self._target, self.max_length) - 3)
        if self._length <= capacity:
            return []
        excess = self._length - capacity
        tail: list[int] = []
        while excess > 0:
            last = self._sentences[-1]
            if len(last) <= excess:
                tail = last + tail
                excess -= len(last)
                self._sentences.pop()
            else:
                tail = last[len(last) - excess:] + tail
                self._sentences[-1] = last[:len(last) - excess]
                excess = 0
        self._length = capacity
        return tail

    def _create_example(self) -> dict[str, list[int]] | tuple[list[int], list[int]]:
        first, second = split_segments(self._sentences, self._target, self.max_length, self.rng)
        self._sentences, self._length = [], 0
        self._next_target(len(first), len(second))
        if self.as_segments:
            return first, second
        return make_features(first, second, self.max_length, self.cls_id, self.sep_id)


def build_examples(documents: Iterable[Sequence[Sequence[int]]], builder: ExampleBuilder
                   ) -> Iterator[dict[str, list[int]]]:
    """Examples of tokenised documents (lists of sentences of ids), in order."""
    for document in documents:
        for sentence in document:
            yield from builder.add_sentence(sentence)
        yield from builder.end_document()


def segment_columns(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], max_length: int, cls_id: int,
                    sep_id: int) -> dict[str, np.ndarray]:
    """`make_features` of many (A, B) pairs at once, as int64 arrays [N, max_length]: the ids of all
    examples are laid out in one list and scattered into the zero matrix by a mask (row-major order)."""
    first_len = np.fromiter((len(a) for a, _ in pairs), np.int64, len(pairs))
    second_len = np.fromiter((len(b) for _, b in pairs), np.int64, len(pairs))
    length = first_len + 2 + np.where(second_len > 0, second_len + 1, 0)
    if len(pairs) and int(length.max()) > max_length:
        raise ValueError(f"example of {int(length.max())} tokens exceeds max_seq_length={max_length}")
    flat: list[int] = []
    for a, b in pairs:
        flat.append(cls_id)
        flat.extend(a)
        flat.append(sep_id)
        if b:
            flat.extend(b)
            flat.append(sep_id)
    position = np.arange(max_length)
    real = position < length[:, None]
    input_ids = np.zeros((len(pairs), max_length), np.int64)
    input_ids[real] = flat
    second = real & (position >= (first_len + 2)[:, None])
    return {"input_ids": input_ids, "input_mask": real.astype(np.int64), "segment_ids": second.astype(np.int64)}


def range_columns(ids: np.ndarray, examples: Sequence[tuple[list[int], int, list[int], int]], max_length: int,
                  cls_id: int, sep_id: int) -> dict[str, np.ndarray]:
    """`segment_columns` of examples given as `segment_ranges` of the id array `ids`: every row is gathered
    from `ids` by one numpy index ([CLS] and [SEP] are two extra slots after the ids), no list of ids made."""
    n = len(examples)
    first_len = np.fromiter((e[1] for e in examples), np.int64, n)
    second_len = np.fromiter((e[3] for e in examples), np.int64, n)
    length = first_len + 2 + np.where(second_len > 0, second_len + 1, 0)
    if n and int(length.max()) > max_length:
        raise ValueError(f"example of {int(length.max())} tokens exceeds max_seq_length={max_length}")
    cls_at, sep_at = len(ids), len(ids) + 1
    source = np.concatenate([ids.astype(np.int64, copy=False), np.array([cls_id, sep_id], np.int64)])
    bounds: list[int] = []
    for first, _, second, second_n in examples:
        bounds += (cls_at, cls_at + 1)
        bounds += first
        bounds += (sep_at, sep_at + 1)
        if second_n:
            bounds += second
            bounds += (sep_at, sep_at + 1)
    pairs = np.array(bounds, np.int64).reshape(-1, 2)
    starts, sizes = pairs[:, 0], pairs[:, 1] - pairs[:, 0]
    out_starts = np.cumsum(sizes) - sizes  # where each range begins in the concatenated rows
    gather = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(starts - out_starts, sizes)
    position = np.arange(max_length)
    real = position < length[:, None]
    input_ids = np.zeros((n, max_length), np.int64)
    input_ids[real] = source[gather]
    second = real & (position >= (first_len + 2)[:, None])
    return {"input_ids": input_ids, "input_mask": real.astype(np.int64), "segment_ids": second.astype(np.int64)}


def build_batches_flat(texts: Iterable[str], encoder: Any, builder: ExampleBuilder, group_lines: int = 2048
                       ) -> Iterator[records.SampleBatch]:
    """What `build_batches` makes of `encode_lines` of each document's lines (`corpus.document_lines` of its
    raw text), from ids kept in arrays: the raw texts of ~`group_lines` lines are encoded at once by the
    encoder's `encode_lines_flat` (one split, no string or list per line: ids of every line in one array
    and each line's count), the builder chooses ranges of that array (`add_document_spans`) and
    `range_columns` gathers the rows. The same examples in the same order (a batch holds the examples of
    one group; a record's bytes do not depend on its batch).

    Why raw lines give document_lines' ids: a blank line has no ids (the builder skips empty sentences
    either way), and every character str.strip removes at a line's ends is one BERT deletes as a control
    character or separates words at (its own `str.split()`; U+2028/U+2029 included), so at a line's ends
    it changes no id (tests/test_electra_pretrain.py compares both paths on such lines)."""
    group: list[str] = []
    lines = 0
    for text in itertools.chain(texts, [None]):
        if text is not None:
            group.append(text)
            lines += text.count("\n") + 1
            if lines < group_lines:
                continue
        if not group:
            break
        line_counts = [t.count("\n") + 1 for t in group]
        ids, lengths = encoder.encode_lines_flat("\n".join(group))
        lengths = lengths.tolist()
        examples: list = []
        start = line = 0
        for count in line_counts:
            doc_lengths = lengths[line:line + count]
            examples += builder.add_document_spans(start, doc_lengths)
            start += sum(doc_lengths)
            line += count
        if examples:
            yield records.SampleBatch(range_columns(ids, examples, builder.max_length, builder.cls_id,
                                                    builder.sep_id))
        group, lines = [], 0


def build_batches(documents: Iterable[Sequence[Sequence[int]]], builder: ExampleBuilder, batch_size: int = 1024
                  ) -> Iterator[records.SampleBatch]:
    """`build_examples` as SampleBatches of up to `batch_size` examples (the builder makes segments)."""
    if not builder.as_segments:
        raise ValueError("build_batches needs an ExampleBuilder(..., as_segments=True)")
    pairs: list = []

    def flush() -> records.SampleBatch:
        columns = segment_columns(pairs, builder.max_length, builder.cls_id, builder.sep_id)
        pairs.clear()
        return records.SampleBatch(columns)

    for document in documents:
        pairs.extend(builder.add_document(document))
        if len(pairs) >= batch_size:
            yield flush()
    if pairs:
        yield flush()


# ------------------------------------------------------------------------------------------------ #
# Documents
# ------------------------------------------------------------------------------------------------ #
def read_text_documents(paths: Sequence[str], blanks_separate_docs: bool, on_bad_utf8: str = "error"
                        ) -> Iterator[list[str]]:
    """Documents (lists of stripped non-empty lines). A blank line ends one only if `blanks_separate_docs`;
    a new file always does (the original flushes at the end of every file)."""
    for text in document_texts(paths, blanks_separate_docs, on_bad_utf8):
        yield corpus.document_lines(text)


def document_texts(paths: Sequence[str], blanks_separate_docs: bool, on_bad_utf8: str = "error",
                   keep: Callable[[int], bool] | None = None) -> Iterator[str]:
    """The documents of `read_text_documents` as raw texts, only those whose index has keep(index) (all
    without `keep`): the others are never copied out nor split into lines."""
    if blanks_separate_docs:
        yield from corpus.iter_document_texts(list(paths), on_bad_utf8, keep)
        return
    index = -1
    for path in paths:
        text = corpus.read_text(path, on_bad_utf8)
        if text and not text.isspace():
            index += 1
            if keep is None or keep(index):
                yield text


# ------------------------------------------------------------------------------------------------ #
# The problem
# ------------------------------------------------------------------------------------------------ #
SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")  # the model masks dynamically, so it needs these ids


@dataclasses.dataclass
class ElectraPretrainHParams(corpus_formats.DocumentSettings):
    """Settings; names follow the original script's flags (framework/flags.py makes absl flags of them)."""

    input_file: str = dataclasses.field(default="", metadata=help_text(
        "Text corpus: comma-separated files/globs, one sentence per line, blank line between documents."))
    vocab_file: str = dataclasses.field(default="", metadata=help_text(
        "WordPiece vocab; empty = build one of --vocab_size tokens from the corpus into the problem's dir."))
    vocab_size: int = dataclasses.field(default=30522, metadata=help_text(
        "Size of a vocab built from the corpus (the real size is recorded in the manifest)."))
    max_seq_length: int = dataclasses.field(default=128, metadata=help_text("Tokens per example.",
                                                                             low=MIN_RANDOM_TARGET))
    do_lower_case: bool = dataclasses.field(default=True, metadata=help_text("Lower-case the text."))
    strip_accents: bool = dataclasses.field(default=True, metadata=help_text(
        "Strip accents when lower-casing (ELECTRA's tokenizer option)."))
    blanks_separate_docs: bool = dataclasses.field(default=True, metadata=help_text(
        "Blank lines end documents; False: blank lines are skipped and a document is a whole file."))
    carry_overflow: bool = dataclasses.field(default=False, metadata=help_text(
        "Carry the text that overflows an example into the next one instead of dropping it."))
    on_bad_utf8: str = dataclasses.field(default="error", metadata=help_text(
        "error | replace | skip", choices=corpus.BAD_UTF8_POLICIES))
    dev_fraction: float = dataclasses.field(default=0.0, metadata=help_text(
        "Share of documents held out as the dev split (0: train only, as the original).",
        low=0.0, high=1.0, high_open=True))
    do_whole_word_mask: bool = dataclasses.field(default=False, metadata=help_text(
        "Also write `word_start` (1 = the token starts a word, 0 = it continues one: a ## piece, or with "
        "--word_segmenter a CJK character inside a segmenter word); the model then masks whole words."))
    word_segmenter: str = dataclasses.field(default="", metadata=help_text(
        "With --do_whole_word_mask: 'jieba' groups CJK characters by jieba's words (Chinese-BERT-wwm)."))

    def validate(self) -> None:
        """Relations between settings, naming the flags (each field's own range is declared above and
        checked first by framework.settings.validate_settings)."""
        checks = [
            (self.vocab_size > 5 or bool(self.vocab_file),
             f"--vocab_size must be > 5 to build a vocab, got {self.vocab_size}"),
            (self.word_segmenter in ("", *word_segmenters.SEGMENTERS),
             f"--word_segmenter must be one of {word_segmenters.SEGMENTERS} or empty, got {self.word_segmenter!r}"),
            (not self.word_segmenter or self.do_whole_word_mask,
             "--word_segmenter only decides the groups of whole-word masking: add --do_whole_word_mask"),
            # WordpieceEncoder always strips accents when lower-casing (BERT's BasicTokenizer does).
            (self.strip_accents or not self.do_lower_case,
             "--nostrip_accents with --do_lower_case is not supported by framework.encoders."
             "WordpieceEncoder (it always strips accents when lower-casing, as BERT's tokenizer)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@register_problem
class ElectraPretrain(WordpieceCorpusProblem):
    """Replaced-token-detection pretraining data (google-research/electra's build_pretraining_dataset)."""

    HParams = ElectraPretrainHParams

    required_special_tokens = SPECIAL_TOKENS

    def __init__(self, hparams: ElectraPretrainHParams | None = None):
        super().__init__(hparams)
        self.hparams.validate()

    @property
    def whole_file_documents(self) -> bool:
        return not self.hparams.blanks_separate_docs

    def documents(self, paths: list[str]) -> Iterator[list[str]]:
        return read_text_documents(paths, self.hparams.blanks_separate_docs, self.hparams.on_bad_utf8)

    def feature_encoders(self, data_dir: str) -> dict[str, Any]:
        return {"input_ids": self.encoder(data_dir)}

    def manifest_settings(self, data_dir: str) -> dict:
        """Also the special ids the model masks with. The whole-word settings appear only when used (data
        dirs made before they existed stay valid), with the segmenter's version (its dictionary decides)."""
        encoder = self.encoder(data_dir)
        settings = dict(super().manifest_settings(data_dir),
                        special_ids={t: int(encoder.special_ids[t]) for t in SPECIAL_TOKENS})
        if not self.hparams.do_whole_word_mask:
            settings.pop("do_whole_word_mask", None)
        if self.hparams.word_segmenter:
            settings["word_segmenter_version"] = word_segmenters.load_segmenter(self.hparams.word_segmenter)[1]
        else:
            settings.pop("word_segmenter", None)
        return settings

    def word_continuations(self, encoder: Any) -> Callable[[Sequence[str]], list[list[int]]]:
        """lines -> ids, with WORD_CONTINUES_BIT on ## pieces and (with a segmenter) on CJK characters that
        continue a segmenter word (framework/word_segmenters.py)."""
        tokens = encoder.convert_ids_to_tokens(list(range(encoder.vocab_size)))
        is_subword = np.array([t.startswith("##") for t in tokens], dtype=bool)
        words = (word_segmenters.WordContinuation(self.hparams.word_segmenter, encoder)
                 if self.hparams.word_segmenter else None)

        def encode(lines: Sequence[str]) -> list[list[int]]:
            ids = encode_lines(encoder, lines)
            flags = words.flags(lines, ids) if words else [np.zeros(len(i), dtype=bool) for i in ids]
            flags = [f | is_subword[np.asarray(i, dtype=np.int64)] if len(i) else f for f, i in zip(flags, ids)]
            return word_segmenters.mark_continuations(ids, flags)

        return encode

    def generate_shard(self, data_dir: str, tmp_dir: str, split: str, shard_id: int, num_shards: int,
                       seed: int) -> Iterator[dict]:
        """This shard's documents (round-robin) through one builder seeded by shard_rng."""
        hp = self.hparams
        encoder = self.encoder(data_dir)
        builder = ExampleBuilder(hp.max_seq_length, encoder.special_ids["[CLS]"], encoder.special_ids["[SEP]"],
                                 shard_rng(seed, split, shard_id), carry_overflow=hp.carry_overflow,
                                 as_segments=True)
        texts = self.shard_texts("", split, shard_id, num_shards)
        if not hp.do_whole_word_mask and not hp.carry_overflow and hasattr(encoder, "encode_lines_flat"):
            # The same examples from ids kept in arrays (build_batches_flat).
            yield from build_batches_flat(texts, encoder, builder)
            self._log_stats(builder, split, shard_id, num_shards)
            return
        mine = map(corpus.document_lines, texts)
        if hp.do_whole_word_mask:
            encode = self.word_continuations(encoder)
            yield from map(with_word_start, build_batches((encode(doc) for doc in mine), builder))
        else:
            yield from build_batches((encode_lines(encoder, doc) for doc in mine), builder)
        self._log_stats(builder, split, shard_id, num_shards)

    def _log_stats(self, builder: ExampleBuilder, split: str, shard_id: int, num_shards: int) -> None:
        stats = builder.stats
        logging.info("%s-%s shard %d/%d: %d examples from %d tokens, %.1f%% of them dropped, %.1f%% single-segment",
                     self.name, split, shard_id, num_shards, stats.examples, stats.tokens_in,
                     100 * stats.dropped_fraction, 100 * stats.single_segment / max(1, stats.examples))

    def generate_encoded_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[dict]:
        """Everything as one shard (seed 0), as sample dicts (of arrays); the driver uses generate_shard."""
        return records.iter_samples(self.generate_shard(data_dir, tmp_dir, split, 0, 1, 0))

    # ------------------------------------------------------------------ reading side
    def example_reading_spec(self) -> dict:
        """The original pretrain_data.py `name_to_features` (+ `word_start` in whole-word data)."""
        length = self.hparams.max_seq_length
        names = ["input_ids", "input_mask", "segment_ids"]
        if getattr(self, "_data_has_word_start", self.hparams.do_whole_word_mask):
            names.append("word_start")
        return {name: tf.io.FixedLenFeature([length], tf.int64) for name in names}

    def dataset(self, mode, data_dir, params, input_context=None, split=None):
        """Reads `word_start` when the data has it (its manifest says do_whole_word_mask), whatever the
        reader's flags: the model masks whole words exactly when the records carry the groups."""
        split = split or (DatasetSplit.TRAIN if mode == ModeKeys.TRAIN else DatasetSplit.EVAL)
        settings = self.read_manifest(data_dir, split).get("settings", {})
        self._data_has_word_start = bool(settings.get("do_whole_word_mask", False))
        return super().dataset(mode, data_dir, params, input_context=input_context, split=split)


def encode_lines(encoder: Any, lines: Sequence[str]) -> list[list[int]]:
    """Token ids of each line; one batched call when the encoder offers it."""
    batch = getattr(encoder, "encode_batch", None)
    if batch is not None:
        return list(batch(list(lines)))
    return [encoder.encode(line) for line in lines]


def with_word_start(batch: records.SampleBatch) -> records.SampleBatch:
    """Move the continuation bits of `input_ids` into the `word_start` feature (1 = starts a word; [CLS], [SEP]
    and padding start their own)."""
    ids, continues = word_segmenters.split_continuations(batch.columns["input_ids"])
    return records.SampleBatch(dict(batch.columns, input_ids=ids, word_start=(~continues).astype(np.int64)))
