"""In-process checks of the fault-handling pieces: manifests with and without sizes, per-writer
temporary names and their cleanup, the directory lock, and cli.explain's one-line messages. The CLI-level
cases are in tests/test_faults.py."""
from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
import zlib

import pytest
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from helpers import toy_problems  # noqa: E402

from textrain.framework import cli, fileio, locks, manifests, shards  # noqa: E402
from textrain.framework.errors import RecordError  # noqa: E402

EMMA = os.path.join(HERE, "data", "austen_emma.txt")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("toy") / "data")
    problem = toy_problems.ToyLines(toy_problems.ToyHParams(input_file=EMMA))
    problem.generate_data(data, "", seed=1)
    return problem, data


def test_manifest_without_sizes_still_loads_and_names_missing_files(toy, tmp_path):
    problem, data = toy
    copy = str(tmp_path / "data")
    tf.io.gfile.makedirs(copy)
    subprocess.run(["cp", "-r", os.path.join(data, "toy_lines"), copy], check=True)
    path = os.path.join(problem.problem_dir(copy), manifests.manifest_filename("toy_lines", "train"))
    manifest = json.load(open(path))
    assert all("size" in s for s in manifest["shards"])
    for s in manifest["shards"]:
        del s["size"]  # as written before sizes were recorded
    fileio.write_json_atomic(path, manifest)
    assert len(problem.data_files(copy, "train")) == 4
    os.remove(os.path.join(problem.problem_dir(copy), manifest["shards"][3]["file"]))
    with pytest.raises(RecordError, match=r"toy_lines-train-00003-of-00004.tfrecord is missing.*textrain-datagen"):
        problem.data_files(copy, "train")


def test_verify_shard_reads_every_record(toy, tmp_path):
    problem, data = toy
    manifest = problem.read_manifest(data, "train")
    entry = manifest["shards"][0]
    src = os.path.join(problem.problem_dir(data), entry["file"])
    assert shards.verify_shard(src, entry) is None
    bad = str(tmp_path / entry["file"])
    blob = bytearray(open(src, "rb").read())
    blob[len(blob) // 2] ^= 0xFF
    open(bad, "wb").write(bytes(blob))
    assert "corrupted record" in shards.verify_shard(bad, entry).message
    assert "holds" in shards.verify_shard(src, dict(entry, count=entry["count"] + 1, size=entry["size"])).message


def test_damage_is_data_naming_each_shard_file(toy, tmp_path):
    """What repair acts on is the file name of each damaged shard, not a message to parse."""
    problem, data = toy
    copy = str(tmp_path / "data")
    subprocess.run(["cp", "-r", data, copy], check=True)
    manifest = problem.read_manifest(copy, "train")
    first, second = (os.path.join(problem.problem_dir(copy), s["file"]) for s in manifest["shards"][:2])
    os.remove(first)
    with open(second, "ab") as f:
        f.write(b"x")
    damage = manifests.check_split_files(problem.problem_dir(copy), manifest)
    assert [d.file for d in damage] == [os.path.basename(first), os.path.basename(second)]
    assert str(damage[0]).endswith("is missing") and "bytes, the manifest says" in str(damage[1])


def test_temporary_names_are_per_writer_and_only_dead_writers_files_are_removed(tmp_path):
    mine = fileio.incomplete_path(str(tmp_path / "a.tfrecord"))
    assert mine.endswith(f"-{os.getpid()}.incomplete") and mine != fileio.incomplete_path(str(tmp_path / "b"))
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = fileio.HOST_TAG
    files = {"live": mine, "dead": str(tmp_path / f"b.tfrecord.{host}-{dead.pid}.incomplete"),
             "other_host": str(tmp_path / f"c.tfrecord.elsewhere-{dead.pid}.incomplete"),
             "untagged": str(tmp_path / "d.tfrecord.incomplete")}
    for path in files.values():
        open(path, "w").close()
    removed = locks.remove_stale_incomplete(str(tmp_path))
    assert sorted(removed) == sorted([files["dead"], files["untagged"]])
    assert os.path.exists(files["live"]) and os.path.exists(files["other_host"])


def test_a_killed_writer_left_as_a_zombie_counts_as_dead(tmp_path):
    """A writer killed with its parent is reparented to pid 1; where nothing reaps it (a container without an
    init) it stays a zombie, which kill(pid, 0) still finds. Its temporary file must be removed all the same."""
    zombie = subprocess.Popen(["true"])  # exits at once and stays a zombie until waited for
    try:
        for _ in range(200):
            with open(f"/proc/{zombie.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        else:
            pytest.fail("the child did not become a zombie")
        assert not locks.process_running(zombie.pid)
        assert locks.process_running(os.getpid())
        path = str(tmp_path / f"e.tfrecord.{fileio.HOST_TAG}-{zombie.pid}.incomplete")
        open(path, "w").close()
        assert locks.remove_stale_incomplete(str(tmp_path)) == [path]
    finally:
        zombie.wait()


def test_lock_is_exclusive_reentrant_and_stale_when_the_holder_is_gone(tmp_path):
    lock = locks.acquire_dir_lock(str(tmp_path), "test")
    assert locks.acquire_dir_lock(str(tmp_path), "test").owner is False  # this process holds it already
    lock.release()
    assert not os.path.exists(tmp_path / ".textrain.lock")

    holder = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / ".textrain.lock").write_text(json.dumps({"host": socket.gethostname(), "pid": holder.pid,
                                                             "program": "other", "started": time.time()}))
        with pytest.raises(locks.LockedError, match=rf"pid {holder.pid}.*\.textrain\.lock"):
            locks.acquire_dir_lock(str(tmp_path), "test")
    finally:
        holder.kill()
        holder.wait()
    taken = locks.acquire_dir_lock(str(tmp_path), "test")  # the holder is gone: stale, taken over
    assert taken.owner and json.loads((tmp_path / ".textrain.lock").read_text())["pid"] == os.getpid()
    taken.release()

    (tmp_path / ".textrain.lock").write_text(json.dumps({"host": "another-machine", "pid": holder.pid}))
    with pytest.raises(locks.LockedError, match="another-machine"):  # never taken from another host
        locks.acquire_dir_lock(str(tmp_path), "test")


def test_explain_turns_known_failures_into_one_line(toy, tmp_path):
    message, status = cli.explain(OSError(errno.ENOSPC, "No space left on device", "/data/x"))
    assert status == 1 and "disk is full" in message and "/data/x" in message
    assert cli.explain(KeyboardInterrupt()) == ("interrupted (Ctrl-C)", 130)
    assert "corrupt or truncated compressed input" in cli.explain(zlib.error("invalid stored block"))[0]
    assert cli.explain(RuntimeError("a bug")) is None  # bugs keep their traceback

    problem, data = toy
    files = problem.data_files(data, "train")
    bad = str(tmp_path / "bad.tfrecord")
    blob = bytearray(open(files[1], "rb").read())
    blob[len(blob) // 2] ^= 0xFF
    open(bad, "wb").write(bytes(blob))
    with pytest.raises(tf.errors.DataLossError) as e:
        for _ in tf.data.TFRecordDataset([files[0], bad]):
            pass
    message, status = cli.explain(e.value, lambda: [bad])
    assert status == 1 and message.startswith(f"{bad}: corrupted record at byte offset") and "--verify" in message
