"""Tasks sharing a data_dir (--num_tasks) claim the corpus partitions they read; a claim that its holder
stops renewing (a task of another machine that died or hangs: here a real process stopped with SIGSTOP,
whose pid this machine still sees alive) is taken over after --claim_timeout_s, and the shards equal a
one-task run's."""
from __future__ import annotations

import glob
import json
import os
import random
import signal
import subprocess
import sys
import time

from textrain.framework import encoders

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "the quick brown fox jumps over a lazy dog and then runs to the river bank in the cold morning".split()


def write_corpus(folder: str, documents: int = 30_000) -> tuple[str, str]:
    rng = random.Random(3)
    path = os.path.join(folder, "corpus.txt")
    with open(path, "w") as f:
        for _ in range(documents):
            for _ in range(rng.randint(2, 4)):
                f.write(" ".join(rng.choices(WORDS, k=rng.randint(3, 9))) + " .\n")
            f.write("\n")
    vocab = os.path.join(folder, "vocab.txt")
    with open(vocab, "w") as f:
        f.write("\n".join(list(encoders.BERT_SPECIAL_TOKENS) + sorted(set(WORDS)) + ["."]) + "\n")
    return path, vocab


def datagen_cmd(corpus: tuple[str, str], data_dir: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "textrain.framework.datagen", "--problem=bert_pretrain",
            f"--input_file={corpus[0]}", f"--vocab_file={corpus[1]}", f"--data_dir={data_dir}", "--num_shards=4",
            "--dupe_factor=1", "--max_seq_length=32", "--max_predictions_per_seq=4", "--partition_mb=0.05", *extra]


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def shard_bytes(data_dir: str) -> dict[str, bytes]:
    files = sorted(glob.glob(os.path.join(data_dir, "bert_pretrain", "*.tfrecord")))
    assert files
    return {os.path.basename(f): open(f, "rb").read() for f in files}


def held_claims(shuffle_dir: str, pid: int) -> list[str]:
    """Claims of `pid` whose partition has no spill file yet."""
    out = []
    for path in glob.glob(os.path.join(shuffle_dir, "part-*.claim")):
        try:
            with open(path) as f:
                holder = json.load(f)
        except (OSError, ValueError):
            continue
        if holder.get("pid") == pid and not os.path.exists(path[:-len(".claim")] + ".spill"):
            out.append(path)
    return out


def stop_while_holding_a_claim(proc: subprocess.Popen, shuffle_dir: str, timeout: float = 300) -> list[str]:
    """SIGSTOP `proc` at a moment it holds a claim of a partition not yet spilled; its claims."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if held_claims(shuffle_dir, proc.pid):
            os.kill(proc.pid, signal.SIGSTOP)
            claims = held_claims(shuffle_dir, proc.pid)
            if claims:
                return claims
            os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.005)
    raise AssertionError("the first task never held a claim")


def test_a_claim_not_renewed_is_taken_over_and_the_shards_are_a_one_task_runs(tmp_path):
    corpus = write_corpus(str(tmp_path))
    reference = str(tmp_path / "one_task")
    run(datagen_cmd(corpus, reference))

    shared = str(tmp_path / "tasks")
    shuffle_dir = os.path.join(shared, "bert_pretrain", ".shuffle")
    first = subprocess.Popen(datagen_cmd(corpus, shared, "--num_tasks=2", "--task_id=0"), cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    try:
        claims = stop_while_holding_a_claim(first, shuffle_dir)
        second = run(datagen_cmd(corpus, shared, "--num_tasks=2", "--task_id=1", "--claim_timeout_s=2"))
        assert "not renewed for" in second.stderr and os.path.basename(claims[0]) in second.stderr
    finally:
        first.kill()  # the hung task's machine is gone for good
        first.communicate()
    assert not glob.glob(os.path.join(shared, "bert_pretrain", "*.manifest.json"))  # task 0's shards are missing
    run(datagen_cmd(corpus, shared, "--num_tasks=2", "--task_id=0"))
    assert shard_bytes(shared) == shard_bytes(reference)
    assert not os.path.exists(shuffle_dir)


CLAIM_AND_HOLD = """
import sys, time
from textrain.framework import shuffle
part = shuffle.Partition(0, 0, "unused")
assert shuffle.claim(sys.argv[1], part)
with shuffle.heartbeat(shuffle._claim_path(sys.argv[1], part), float(sys.argv[2])):
    print("claimed", flush=True)
    time.sleep(60)
"""


def test_a_renewed_claim_is_kept_past_the_timeout(tmp_path):
    """A claim whose holder renews it stays its holder's for longer than the timeout; once the holder stops,
    another process takes it after the timeout."""
    from textrain.framework import shuffle
    directory, part, timeout = str(tmp_path), shuffle.Partition(0, 0, "unused"), 1.0
    holder = subprocess.Popen([sys.executable, "-c", CLAIM_AND_HOLD, directory, str(timeout)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "claimed"
        end = time.time() + 3 * timeout
        while time.time() < end:
            assert not shuffle.claim(directory, part, timeout)
            time.sleep(0.1)
        os.kill(holder.pid, signal.SIGSTOP)
        time.sleep(timeout * 1.5)
        assert shuffle.claim(directory, part, timeout)
    finally:
        holder.kill()
        holder.communicate()
