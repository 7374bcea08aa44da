"""XLNet pretraining data: zihangdai/xlnet `data_utils.py` semantics, made in parallel shards.

Generation (`generate_shard`) turns one-sentence-per-line text into the original's TFRecord features
(int64 `input`, `target`, `seg_id`, `is_masked` of length seq_len and `label` [1]); reading
(`preprocess_example`) samples the factorisation order at parse time exactly as the original's
`_local_perm` / `parser` do (problems/xlnet_permutation.py) and yields `perm_mask`, `target_mapping`,
`target`, `target_mask`, `input_k`, `input_q`, `seg_id`, `label`.

Semantics kept from the original (see the functions' docstrings for the details):
- Lines -> SentencePiece ids with XLNet's preprocessing; a sentence id that flips on every line; a
  blank line appends `<eod>` carrying the sentence id of the line before it (when `use_eod`);
  `<eop>` is ordinary text. Pieces of text joined into one stream flip their sentence ids when the
  first id would equal the previous last one (the original does this when it joins files).
- `batchify` into streams; with `bi_data` half of the host batch are forward streams and the other
  half their reversals. Records of seq_len = reuse_len stream tokens + A <sep> B <sep> <cls> from
  `_split_a_and_b` (A/B consecutive with p=0.5, otherwise B random from the stream, with the
  original's extension to sentence boundaries and trimming rule), advancing reuse_len per batch;
  a batch in which any row cannot be made ends the stream.
- `_sample_mask`: n ~ 1/n over 1..5, context n*mask_alpha//mask_beta split uniformly left/right,
  spans start on a "start piece" (`▁`/`<` prefix or a punctuation piece), scanned from the right on
  reversed rows, ceil(num_predict/2) on the reuse part and floor(num_predict/2) on the rest, topped up
  by uniform single positions. `<sep>`/`<cls>` can be masked (and are then dropped from the targets at
  parse time, as in the original). Note: the original's span-end loop tests `seg[beg]` instead of
  `seg[end]`, so a span is n *pieces* starting at a word start, not n words; we keep that behaviour
  because it is what the released models were trained on.

Decisions (where we differ from the original, on purpose):
- Per-core layout: every core's slice of a host batch is [forward half | backward half] for any
  num_core_per_host (the original lays the data out that way only on TPU; on GPU it forces one core,
  so with several GPUs a tower received only forward or only backward rows).
- Exactly num_predict masks per record. Settings that make it impossible (ceil(num_predict/2) >
  reuse_len ...) are a ValueError naming the flags, instead of the original's endless loop
  (zihangdai/xlnet#217). mask_alpha < mask_beta (an empty context, a crash in the original) too.
- Parallel, deterministic generation, the corpus read once (framework/shuffle.py): a document (a run
  of non-blank lines; blank lines separate documents) goes to the shard a hash of its text picks, and
  a shard's stream is its documents in corpus order, each ended by one <eod> (with use_eod) as a
  document followed by a blank line is in the original; runs of blank lines, and blank lines before a
  file's first document, are one separator (the original gives each blank line an <eod>). Each shard is
  an independent set of bsz_per_host streams written row-major per batch, so row i of batch t+1
  continues row i of batch t inside a shard. Randomness comes from `shard_np_rng(seed, split/pass,
  shard)` only: same seed and input give the same bytes for any number of workers, tasks or runner,
  and for the same text cut into any files or formats. `--dev_input_file`'s documents make the dev
  split (their shard by the same hash).
- num_passes is real: each pass re-samples A/B and masks with its own rng over the shard's stream;
  passes are appended to the same shard file. The original also permutes a task's input files per
  pass; a shard here mixes documents of every file, and its bytes must not depend on how the text is
  cut into files, so its stream is in corpus order in every pass.
- The sampling is vectorised with numpy over many records at once (same distributions as the
  original's per-record Python loops, not the same random draws: the original is not seeded).
- Speed: text is encoded in ~1 MB chunks by one SentencePiece call; memory is one shard's ids plus
  4096 records (docs/HISTORY.md).
- perm_size = 0 means reuse_len (the original's README uses perm_size = reuse_len).
- `after_split` also writes the original's `corpus_info.json` and one combined
  `record_info-{split}-0-0.bsz-...json` listing every shard; the original reader takes only the first
  `--num_passes` files of a record_info, so pass `--num_passes` >= the number of shards to it.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
from absl import logging

from textrain.framework import corpus, corpus_formats, encoders, fileio, records, shuffle
from textrain.framework.errors import SettingsMismatchError
from textrain.framework.generator import shard_np_rng
from textrain.framework.lazy_tf import tf
from textrain.framework.manifests import check_settings
from textrain.framework.problem import DataParams, DatasetSplit, Problem
from textrain.framework.registry import register_problem
from textrain.framework.settings import help_text
from textrain.problems.xlnet_permutation import draw_seed, example_seed, permutation_features

SPECIAL_IDS = encoders.XLNET_SPECIAL_IDS
SEP_ID = SPECIAL_IDS["<sep>"]
CLS_ID = SPECIAL_IDS["<cls>"]
EOD_ID = SPECIAL_IDS["<eod>"]
MAX_GRAM = 5
# Pieces that start a word for `_is_start_piece` besides "▁..." and "<...>" (the original's set).
_START_PUNCT = frozenset('!"#$%&"()*+,-./:;?@[\\]^_`{|}~')
# Records sampled at once (bounds memory; big enough that numpy's per-call overhead vanishes).
_RECORDS_PER_CHUNK = 4096
# Characters of text encoded per call of the encoder (bounds the memory of the raw text).
_ENCODE_CHUNK_CHARS = 1 << 20


@dataclasses.dataclass
class XlnetPretrainHParams(corpus_formats.DocumentSettings):
    """Settings, named as the original data_utils.py / train_gpu.py flags."""

    input_file: str = dataclasses.field(default="", metadata=help_text(
        "Comma-separated paths/globs of text: one sentence per line, blank line between documents."))
    dev_input_file: str = dataclasses.field(default="", metadata=help_text(
        "xlnet_pretrain: text for a 'dev' split (empty: no dev split)."))
    sp_model: str = dataclasses.field(default="", metadata=help_text(
        "SentencePiece model; empty: train one (XLNet recipe) into <data_dir>/<problem>/spiece.model."))
    vocab_size: int = dataclasses.field(default=32000, metadata=help_text(
        "Vocabulary size of a SentencePiece model trained by datagen.", low=10))
    uncased: bool = False
    seq_len: int = dataclasses.field(default=512, metadata=help_text("Tokens per example.", low=5))
    reuse_len: int = dataclasses.field(default=256, metadata=help_text(
        "Tokens reused as memory by the next segment (< seq_len - 3).", low=0))
    bsz_per_host: int = dataclasses.field(default=32, metadata=help_text("Rows per host (batch).", low=1))
    num_core_per_host: int = dataclasses.field(default=8, metadata=help_text("Cores per host.", low=1))
    bi_data: bool = True
    mask_alpha: int = dataclasses.field(default=6, metadata=help_text(
        "How many tokens form a group (span context).", low=1))
    mask_beta: int = dataclasses.field(default=1, metadata=help_text(
        "How many tokens to mask within each group.", low=1))
    num_predict: int = dataclasses.field(default=85, metadata=help_text("Tokens to predict.", low=1))
    use_eod: bool = True
    num_passes: int = dataclasses.field(default=1, metadata=help_text("Passes over the corpus.", low=1))
    perm_size: int = dataclasses.field(default=0, metadata=help_text(
        "Factorisation-order block size at read time; 0 = reuse_len.", low=0))
    on_bad_utf8: str = dataclasses.field(default="error", metadata=help_text(
        "Input bytes that are not UTF-8: error | replace | skip.", choices=corpus.BAD_UTF8_POLICIES))


def validate_hparams(hp: XlnetPretrainHParams) -> None:
    """Settings the generator cannot honour -> ValueError naming the flags."""
    if hp.seq_len <= 0 or hp.reuse_len < 0:
        raise ValueError(f"--seq_len must be > 0 and --reuse_len >= 0, got {hp.seq_len}, {hp.reuse_len}")
    if hp.reuse_len >= hp.seq_len - 3:
        raise ValueError(f"--reuse_len={hp.reuse_len} must be < --seq_len - 3 = {hp.seq_len - 3} "
                         f"(two <sep> and one <cls> follow the reused tokens)")
    if hp.bsz_per_host <= 0 or hp.num_core_per_host <= 0:
        raise ValueError("--bsz_per_host and --num_core_per_host must be > 0")
    step = 2 * hp.num_core_per_host if hp.bi_data else hp.num_core_per_host
    if hp.bsz_per_host % step:
        raise ValueError(f"--bsz_per_host={hp.bsz_per_host} must be a multiple of "
                         f"{'2 * ' if hp.bi_data else ''}--num_core_per_host={hp.num_core_per_host}"
                         f"{' (--bi_data gives every core forward and backward rows)' if hp.bi_data else ''}")
    if hp.mask_beta < 1 or hp.mask_alpha < hp.mask_beta:
        raise ValueError(f"need --mask_alpha >= --mask_beta >= 1 (the context of a 1-gram is "
                         f"mask_alpha // mask_beta tokens), got {hp.mask_alpha}, {hp.mask_beta}")
    if hp.num_predict < 1:
        raise ValueError(f"--num_predict must be >= 1, got {hp.num_predict}")
    goal_0, goal_1 = split_num_predict(hp.num_predict)
    if goal_0 > hp.reuse_len or goal_1 > hp.seq_len - hp.reuse_len:
        raise ValueError(
            f"--num_predict={hp.num_predict} is impossible: {goal_0} masks must fit in the reuse part "
            f"(--reuse_len={hp.reuse_len}) and {goal_1} in the rest (--seq_len - --reuse_len = "
            f"{hp.seq_len - hp.reuse_len}); lower --num_predict or raise --reuse_len "
            f"(the original loops forever here, zihangdai/xlnet#217)")
    if hp.num_passes < 1:
        raise ValueError(f"--num_passes must be >= 1, got {hp.num_passes}")
    if hp.on_bad_utf8 not in corpus.BAD_UTF8_POLICIES:
        raise ValueError(f"--on_bad_utf8 must be one of {corpus.BAD_UTF8_POLICIES}, got {hp.on_bad_utf8!r}")


def split_num_predict(num_predict: int) -> tuple[int, int]:
    """(masks on the reuse part, masks on the rest): ceil and floor halves, as the original."""
    goal_1 = num_predict // 2
    return num_predict - goal_1, goal_1


def resolve_perm_size(hp: XlnetPretrainHParams) -> int:
    """perm_size (0 -> reuse_len), checked as the original's parser asserts, plus divisibility."""
    perm_size = hp.perm_size or hp.reuse_len
    non_reuse = hp.seq_len - hp.reuse_len
    if perm_size <= 0 or perm_size > hp.reuse_len or perm_size > non_reuse:
        raise ValueError(f"--perm_size={perm_size} must be in [1, min(--reuse_len={hp.reuse_len}, "
                         f"--seq_len - --reuse_len={non_reuse})] (a larger block leaks across the reuse "
                         f"boundary)")
    if hp.reuse_len % perm_size or non_reuse % perm_size:
        raise ValueError(f"--perm_size={perm_size} must divide --reuse_len={hp.reuse_len} and "
                         f"--seq_len - --reuse_len={non_reuse} (the order is permuted in blocks)")
    return perm_size


# =============================================================================================== #
# Text -> one stream of ids and sentence ids
# =============================================================================================== #
def start_piece_table(pieces: Sequence[str]) -> np.ndarray:
    """bool[vocab]: does the piece start a word (the original's `_is_start_piece`)."""
    return np.array([p.startswith("▁") or p.startswith("<") or p in _START_PUNCT for p in pieces],
                    dtype=bool)


def encode_document(lines: Sequence[str], encoded: Iterator[Sequence[int]],
                    use_eod: bool) -> tuple[np.ndarray, np.ndarray]:
    """The original's per-file loop over one document's lines (sentence id starts True).

    `encoded` yields the ids of the non-blank lines in order. A non-blank line takes the current
    sentence id and flips it; a blank line (with use_eod) flips it, appends <eod> with it, and flips
    back, so <eod> carries the id of the line before it.
    """
    ids: list[int] = []
    sent: list[bool] = []
    sent_id = True
    for line in lines:
        if not line.strip():
            if not use_eod:
                continue
            sent_id = not sent_id
            cur = [EOD_ID]
        else:
            cur = list(next(encoded))
        ids.extend(cur)
        sent.extend([sent_id] * len(cur))
        sent_id = not sent_id
    return np.asarray(ids, dtype=np.int32), np.asarray(sent, dtype=bool)


def join_streams(pieces: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate (ids, sent_ids) pieces, flipping a piece's sentence ids when its first id equals
    the previous piece's last (the original's rule when it joins files), so no sentences merge."""
    out_ids, out_sent = [], []
    prev = None
    for ids, sent in pieces:
        if len(ids) == 0:
            continue
        if prev is not None and sent[0] == prev:
            sent = np.logical_not(sent)
        out_ids.append(ids)
        out_sent.append(sent)
        prev = sent[-1]
    if not out_ids:
        return np.zeros([0], np.int32), np.zeros([0], bool)
    return np.concatenate(out_ids), np.concatenate(out_sent)


# =============================================================================================== #
# Streams -> host batch rows
# =============================================================================================== #
def batchify(data: np.ndarray, num_rows: int, sent_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cut a stream into num_rows equal consecutive rows (the tail that does not fit is dropped)."""
    num_step = len(data) // num_rows
    n = num_rows * num_step
    return data[:n].reshape(num_rows, num_step), sent_ids[:n].reshape(num_rows, num_step)


def host_rows(data: np.ndarray, sent_ids: np.ndarray, bsz_per_host: int, num_core_per_host: int,
              bi_data: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows [bsz_per_host, L], their sentence ids, reverse flag per row).

    With bi_data every core's slice is [its bsz_per_core/2 forward streams | their reversals].
    """
    if not bi_data:
        rows, sent = batchify(data, bsz_per_host, sent_ids)
        return rows, sent, np.zeros([bsz_per_host], bool)
    bsz_per_core = bsz_per_host // num_core_per_host
    half = bsz_per_core // 2
    fwd, fwd_sent = batchify(data, bsz_per_host // 2, sent_ids)
    fwd = fwd.reshape(num_core_per_host, 1, half, -1)
    fwd_sent = fwd_sent.reshape(num_core_per_host, 1, half, -1)
    rows = np.concatenate([fwd, fwd[..., ::-1]], axis=1).reshape(bsz_per_host, -1)
    sent = np.concatenate([fwd_sent, fwd_sent[..., ::-1]], axis=1).reshape(bsz_per_host, -1)
    reverse = (np.arange(bsz_per_host) // half) % 2 == 1
    return rows, sent, reverse


def sentence_boundaries(rows_sent: np.ndarray) -> np.ndarray:
    """Sorted flat positions p (p % L != 0) where a row's sentence id differs from the one before."""
    num_rows, length = rows_sent.shape
    change = np.zeros_like(rows_sent, dtype=bool)
    change[:, 1:] = rows_sent[:, 1:] != rows_sent[:, :-1]
    return np.flatnonzero(change.reshape(-1)).astype(np.int64)


# =============================================================================================== #
# _split_a_and_b, vectorised over records
# =============================================================================================== #
def trim_pair(a_len: np.ndarray, b_len: np.ndarray, tot_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Closed form of the original's loop `while a+b > tot: if a > b: a -= 1 else: b -= 1`."""
    a_len, b_len = np.asarray(a_len, np.int64), np.asarray(b_len, np.int64)
    excess = a_len + b_len - tot_len
    # a > b: a shrinks to b, then b and a take turns (b first).
    d1 = a_len - b_len
    r1 = excess - d1
    a1 = np.where(excess <= d1, a_len - excess, b_len - r1 // 2)
    b1 = np.where(excess <= d1, b_len, b_len - (r1 + 1) // 2)
    # a <= b: b shrinks to a - 1, then a and b take turns (a first).
    d2 = b_len - a_len
    r2 = excess - d2 - 1
    a2 = np.where(excess <= d2 + 1, a_len, a_len - (r2 + 1) // 2)
    b2 = np.where(excess <= d2 + 1, b_len - excess, a_len - 1 - r2 // 2)
    a_out = np.where(a_len > b_len, a1, a2)
    b_out = np.where(a_len > b_len, b1, b2)
    keep = excess <= 0
    return np.where(keep, a_len, a_out), np.where(keep, b_len, b_out)


@dataclasses.dataclass
class SplitAB:
    """Per record: A = row[a_begin:a_begin+a_len], B = row[b_begin:b_begin+b_len]."""

    a_begin: np.ndarray
    a_len: np.ndarray
    b_begin: np.ndarray
    b_len: np.ndarray
    label: np.ndarray
    ok: np.ndarray  # False where the original returns None (its targets would run off the row)


def split_a_and_b(boundaries: np.ndarray, row_start: np.ndarray, row_len: int, begin: np.ndarray,
                  tot_len: int, rng: np.random.Generator) -> SplitAB:
    """The original `_split_a_and_b(..., extend_target=True)` for many records at once.

    `boundaries` are flat sentence-boundary positions of the rows (see `sentence_boundaries`),
    `row_start` the flat offset of each record's row, `begin` the local index where A starts
    (begin + tot_len < row_len is assumed, as the caller's loop guarantees).
    """
    num = len(begin)
    nb = len(boundaries)
    bnd = np.append(boundaries, np.iinfo(np.int64).max)  # a sentinel past every row
    g_begin = row_start + begin
    # cut points: boundaries p with begin < p < begin + tot_len; end_idx: first one >= begin + tot_len
    lo = np.searchsorted(boundaries, g_begin + 1, "left")
    hi = np.searchsorted(boundaries, g_begin + tot_len, "left")
    n_cut = hi - lo
    end_idx = np.minimum(bnd[hi] - row_start, row_len)
    u_label, u_cut, u_b = rng.random([3, num])
    pick = lo + np.floor(u_cut * n_cut).astype(np.int64)
    cut = bnd[np.minimum(pick, nb)] - row_start
    label = ((n_cut > 0) & (u_label >= 0.5)).astype(np.int64)  # random() < 0.5 -> label 0
    a_end = np.where(n_cut > 0, cut, end_idx)

    # label 0: B of about the remaining length from anywhere in the row, extended to sentence edges
    b_len0 = np.maximum(1, tot_len - (a_end - begin))
    b_begin0 = np.floor(u_b * (row_len - b_len0)).astype(np.int64)  # randint(0, row_len-1-b_len0)
    b_end0 = b_begin0 + b_len0
    prev_b = np.searchsorted(boundaries, row_start + b_begin0, "right") - 1
    prev_pos = np.where(prev_b >= 0, bnd[np.maximum(prev_b, 0)] - row_start, 0)
    b_begin0 = np.where(b_begin0 > 0, np.maximum(prev_pos, 0), 0)
    next_b = np.searchsorted(boundaries, row_start + b_end0, "left")
    b_end0 = np.where(b_end0 < row_len - 1, np.minimum(bnd[next_b] - row_start, row_len - 1), b_end0)

    # label 1: B continues A up to end_idx
    b_begin = np.where(label == 1, a_end, b_begin0)
    b_end = np.where(label == 1, end_idx, b_end0)

    a_len, b_len = trim_pair(a_end - begin, b_end - b_begin, tot_len)
    ok = (begin + a_len < row_len) & (b_begin + b_len < row_len)
    return SplitAB(begin.astype(np.int64), a_len, b_begin.astype(np.int64), b_len, label, ok)


def reuse_parts(rows: np.ndarray, first_batch: int, num_batches: int,
                reuse_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(input, target) [num_batches * bsz, reuse_len] of the reused tokens of batches
    first_batch.. (row-major per batch); targets are the next tokens of the row."""
    bsz = rows.shape[0]
    lo, hi = first_batch * reuse_len, (first_batch + num_batches) * reuse_len

    def cut(offset: int) -> np.ndarray:
        part = rows[:, lo + offset:hi + offset].reshape(bsz, num_batches, reuse_len)
        return part.transpose(1, 0, 2).reshape(-1, reuse_len).astype(np.int64)

    return cut(0), cut(1)


def assemble_records(flat: np.ndarray, row_start: np.ndarray, reuse_inp: np.ndarray,
                     reuse_tgt: np.ndarray, ab: SplitAB, seq_len: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input, target, seg_id) [num, seq_len] of records `reuse | A <sep> B <sep> <cls>`.

    `flat` holds the rows flattened followed by [SEP_ID, CLS_ID]. Targets are the next stream token
    (the first <sep> predicts B's first token); the last two positions have <cls>, as the original.
    """
    num, reuse_len = reuse_inp.shape
    width = seq_len - reuse_len
    j = np.arange(width, dtype=np.int64)[None, :]
    a_len = ab.a_len[:, None]
    # A's positions run on from a_begin; from the first <sep> on they run on from b_begin - 1
    jump = (ab.b_begin - ab.a_begin - ab.a_len - 1)[:, None]
    idx = (row_start + ab.a_begin)[:, None] + j + np.where(j >= a_len, jump, 0)
    inp = flat[idx]
    tgt = flat[idx + 1]
    rows = np.arange(num)
    inp[rows, ab.a_len] = SEP_ID
    inp[:, width - 2] = SEP_ID
    inp[:, width - 1] = CLS_ID
    tgt[:, width - 2:] = CLS_ID
    seg = (j > a_len).astype(np.int64)
    seg[:, width - 1] = 2
    return (np.concatenate([reuse_inp, inp], axis=1), np.concatenate([reuse_tgt, tgt], axis=1),
            np.concatenate([np.zeros([num, reuse_len], np.int64), seg], axis=1))


# =============================================================================================== #
# _sample_mask, vectorised over records
# =============================================================================================== #
_NGRAM_P = (1.0 / np.arange(1, MAX_GRAM + 1)) / np.sum(1.0 / np.arange(1, MAX_GRAM + 1))


def sample_span_masks(is_start: np.ndarray, reverse: np.ndarray, goal: int, mask_alpha: int,
                      mask_beta: int, rng: np.random.Generator) -> np.ndarray:
    """bool [num, seg_len] with exactly `goal` True per row: the original `_sample_mask`.

    `is_start` [num, seg_len]: does the token start a word. Rows with `reverse` are scanned from the
    right. Spans: n ~ p(n) ∝ 1/n (capped to what is still needed), a context of
    n * mask_alpha // mask_beta tokens split uniformly into left/right, the span starts at the first
    word start after the left context and covers n pieces (see the module docstring); the scan stops
    at the first span that would reach the end. Missing masks are then drawn uniformly among the
    unmasked positions (the original's rejection loop draws from the same distribution).
    """
    num, seg_len = is_start.shape
    if goal > seg_len:
        raise ValueError(f"cannot mask {goal} of {seg_len} tokens (check --num_predict)")
    start = np.where(reverse[:, None], is_start[:, ::-1], is_start)
    # next_start[r, p]: first q >= p that starts a word, seg_len if none (p == seg_len included)
    cand = np.where(start, np.arange(seg_len)[None, :], seg_len)
    next_start = np.minimum.accumulate(cand[:, ::-1], axis=1)[:, ::-1]
    next_start = np.concatenate([next_start, np.full([num, 1], seg_len)], axis=1)
    # Every row's random numbers are drawn up front (at most `goal` spans per row), so the result
    # does not depend on how rows are grouped and can be checked against a per-row reference.
    ngram_draws = rng.choice(MAX_GRAM, size=[num, max(goal, 1)], p=_NGRAM_P) + 1
    ctx_draws = rng.random([num, max(goal, 1)])
    fill_keys = rng.random([num, seg_len])
    mask = np.zeros([num, seg_len], bool)
    cur = np.zeros(num, np.int64)
    count = np.zeros(num, np.int64)
    active = np.arange(num) if goal > 0 else np.arange(0)
    step = 0
    while active.size:
        n = np.minimum(ngram_draws[active, step], goal - count[active])
        ctx = n * mask_alpha // mask_beta
        l_ctx = np.floor(ctx_draws[active, step] * ctx).astype(np.int64)
        beg = next_start[active, np.minimum(cur[active] + l_ctx, seg_len)]
        end = beg + n
        fits = end < seg_len
        rows, beg, n, end, r_ctx = active[fits], beg[fits], n[fits], end[fits], (ctx - l_ctx)[fits]
        for off in range(MAX_GRAM):
            sel = off < n
            mask[rows[sel], beg[sel] + off] = True
        count[rows] += n
        cur[rows] = end + r_ctx
        active = rows[(cur[rows] < seg_len) & (count[rows] < goal)]
        step += 1
    need = goal - count
    short = np.flatnonzero(need > 0)
    if short.size:
        mask[short] |= smallest_keys(fill_keys[short], mask[short], need[short])
    return np.where(reverse[:, None], mask[:, ::-1], mask)


def smallest_keys(keys: np.ndarray, taken: np.ndarray, need: np.ndarray) -> np.ndarray:
    """bool [n, L]: per row, the need[r] positions not `taken` with the smallest keys (ties: the
    lower position first, i.e. a stable ranking).

    One sort and a threshold instead of ranking by argsort twice (4x faster); a row whose threshold
    key occurs twice (floats in [0, 1): practically never) is ranked exactly instead.
    """
    keys = np.where(taken, 2.0, keys)  # taken positions sort last
    rows = np.arange(len(keys))
    threshold = np.sort(keys, axis=1)[rows, need - 1]
    pick = keys <= threshold[:, None]
    tied = np.flatnonzero(pick.sum(axis=1) != need)
    if tied.size:
        rank = np.argsort(np.argsort(keys[tied], axis=1, kind="stable"), axis=1, kind="stable")
        pick[tied] = rank < need[tied, None]
    return pick


# =============================================================================================== #
# Stream -> records
# =============================================================================================== #
@dataclasses.dataclass(frozen=True)
class XlnetRecordSettings:
    seq_len: int
    reuse_len: int
    bsz_per_host: int
    num_core_per_host: int
    bi_data: bool
    mask_alpha: int
    mask_beta: int
    num_predict: int

    @classmethod
    def from_hparams(cls, hp: XlnetPretrainHParams) -> "XlnetRecordSettings":
        return cls(hp.seq_len, hp.reuse_len, hp.bsz_per_host, hp.num_core_per_host, hp.bi_data,
                   hp.mask_alpha, hp.mask_beta, hp.num_predict)


def iter_record_batches(data: np.ndarray, sent_ids: np.ndarray, cfg: XlnetRecordSettings,
                        is_start_table: np.ndarray, rng: np.random.Generator
                        ) -> Iterator[dict[str, np.ndarray]]:
    """Yield chunks of records (dict of [num, ...] int64 arrays), whole host batches in order.

    Within a chunk, record b * bsz_per_host + r is row r of batch b; batches advance reuse_len.
    """
    rows, rows_sent, reverse = host_rows(data, sent_ids, cfg.bsz_per_host, cfg.num_core_per_host,
                                         cfg.bi_data)
    bsz, row_len = rows.shape
    tot_len = cfg.seq_len - cfg.reuse_len - 3
    num_batches = 0 if row_len < cfg.seq_len else (row_len - cfg.seq_len) // cfg.reuse_len + 1
    if num_batches == 0:
        return
    flat = np.concatenate([rows.reshape(-1), np.array([SEP_ID, CLS_ID], rows.dtype)])
    boundaries = sentence_boundaries(rows_sent)
    goal_0, goal_1 = split_num_predict(cfg.num_predict)
    batches_per_chunk = max(1, _RECORDS_PER_CHUNK // bsz)
    for first in range(0, num_batches, batches_per_chunk):
        t = np.arange(first, min(num_batches, first + batches_per_chunk))
        reuse_begin = np.repeat(t * cfg.reuse_len, bsz)
        row = np.tile(np.arange(bsz), len(t))
        row_start = row.astype(np.int64) * row_len
        ab = split_a_and_b(boundaries, row_start, row_len, reuse_begin + cfg.reuse_len, tot_len, rng)
        batch_ok = ab.ok.reshape(len(t), bsz).all(axis=1)
        stop = len(t) if batch_ok.all() else int(np.argmin(batch_ok))
        keep = stop * bsz
        if keep:
            sel = slice(0, keep)
            ab_kept = SplitAB(*(getattr(ab, f.name)[sel] for f in dataclasses.fields(SplitAB)))
            reuse_inp, reuse_tgt = reuse_parts(rows, first, stop, cfg.reuse_len)
            inp, tgt, seg = assemble_records(flat, row_start[sel], reuse_inp, reuse_tgt, ab_kept,
                                             cfg.seq_len)
            rev = reverse[row[sel]]
            starts = is_start_table[inp]
            mask_0 = sample_span_masks(starts[:, :cfg.reuse_len], rev, goal_0, cfg.mask_alpha,
                                       cfg.mask_beta, rng)
            mask_1 = sample_span_masks(starts[:, cfg.reuse_len:], rev, goal_1, cfg.mask_alpha,
                                       cfg.mask_beta, rng)
            is_masked = np.concatenate([mask_0, mask_1], axis=1)
            assert (is_masked.sum(axis=1) == cfg.num_predict).all()
            yield {"input": inp, "target": tgt, "seg_id": seg, "is_masked": is_masked.astype(np.int64),
                   "label": ab_kept.label[:, None]}
        if stop < len(t):
            logging.info("stream ends at batch %d of %d (a row could not make a record)",
                         first + stop, num_batches)
            return


def iter_records(data: np.ndarray, sent_ids: np.ndarray, cfg: XlnetRecordSettings,
                 is_start_table: np.ndarray, rng: np.random.Generator) -> Iterator[dict[str, np.ndarray]]:
    """One dict per record, in write order."""
    for chunk in iter_record_batches(data, sent_ids, cfg, is_start_table, rng):
        names = list(chunk)
        for values in zip(*(chunk[k] for k in names)):
            yield dict(zip(names, values))


# =============================================================================================== #
# Documents -> shards
# =============================================================================================== #
@dataclasses.dataclass
class Document:
    """A document's lines as the original's per-line loop sees them (blank lines kept: each one is an
    <eod> with use_eod)."""

    lines: list[str]


def shuffled_document(text: str) -> Document:
    """A document of the corpus shuffle (its text lines) as the original reads it from a file in which
    one blank line follows every document: its stripped text lines, then that blank line."""
    return Document(corpus.document_lines(text) + [""])


def documents_from_ids(docs: Sequence[Document], texts_ids: np.ndarray, text_lengths: np.ndarray,
                       use_eod: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """`encode_document` for many documents at once, without a Python step per line.

    `texts_ids` are the ids of the documents' non-blank lines, concatenated in order, and
    `text_lengths` each line's count. A non-blank line that is the k-th (from 0) of its document
    gets sentence id k % 2 == 0; a blank line's <eod> gets the opposite of the k of the lines before
    it (that is, the id of the line before it), which is what the per-line loop computes.
    """
    if not docs:
        return []
    blank = np.fromiter((not ln.strip() for d in docs for ln in d.lines), bool)
    doc_lines = np.fromiter((len(d.lines) for d in docs), np.int64, count=len(docs))
    doc_start = np.cumsum(doc_lines) - doc_lines
    text = ~blank
    before = np.cumsum(text) - text                          # non-blank lines before each line
    k = before - np.repeat(before[doc_start], doc_lines)     # ... within its document
    line_sent = (k % 2 == 0) != blank
    counts = np.zeros(len(blank), np.int64)
    counts[text] = text_lengths
    if use_eod:
        counts[blank] = 1
    ends = np.cumsum(counts)
    ids = np.empty(int(ends[-1]) if len(ends) else 0, np.int32)
    is_eod = np.zeros(len(ids), bool)
    if use_eod:
        is_eod[(ends - counts)[blank]] = True
    ids[is_eod] = EOD_ID
    ids[~is_eod] = texts_ids
    sent = np.repeat(line_sent, counts)
    doc_end = ends[doc_start + doc_lines - 1] if len(ends) else np.zeros(len(docs), np.int64)
    bounds = np.concatenate([[0], doc_end]).tolist()
    return [(ids[a:b], sent[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _flat(encode_batch: Callable[[list[str]], list[list[int]]]
          ) -> Callable[[list[str]], tuple[np.ndarray, np.ndarray]]:
    """An encode_batch (texts -> ids per text) as texts -> (concatenated ids, lengths)."""
    def encode_flat(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encoded = encode_batch(texts)
        lengths = np.fromiter(map(len, encoded), np.int64, count=len(encoded))
        return np.fromiter(itertools.chain.from_iterable(encoded), np.int32,
                           count=int(lengths.sum())), lengths
    return encode_flat


def encode_documents_flat(docs: Iterable[Document],
                          encode_flat: Callable[[list[str]], tuple[np.ndarray, np.ndarray]],
                          use_eod: bool, chunk_chars: int = _ENCODE_CHUNK_CHARS
                          ) -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids, sent_ids) per document; the non-blank lines of about `chunk_chars`
    characters of documents are encoded per call (one batch for the encoder, bounded memory)."""
    out: list[tuple[np.ndarray, np.ndarray]] = []
    chunk: list[Document] = []
    size = 0

    def flush() -> None:
        texts = [t for d in chunk for t in (ln.strip() for ln in d.lines) if t]
        out.extend(documents_from_ids(chunk, *encode_flat(texts), use_eod))
        chunk.clear()

    for doc in docs:
        chunk.append(doc)
        size += sum(map(len, doc.lines))
        if size >= chunk_chars:
            flush()
            size = 0
    if chunk:
        flush()
    return out


def encode_documents(docs: Iterable[Document], encode_batch: Callable[[list[str]], list[list[int]]],
                     use_eod: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids, sent_ids) per document, with an encode_batch (texts -> ids per text)."""
    return encode_documents_flat(docs, _flat(encode_batch), use_eod)


# =============================================================================================== #
# The problem
# =============================================================================================== #
def record_filename_suffix(hp: XlnetPretrainHParams) -> str:
    """The original's `format_filename` middle part: bsz-8.seqlen-128.reuse-64.uncased.bi.alpha-6..."""
    return (f"bsz-{hp.bsz_per_host}.seqlen-{hp.seq_len}.reuse-{hp.reuse_len}."
            f"{'uncased.' if hp.uncased else ''}{'bi' if hp.bi_data else 'uni'}."
            f"alpha-{hp.mask_alpha}.beta-{hp.mask_beta}.fnp-{hp.num_predict}")


@register_problem
class XlnetPretrain(Problem):
    """XLNet permutation-LM pretraining records (see the module docstring)."""

    HParams = XlnetPretrainHParams
    shuffle_examples = False  # stream order must survive: row i of batch t+1 continues row i of t

    def __init__(self, hparams: XlnetPretrainHParams | None = None):
        super().__init__(hparams)
        validate_hparams(self.hparams)
        self._encoders: dict[str, encoders.SentencePieceEncoder] = {}
        self._start_tables: dict[str, np.ndarray] = {}

    # ---------------------------------------------------------------- vocabulary
    def sp_model_path(self, data_dir: str) -> str:
        return self.hparams.sp_model or os.path.join(self.problem_dir(data_dir), "spiece.model")

    def prepare(self, data_dir: str, tmp_dir: str) -> None:
        """Train a SentencePiece model (XLNet's recipe) unless --sp_model is given or one exists."""
        path = self.sp_model_path(data_dir)
        if self.hparams.sp_model:
            if not fileio.exists(path):
                raise FileNotFoundError(f"--sp_model={path} does not exist")
            return
        if fileio.exists(path):
            logging.info("reusing SentencePiece model %s", path)
            return
        fileio.makedirs(os.path.dirname(path))
        logging.info("training a %d-piece SentencePiece model into %s", self.hparams.vocab_size, path)
        lines = (line for p in self.input_paths(DatasetSplit.TRAIN) for _, line in corpus.iter_lines(p))
        encoders.train_sentencepiece(
            lines, path[:-len(".model")],
            vocab_size=self.hparams.vocab_size, hard_vocab_limit=False)  # small corpora: fewer pieces

    def encoder(self, data_dir: str) -> encoders.SentencePieceEncoder:
        path = self.sp_model_path(data_dir)
        if path not in self._encoders:
            if not fileio.exists(path):
                raise FileNotFoundError(f"SentencePiece model {path} does not exist: pass --sp_model or "
                                        f"run datagen (which trains one) first")
            self._encoders[path] = encoders.SentencePieceEncoder(path, uncased=self.hparams.uncased)
        return self._encoders[path]

    def feature_encoders(self, data_dir: str) -> dict:
        return {"input": self.encoder(data_dir)}

    def start_piece_table(self, data_dir: str) -> np.ndarray:
        """bool[vocab] of word-start pieces, made once per model (~0.03 s for 32000 pieces)."""
        path = self.sp_model_path(data_dir)
        if path not in self._start_tables:
            enc = self.encoder(data_dir)
            self._start_tables[path] = start_piece_table(enc.convert_ids_to_tokens(list(range(enc.vocab_size))))
        return self._start_tables[path]

    # ---------------------------------------------------------------- generation
    def dataset_splits(self) -> list[tuple[str, int]]:
        splits = [(DatasetSplit.TRAIN, 8)]
        if self.hparams.dev_input_file:
            splits.append((DatasetSplit.EVAL, 1))
        return splits

    def input_paths(self, split: str) -> list[str]:
        pattern = self.hparams.dev_input_file if split == DatasetSplit.EVAL else self.hparams.input_file
        if not pattern:
            raise ValueError(f"xlnet_pretrain: no input for split {split!r}; pass "
                             f"--{'dev_input_file' if split == DatasetSplit.EVAL else 'input_file'}")
        return corpus.expand_paths(pattern, corpus_formats.ReadOptions.of(self.hparams))

    def document_corpus(self, tmp_dir: str) -> shuffle.DocumentCorpus:
        """The corpus (--input_file; --dev_input_file: the dev split's own files), read once by datagen
        and shuffled to the shards by a hash of each document's text (framework/shuffle.py)."""
        hp = self.hparams
        dev = tuple(self.input_paths(DatasetSplit.EVAL)) if hp.dev_input_file else ()
        return shuffle.DocumentCorpus(tuple(self.input_paths(DatasetSplit.TRAIN)), hp.on_bad_utf8, dev_paths=dev)

    def shard_stream_documents(self, data_dir: str, split: str, shard_id: int,
                               num_shards: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """This shard's documents in corpus order, encoded: (ids, sent_ids) each."""
        texts = shuffle.shard_texts(self.document_corpus(""), split, shard_id, num_shards)
        return encode_documents_flat(map(shuffled_document, texts), self.encoder(data_dir).encode_batch_flat,
                                     self.hparams.use_eod)

    def generate_shard(self, data_dir: str, tmp_dir: str, split: str, shard_id: int, num_shards: int,
                       seed: int) -> Iterator[records.SampleBatch]:
        data, sent_ids = join_streams(self.shard_stream_documents(data_dir, split, shard_id, num_shards))
        table = self.start_piece_table(data_dir)
        cfg = XlnetRecordSettings.from_hparams(self.hparams)
        for pass_id in range(self.hparams.num_passes):
            rng = shard_np_rng(seed, f"{split}/pass-{pass_id}", shard_id)
            for chunk in iter_record_batches(data, sent_ids, cfg, table, rng):
                yield records.SampleBatch(chunk)  # written column-wise: no dict per record

    def manifest_settings(self, data_dir: str) -> dict:
        hp = self.hparams
        enc = self.encoder(data_dir)
        settings = {k: getattr(hp, k) for k in (
            "input_file", "dev_input_file", "uncased", "seq_len", "reuse_len", "bsz_per_host",
            "num_core_per_host", "bi_data", "mask_alpha", "mask_beta", "num_predict", "use_eod",
            "num_passes", "on_bad_utf8")}
        settings.update(vocab_size=enc.vocab_size, vocab_fingerprint=enc.fingerprint())
        return settings

    def after_split(self, data_dir: str, split: str, manifest: dict) -> None:
        """Also write the original's corpus_info.json and record_info-*.json (see module docstring)."""
        hp = self.hparams
        out_dir = self.problem_dir(data_dir)
        num_records = int(manifest["num_examples"])
        record_info = {"filenames": [os.path.join(out_dir, s["file"]) for s in manifest["shards"]],
                       "num_batch": num_records // hp.bsz_per_host}
        name = f"record_info-{split}-0-0.{record_filename_suffix(hp)}.json"
        _write_json(os.path.join(out_dir, name), record_info)
        corpus_info = {
            "vocab_size": self.encoder(data_dir).vocab_size, "bsz_per_host": hp.bsz_per_host,
            "num_core_per_host": hp.num_core_per_host, "seq_len": hp.seq_len,
            "reuse_len": hp.reuse_len, "uncased": hp.uncased, "bi_data": hp.bi_data,
            "mask_alpha": hp.mask_alpha, "mask_beta": hp.mask_beta, "num_predict": hp.num_predict,
            "use_eod": hp.use_eod, "sp_path": self.sp_model_path(data_dir),
            "input_glob": hp.dev_input_file if split == DatasetSplit.EVAL else hp.input_file}
        _write_json(os.path.join(out_dir, "corpus_info.json"), corpus_info)

    # ---------------------------------------------------------------- reading
    def example_reading_spec(self) -> dict:
        seq_len = self.hparams.seq_len
        return {"input": tf.io.FixedLenFeature([seq_len], tf.int64),
                "target": tf.io.FixedLenFeature([seq_len], tf.int64),
                "seg_id": tf.io.FixedLenFeature([seq_len], tf.int64),
                "label": tf.io.FixedLenFeature([1], tf.int64),
                "is_masked": tf.io.FixedLenFeature([seq_len], tf.int64)}

    def preprocess_example(self, example: dict, mode: str, params: DataParams) -> dict:
        """The original parser: factorisation order, perm_mask, target_mapping ... (int64 -> int32)."""
        hp = self.hparams
        perm_size = resolve_perm_size(hp)
        if params is None or params.seed is None:  # never the stateful path inside a pipeline
            params = dataclasses.replace(params or DataParams(batch_size=1), seed=draw_seed())
        seed = example_seed(example, params.seed)
        return permutation_features(example, hp.seq_len, hp.reuse_len, perm_size, hp.num_predict, seed)

    def dataset(self, mode: str, data_dir: str, params: DataParams,
                input_context: tf.distribute.InputContext | None = None,
                split: str | None = None) -> tf.data.Dataset:
        """As the base, after checking the data's manifest and the per-core batch layout."""
        hp = self.hparams
        split = split or (DatasetSplit.TRAIN if mode == "train" else DatasetSplit.EVAL)
        manifest = self.read_manifest(data_dir, split)
        check_settings(manifest, {k: getattr(hp, k) for k in (
            "seq_len", "reuse_len", "bsz_per_host", "num_core_per_host", "bi_data", "num_predict",
            "mask_alpha", "mask_beta", "uncased")}, "the xlnet_pretrain flags")
        check_batch_layout(hp, params.batch_size, input_context)
        if params.seed is None:  # one stateless seed for this pipeline (xlnet_permutation's docstring)
            params = dataclasses.replace(params, seed=draw_seed())
        return super().dataset(mode, data_dir, params, input_context=input_context, split=split)


def check_batch_layout(hp: XlnetPretrainHParams, batch_size: int,
                       input_context: tf.distribute.InputContext | None) -> None:
    """Each replica must get exactly one core's rows of every host batch, or rows stop continuing."""
    bsz_per_core = hp.bsz_per_host // hp.num_core_per_host
    if input_context is None:
        if batch_size != hp.bsz_per_host:
            raise SettingsMismatchError(f"batch_size={batch_size} must equal --bsz_per_host={hp.bsz_per_host} "
                             f"(XLNet rows continue across batches; a distribution strategy splits the "
                             f"host batch into --num_core_per_host={hp.num_core_per_host} slices)")
        return
    per_replica = input_context.get_per_replica_batch_size(batch_size)
    local_replicas = input_context.num_replicas_in_sync // max(1, input_context.num_input_pipelines)
    if per_replica != bsz_per_core or local_replicas != hp.num_core_per_host:
        raise SettingsMismatchError(
            f"the data was made for --num_core_per_host={hp.num_core_per_host} replicas per host with "
            f"{bsz_per_core} rows each (--bsz_per_host={hp.bsz_per_host}); this run has "
            f"{local_replicas} replicas per input pipeline with {per_replica} rows each: regenerate the "
            f"data with matching --bsz_per_host/--num_core_per_host or change the batch size")


def _write_json(path: str, obj: dict) -> None:
    fileio.write_text_atomic(path, json.dumps(obj))  # json.dump's bytes: the original reader's format
