"""The TFRecord wire format of a sample: dicts (or columns of them) as serialized tf.train.Examples.

- Samples are dicts, or `SampleBatch`es (columns [N, k] of fixed-length numeric features) that a problem
  making its features as arrays yields to skip per-sample dicts; both serialize to the same bytes, written
  directly in the protobuf wire format (`serialize_samples` / `serialize_batch`, no tf.train.Example).
- The file framing (length, CRCs) is framework/fileio.py's; writing shards is framework/shards.py's.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from textrain.framework.errors import RecordError
from textrain.framework.lazy_tf import tf


# ----------------------------------------------------------------------------------------------- #
# dict -> tf.train.Example
# ----------------------------------------------------------------------------------------------- #
def _as_list(value: Any) -> list:
    if isinstance(value, np.ndarray):
        return value.reshape(-1).tolist()
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def to_feature(name: str, value: Any) -> tf.train.Feature:
    values = _as_list(value)
    if not values:
        raise RecordError(f"feature {name!r} is empty; every feature needs at least one value")
    first = values[0]
    if isinstance(first, (bool, np.bool_, int, np.integer)):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))
    if isinstance(first, (float, np.floating)):
        return tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in values]))
    if isinstance(first, (str, bytes)):
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v.encode("utf-8") if isinstance(v, str) else v for v in values]))
    raise RecordError(f"feature {name!r} has values of unsupported type {type(first).__name__}")


def to_example(sample: Mapping[str, Any]) -> tf.train.Example:
    """A sample dict (name -> int/float/str/bytes or a list/array of them) as a tf.train.Example."""
    return tf.train.Example(features=tf.train.Features(
        feature={name: to_feature(name, value) for name, value in sample.items()}))


# ----------------------------------------------------------------------------------------------- #
# fast serialization: many samples at once
# ----------------------------------------------------------------------------------------------- #
# Building a tf.train.Example per record costs ~80 us in Python (most of a pretraining datagen's
# time). `serialize_samples` writes the same protobuf wire format directly, vectorising the varint
# encoding of every int feature over a chunk of samples with numpy. The message is the one
# `to_example` builds (tests/test_framework.py checks); map entries are in sorted name order, fixed by
# this code rather than by the protobuf version, which keeps shards byte-identical across installs.
_THRESHOLDS = [1 << (7 * k) for k in range(1, 10)]  # a varint of v has 1 + #{t <= v} bytes


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_VARINT_TABLE = [_encode_varint(n) for n in range(1 << 14)]  # every length a record field has


def _varint(n: int) -> bytes:
    return _VARINT_TABLE[n] if n < 16384 else _encode_varint(n)


def _varints(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Varint bytes of int64 `values` (negatives as 10-byte two's complement, as protobuf writes them) and
    each one's length in bytes (int64).

    Decisions (this was once the largest cost of pretraining datagen): the width of the widest value
    bounds the work, so 0/1 masks take one cast and WordPiece ids (< 2^21) three byte positions; values
    below 2^32 are shifted as uint32 (half the memory traffic of uint64). Each value's length is 1 plus
    the thresholds 2^7, 2^14, ... it reaches; the output is one uint8 array written per byte position k
    at `start + k` of the values that have a byte k (7 bits, 0x80 when a byte k+1 follows), instead of a
    [values, width] matrix compressed by a mask. Negative values (and any >= 2^63 as uint64) take the
    same path with width 10."""
    v = np.asarray(values).astype(np.int64, copy=False).reshape(-1).view(np.uint64)
    if not v.size:
        return b"", np.zeros(0, np.int64)
    vmax = int(v.max())
    if vmax < 0x80:  # masks, segment ids, labels: each value is its own byte
        return v.astype(np.uint8).tobytes(), np.ones(v.size, np.int64)
    width = 1 + sum(vmax >= t for t in _THRESHOLDS)
    w = v.astype(np.uint32) if vmax < 1 << 32 else v
    lengths = np.ones(v.size, np.uint8)  # uint8 while encoding: a quarter of int64's memory traffic
    for t in _THRESHOLDS[:width - 1]:
        lengths += w >= t
    ends = np.cumsum(lengths, dtype=np.int64)
    nbytes = lengths.astype(np.int64)
    starts = ends - nbytes
    out = np.empty(int(ends[-1]), np.uint8)
    out[starts] = (w & 0x7F).astype(np.uint8) | ((lengths > 1).view(np.uint8) << 7)
    for k in range(1, width):
        has = np.flatnonzero(lengths > k)  # the values that have a byte k
        group = ((w[has] >> (7 * k)) & 0x7F).astype(np.uint8)
        out[starts[has] + k] = group | ((lengths[has] > k + 1).view(np.uint8) << 7)
    return out.tobytes(), nbytes


def _kind(name: str, value: Any) -> str:
    first = _as_list(value)[:1]
    if not first:
        raise RecordError(f"feature {name!r} is empty; every feature needs at least one value")
    f = first[0]
    if isinstance(f, (bool, np.bool_, int, np.integer)):
        return "int"
    if isinstance(f, (float, np.floating)):
        return "float"
    if isinstance(f, (str, bytes)):
        return "bytes"
    raise RecordError(f"feature {name!r} has values of unsupported type {type(f).__name__}")


def _feature_entries(name: str, values: list[Any], kind: str) -> tuple[list[list[bytes]], list[int],
                                                                     float | None]:
    """For each sample: the parts of this feature's map entry (`Features.feature[name]`), their total
    length, and the feature's largest value. Lengths are computed, not measured, so each record is
    joined once."""
    key = name.encode("utf-8")
    head = b"\x0a" + _varint(len(key)) + key + b"\x12"
    if kind == "bytes":
        sizes, datas = [], []
        for v in values:
            items = [x.encode("utf-8") if isinstance(x, str) else x for x in _as_list(v)]
            data = b"".join(b"\x0a" + _varint(len(x)) + x for x in items)
            datas.append(data)
            sizes.append(len(data))
        tag, vmax = b"\x0a", None
    else:
        arrays = [np.asarray(v).reshape(-1) for v in values]
        lengths = np.array([a.size for a in arrays])
        if (lengths == 0).any():
            raise RecordError(f"feature {name!r} is empty; every feature needs at least one value")
        flat = np.concatenate(arrays)
        vmax = float(flat.max())
        if kind == "float":
            blob, tag = flat.astype("<f4").tobytes(), b"\x12"
            sizes = (lengths * 4).tolist()
        else:
            blob, nbytes = _varints(flat)
            ends = np.cumsum(nbytes)[np.cumsum(lengths) - 1]
            sizes = np.diff(ends, prepend=0).tolist()
            tag = b"\x1a"
        datas, pos = [], 0
        for size in sizes:
            datas.append(blob[pos:pos + size])
            pos += size
    parts, totals = [], []
    packed = kind != "bytes"  # Int64List/FloatList hold one packed field; BytesList repeats field 1
    for size, data in zip(sizes, datas, strict=True):
        v_size = _varint(size) if packed else b""
        inner = (1 + len(v_size) + size) if packed else size   # the *List message
        v_inner = _varint(inner)
        feat = 1 + len(v_inner) + inner                # Feature message: the oneof field
        v_feat = _varint(feat)
        entry = len(head) + len(v_feat) + feat         # map entry: key, value
        v_entry = _varint(entry)
        list_head = [b"\x0a", v_size] if packed else []
        parts.append([b"\x0a", v_entry, head, v_feat, tag, v_inner, *list_head, data])
        totals.append(1 + len(v_entry) + entry)
    return parts, totals, vmax


def serialize_samples(samples: list[Mapping[str, Any]]) -> tuple[list[bytes], dict[str, float]]:
    """Serialized tf.train.Examples of `samples` (same feature names in each) and the largest value
    of every numeric feature."""
    if not samples:
        return [], {}
    names = sorted(samples[0])
    for s in samples:
        if len(s) != len(names) or any(n not in s for n in names):
            raise RecordError(f"samples of one shard must have the same features: {names} vs {sorted(s)}")
    per_feature, totals, feature_max = [], np.zeros(len(samples), np.int64), {}
    for name in names:
        values = [s[name] for s in samples]
        parts, sizes, vmax = _feature_entries(name, values, _kind(name, values[0]))
        if vmax is not None:
            feature_max[name] = vmax
        per_feature.append(parts)
        totals += sizes
    out = []
    for i, body_len in enumerate(totals.tolist()):
        record = [b"\x0a", _varint(body_len)]
        for parts in per_feature:
            record.extend(parts[i])
        out.append(b"".join(record))
    return out, feature_max


# ----------------------------------------------------------------------------------------------- #
# columns: many samples of fixed-length numeric features, serialized without per-value Python work
# ----------------------------------------------------------------------------------------------- #
@dataclasses.dataclass
class SampleBatch:
    """N samples as columns, name -> numeric array [N, k] (k >= 1, the same k for every sample): what a
    problem whose features all have fixed lengths may yield from `generate_shard` instead of N dicts.
    `write_shard` writes exactly the bytes the N dicts would give, without building them (pretraining
    datagen makes its features as arrays: ELECTRA's three [max_seq_length] rows)."""

    columns: dict[str, np.ndarray]

    def __post_init__(self) -> None:
        sizes = {name: np.shape(v) for name, v in self.columns.items()}
        rows = {shape[0] if len(shape) == 2 else None for shape in sizes.values()}
        if not self.columns or len(rows) != 1 or None in rows:
            raise RecordError(f"a SampleBatch needs [N, k] arrays with the same N, got {sizes}")
        for name, shape in sizes.items():
            if shape[1] == 0:
                raise RecordError(f"feature {name!r} is empty; every feature needs at least one value")

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def samples(self) -> Iterator[dict[str, np.ndarray]]:
        """The batch as sample dicts (rows), for callers that want dicts."""
        for i in range(len(self)):
            yield {name: v[i] for name, v in self.columns.items()}


def iter_samples(items: Iterable[Mapping[str, Any] | SampleBatch]) -> Iterator[Mapping[str, Any]]:
    """Sample dicts of a stream that may hold SampleBatches."""
    for item in items:
        if isinstance(item, SampleBatch):
            yield from item.samples()
        else:
            yield item


def _entry_head(key: bytes, tag: bytes, size: int) -> bytes:
    """Everything of one `Features.feature` map entry before its packed data of `size` bytes."""
    head = b"\x0a" + _varint(len(key)) + key + b"\x12"
    v_size = _varint(size)
    inner = 1 + len(v_size) + size
    v_inner = _varint(inner)
    feat = 1 + len(v_inner) + inner
    v_feat = _varint(feat)
    entry = len(head) + len(v_feat) + feat
    return b"\x0a" + _varint(entry) + head + v_feat + tag + v_inner + b"\x0a" + v_size


def serialize_batch(batch: SampleBatch) -> tuple[list[bytes], dict[str, float]]:
    """`serialize_samples(list(batch.samples()))`, computed column-wise: each feature's packed values for
    all rows in one numpy pass; per record only a join of cached entry heads and slices."""
    names = sorted(batch.columns)
    n = len(batch)
    heads, blobs, offsets, feature_max = [], [], [], {}
    for name in names:
        values = np.asarray(batch.columns[name])
        if values.dtype.kind in "biu":
            blob, nbytes = _varints(values.reshape(-1))
            sizes = nbytes.reshape(n, -1).sum(axis=1)
            tag = b"\x1a"
        elif values.dtype.kind == "f":
            blob, tag = values.astype("<f4").tobytes(), b"\x12"
            sizes = np.full(n, values.shape[1] * 4)
        else:
            raise RecordError(f"feature {name!r}: a SampleBatch holds numbers only, got {values.dtype}")
        feature_max[name] = float(values.max())
        key = name.encode("utf-8")
        cache: dict[int, bytes] = {}
        sizes = sizes.tolist()
        heads.append([cache.get(z) or cache.setdefault(z, _entry_head(key, tag, z)) for z in sizes])
        blobs.append(blob)
        offsets.append(np.concatenate([[0], np.cumsum(sizes)]).tolist())
    out = []
    for i in range(n):
        parts = []
        for head, blob, off in zip(heads, blobs, offsets, strict=True):
            parts.append(head[i])
            parts.append(blob[off[i]:off[i + 1]])
        body = b"".join(parts)
        out.append(b"\x0a" + _varint(len(body)) + body)
    return out, feature_max
