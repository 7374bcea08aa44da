"""Shard files: atomic sharded writing with a bounded-memory shuffle, statistics sidecars, CRC reading.

File discipline (tensor2tensor's, made strict):
- A shard is written as `<name>.<host>-<pid>.incomplete` (fileio.incomplete_path: unique per writer, so
  two writers can never mix bytes under one name) and renamed when whole; its statistics go to a
  `<name>.stats.json` sidecar that is renamed into place *before* the shard, so an existing shard always
  has its statistics and a half-written shard never has the final name.
- Each shard's statistics record the file's size in bytes (`size`), so a truncated or replaced shard is
  caught by a stat (`completed_shard_stats`, manifests.check_split_files); every record's CRC is read by
  `verify_shard` (`textrain-datagen --verify`).
- Shuffling a shard is exact (a uniform permutation) and bounded in memory: records are buffered up to
  `shuffle_memory_bytes`; past that they are spilled to random bucket files, each bucket is shuffled in
  memory, and the buckets are concatenated.
"""
from __future__ import annotations

import os
import random
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from textrain.framework import fileio, tf_errors
from textrain.framework.lazy_tf import tf
from textrain.framework.manifests import ShardDamage
from textrain.framework.records import SampleBatch, serialize_batch, serialize_samples


def shard_filename(problem: str, split: str, shard_id: int, num_shards: int) -> str:
    return f"{problem}-{split}-{shard_id:05d}-of-{num_shards:05d}.tfrecord"


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
        return fileio.incomplete_path(self.tmp_prefix, f"bucket{i:03d}")

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
            fileio.remove_if_exists(self._bucket_path(i))


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
    tmp = fileio.incomplete_path(path)
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
        fileio.remove_if_exists(tmp)
        if shuffler is not None:
            shuffler.cleanup()
        raise
    try:
        result = dict(stats.as_dict(), file=os.path.basename(path), settings_hash=settings_hash,
                      size=fileio.stat(tmp).length)
        fileio.write_json_atomic(stats_path(path), result)
        fileio.rename(tmp, path, overwrite=True)
    except BaseException:
        fileio.remove_if_exists(tmp)
        raise
    return result


def completed_shard_stats(path: str, settings_hash: str) -> dict | None:
    """The stats of a finished shard made with the same settings, else None (redo it)."""
    if not (fileio.exists(path) and fileio.exists(stats_path(path))):
        return None
    stats = fileio.read_json(stats_path(path))
    if stats.get("settings_hash") != settings_hash:
        return None
    if "size" in stats and fileio.stat(path).length != int(stats["size"]):
        return None  # truncated or replaced since it was written
    return stats


def verify_shard(path: str, expected: dict | None = None) -> ShardDamage | None:
    """Read every record of a shard (CRC checked) and compare with its manifest entry; None when sound,
    else what is wrong."""
    name = os.path.basename(path)
    if not fileio.exists(path):
        return ShardDamage(name, f"{name} is missing")
    if expected and "size" in expected and fileio.stat(path).length != int(expected["size"]):
        return ShardDamage(name, f"{name} has {fileio.stat(path).length} bytes, the manifest says "
                                 f"{expected['size']}")
    try:
        count = int(tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda n, _: n + 1))
    except tf.errors.DataLossError as e:
        return ShardDamage(name, f"{name}: {tf_errors.tf_message(e)}")
    if expected and count != int(expected["count"]):
        return ShardDamage(name, f"{name} holds {count} records, the manifest says {expected['count']}")
    return None
