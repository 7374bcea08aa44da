"""TFRecord files: examples, atomic sharded writing, bounded-memory shuffle, manifests, checked reading.

File discipline (tensor2tensor's, made strict):
- A shard is written as `<name>.<host>-<pid>.incomplete` (unique per writer, so two writers can never
  mix bytes under one name) and renamed when whole; its statistics go to a
  `<name>.stats.json` sidecar that is renamed into place *before* the shard, so an existing shard always
  has its statistics and a half-written shard never has the final name.
- A split's manifest is written last (also via rename). A split is complete only when its manifest
  exists; the reader and the trainer read settings from it instead of from file names. Each shard entry
  records the file's size in bytes (`size`), so a deleted, truncated or replaced shard is caught by a
  stat before training (`check_split_files`); every record's CRC is read by `verify_shard`
  (`textrain-datagen --verify`). Manifests written before sizes were recorded still load (names only).
- `.incomplete` files left by a writer that died (same host, pid gone) are removed by
  `remove_stale_incomplete` when the next writer starts or a shard fails.
- Samples are dicts, or `SampleBatch`es (columns [N, k] of fixed-length numeric features) that a problem
  making its features as arrays yields to skip per-sample dicts; both serialize to the same bytes, written
  directly in the protobuf wire format (`serialize_samples` / `serialize_batch`, no tf.train.Example).
- Shuffling a shard is exact (a uniform permutation) and bounded in memory: records are buffered up to
  `shuffle_memory_bytes`; past that they are spilled to random bucket files, each bucket is shuffled in
  memory, and the buckets are concatenated.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import socket
import time
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from textrain.framework import fileio, locks
from textrain.framework.errors import UserError
from textrain.framework.lazy_tf import tf

MANIFEST_VERSION = 1


class RecordError(UserError, ValueError):
    """A record that cannot be written or read; the message names the feature or the file."""


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

    Decisions (issue #12: this was the largest cost of pretraining datagen): the width of the widest value
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
    for size, data in zip(sizes, datas):
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
        for head, blob, off in zip(heads, blobs, offsets):
            parts.append(head[i])
            parts.append(blob[off[i]:off[i + 1]])
        body = b"".join(parts)
        out.append(b"\x0a" + _varint(len(body)) + body)
    return out, feature_max


# ----------------------------------------------------------------------------------------------- #
# atomic file helpers
# ----------------------------------------------------------------------------------------------- #
_HOST = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname()) or "host"
_TAGGED = re.compile(r"\.([A-Za-z0-9_]+)-(\d+)\.incomplete$")


def incomplete_path(path: str, part: str = "") -> str:
    """The temporary name of `path` while this process writes it: unique per host and pid."""
    return f"{path}{'.' + part if part else ''}.{_HOST}-{os.getpid()}.incomplete"


def remove_stale_incomplete(directory: str) -> list[str]:
    """Remove the `.incomplete` files in `directory` whose writer is gone (this host, pid not alive;
    untagged ones from older versions too). Files of live writers and of other hosts are left alone.
    Returns the removed paths."""
    removed = []
    for path in fileio.glob(os.path.join(directory, "*.incomplete")):
        m = _TAGGED.search(path)
        if m and (m.group(1) != _HOST or locks.process_running(int(m.group(2)))):
            continue
        remove_if_exists(path)
        removed.append(path)
    return removed


def write_text_atomic(path: str, text: str) -> None:
    tmp = incomplete_path(path)
    try:
        with fileio.open_file(tmp, "w") as f:
            f.write(text)
        fileio.rename(tmp, path, overwrite=True)
    except BaseException:
        remove_if_exists(tmp)
        raise


def write_json_atomic(path: str, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def read_json(path: str) -> Any:
    with fileio.open_file(path) as f:
        return json.load(f)


def remove_if_exists(path: str) -> None:
    if fileio.exists(path):
        fileio.remove(path)


# ----------------------------------------------------------------------------------------------- #
# sharded writing
# ----------------------------------------------------------------------------------------------- #
def shard_filename(problem: str, split: str, shard_id: int, num_shards: int) -> str:
    return f"{problem}-{split}-{shard_id:05d}-of-{num_shards:05d}.tfrecord"


def manifest_filename(problem: str, split: str) -> str:
    return f"{problem}-{split}.manifest.json"


def stats_path(shard_path: str) -> str:
    return shard_path + ".stats.json"


class _Stats:
    """Counts and the largest value of every numeric feature (the trainer checks ids < vocab size)."""

    def __init__(self):
        self.count = 0
        self.feature_max: dict[str, float] = {}

    def add(self, count: int, feature_max: dict[str, float]) -> None:
        self.count += count
        for name, m in feature_max.items():
            if name not in self.feature_max or m > self.feature_max[name]:
                self.feature_max[name] = m

    def as_dict(self) -> dict:
        return {"count": self.count, "feature_max": self.feature_max}


class _BoundedShuffler:
    """Exact shuffle of serialized records with bounded memory (spill to random buckets)."""

    def __init__(self, rng: random.Random, tmp_prefix: str, memory_bytes: int, num_buckets: int = 64):
        self.rng, self.tmp_prefix = rng, tmp_prefix
        self.memory_bytes, self.num_buckets = memory_bytes, num_buckets
        self.buffer: list[bytes] = []
        self.buffered = 0
        self.buckets: list[fileio.TFRecordWriter] | None = None

    def add(self, record: bytes) -> None:
        self.buffer.append(record)
        self.buffered += len(record)
        if self.buffered > self.memory_bytes:
            self._spill()

    def _bucket_path(self, i: int) -> str:
        return incomplete_path(self.tmp_prefix, f"bucket{i:03d}")

    def _spill(self) -> None:
        if self.buckets is None:
            self.buckets = [fileio.TFRecordWriter(self._bucket_path(i)) for i in range(self.num_buckets)]
        for rec in self.buffer:
            self.buckets[self.rng.randrange(self.num_buckets)].write(rec)
        self.buffer, self.buffered = [], 0

    def records(self) -> Iterator[bytes]:
        if self.buckets is None:
            self.rng.shuffle(self.buffer)
            yield from self.buffer
            return
        self._spill()
        for w in self.buckets:
            w.close()
        for i in range(self.num_buckets):
            path = self._bucket_path(i)
            bucket = list(fileio.iter_tfrecords(path))
            self.rng.shuffle(bucket)
            yield from bucket
            fileio.remove(path)

    def cleanup(self) -> None:
        for i in range(self.num_buckets):
            remove_if_exists(self._bucket_path(i))


def _serialized_chunks(items: Iterable[Mapping[str, Any] | SampleBatch]
                       ) -> Iterator[tuple[list[bytes], dict[str, float]]]:
    """Serialized records with their feature maxima, chunk by chunk: dicts 512 at a time, a SampleBatch
    as it comes (a record's bytes do not depend on its neighbours, so the chunking changes nothing)."""
    pending: list[Mapping[str, Any]] = []
    for item in items:
        if isinstance(item, SampleBatch):
            if pending:
                yield serialize_samples(pending)
                pending = []
            if len(item):
                yield serialize_batch(item)
            continue
        pending.append(item)
        if len(pending) == 512:
            yield serialize_samples(pending)
            pending = []
    if pending:
        yield serialize_samples(pending)


def write_shard(path: str, samples: Iterable[Mapping[str, Any] | SampleBatch], *,
                shuffle_rng: random.Random | None, settings_hash: str, shuffle_memory_bytes: int = 256 << 20
                ) -> dict:
    """Write one shard atomically; returns its statistics (also stored beside it). `samples` are dicts,
    or SampleBatches of many at once (the same bytes)."""
    tmp = incomplete_path(path)
    stats = _Stats()
    shuffler = (_BoundedShuffler(shuffle_rng, path, shuffle_memory_bytes)
                if shuffle_rng is not None else None)
    try:
        with fileio.TFRecordWriter(tmp) as writer:
            for serialized, feature_max in _serialized_chunks(samples):
                stats.add(len(serialized), feature_max)
                if shuffler is None:
                    writer.write_many(serialized)
                else:
                    for record in serialized:
                        shuffler.add(record)
            if shuffler is not None:
                for record in shuffler.records():
                    writer.write(record)
    except BaseException:
        remove_if_exists(tmp)
        if shuffler is not None:
            shuffler.cleanup()
        raise
    try:
        result = dict(stats.as_dict(), file=os.path.basename(path), settings_hash=settings_hash,
                      size=fileio.stat(tmp).length)
        write_json_atomic(stats_path(path), result)
        fileio.rename(tmp, path, overwrite=True)
    except BaseException:
        remove_if_exists(tmp)
        raise
    return result


def completed_shard_stats(path: str, settings_hash: str) -> dict | None:
    """The stats of a finished shard made with the same settings, else None (redo it)."""
    if not (fileio.exists(path) and fileio.exists(stats_path(path))):
        return None
    stats = read_json(stats_path(path))
    if stats.get("settings_hash") != settings_hash:
        return None
    if "size" in stats and fileio.stat(path).length != int(stats["size"]):
        return None  # truncated or replaced since it was written
    return stats


def merge_stats(shard_stats: list[dict]) -> dict:
    feature_max: dict[str, float] = {}
    for s in shard_stats:
        for k, v in s["feature_max"].items():
            feature_max[k] = max(v, feature_max.get(k, v))
    return {"num_examples": sum(s["count"] for s in shard_stats),
            "shards": [{k: s[k] for k in ("file", "count", "size") if k in s} for s in shard_stats],
            "feature_max": feature_max}


def make_manifest(problem: str, split: str, seed: int, settings: dict, settings_hash: str,
                  shard_stats: list[dict]) -> dict:
    return dict(merge_stats(shard_stats), version=MANIFEST_VERSION, problem=problem, split=split,
                seed=seed, settings=settings, settings_hash=settings_hash,
                created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


# ----------------------------------------------------------------------------------------------- #
# reading
# ----------------------------------------------------------------------------------------------- #
# The record files this process opened for reading (Problem.data_files notes them), so a DataLossError
# that reaches framework.cli without a file name can be explained with the file and offset.
_OPENED: dict[str, None] = {}


def note_files_opened(paths: Iterable[str]) -> None:
    _OPENED.update(dict.fromkeys(paths))


def files_opened() -> list[str]:
    return list(_OPENED)


def tf_message(error: Exception) -> str:
    """The first line of a TF error's message without its '{{function_node ...}}' and '[Op:...]' wrapping."""
    text = str(getattr(error, "message", error)).strip().splitlines()[0] if str(error).strip() else ""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", text).strip()


def _verify_hint(path: str) -> str:
    problem_dir = os.path.dirname(path)
    return (f"run textrain-datagen --verify --problem={os.path.basename(problem_dir)} "
            f"--data_dir={os.path.dirname(problem_dir) or '.'} (with the settings the data was made with) "
            f"to regenerate the damaged shards")


def count_records(path: str) -> int:
    """Number of records in one file, every record's CRC checked; DataLossError is re-raised naming the file."""
    try:
        return int(tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda n, _: n + 1))
    except tf.errors.DataLossError as e:
        raise RecordError(f"{path}: corrupt TFRecord ({tf_message(e)}); {_verify_hint(path)}") from None


def find_corrupt_file(paths: Iterable[str]) -> str | None:
    for p in paths:
        try:
            count_records(p)
        except RecordError:
            return p
        except tf.errors.NotFoundError:  # gone since: not the file that gave the data loss
            continue
    return None


def explain_data_loss(error: Exception, paths: Iterable[str]) -> RecordError:
    """Turn tf.data's file-less 'corrupted record at N' error into one that names the file and offset."""
    message = tf_message(error)
    offset = re.search(r"(corrupted|truncated) record at (\d+)", message)
    if offset:  # the damaged file is longer than the offset: read only those
        paths = [p for p in paths if fileio.exists(p) and fileio.stat(p).length > int(offset.group(2))]
    bad = find_corrupt_file(paths)
    where = bad if bad else "one of the input files"
    at = f" at byte offset {offset.group(2)}" if offset else ""
    kind = offset.group(1) if offset else "corrupt"
    hint = _verify_hint(bad) if bad else "run textrain-datagen --verify on the data_dir to find and regenerate it"
    return RecordError(f"{where}: {kind} record{at} ({message}); {hint}")


def check_split_files(problem_dir: str, manifest: dict) -> list[str]:
    """What is wrong with a split's files compared with its manifest: missing files and files whose
    size differs from the size recorded at write time (a stat per shard; manifests without sizes are
    checked for presence only). Empty when all is well."""
    problems = []
    for shard in manifest.get("shards", []):
        path = os.path.join(problem_dir, shard["file"])
        try:
            size = fileio.stat(path).length
        except FileNotFoundError:
            problems.append(f"{shard['file']} is missing")
            continue
        if "size" in shard and int(shard["size"]) != size:
            problems.append(f"{shard['file']} has {size} bytes, the manifest says {shard['size']}")
    return problems


def verify_shard(path: str, expected: dict | None = None) -> str | None:
    """Read every record of a shard (CRC checked) and compare with its manifest entry; None when sound,
    else what is wrong."""
    name = os.path.basename(path)
    if not fileio.exists(path):
        return f"{name} is missing"
    if expected and "size" in expected and fileio.stat(path).length != int(expected["size"]):
        return f"{name} has {fileio.stat(path).length} bytes, the manifest says {expected['size']}"
    try:
        count = int(tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda n, _: n + 1))
    except tf.errors.DataLossError as e:
        return f"{name}: {tf_message(e)}"
    if expected and count != int(expected["count"]):
        return f"{name} holds {count} records, the manifest says {expected['count']}"
    return None
