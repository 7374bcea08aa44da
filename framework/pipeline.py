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
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf


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


def batch(ds: tf.data.Dataset, batching: str, batch_size: int, *, max_length: int = 0,
          length_fn: Callable | None = None, drop_remainder: bool = True) -> tf.data.Dataset:
    """Batch per `batching` (fixed | bucket | pack); `batch_size` is per replica (in examples)."""
    if batching == "fixed":
        if max_length > 0 and length_fn is not None:
            ds = filter_length(ds, max_length, length_fn)
            shapes = {k: ([max_length] if s.rank == 1 else s) for k, s in ds.element_spec.items()
                      for s in [s.shape]}
            return ds.padded_batch(batch_size, padded_shapes=shapes, drop_remainder=drop_remainder)
        return ds.batch(batch_size, drop_remainder=drop_remainder)
    if batching == "bucket":
        if max_length <= 0:
            raise ValueError("bucket batching needs max_length > 0")
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
    raise ValueError(f"unknown batching {batching!r}; use fixed, bucket or pack")


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
