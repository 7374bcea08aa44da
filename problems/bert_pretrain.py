"""BERT pretraining data (masked LM + next sentence prediction), as google-research/bert
`create_pretraining_data.py` makes it, but deterministic, parallel and in bounded memory.

Semantics kept from the original (facts, re-implemented; see `create_pairs_from_document` and
`mask_batch`):
- Input: one sentence per line, a blank line between documents; each line is WordPiece-tokenized
  (bert FullTokenizer ids) and lines that tokenize to nothing are dropped; empty documents are dropped.
  The documents are shuffled once, then `dupe_factor` passes go over all of them, each pass drawing
  new pair boundaries and new masks.
- Per document: the target length is `max_seq_length - 3`, or with probability `short_seq_prob` a
  uniform `randint(2, max_seq_length - 3)`. Sentences accumulate into a chunk until the chunk reaches
  the target or the document ends. A = the first `a_end` sentences of the chunk (`a_end` uniform in
  [1, len(chunk) - 1], 1 for a one-sentence chunk). B is, with probability 0.5 (always for a
  one-sentence chunk), a "random next": sentences from a random start in another document (up to 10
  draws to avoid the current one) until `target - len(A)` tokens, and the chunk's unused sentences
  are put back (they start the next chunk); otherwise the rest of the chunk. The pair is truncated to
  `max_seq_length - 3` tokens by removing one token at a time from the longer side (B on a tie), from
  the front or the back with probability 1/2 each. Layout `[CLS] A [SEP] B [SEP]`, segment ids 0 up
  to and including the first [SEP], 1 after.
- Masking: candidates are all positions except [CLS]/[SEP]; with `do_whole_word_mask` a `##` piece
  joins the group of the piece before it (as in the original, also across the middle [SEP] when B
  starts with a `##` piece); with `word_segmenter="jieba"` as well a CJK character joins the group of the
  character before it when jieba puts both in one word (Chinese-BERT-wwm's rule; the characters stay one
  token each, so the ids are unchanged; framework/word_segmenters.py). Groups are visited in random
  order; a group that would overflow
  `num_to_predict = min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob)))` is
  skipped. Each chosen position becomes [MASK] (80 %), stays (10 %) or becomes a uniformly random
  vocabulary id (10 %, any id, as the original's `vocab_words`). Positions are sorted.
- Features exactly as the original TFRecords (readable by its run_pretraining.py `input_fn`): int64
  `input_ids`/`input_mask`/`segment_ids` [max_seq_length], int64 `masked_lm_positions`/`masked_lm_ids`
  and float `masked_lm_weights` [max_predictions_per_seq], int64 `next_sentence_labels` [1]
  (1 = B is a random next), zero-padded.

Decisions that differ from the original, on purpose:
- Bounded memory and parallelism. The original holds every instance of every dupe pass in RAM
  (google-research/bert#612) and runs on one core. Here datagen reads the corpus once and sends each
  document to the shard a hash of its text names (framework/shuffle.py); the unit of work is one output
  shard, which tokenizes only its own documents (as one int32 array each), in corpus order. Instances are made and masked in batches of
  MASKING_BATCH pairs and yielded one by one (the records writer shuffles within a shard with bounded
  memory), so memory is one shard's token ids plus one batch, whatever dupe_factor is: about
  4 bytes x corpus tokens / num_shards per worker (raise --num_shards for corpora of many GB).
- Consequence: the "random next" document is drawn from the shard's documents rather than from the
  whole corpus. B still comes from another document with the same probability and the same length
  rule, so the statistics (NSP balance, lengths, masked fractions) are those of the original; the
  only change is which other documents can supply B, which matters only for a shard with one
  document (then B comes from that document itself, as the original does for a one-document corpus).
  tests/test_bert_pretrain.py compares the statistics of 1- and 4-shard runs with a plain restatement
  of the original algorithm (one global document list).
- A document ends at the end of its file (framework.corpus); the original lets the last document of
  a file run on into the next file when there is no blank line between them.
- Randomness. The structure (document shuffle, target lengths, a_end, random next) uses a
  `random.Random` in the original's call order. Two hot spots draw differently with the same
  distribution: truncation computes how many tokens each side loses (that part is not random) and
  draws each side's front/back split as the popcount of that many random bits, instead of one draw
  per removed token; the masking is vectorized with numpy over batches of pairs (the original spends
  most of its time in a per-token `random.shuffle`) from a separate `numpy.random.Generator`, and its
  80/10/10 decision is one uniform draw split at 0.8/0.9 instead of two draws. The bytes differ from
  the original's (they would anyway: the sharding differs); the statistics do not.
- Seeds: both the original's `random_seed` and the driver's `--seed` are folded into the shard's
  generators (`framework.generator.shard_rng`), so either one changes the data, and the same pair gives
  byte-identical shards whatever the number of workers.
- A dev split is optional: with `dev_fraction` f > 0, a document is held out when the hash of its text
  falls below f (framework/shuffle.py: an expected share f, the same documents in any format and for any
  partitioning); default 0 (train only, as the original).
- Vocabulary: `vocab_file=""` builds a WordPiece vocab of at most `vocab_size` tokens from the input
  (framework.encoders.build_wordpiece_vocab) into `{data_dir}/bert_pretrain/vocab.txt`, reused on
  re-runs. The manifest records the real size and the vocab's sha256.

Speed: the shards are byte-identical to the per-example code's (tests/test_bert_golden.py); how the CPU
was brought down is in docs/HISTORY.md.
"""
from __future__ import annotations

import array
import bisect
import dataclasses
import gc
import itertools
import random
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np
from absl import logging

from textrain.framework import corpus, corpus_formats, records, word_segmenters
from textrain.framework.generator import shard_np_rng, shard_rng
from textrain.framework.lazy_tf import tf
from textrain.framework.registry import register_problem
from textrain.framework.settings import help_text
from textrain.framework.text_problems import WordpieceCorpusProblem
from textrain.framework.truncation import truncate_seq_pair

CLS, SEP, MASK = "[CLS]", "[SEP]", "[MASK]"
RANDOM_NEXT_PROB = 0.5          # probability that B comes from another document
MASK_TOKEN_PROB = 0.8           # of the chosen positions: [MASK] ...
KEEP_TOKEN_PROB = 0.1           # ... unchanged; the remaining 0.1 get a random vocabulary id
RANDOM_DOCUMENT_TRIES = 10      # draws to find a document other than the current one
MASKING_BATCH = 256             # pairs masked together (numpy); bounds memory, amortizes overhead


def _setting(default: Any, text: str, **accepts: Any) -> Any:
    """A settings field whose help text and accepted values (framework.settings.help_text) become the flag's."""
    return dataclasses.field(default=default, metadata=help_text(text, **accepts))


@dataclasses.dataclass
class BertPretrainHParams(corpus_formats.DocumentSettings):
    """Settings; field names are the original script's flag names (framework/flags.py makes flags)."""

    input_file: str = _setting("", "Raw text: one sentence per line, a blank line between documents; "
                                   "comma-separated paths or globs (.gz/.bz2 read transparently).")
    vocab_file: str = _setting("", "BERT vocab.txt; empty: build one from --input_file into "
                                   "{data_dir}/bert_pretrain/vocab.txt (reused on re-runs).")
    vocab_size: int = _setting(30522, "Size of the vocab built when --vocab_file is empty (a small corpus "
                                      "may give fewer; the manifest records the real size).")
    do_lower_case: bool = _setting(True, "Lower-case and strip accents (uncased models).")
    do_whole_word_mask: bool = _setting(False, "Mask whole words (a piece and its ## continuations).")
    word_segmenter: str = _setting("", "With --do_whole_word_mask: 'jieba' groups CJK characters (one token "
                                       "each) by the segmenter's words, as Chinese-BERT-wwm; empty: ## only.")
    max_seq_length: int = _setting(128, "Tokens per example, [CLS] and [SEP]s included.", low=5)
    max_predictions_per_seq: int = _setting(20, "Most masked-LM predictions per example "
                                                "(at most --max_seq_length - 3).", low=1)
    random_seed: int = _setting(12345, "Seed of the original script; folded together with --seed.")
    dupe_factor: int = _setting(10, "Passes over the corpus, each with new pairs and masks.", low=1)
    masked_lm_prob: float = _setting(0.15, "Share of the tokens to mask.", low=0.0, low_open=True, high=1.0)
    short_seq_prob: float = _setting(0.1, "Probability of a document aiming at a random shorter length.",
                                     low=0.0, high=1.0)
    on_bad_utf8: str = _setting("error", "Input bytes that are not UTF-8: error | replace | skip.",
                                choices=corpus.BAD_UTF8_POLICIES)
    dev_fraction: float = _setting(0.0, "Share of the documents held out as the dev split (0: none).",
                                   low=0.0, high=1.0, high_open=True)

    def validate(self) -> None:
        """Relations between settings (each field's own range is declared above and checked by
        framework.settings.validate_settings first), naming the flags.

        Masked positions are chosen among the tokens of `[CLS] A [SEP] B [SEP]` other than the three
        specials (create_pretraining_data's candidates), so at most max_seq_length - 3 positions can
        ever be predicted; a larger max_predictions_per_seq is a mistake, refused here."""
        checks = [
            (self.max_predictions_per_seq <= self.max_seq_length - 3,
             f"--max_predictions_per_seq={self.max_predictions_per_seq} exceeds the "
             f"--max_seq_length - 3 = {self.max_seq_length - 3} tokens that can be masked ([CLS] and two "
             f"[SEP] never are); lower --max_predictions_per_seq (the original uses about "
             f"max_seq_length * masked_lm_prob) or raise --max_seq_length"),
            (self.vocab_size >= 10 or bool(self.vocab_file),
             f"--vocab_size must be >= 10 to build a vocab, got {self.vocab_size}"),
            (self.word_segmenter in ("", *word_segmenters.SEGMENTERS),
             f"--word_segmenter must be one of {word_segmenters.SEGMENTERS} or empty, got {self.word_segmenter!r}"),
            (not self.word_segmenter or self.do_whole_word_mask,
             "--word_segmenter only decides the groups of whole-word masking: add --do_whole_word_mask"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


# =============================================================================================== #
# Documents
# =============================================================================================== #
@dataclasses.dataclass
class TokenizedDocument:
    """A document's sentences as one flat id array; sentence k is ids[bounds[k]:bounds[k + 1]]."""

    ids: np.ndarray      # int32 [num_tokens]
    bounds: array.array  # int64 [num_sentences + 1], bounds[0] == 0 (not numpy: scalar look-ups are hot)

    @property
    def num_sentences(self) -> int:
        return len(self.bounds) - 1

    @classmethod
    def from_sentences(cls, sentences: Iterable[Sequence[int]]) -> "TokenizedDocument | None":
        """Drop empty sentences (the original skips lines that tokenize to nothing); None if empty."""
        kept = [s for s in sentences if len(s)]
        if not kept:
            return None
        bounds = array.array("q", [0, *itertools.accumulate(len(s) for s in kept)])
        ids = np.fromiter(itertools.chain.from_iterable(kept), dtype=np.int32, count=bounds[-1])
        return cls(ids, bounds)

    @classmethod
    def from_flat(cls, ids: np.ndarray, lengths: np.ndarray) -> "TokenizedDocument | None":
        """The same from all sentences' ids in one array and each sentence's length (encode_flat)."""
        kept = lengths[lengths > 0]
        if not len(kept):
            return None
        bounds = array.array("q", [0])
        bounds.extend(np.cumsum(kept).tolist())
        return cls(np.ascontiguousarray(ids, dtype=np.int32), bounds)

    def span(self, first: int, last: int) -> np.ndarray:
        """Tokens of sentences first .. last - 1."""
        return self.ids[self.bounds[first]:self.bounds[last]]


def encode_lines(encoder: Any, lines: Sequence[str]) -> list[list[int]]:
    """Ids of each line, through the encoder's batch fast path when it has one."""
    batch = getattr(encoder, "encode_batch", None)
    if batch is not None:
        return list(batch(list(lines)))
    return [encoder.encode(line) for line in lines]


WORD_CONTINUES_BIT = word_segmenters.WORD_CONTINUES_BIT  # segmenter word continuations (see there)


def tokenize_documents(documents: Iterable[Sequence[str]], encoder: Any,
                       words: word_segmenters.WordContinuation | None = None) -> Iterator[TokenizedDocument]:
    """Text documents (lists of lines) -> TokenizedDocument; documents left empty are dropped. With `words`,
    the ids of tokens continuing a segmenter word carry WORD_CONTINUES_BIT (ids otherwise unchanged)."""
    flat = getattr(encoder, "encode_flat", None) if words is None else None
    for lines in documents:
        if flat is not None:  # one call per document, no list per line
            doc = TokenizedDocument.from_flat(*flat(list(lines)))
        else:
            ids = encode_lines(encoder, lines)
            if words is not None:
                ids = word_segmenters.mark_continuations(ids, words.flags(lines, ids))
            doc = TokenizedDocument.from_sentences(ids)
        if doc is not None:
            yield doc


# =============================================================================================== #
# Sentence pairs (the original's create_instances_from_document, minus the masking)
# =============================================================================================== #
class SentencePair(NamedTuple):
    tokens_a: np.ndarray
    tokens_b: np.ndarray
    is_random_next: bool


def randint(getrandbits: Callable[[int], int], a: int, b: int) -> int:
    """`random.Random.randint(a, b)` with the same draws from the same generator, minus its three
    Python-level calls (randint -> randrange -> _randbelow_with_getrandbits, CPython 3.8-3.13): draw
    `n.bit_length()` bits, n = b - a + 1, until the value is below n (also for n == 1, which consumes one
    draw). Pair-making calls it a few times per pair; tests check it against random.Random.randint."""
    n = b - a + 1
    k = n.bit_length()
    r = getrandbits(k)
    while r >= n:
        r = getrandbits(k)
    return a + r


def sample_target_length(max_num_tokens: int, short_seq_prob: float, rng: random.Random) -> int:
    """Usually fill the sequence; sometimes (short_seq_prob) aim for a random shorter length."""
    if rng.random() < short_seq_prob:
        return randint(rng.getrandbits, 2, max_num_tokens)
    return max_num_tokens


def _random_next_span(documents: Sequence[TokenizedDocument], document_index: int, target_b_length: int,
                      getrandbits: Callable[[int], int]) -> tuple[np.ndarray, int, int]:
    """Sentences of another document from a random start, until target_b_length tokens (>= 1 sentence),
    as (that document's ids, first token, end token)."""
    last = len(documents) - 1
    for _ in range(RANDOM_DOCUMENT_TRIES):
        other = randint(getrandbits, 0, last)
        if other != document_index:
            break
    doc = documents[other]
    bounds = doc.bounds
    num_sentences = len(bounds) - 1
    start = randint(getrandbits, 0, num_sentences - 1)
    # First sentence end at which the tokens taken reach the target (the original's loop + break).
    end = bisect.bisect_left(bounds, bounds[start] + target_b_length)
    end = min(max(end, start + 1), num_sentences)
    return doc.ids, bounds[start], bounds[end]


def create_pairs_from_document(documents: Sequence[TokenizedDocument], document_index: int,
                               max_seq_length: int, short_seq_prob: float,
                               rng: random.Random) -> Iterator[SentencePair]:
    """The (A, B, is_random_next) pairs of one document, truncated to max_seq_length - 3 tokens.

    The random draws are the original's, in its order (the tests pin the bytes); the sentence loop is a
    bisection: a chunk ends at its first sentence whose end reaches the chunk's first token + target."""
    doc = documents[document_index]
    max_num_tokens = max_seq_length - 3  # room for [CLS], [SEP], [SEP]
    getrandbits, uniform = rng.getrandbits, rng.random
    target = sample_target_length(max_num_tokens, short_seq_prob, rng)
    ids, bounds = doc.ids, doc.bounds
    n = len(bounds) - 1
    chunk_start = 0
    while chunk_start < n:
        i = min(bisect.bisect_left(bounds, bounds[chunk_start] + target, chunk_start + 1) - 1, n - 1)
        chunk_len = i - chunk_start + 1
        a_end = randint(getrandbits, 1, chunk_len - 1) if chunk_len >= 2 else 1
        a_lo, a_hi = bounds[chunk_start], bounds[chunk_start + a_end]
        if chunk_len == 1 or uniform() < RANDOM_NEXT_PROB:
            is_random_next = True
            b_ids, b_lo, b_hi = _random_next_span(documents, document_index, target - (a_hi - a_lo),
                                                  getrandbits)
            i -= chunk_len - a_end  # put the unused sentences back: they start the next chunk
        else:
            is_random_next = False
            b_ids, b_lo, b_hi = ids, a_hi, bounds[i + 1]
        if a_hi - a_lo + b_hi - b_lo > max_num_tokens:
            a_front, a_back, b_front, b_back = truncate_seq_pair(a_hi - a_lo, b_hi - b_lo, max_num_tokens, rng)
            a_lo, a_hi, b_lo, b_hi = a_lo + a_front, a_hi - a_back, b_lo + b_front, b_hi - b_back
        yield SentencePair(ids[a_lo:a_hi], b_ids[b_lo:b_hi], is_random_next)
        chunk_start = i + 1


# =============================================================================================== #
# Masking (the original's create_masked_lm_predictions, vectorized over a batch of pairs)
# =============================================================================================== #
@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """What masking needs to know about the vocabulary."""

    cls_id: int
    sep_id: int
    mask_id: int
    size: int
    is_subword: np.ndarray  # bool [size]: the token starts with "##"

    @classmethod
    def from_encoder(cls, encoder: Any, source: str = "the vocabulary") -> "Vocabulary":
        size = int(encoder.vocab_size)
        tokens = encoder.convert_ids_to_tokens(list(range(size)))
        index = {t: i for i, t in enumerate(tokens)}
        missing = [t for t in (CLS, SEP, MASK) if t not in index]
        if missing:
            raise ValueError(f"{source} lacks the special token(s) {', '.join(missing)} that BERT "
                             f"pretraining data needs")
        return cls(index[CLS], index[SEP], index[MASK], size,
                   np.array([t.startswith("##") for t in tokens], dtype=bool))


@dataclasses.dataclass
class PairBatch:
    """Pairs laid out as `[CLS] A [SEP] B [SEP]`, zero-padded: the unmasked batch."""

    input_ids: np.ndarray       # int64 [B, max_seq_length]
    num_tokens: np.ndarray      # int64 [B] = len(A) + len(B) + 3
    len_a: np.ndarray           # int64 [B]
    is_random_next: np.ndarray  # bool [B]


def _scatter_rows(out: np.ndarray, pieces: Sequence[np.ndarray], first_col: np.ndarray) -> None:
    """out[r, first_col[r]:first_col[r] + len(pieces[r])] = pieces[r] for every row, in one scatter."""
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    rows = np.repeat(np.arange(len(pieces)), lengths)
    starts = np.cumsum(lengths) - lengths  # offset of each row's piece in the concatenation
    cols = np.arange(int(lengths.sum())) - np.repeat(starts - first_col, lengths)
    out[rows, cols] = np.concatenate(pieces)


def pack_pairs(pairs: Sequence[SentencePair], max_seq_length: int, vocab: Vocabulary) -> PairBatch:
    """`[CLS] A [SEP] B [SEP]` rows, zero-padded to max_seq_length."""
    len_a = np.fromiter((len(p.tokens_a) for p in pairs), dtype=np.int64, count=len(pairs))
    len_b = np.fromiter((len(p.tokens_b) for p in pairs), dtype=np.int64, count=len(pairs))
    num_tokens = len_a + len_b + 3
    if len(pairs) and num_tokens.max() > max_seq_length:
        raise AssertionError(f"a pair of {num_tokens.max()} tokens exceeds max_seq_length={max_seq_length}")
    ids = np.zeros((len(pairs), max_seq_length), dtype=np.int64)
    rows = np.arange(len(pairs))
    ids[:, 0] = vocab.cls_id
    ids[rows, len_a + 1] = vocab.sep_id
    ids[rows, num_tokens - 1] = vocab.sep_id
    _scatter_rows(ids, [p.tokens_a for p in pairs], np.ones_like(len_a))
    _scatter_rows(ids, [p.tokens_b for p in pairs], len_a + 2)
    return PairBatch(ids, num_tokens, len_a, np.fromiter((p.is_random_next for p in pairs), dtype=bool,
                                                         count=len(pairs)))


def num_to_predict(num_tokens: np.ndarray, masked_lm_prob: float, max_predictions: int) -> np.ndarray:
    """min(max_predictions, max(1, round(len(tokens) * p))); round half to even, as Python's round."""
    return np.minimum(max_predictions, np.maximum(1, np.rint(num_tokens * masked_lm_prob))).astype(np.int64)


def candidate_mask(batch: PairBatch) -> np.ndarray:
    """bool [B, L]: real tokens other than [CLS] and the two [SEP]."""
    pos = np.arange(batch.input_ids.shape[1])[None, :]
    n = batch.num_tokens[:, None]
    return (pos >= 1) & (pos < n - 1) & (pos != batch.len_a[:, None] + 1)


def _choose_positions_per_token(cand: np.ndarray, budget: np.ndarray, max_predictions: int,
                                rng: np.random.Generator) -> np.ndarray:
    """int [B, max_predictions]: `budget` candidates per row, uniformly (a shuffle's first `budget`
    entries), in increasing order, padded with `length` (sorts last) where a row has fewer."""
    length = cand.shape[1]
    keys = rng.random(cand.shape)
    keys[~cand] = 2.0  # never before a candidate
    k = min(max_predictions, length)
    order = np.argsort(keys, axis=1)[:, :k]  # a random permutation of the candidates, per row
    take = np.arange(k)[None, :] < np.minimum(budget, cand.sum(axis=1))[:, None]
    chosen = np.where(take, order, length)
    chosen.sort(axis=1)
    if k < max_predictions:
        chosen = np.pad(chosen, ((0, 0), (0, max_predictions - k)), constant_values=length)
    return chosen


def _sorted_positions(chosen: np.ndarray, max_predictions: int) -> np.ndarray:
    """bool [B, L] -> its True columns per row in increasing order, [B, max_predictions], padded with L."""
    num_rows, length = chosen.shape
    counts = chosen.sum(axis=1)
    # np.nonzero lists them row by row in increasing order; each one's rank in its row is its column.
    rows, cols = np.nonzero(chosen)
    rank = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    keep = rank < max_predictions
    positions = np.full((num_rows, max_predictions), length, dtype=np.int64)
    positions[rows[keep], rank[keep]] = cols[keep]
    return positions


def _choose_whole_words(input_ids: np.ndarray, cand: np.ndarray, budget: np.ndarray, vocab: Vocabulary,
                        rng: np.random.Generator, continues: np.ndarray | None = None) -> np.ndarray:
    """bool [B, L]: whole words (a piece plus its following `##` pieces, and with a word segmenter a CJK
    character plus the following characters of its word: `continues`), visited in random order; a word that
    would overflow the budget is skipped and the next ones still tried, as in the original."""
    num_rows, length = cand.shape
    pos = np.arange(length)[None, :]
    # A candidate starts a word unless it is a ## piece (or a flagged continuation) after another candidate;
    # position 1 (the first candidate) always starts one.
    joins = vocab.is_subword[input_ids] if continues is None else vocab.is_subword[input_ids] | continues
    starts = cand & (~joins | (pos == 1))
    word = np.where(cand, np.cumsum(starts, axis=1) - 1, 0)
    num_words = starts.sum(axis=1)
    width = max(1, int(num_words.max(initial=0)))
    sizes = np.bincount((np.arange(num_rows)[:, None] * width + word)[cand],
                        minlength=num_rows * width).reshape(num_rows, width)
    keys = rng.random((num_rows, width))
    keys[np.arange(width)[None, :] >= num_words[:, None]] = 2.0  # padding words sort last
    order = np.argsort(keys, axis=1)
    # The greedy walk is sequential (a skipped word lets a smaller later one in): plain ints per row.
    picked = np.zeros((num_rows, width), dtype=bool)
    for row, (row_sizes, limit) in enumerate(zip(np.take_along_axis(sizes, order, axis=1).tolist(),
                                                 budget.tolist())):
        count = 0
        for rank, size in enumerate(row_sizes):
            if count >= limit or size == 0:  # size 0: past the row's real words
                break
            if count + size <= limit:
                picked[row, rank] = True
                count += size
    selected = np.zeros_like(picked)
    np.put_along_axis(selected, order, picked, axis=1)
    return cand & np.take_along_axis(selected, word, axis=1)


@dataclasses.dataclass
class MaskedBatch:
    input_ids: np.ndarray           # int64 [B, L], masked
    input_mask: np.ndarray          # int64 [B, L]
    segment_ids: np.ndarray         # int64 [B, L]
    masked_lm_positions: np.ndarray  # int64 [B, P], sorted, zero-padded
    masked_lm_ids: np.ndarray       # int64 [B, P], the original ids, zero-padded
    masked_lm_weights: np.ndarray   # float32 [B, P], 1.0 for real predictions
    next_sentence_labels: np.ndarray  # int64 [B, 1]


def mask_batch(batch: PairBatch, vocab: Vocabulary, masked_lm_prob: float, max_predictions: int,
               whole_word: bool, rng: np.random.Generator) -> MaskedBatch:
    """Choose and replace the masked-LM positions of every pair of the batch."""
    continues = (batch.input_ids & WORD_CONTINUES_BIT) != 0  # set only with a word segmenter
    ids = batch.input_ids & ~WORD_CONTINUES_BIT
    num_rows, length = ids.shape
    cand = candidate_mask(batch)
    budget = num_to_predict(batch.num_tokens, masked_lm_prob, max_predictions)
    if whole_word:
        chosen = _choose_whole_words(ids, cand, budget, vocab, rng, continues if continues.any() else None)
        positions = _sorted_positions(chosen, max_predictions)
    else:
        positions = _choose_positions_per_token(cand, budget, max_predictions, rng)
    valid = positions < length
    positions = np.where(valid, positions, 0)
    originals = np.take_along_axis(ids, positions, axis=1)
    labels = np.where(valid, originals, 0)
    # 80 % [MASK], 10 % unchanged, 10 % a random id: one uniform draw per position.
    u = rng.random((num_rows, max_predictions))
    random_ids = rng.integers(0, vocab.size, size=(num_rows, max_predictions))
    replacement = np.where(u < MASK_TOKEN_PROB, vocab.mask_id,
                           np.where(u < MASK_TOKEN_PROB + KEEP_TOKEN_PROB, labels, random_ids))
    # Padding entries point at position 0 ([CLS], never a candidate) and write back what is there.
    masked = ids.copy()
    np.put_along_axis(masked, positions, np.where(valid, replacement, originals), axis=1)
    pos = np.arange(length)[None, :]
    in_seq = pos < batch.num_tokens[:, None]
    return MaskedBatch(
        input_ids=masked,
        input_mask=in_seq.astype(np.int64),
        segment_ids=(in_seq & (pos >= batch.len_a[:, None] + 2)).astype(np.int64),
        masked_lm_positions=positions.astype(np.int64),
        masked_lm_ids=labels.astype(np.int64),
        masked_lm_weights=valid.astype(np.float32),
        next_sentence_labels=batch.is_random_next.astype(np.int64)[:, None])


FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")


def batch_to_features(masked: MaskedBatch) -> records.SampleBatch:
    """The batch's rows as the original's TFRecord features, column-wise: the records writer serializes
    a SampleBatch without a dict per row (the same bytes as the rows' dicts)."""
    return records.SampleBatch({name: getattr(masked, name) for name in FEATURES})


# =============================================================================================== #
# A whole shard
# =============================================================================================== #
def generate_instances(documents: list[TokenizedDocument], vocab: Vocabulary, hp: BertPretrainHParams,
                       rng: random.Random, np_rng: np.random.Generator,
                       batch_size: int = MASKING_BATCH) -> Iterator[records.SampleBatch]:
    """The instances of `dupe_factor` passes over `documents` (shuffled in place first, as the original),
    as SampleBatches of up to `batch_size` rows (`records.iter_samples` gives them as feature dicts)."""
    rng.shuffle(documents)
    pending: list[SentencePair] = []

    def flush() -> Iterator[records.SampleBatch]:
        masked = mask_batch(pack_pairs(pending, hp.max_seq_length, vocab), vocab, hp.masked_lm_prob,
                            hp.max_predictions_per_seq, hp.do_whole_word_mask, np_rng)
        pending.clear()
        yield batch_to_features(masked)

    for _ in range(hp.dupe_factor):
        for index in range(len(documents)):
            for pair in create_pairs_from_document(documents, index, hp.max_seq_length,
                                                   hp.short_seq_prob, rng):
                pending.append(pair)
                if len(pending) >= batch_size:
                    yield from flush()
    if pending:
        yield from flush()


def freeze_long_lived_objects() -> None:
    """gc.freeze(): what is alive now (TensorFlow's modules, the problem, the encoder and its caches) is moved
    out of the cyclic collector's generations, so its full collections, which the many short-lived objects
    of making and writing instances trigger, no longer traverse it. Measured: about a tenth of a 5 MB
    datagen run's CPU (0.55 of 4.8 s, most of it TensorFlow's objects). It changes no result: frozen
    objects are still freed by reference counting; only cyclic garbage among them waits for gc.unfreeze()."""
    gc.freeze()


def combined_seed(seed: int, random_seed: int) -> int:
    """The driver's --seed and the original's --random_seed, both deciding the data."""
    return seed * (1 << 32) + random_seed


# =============================================================================================== #
# The problem
# =============================================================================================== #
@register_problem
class BertPretrain(WordpieceCorpusProblem):
    """Masked-LM + next-sentence pairs for BERT pretraining (google-research/bert records)."""

    HParams = BertPretrainHParams

    def __init__(self, hparams: BertPretrainHParams | None = None):
        super().__init__(hparams)
        self.hparams.validate()

    def feature_encoders(self, data_dir: str) -> dict[str, Any]:
        return {"inputs": self.encoder(data_dir)}

    def manifest_settings(self, data_dir: str) -> dict:
        """Without a segmenter the settings are what they were before --word_segmenter existed (old data
        dirs stay valid); with one, its version too (its dictionary decides the groups)."""
        settings = super().manifest_settings(data_dir)
        if self.hparams.word_segmenter:
            settings["word_segmenter_version"] = word_segmenters.load_segmenter(self.hparams.word_segmenter)[1]
        else:
            settings.pop("word_segmenter", None)
        return settings

    def shard_documents(self, data_dir: str, split: str, shard_id: int,
                        num_shards: int) -> list[TokenizedDocument]:
        """Stream the corpus, splitting into lines and tokenizing only this shard's documents."""
        mine = map(corpus.document_lines, self.shard_texts("", split, shard_id, num_shards))
        encoder = self.encoder(data_dir)
        words = (word_segmenters.WordContinuation(self.hparams.word_segmenter, encoder)
                 if self.hparams.word_segmenter else None)
        documents = list(tokenize_documents(mine, encoder, words))
        if words is not None and words.misaligned_lines:
            logging.warning("%s-%s shard %d: %d lines could not be aligned with %s; their characters are "
                            "masked one by one", self.name, split, shard_id, words.misaligned_lines, words.version)
        return documents

    def generate_shard(self, data_dir: str, tmp_dir: str, split: str, shard_id: int, num_shards: int,
                       seed: int) -> Iterator[records.SampleBatch]:
        freeze_long_lived_objects()
        documents = self.shard_documents(data_dir, split, shard_id, num_shards)
        if not documents:
            logging.warning("%s-%s shard %d of %d has no documents", self.name, split, shard_id, num_shards)
            return
        encoder = self.encoder(data_dir)
        vocab = Vocabulary.from_encoder(encoder, self.vocab_path(data_dir))
        s = combined_seed(seed, self.hparams.random_seed)
        yield from generate_instances(documents, vocab, self.hparams, shard_rng(s, split, shard_id),
                                      shard_np_rng(s, split, shard_id))

    def generate_encoded_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[dict]:
        """Everything as one shard (seed 0), as feature dicts; the driver uses generate_shard."""
        return records.iter_samples(self.generate_shard(data_dir, tmp_dir, split, 0, 1, 0))

    # ------------------------------------------------------------------ reading side
    def example_reading_spec(self) -> dict:
        """The original run_pretraining.py `name_to_features`."""
        seq, preds = self.hparams.max_seq_length, self.hparams.max_predictions_per_seq
        return {
            "input_ids": tf.io.FixedLenFeature([seq], tf.int64),
            "input_mask": tf.io.FixedLenFeature([seq], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([seq], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([preds], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([preds], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([preds], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
        }

    def default_batching(self) -> str:
        return "fixed"  # every feature is fixed-length; batches use drop_remainder (DataParams)
