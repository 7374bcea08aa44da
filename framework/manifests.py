"""Split manifests: what a complete split holds, the settings it was made with, and checks against them.

- A split's manifest is written last (atomically). A split is complete only when its manifest exists; the
  reader and the trainer read settings from it instead of from file names. Each shard entry records the
  file's size in bytes (`size`), so a deleted, truncated or replaced shard is caught by a stat before
  training (`check_split_files`). Manifests written before sizes were recorded still load (names only).
- What is wrong with a shard is data (`ShardDamage`: the file and the reason), so a repair acts on the
  file names, never on a message.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time

from textrain.framework import fileio
from textrain.framework.errors import SettingsMismatchError

MANIFEST_VERSION = 1


@dataclasses.dataclass(frozen=True)
class ShardDamage:
    """One shard that does not match its manifest entry: its file name (what a repair acts on) and the
    message for a person (naming the file)."""

    file: str
    message: str

    def __str__(self) -> str:
        return self.message


def manifest_filename(problem: str, split: str) -> str:
    return f"{problem}-{split}.manifest.json"


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


def settings_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_settings(manifest: dict, expected: dict, source: str) -> None:
    """Refuse values in `expected` that disagree with the data's manifest, naming both."""
    settings = manifest.get("settings", {})
    bad = [f"{k}: {source} says {v!r}, the data was made with {settings[k]!r}"
           for k, v in expected.items() if k in settings and v is not None and settings[k] != v]
    if bad:
        raise SettingsMismatchError(
            f"settings disagree with the data manifest of {manifest.get('problem')}-"
            f"{manifest.get('split')}:\n  " + "\n  ".join(bad))


def check_split_files(problem_dir: str, manifest: dict) -> list[ShardDamage]:
    """What is wrong with a split's files compared with its manifest: missing files and files whose
    size differs from the size recorded at write time (a stat per shard; manifests without sizes are
    checked for presence only). Empty when all is well."""
    problems: list[ShardDamage] = []
    for shard in manifest.get("shards", []):
        path = os.path.join(problem_dir, shard["file"])
        try:
            size = fileio.stat(path).length
        except FileNotFoundError:
            problems.append(ShardDamage(shard["file"], f"{shard['file']} is missing"))
            continue
        if "size" in shard and int(shard["size"]) != size:
            problems.append(ShardDamage(shard["file"],
                                        f"{shard['file']} has {size} bytes, the manifest says {shard['size']}"))
    return problems
