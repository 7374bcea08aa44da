"""tf.data pieces: files -> records -> parsed examples -> batches.

`Problem.dataset` strings these together; they are separate so a problem with unusual needs can
reuse the parts it wants.

Decisions:
- With a `tf.distribute.InputContext`, each input pipeline (one per host/worker) reads its own subset
  of the files (file i goes to pipeline i % n) — the TPUEstimator per-host contract. Fewer files than
  pipelines is an error: silently repeating data on some hosts would bias training.
- `interleave=False` reads files one after another in order (XLNet streams must stay in order).
- Batching: `fixed` pads every example to the same shape (TPU/XLA: static shapes, drop_remainder);
  `bucket` groups by length and pads per bucket (GPUs, fewer pad tokens); `pack` concatenates several
  variable-length examples into one fixed-length row with `<name>_segmentation` and `<name>_position`
  features (tensor2tensor's packed format) for XLA without padding waste.
- Batching by tokens (`tokens`, tensor2tensor's `batching_scheme`): `batch_size` counts tokens. Examples
  fall into length buckets whose boundaries grow by 1.1 from 8 to max_length; a bucket of upper bound
  b gets max(1, tokens // b) examples, rounded down to a divisor of one highly composite window size
  (t2t's rounding, so a window always splits evenly into batches). A batch of that bucket is padded to
  its longest example (< b), so batch * padded length never exceeds the budget. This is the
  bucketing/padding trade-off of the tf.data walk-through: buckets cut padding (most of a pad-to-max
  batch is padding on sentence data) but a batch holds sentences of similar length, less i.i.d. than a
  plain shuffle; the 1.1 spacing keeps the waste under ~10% with a few dozen buckets.
  `tokens_fixed` is the TPU variant: static shapes, batch_size // max_length examples padded to
  max_length, remainder dropped. Per replica, `batch_size` is the replica's share of the global tokens.
"""
from __future__ import annotations

from typing import Callable

from textrain.framework.lazy_tf import tf


def files_for_pipeline(files: list[str], input_context: tf.distribute.InputContext) -> list[str]:
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    if n <= 1:
        return files
    if len(files) < n:
        raise ValueError(f"{len(files)} data file(s) for {n} input pipelines: every pipeline needs its "
                         f"own files; regenerate with at least {n} shards")
    return files[i::n]


def read_records(files: list[str], shuffle_files: bool, seed: int | None, interleave: bool = True,
                 cycle_length: int = 8) -> tf.data.Dataset:
    if not files:
        raise ValueError("no data files to read")
    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_files:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    if not interleave:
        return ds.flat_map(tf.data.TFRecordDataset)
    return ds.interleave(tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(files)),
                         num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def parse_example(record: tf.Tensor, spec: dict) -> dict:
    parsed = tf.io.parse_single_example(record, spec)
    return {k: (tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v) for k, v in parsed.items()}


def filter_length(ds: tf.data.Dataset, max_length: int, length_fn: Callable) -> tf.data.Dataset:
    if max_length <= 0:
        return ds
    return ds.filter(lambda ex: length_fn(ex) <= max_length)


def bucket_boundaries(max_length: int, min_length: int = 8, spacing: float = 1.1) -> list[int]:
    """Geometric bucket boundaries (tensor2tensor's `_bucket_boundaries`)."""
    bounds, x = [], min_length
    while x < max_length:
        bounds.append(x)
        x = max(x + 1, int(x * spacing))
    return bounds


# tensor2tensor's list: window sizes with many divisors, so every bucket's batch size can divide one window.
HIGHLY_COMPOSITE_NUMBERS = (
    1, 2, 4, 6, 12, 24, 36, 48, 60, 120, 180, 240, 360, 720, 840, 1260, 1680, 2520, 5040, 7560, 10080,
    15120, 20160, 25200, 27720, 45360, 50400, 55440, 83160, 110880, 166320, 221760, 277200, 332640, 498960,
    554400, 665280, 720720, 1081080, 1441440, 2162160, 2882880, 3603600, 4324320, 6486480, 7207200,
    8648640, 10810800, 14414400, 17297280, 21621600, 32432400, 36756720, 43243200, 61261200, 73513440,
    110270160)


def token_batching_scheme(batch_tokens: int, max_length: int, min_length_bucket: int = 8,
                          length_bucket_step: float = 1.1) -> tuple[list[int], list[int]]:
    """(bucket boundaries, examples per bucket) for `batch_tokens` tokens per batch (t2t's batching_scheme).

    There is one more batch size than boundaries: the last bucket holds lengths in
    [last boundary, max_length] and gets batch_tokens // max_length examples.
    """
    if batch_tokens <= 0 or max_length <= 0:
        raise ValueError(f"token batching needs batch_size > 0 tokens and max_length > 0 "
                         f"(got {batch_tokens}, {max_length})")
    if max_length > batch_tokens:
        raise ValueError(f"max_length {max_length} exceeds the batch of {batch_tokens} tokens: one example "
                         f"would not fit; raise the batch size or lower max_length")
    boundaries = bucket_boundaries(max_length, min_length_bucket, length_bucket_step)
    sizes = [max(1, batch_tokens // length) for length in boundaries + [max_length]]
    window = max(n for n in HIGHLY_COMPOSITE_NUMBERS if n <= 3 * max(sizes))
    divisors = [d for d in range(1, window + 1) if window % d == 0]
    sizes = [max(d for d in divisors if d <= size) for size in sizes]
    return boundaries, sizes


def batch_by_tokens(ds: tf.data.Dataset, batch_tokens: int, max_length: int, length_fn: Callable,
                    fixed_shapes: bool = False, drop_remainder: bool = True) -> tf.data.Dataset:
    """Batches of at most `batch_tokens` tokens (padding included); see the module docstring."""
    ds = filter_length(ds, max_length, length_fn)
    if fixed_shapes:
        if max_length > batch_tokens:
            raise ValueError(f"max_length {max_length} exceeds the batch of {batch_tokens} tokens")
        shapes = {k: ([max_length] if s.shape.rank == 1 else s.shape) for k, s in ds.element_spec.items()}
        return ds.padded_batch(batch_tokens // max_length, padded_shapes=shapes, drop_remainder=True)
    boundaries, sizes = token_batching_scheme(batch_tokens, max_length)
    # tf.data buckets hold lengths in [b_{i-1}, b_i): every length of bucket i is < its boundary.
    return ds.bucket_by_sequence_length(length_fn, bucket_boundaries=boundaries, bucket_batch_sizes=sizes,
                                        drop_remainder=drop_remainder)


def batch(ds: tf.data.Dataset, batching: str, batch_size: int, *, max_length: int = 0,
          length_fn: Callable | None = None, drop_remainder: bool = True) -> tf.data.Dataset:
    """Batch per `batching` (fixed | bucket | pack | tokens | tokens_fixed); `batch_size` is per replica,
    in examples (tokens for tokens/tokens_fixed)."""
    if batching in ("tokens", "tokens_fixed"):
        if max_length <= 0 or length_fn is None:
            raise ValueError(f"{batching} batching needs max_length > 0 (--max_length)")
        return batch_by_tokens(ds, batch_size, max_length, length_fn, fixed_shapes=batching == "tokens_fixed",
                               drop_remainder=drop_remainder)
    if batching == "fixed":
        if max_length > 0 and length_fn is not None:
            ds = filter_length(ds, max_length, length_fn)
            shapes = {k: ([max_length] if s.rank == 1 else s) for k, s in ds.element_spec.items()
                      for s in [s.shape]}
            return ds.padded_batch(batch_size, padded_shapes=shapes, drop_remainder=drop_remainder)
        return ds.batch(batch_size, drop_remainder=drop_remainder)
    if batching == "bucket":
        if max_length <= 0:
            raise ValueError("bucket batching needs max_length > 0 (--max_length)")
        ds = filter_length(ds, max_length, length_fn)
        bounds = bucket_boundaries(max_length + 1)
        return ds.bucket_by_sequence_length(
            length_fn, bucket_boundaries=bounds, bucket_batch_sizes=[batch_size] * (len(bounds) + 1),
            drop_remainder=drop_remainder)
    if batching == "pack":
        if max_length <= 0:
            raise ValueError("pack batching needs max_length > 0")
        ds = filter_length(ds, max_length, length_fn)
        return pack(ds, max_length).batch(batch_size, drop_remainder=drop_remainder)
    raise ValueError(f"unknown batching {batching!r}; use fixed, bucket, pack, tokens or tokens_fixed")


def pack(ds: tf.data.Dataset, length: int) -> tf.data.Dataset:
    """Greedy in-order packing of rank-1 features into rows of `length`.

    Examples are appended to the current row while every feature still fits; otherwise the row is
    emitted and a new one starts. Each feature `f` gets `f_segmentation` (1, 2, ... per example, 0 on
    padding) and `f_position` (position within its example).
    """
    keys = sorted(ds.element_spec)
    dtypes = {k: ds.element_spec[k].dtype for k in keys}

    def empty():
        row = {k: tf.zeros([length], dtypes[k]) for k in keys}
        row.update({f"{k}_segmentation": tf.zeros([length], tf.int32) for k in keys})
        row.update({f"{k}_position": tf.zeros([length], tf.int32) for k in keys})
        return row

    def append(row, fill, seg, ex):
        row = dict(row)
        new_fill = {}
        for k in keys:
            n = tf.shape(ex[k])[0]
            idx = tf.range(n) + fill[k]
            row[k] = tf.tensor_scatter_nd_update(row[k], idx[:, None], ex[k])
            row[f"{k}_segmentation"] = tf.tensor_scatter_nd_update(
                row[f"{k}_segmentation"], idx[:, None], tf.fill([n], seg))
            row[f"{k}_position"] = tf.tensor_scatter_nd_update(row[f"{k}_position"], idx[:, None], tf.range(n))
            new_fill[k] = fill[k] + n
        return row, new_fill

    zero_fill = {k: tf.constant(0) for k in keys}
    init = (empty(), zero_fill, tf.constant(0))

    def step(state, ex):
        row, fill, seg = state
        fits = tf.reduce_all([fill[k] + tf.shape(ex[k])[0] <= length for k in keys])

        def add():
            r, f = append(row, fill, seg + 1, ex)
            return (r, f, seg + 1), (tf.constant(False), empty())

        def flush():
            def start_new():
                r, f = append(empty(), zero_fill, tf.constant(1), ex)
                return r, f, tf.constant(1)

            ex_fits = tf.reduce_all([tf.shape(ex[k])[0] <= length for k in keys])
            new_state = tf.cond(ex_fits, start_new, lambda: (empty(), zero_fill, tf.constant(0)))
            return new_state, (seg > 0, row)

        return tf.cond(fits, add, flush)

    # A sentinel longer than any row flushes the last row at the end of the data.
    sentinel = tf.data.Dataset.from_tensors({k: tf.zeros([length + 1], dtypes[k]) for k in keys})
    packed = ds.concatenate(sentinel).scan(init, step)
    return packed.filter(_emitted).map(_row)


def _emitted(emit, row):
    return emit


def _row(emit, row):
    return row
