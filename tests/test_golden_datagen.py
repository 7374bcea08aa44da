"""Goldens: the bytes every datagen path writes, through the textrain-datagen CLI.

bert/electra/xlnet pretraining shards are pinned already (tests/test_bert_golden.py, test_electra_golden.py,
test_xlnet_pretrain.py's GOLDEN_SHA256); this file pins the fine-tuning and translation paths: translate,
GLUE (pair, single sentence, regression), tsv_classification, SQuAD v1/v2 and RACE, each with WordPiece and
SentencePiece where the problem takes both. The inputs are made here from tests/data by plain rules; the CLI
runs them with a fixed --seed; every TFRecord file the run writes is hashed (sha256, first 16 hex digits),
in name order. tests/golden/datagen.json was written by `python3 tests/test_golden_datagen.py --write` on the
code before the refactors that gave a run one assembly (docs/HISTORY.md). Only record bytes are pinned: manifests (timings, paths) may change form.
"""
from __future__ import annotations

import collections
import csv
import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
GOLDEN = os.path.join(HERE, "golden", "datagen.json")
SP_MODEL = os.path.join(DATA, "xlnet_spiece_1200.model")
SPECIALS = ["[PAD]"] + [f"[unused{i}]" for i in range(3)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def emma_lines(n: int, start: int = 0) -> list[str]:
    with open(os.path.join(DATA, "austen_emma.txt"), encoding="utf-8") as f:
        lines = [line.strip() for line in f if len(line.split()) > 4]
    return lines[start:start + n]


def tang_lines() -> list[str]:
    with open(os.path.join(DATA, "tang_poems_zh.txt"), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def write_vocab(path: str) -> None:
    """Specials, every character alone and as ##, the 400 most frequent lower-case Emma words: words split
    into several pieces and some are [UNK]."""
    text = " ".join(emma_lines(3000)).lower()
    words = collections.Counter(re.findall(r"[a-z]+", text))
    chars = sorted({c for c in text if not c.isspace()})
    tokens = SPECIALS + chars + [f"##{c}" for c in chars] + [w for w, _ in words.most_common(400) if len(w) > 1]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(dict.fromkeys(tokens)) + "\n")


def write_tsv(path: str, rows: list[list[str]]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\", lineterminator="\n").writerows(rows)


def write_glue(root: str) -> None:
    lines = [line.replace("\t", " ") for line in emma_lines(90)]
    mrpc = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    for split, part in (("train", lines[:40]), ("dev", lines[40:60]), ("test", lines[60:70])):
        pairs = [[str(i % 2), str(2 * i), str(2 * i + 1), a, b] for i, (a, b) in enumerate(zip(part, part[1:]))]
        write_tsv(os.path.join(root, "MRPC", f"{split}.tsv"),
                  [mrpc] + (pairs if split != "test" else [[str(i)] + r[1:] for i, r in enumerate(pairs)]))
        cola = [[f"s{i}", str(i % 2), "", a] for i, a in enumerate(part)]
        write_tsv(os.path.join(root, "CoLA", f"{split}.tsv"),
                  cola if split != "test" else [["index", "sentence"]] + [[str(i), a] for i, a in enumerate(part)])
        sts = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2"]
        rows = [[str(i), "g", "f", "2012", str(i), "none", "none", a, b, f"{(i * 7) % 50 / 10:.3f}"]
                for i, (a, b) in enumerate(zip(part, part[1:]))]
        write_tsv(os.path.join(root, "STS-B", f"{split}.tsv"),
                  [sts + ["score"]] + rows if split != "test" else [sts] + [r[:-1] for r in rows])


def write_tsv_classification(root: str) -> None:
    lines = emma_lines(120, start=200)
    labels = ["pos", "neg", "neutral"]
    write_tsv(os.path.join(root, "train.tsv"), [["text", "label"]] + [[t, labels[i % 3]] for i, t in
                                                                     enumerate(lines[:100])])
    write_tsv(os.path.join(root, "dev.tsv"), [["text", "label"]] + [[t, labels[i % 3]] for i, t in
                                                                   enumerate(lines[100:])])


def write_squad(path: str) -> None:
    """Emma paragraphs; each question asks for a span that is really in the context; every third
    question of the v2 file is unanswerable."""
    paragraphs = []
    lines = emma_lines(60, start=400)
    for p in range(10):
        context = " ".join(lines[6 * p:6 * p + 6])
        words = context.split()
        qas = []
        for q in range(4):
            start = (11 * q + 3 * p) % max(1, len(words) - 4)
            answer = " ".join(words[start:start + 1 + q % 3])
            offset = len(" ".join(words[:start])) + (1 if start else 0)
            impossible = (p + q) % 3 == 0
            qas.append({"id": f"p{p}q{q}", "question": f"What comes after {words[max(0, start - 1)]}?",
                        "is_impossible": impossible,
                        "answers": [] if impossible else [{"text": answer, "answer_start": offset}]})
        paragraphs.append({"context": context, "qas": qas})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "v2.0", "data": [{"title": "Emma", "paragraphs": paragraphs}]}, f)


def write_race(root: str) -> None:
    lines = emma_lines(40, start=800)
    for split in ("train", "dev"):
        for level in ("middle", "high"):
            os.makedirs(os.path.join(root, split, level))
            for k in range(3):
                article = " ".join(lines[k * 5:k * 5 + 5])
                words = article.split()
                obj = {"id": f"{level}{k}.txt", "article": article,
                       "questions": [f"Who said {words[3]}?", f"{words[0]} _ {words[2]}."],
                       "options": [words[4:8], words[8:12]], "answers": ["ABCD"[k % 4], "ABCD"[(k + 1) % 4]]}
                with open(os.path.join(root, split, level, f"{k}.txt"), "w", encoding="utf-8") as f:
                    json.dump(obj, f)


def write_parallel(root: str) -> None:
    """English and Chinese lines side by side (not translations: the problem only needs aligned lines)."""
    zh = tang_lines()
    en = emma_lines(len(zh), start=1000)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "train.en"), "w", encoding="utf-8") as f:
        f.write("\n".join(en) + "\n")
    with open(os.path.join(root, "train.zh"), "w", encoding="utf-8") as f:
        f.write("\n".join(zh) + "\n")


def write_inputs(root: str) -> dict[str, str]:
    paths = {"vocab": os.path.join(root, "vocab.txt"), "glue": os.path.join(root, "glue"),
             "tsv": os.path.join(root, "tsv"), "squad": os.path.join(root, "squad.json"),
             "race": os.path.join(root, "race"), "parallel": os.path.join(root, "parallel")}
    write_vocab(paths["vocab"])
    write_glue(paths["glue"])
    write_tsv_classification(paths["tsv"])
    write_squad(paths["squad"])
    write_race(paths["race"])
    write_parallel(paths["parallel"])
    return paths


def configs(p: dict[str, str]) -> dict[str, list[str]]:
    """name -> textrain-datagen flags (besides --data_dir and --seed)."""
    wp = [f"--vocab_file={p['vocab']}"]
    sp = ["--tokenizer=sentencepiece", f"--sp_model={SP_MODEL}"]
    squad = [f"--train_file={p['squad']}", f"--predict_file={p['squad']}", "--max_seq_length=48",
             "--doc_stride=16", "--max_query_length=12"]
    return {
        "translate": ["--problem=translate_enzh_sub8k", f"--tmp_dir={p['parallel']}", "--dev_every=10"],
        "mrpc_wordpiece": ["--problem=mrpc", f"--glue_dir={p['glue']}/MRPC", "--max_seq_length=40", *wp],
        "mrpc_sentencepiece": ["--problem=mrpc", f"--glue_dir={p['glue']}/MRPC", "--max_seq_length=40", *sp],
        "cola_wordpiece": ["--problem=cola", f"--glue_dir={p['glue']}/CoLA", "--max_seq_length=24", *wp],
        "stsb_wordpiece": ["--problem=stsb", f"--glue_dir={p['glue']}/STS-B", "--max_seq_length=40", *wp],
        "tsv_classification": ["--problem=tsv_classification", f"--train_file={p['tsv']}/train.tsv",
                               f"--dev_file={p['tsv']}/dev.tsv", "--has_header", "--text_a_column=text",
                               "--label_column=label", "--max_seq_length=32", *wp],
        "squad_v1_wordpiece": ["--problem=squad_v1", *squad, *wp],
        "squad_v2_wordpiece": ["--problem=squad_v2", *squad, *wp],
        "squad_v2_sentencepiece": ["--problem=squad_v2", *squad, *sp],
        "race_wordpiece": ["--problem=race", f"--race_dir={p['race']}", "--max_seq_length=40", *wp],
        "race_sentencepiece": ["--problem=race", f"--race_dir={p['race']}", "--max_seq_length=40", *sp],
    }


def run_config(flags: list[str], data_dir: str) -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-m", "textrain.framework.datagen", f"--data_dir={data_dir}",
                           "--seed=3", *flags], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    digests = {}
    for folder, _, files in os.walk(data_dir):
        for name in files:  # the records and the subword vocabularies (they fix the ids)
            if name.endswith((".tfrecord", ".subwords")):
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    digests[os.path.relpath(path, data_dir)] = hashlib.sha256(f.read()).hexdigest()[:16]
    assert digests, f"no TFRecord files under {data_dir}"
    return dict(sorted(digests.items()))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    return write_inputs(str(tmp_path_factory.mktemp("golden_inputs")))


def _golden() -> dict:
    with open(GOLDEN, encoding="utf-8") as f:
        return json.load(f)


NAMES = ["translate", "mrpc_wordpiece", "mrpc_sentencepiece", "cola_wordpiece", "stsb_wordpiece", "tsv_classification",
         "squad_v1_wordpiece", "squad_v2_wordpiece", "squad_v2_sentencepiece", "race_wordpiece", "race_sentencepiece"]


@pytest.mark.parametrize("name", NAMES)
def test_shards_are_byte_identical_to_before_issue_21(name, inputs, tmp_path):
    assert run_config(configs(inputs)[name], str(tmp_path / "data")) == _golden()[name]


def test_every_config_has_a_golden(inputs):
    assert sorted(configs(inputs)) == sorted(NAMES) == sorted(_golden())


if __name__ == "__main__":
    import tempfile
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python3 tests/test_golden_datagen.py --write   (only on the code the goldens pin)")
    with tempfile.TemporaryDirectory() as tmp:
        made = write_inputs(tmp)
        golden = {name: run_config(flags, os.path.join(tmp, "out", name)) for name, flags in configs(made).items()}
    with open(GOLDEN, "w", encoding="utf-8") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
        f.write("\n")
