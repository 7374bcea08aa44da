"""xlnet_pretrain, translate and tsv_classification datagen read their corpus once, whatever the shard and task count, through the real
`textrain-datagen`: the bytes its process tree reads (rchar, tests/tree_cost.py) less those of a run over
a 20 KB corpus (imports, the SentencePiece model) stay near twice the corpus (its partitions once,
the spill files once) at 2 or 16 shards, and for --num_tasks=4 run one after another (each task reads only
the partitions it claims, then its shards' slices); the tasks' shards equal one task's.

A shard job that reads the corpus itself (as xlnet_pretrain did: each worker or task scanned the corpus
twice, to size the documents, then to read its contiguous ranges) reads ~2x the corpus per task: ~8x for
four tasks. translate's shard jobs each read both files whole: 16x at 16 shards; now the planner's count
pass (once: later tasks reuse its plan), the partitions and the spills read ~3x. tsv_classification's
shard jobs each read the train file whole (17x at 16 shards); now the planner's passes (a newline count
and a row count, which checks every row), the partitions and the spills read ~4x."""
from __future__ import annotations

import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tree_cost import run_measured  # noqa: E402

REPO = os.path.dirname(HERE)
EMMA = os.path.join(HERE, "data", "austen_emma.txt")
SP_MODEL = os.path.join(HERE, "data", "xlnet_spiece_1200.model")
XLNET = ["--problem=xlnet_pretrain", f"--sp_model={SP_MODEL}", "--seq_len=64", "--reuse_len=32", "--num_predict=8",
         "--bsz_per_host=4", "--num_core_per_host=1", "--partition_mb=0.5"]
READ_BOUND = 2.5  # x the corpus: its partitions once, the spill files once, and some slack
# Each task also reads ~64 KB at every partition cut (planning) and each spill's index once per shard of its:
# ~0.25x of this small corpus cut into 0.5 MB partitions.
TASKS_READ_BOUND = 4.0  # and four start-ups, each measured by polling (a process's last reads may be missed)


def write_corpus(path: str, copies: int = 10) -> int:
    """Emma's non-blank lines grouped into documents of 3 + c lines in copy c (no document repeats)."""
    with open(EMMA, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    with open(path, "w", encoding="utf-8") as out:
        for c in range(copies):
            size = 3 + c
            for i in range(0, len(lines) - size, size):
                out.write("\n".join(lines[i:i + size]) + "\n\n")
    return os.path.getsize(path)


def datagen(data_dir: str, corpus: str, *extra: str) -> tuple[float, int]:
    cmd = [sys.executable, "-m", "textrain.framework.datagen", f"--data_dir={data_dir}", f"--input_file={corpus}",
           *XLNET, *extra]
    cpu, read, proc = run_measured(cmd, REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cpu, read


def shard_bytes(data_dir: str) -> dict[str, bytes]:
    return shard_bytes_of(data_dir, "xlnet_pretrain")


def test_xlnet_reads_its_corpus_once_at_any_shard_and_task_count(tmp_path):
    corpus = str(tmp_path / "corpus.txt")
    size = write_corpus(corpus)
    tiny = str(tmp_path / "tiny.txt")
    with open(corpus, encoding="utf-8") as f, open(tiny, "w", encoding="utf-8") as out:
        out.write(f.read(20_000))  # a few records' worth
    _, startup = datagen(str(tmp_path / "tiny"), tiny, "--num_shards=1")

    _, read_2 = datagen(str(tmp_path / "s2"), corpus, "--num_shards=2")
    _, read_16 = datagen(str(tmp_path / "s16"), corpus, "--num_shards=16")
    tasks = str(tmp_path / "tasks")
    read_tasks = sum(datagen(tasks, corpus, "--num_shards=16", "--num_tasks=4", f"--task_id={t}")[1]
                     for t in range(4))
    figures = (f"corpus {size / 1e6:.1f} MB, start-up {startup / 1e6:.1f} MB; beyond it 2 shards read "
               f"{(read_2 - startup) / size:.2f}x, 16 shards {(read_16 - startup) / size:.2f}x, "
               f"4 tasks {(read_tasks - 4 * startup) / size:.2f}x the corpus")
    print(figures)
    assert read_2 - startup <= READ_BOUND * size, figures
    assert read_16 - startup <= READ_BOUND * size, figures
    assert read_tasks - 4 * startup <= TASKS_READ_BOUND * size, figures
    assert shard_bytes(tasks) == shard_bytes(str(tmp_path / "s16"))
    assert not glob.glob(os.path.join(tasks, "xlnet_pretrain", ".shuffle"))


def write_parallel(folder: str, pairs: int = 40_000) -> int:
    """train.en / train.zh of `pairs` line pairs (a few blank lines, which datagen leaves out); their size."""
    import random
    rng = random.Random(5)
    words = "the a house river cold morning runs over quickly bank light".split()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "train.en"), "w") as en, open(os.path.join(folder, "train.zh"), "w") as zh:
        for i in range(pairs):
            en.write(("" if i % 97 == 5 else " ".join(rng.choices(words, k=rng.randint(3, 12)))) + "\n")
            zh.write("".join(rng.choices("房子河流早晨寒冷快速光", k=rng.randint(3, 15))) + "\n")
    return sum(os.path.getsize(os.path.join(folder, n)) for n in ("train.en", "train.zh"))


def translate(data_dir: str, tmp_dir: str, *extra: str) -> tuple[float, int]:
    cmd = [sys.executable, "-m", "textrain.framework.datagen", "--problem=translate_enzh_sub8k",
           f"--data_dir={data_dir}", f"--tmp_dir={tmp_dir}", "--partition_mb=0.3", *extra]
    cpu, read, proc = run_measured(cmd, REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cpu, read


def test_translate_reads_its_pair_once_at_any_shard_and_task_count(tmp_path):
    """Every run reuses one set of vocabularies (built from a small pair, not measured: building them reads
    up to 10 MB per side); 16 shards in one run and --num_tasks=4 one after another: the same shards."""
    import shutil
    parallel, tiny = str(tmp_path / "parallel"), str(tmp_path / "tiny")
    size = write_parallel(parallel)
    write_parallel(tiny, pairs=300)
    runs = {name: str(tmp_path / name) for name in ("tiny", "s16", "tasks")}
    translate(runs["tiny"], tiny, "--vocab_only")
    for name in ("s16", "tasks"):
        shutil.copytree(runs["tiny"], runs[name])
    _, startup = translate(runs["tiny"], tiny, "--num_shards=1")
    _, read_16 = translate(runs["s16"], parallel, "--num_shards=16")
    read_tasks = sum(translate(runs["tasks"], parallel, "--num_shards=16", "--num_tasks=4", f"--task_id={t}")[1]
                     for t in range(4))
    figures = (f"pair {size / 1e6:.1f} MB, start-up {startup / 1e6:.1f} MB; beyond it 16 shards read "
               f"{(read_16 - startup) / size:.2f}x, 4 tasks {(read_tasks - 4 * startup) / size:.2f}x the pair")
    print(figures)
    assert read_16 - startup <= 4.0 * size, figures  # the code before: 17x
    assert read_tasks - 4 * startup <= 4.5 * size, figures
    assert shard_bytes_of(runs["tasks"], "translate_enzh_sub8k") == shard_bytes_of(runs["s16"], "translate_enzh_sub8k")


def shard_bytes_of(data_dir: str, problem: str) -> dict[str, bytes]:
    files = sorted(glob.glob(os.path.join(data_dir, problem, "*.tfrecord")))
    assert files
    return {os.path.basename(f): open(f, "rb").read() for f in files}


def write_table(path: str, rows: int) -> int:
    """A headed `sentence<TAB>label` file of Emma's lines (a blank line now and then); its size."""
    with open(EMMA, encoding="utf-8") as f:
        lines = [line.strip().replace("\t", " ") for line in f if line.strip()]
    with open(path, "w", encoding="utf-8") as out:
        out.write("sentence\tlabel\n")
        for i in range(rows):
            out.write(("\n" if i % 89 == 7 else "") + f"{lines[i % len(lines)]}\t{'pos' if i % 3 else 'neg'}\n")
    return os.path.getsize(path)


def tsv(data_dir: str, train_file: str, vocab: str, *extra: str) -> tuple[float, int]:
    cmd = [sys.executable, "-m", "textrain.framework.datagen", "--problem=tsv_classification",
           f"--data_dir={data_dir}", f"--train_file={train_file}", f"--vocab_file={vocab}", "--labels=neg,pos",
           "--dev_fraction=0.1", "--max_seq_length=16", *extra]
    cpu, read, proc = run_measured(cmd, REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cpu, read


def test_tsv_classification_reads_its_rows_once_at_any_shard_and_task_count(tmp_path):
    """16 shards over partitions of 0.3 MB, --num_tasks=4 one after another, and one partition: the same
    shards (a row's shard is its index mod 16, its dev share every 10th row, as before)."""
    from textrain.framework import encoders
    table, tiny = str(tmp_path / "train.tsv"), str(tmp_path / "tiny.tsv")
    size = write_table(table, 40_000)
    write_table(tiny, 100)
    with open(EMMA, encoding="utf-8") as f:
        vocab = encoders.build_wordpiece_vocab(iter(f.read(200_000).split("\n")), vocab_size=300,
                                               out_file=str(tmp_path / "vocab.txt"))
    _, startup = tsv(str(tmp_path / "tiny"), tiny, vocab, "--num_shards=1")
    _, read_16 = tsv(str(tmp_path / "s16"), table, vocab, "--num_shards=16", "--partition_mb=0.3")
    tasks = str(tmp_path / "tasks")
    read_tasks = sum(tsv(tasks, table, vocab, "--num_shards=16", "--partition_mb=0.3", "--num_tasks=4",
                         f"--task_id={t}")[1] for t in range(4))
    tsv(str(tmp_path / "whole"), table, vocab, "--num_shards=16")
    figures = (f"table {size / 1e6:.1f} MB, start-up {startup / 1e6:.1f} MB; beyond it 16 shards read "
               f"{(read_16 - startup) / size:.2f}x, 4 tasks {(read_tasks - 4 * startup) / size:.2f}x the table")
    print(figures)
    assert read_16 - startup <= 5.0 * size, figures  # the code before: ~17x
    assert read_tasks - 4 * startup <= 6.0 * size, figures
    expected = shard_bytes_of(str(tmp_path / "s16"), "tsv_classification")
    assert len(expected) == 17  # 16 train shards and the dev shard
    assert shard_bytes_of(tasks, "tsv_classification") == expected
    assert shard_bytes_of(str(tmp_path / "whole"), "tsv_classification") == expected
