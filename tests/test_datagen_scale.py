"""Datagen's cost does not grow with the shard count: a corpus of more than 2^20 short documents through
`textrain-datagen` with 8 and with 64 shards costs about the same CPU and reads about the same bytes.

A shard job that streams the whole corpus to pick out its own documents makes the 64-shard run cost ~8x the
scan of the 8-shard one; a corpus read once (partitions, then a shuffle by shard) costs the same at any shard
count. The runs are real CLI subprocesses; CPU and bytes read are those of the whole process tree, polled
from /proc until it exits (and the reaped children's rusage, whichever is larger).
"""
from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
import time

import pytest

from textrain.framework import encoders

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tree_cost import descendants, process_cost  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTS = (1 << 20) + (1 << 14)  # past 2^20: no per-process document index can stand in for a read-once path
WORDS = ("the quick brown fox jumps over lazy dog a an of to in is was he she it they we you and or but "
         "not with from for by on at as this that these those then than when where who what which").split()
CPU_RATIO = 1.35  # 64 shards / 8 shards; the run's fixed and per-document costs do not depend on the shards
READ_RATIO = 1.5


def datagen_cli() -> list[str]:
    """The console script a user types, from the running interpreter's environment."""
    script = os.path.join(os.path.dirname(sys.executable), "textrain-datagen")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "textrain.framework.datagen"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[str, str]:
    """(corpus file, vocab file): DOCUMENTS documents of two short lines each, every word in the vocab."""
    folder = tmp_path_factory.mktemp("scale")
    rng = random.Random(7)
    path = str(folder / "short_docs.txt")
    with open(path, "w") as f:
        for _ in range(DOCUMENTS):
            f.write(" ".join(rng.choices(WORDS, k=rng.randint(2, 4))) + "\n"
                    + " ".join(rng.choices(WORDS, k=rng.randint(2, 4))) + "\n\n")
    vocab = str(folder / "vocab.txt")
    with open(vocab, "w") as f:
        f.write("\n".join(list(encoders.BERT_SPECIAL_TOKENS) + sorted(set(WORDS))) + "\n")
    return path, vocab


def run_datagen(corpus: tuple[str, str], data_dir: str, num_shards: int, cpu_limit: float,
                why: str = "") -> tuple[float, int]:
    """(CPU seconds, bytes read) of one datagen run's process tree; a run past `cpu_limit` CPU-s is
    stopped and fails the test (the old cost would take minutes to finish)."""
    path, vocab = corpus
    # electra_pretrain: its shard job only tokenizes and packs (no masking or NSP pairs at datagen), so the
    # corpus's read and shuffle weigh the most in the run's CPU: the ratio is the most sensitive to them.
    cmd = datagen_cli() + [
        "--problem=electra_pretrain", f"--input_file={path}", f"--vocab_file={vocab}", f"--data_dir={data_dir}",
        f"--num_shards={num_shards}", "--max_seq_length=32"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    seen: dict[int, tuple[float, int]] = {}
    while proc.poll() is None:
        for pid in descendants(proc.pid):
            cost = process_cost(pid)
            if cost:
                seen[pid] = cost
        polled = sum(c for c, _ in seen.values())
        if polled > cpu_limit:
            proc.kill()
            proc.communicate()
            pytest.fail(f"{num_shards} shards: over {cpu_limit:.0f} CPU-s and still running{why}")
        time.sleep(0.2)
    out = proc.communicate()[0]
    assert proc.returncode == 0, out[-3000:]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return max(reaped, sum(c for c, _ in seen.values())), sum(r for _, r in seen.values())


@pytest.mark.slow
def test_cpu_and_bytes_read_do_not_grow_with_the_shard_count(corpus, tmp_path):
    corpus_bytes = os.path.getsize(corpus[0])
    cpu_8, read_8 = run_datagen(corpus, str(tmp_path / "s8"), 8, cpu_limit=600)
    cpu_64, read_64 = run_datagen(corpus, str(tmp_path / "s64"), 64, cpu_limit=CPU_RATIO * cpu_8 + 5,
                                   why=f" (8 shards: {cpu_8:.1f} CPU-s)")
    figures = (f"8 shards {cpu_8:.1f} CPU-s, read {read_8 / corpus_bytes:.2f}x the corpus; "
               f"64 shards {cpu_64:.1f} CPU-s, read {read_64 / corpus_bytes:.2f}x")
    print(figures)  # shown with -rA: the figures behind the bounds
    assert cpu_64 <= CPU_RATIO * cpu_8, figures
    assert read_64 <= READ_RATIO * read_8, figures
