"""RACE-style multiple choice: an article, questions, four options each, the answer letter.

Input layout (the RACE release, read by zihangdai/xlnet `run_race.py`): `{race_dir}/{train,dev,test}/
{middle,high}/*.txt`, each file one JSON object `{"id", "article", "questions": [...], "options":
[[4 strings], ...], "answers": ["A".."D", ...]}`. Files are read in sorted order (the original lists
the directory in whatever order the file system gives).

Each question becomes one record of `num_choices` rows (4 in RACE) laid end to end, as run_race.py:
`input_ids`, `input_mask`, `segment_ids` `[num_choices * max_seq_length]` and `label_ids` (the answer
letter's index). Row c holds the article and "question + option c"; a question with a "_" blank gets
the option written into the blank instead. The question-option text keeps its LAST `max_qa_length`
tokens; the article keeps its first `max_seq_length - 3 - len(qa)` tokens.
- sentencepiece (XLNet): `article <sep> qa <sep> <cls>`, segments 0 (article and its <sep>), 1 (qa and
  its <sep>), 2 (<cls>), 3 on padding; LEFT padding with id 0, `input_mask` 1 on padding (XLNet's
  convention). (The original appends the <sep> to the shared article token list when the article is
  not truncated, so its later options see a longer article; we do not repeat that.)
- wordpiece (BERT): `[CLS] article [SEP] qa [SEP]`, segments 0 then 1, right padding, mask 1 = real.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterator

import numpy as np

from textrain.framework import fileio
from textrain.framework.lazy_tf import tf
from textrain.framework.problem import DatasetSplit
from textrain.framework.registry import register_problem
from textrain.framework.settings import help_text
from textrain.framework.tasks import FinetuneTask, check_tokenizer

SEG_A, SEG_B, SEG_CLS, SEG_PAD = 0, 1, 2, 3
LEVELS = ("middle", "high")


class RaceFormatError(ValueError):
    pass


def read_race_split(race_dir: str, split: str, levels: tuple[str, ...] = LEVELS) -> list[dict[str, Any]]:
    """Every question of one split: {id, level, article, question, options, label}."""
    examples = []
    for level in levels:
        folder = os.path.join(race_dir, split, level)
        if not fileio.isdir(folder):
            continue
        for name in sorted(fileio.listdir(folder)):
            path = os.path.join(folder, name)
            with fileio.open_file(path) as f:
                try:
                    data = json.load(f)
                except json.JSONDecodeError as e:
                    raise RaceFormatError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from None
            missing = [k for k in ("article", "questions", "options", "answers") if k not in data]
            if missing:
                raise RaceFormatError(f"{path}: lacks {', '.join(missing)}")
            if not len(data["questions"]) == len(data["options"]) == len(data["answers"]):
                raise RaceFormatError(f"{path}: {len(data['questions'])} questions, {len(data['options'])} "
                                      f"option lists and {len(data['answers'])} answers")
            for i, (question, options, answer) in enumerate(
                    zip(data["questions"], data["options"], data["answers"])):
                label = ord(answer) - ord("A") if isinstance(answer, str) and len(answer) == 1 else -1
                if not 0 <= label < len(options):
                    raise RaceFormatError(f"{path}: question {i}: answer {answer!r} is not one of "
                                          f"A..{chr(ord('A') + len(options) - 1)}")
                examples.append({"id": f"{data.get('id', name)}-{i}", "level": level,
                                 "article": data["article"], "question": question,
                                 "options": list(options), "label": label})
    return examples


def question_with_option(question: str, option: str) -> str:
    """The option written into a "_" blank, else appended after a space (run_race.py)."""
    return question.replace("_", option) if "_" in question else " ".join([question, option])


@dataclasses.dataclass
class RaceHParams:
    race_dir: str = dataclasses.field(default="", metadata=help_text(
        "RACE folder: {train,dev,test}/{middle,high}/*.txt (one JSON object per file)."))
    tokenizer: str = "wordpiece"
    vocab_file: str = ""
    do_lower_case: bool = True
    sp_model: str = ""
    uncased: bool = False
    max_seq_length: int = 512
    max_qa_length: int = dataclasses.field(default=128, metadata=help_text(
        "Question + option tokens kept (the last ones), as run_race.py."))
    num_choices: int = dataclasses.field(default=4, metadata=help_text("Options per question."))
    train_shards: int = 4


@register_problem(name="race")
class Race(FinetuneTask):
    """RACE-style multiple choice (a fine-tuning task: main metric accuracy; dev/test kept in file order)."""

    HParams = RaceHParams
    task_type = "multiple_choice"
    main_metric = "accuracy"

    def __init__(self, hparams=None):
        super().__init__(hparams)
        check_tokenizer(self.hparams.tokenizer)

    def dataset_splits(self) -> list[tuple[str, int]]:
        hp = self.hparams
        splits = [(DatasetSplit.TRAIN, hp.train_shards)]
        for split in (DatasetSplit.EVAL, DatasetSplit.TEST):
            if any(fileio.isdir(os.path.join(hp.race_dir, split, lv)) for lv in LEVELS):
                splits.append((split, 1))
        return splits

    def prepare(self, data_dir: str, tmp_dir: str) -> None:
        if not self.hparams.race_dir or not fileio.isdir(self.hparams.race_dir):
            raise FileNotFoundError(f"--race_dir={self.hparams.race_dir!r} is not a folder "
                                    f"(expected train/, dev/, test/ with middle/ and high/)")
        self.encoder()

    def feature_encoders(self, data_dir: str) -> dict:
        return {"input_ids": self.encoder()}

    def manifest_settings(self, data_dir: str) -> dict:
        return dict(super().manifest_settings(data_dir), vocab_size=int(self.encoder().vocab_size))

    def example_reading_spec(self) -> dict:
        n = self.hparams.max_seq_length * self.hparams.num_choices
        mask_dtype = tf.int64 if self.hparams.tokenizer == "wordpiece" else tf.float32
        f = tf.io.FixedLenFeature
        return {"input_ids": f([n], tf.int64), "input_mask": f([n], mask_dtype),
                "segment_ids": f([n], tf.int64), "label_ids": f([], tf.int64), "example_index": f([], tf.int64)}

    def shuffle_split(self, split: str) -> bool:
        return split == DatasetSplit.TRAIN

    def eval_splits(self) -> list[str]:
        return [DatasetSplit.EVAL]

    def num_labels(self, data_dir: str) -> int:
        """The number of choices (the model scores that many rows per example)."""
        return self.hparams.num_choices

    def label_list(self, data_dir: str) -> list[str]:
        """No names: a label is the answer's choice index (predictions give that index)."""
        return []

    def generate_shard(self, data_dir, tmp_dir, split, shard_id, num_shards, seed) -> Iterator[dict]:
        """Round-robin over the questions; each record carries its `example_index` (file order)."""
        encoder = self.encoder()
        for i, sample in enumerate(read_race_split(self.hparams.race_dir, split)):
            if i % num_shards == shard_id:
                yield dict(encode_choices(sample, encoder, self.hparams), example_index=i)

    def compute_metrics(self, labels: Any, outputs: Any) -> dict[str, float]:
        """Accuracy of the argmax over the choices (the contract's `metrics` calls it with the labels and
        logits); `outputs`: logits [N, num_choices] (or a dict with them)."""
        logits = np.asarray(outputs["logits"] if isinstance(outputs, dict) else outputs)
        labels = np.asarray(labels).reshape(-1)
        return {"accuracy": float(np.mean(np.argmax(logits, -1) == labels)) if len(labels) else 0.0,
                "num_examples": int(len(labels))}


def encode_choices(sample: dict, encoder: Any, hp: RaceHParams) -> dict:
    """One question's `num_choices` rows, laid end to end (see the module docstring)."""
    if len(sample["options"]) != hp.num_choices:
        raise ValueError(f"question {sample['id']}: {len(sample['options'])} options, --num_choices="
                         f"{hp.num_choices}")
    L = hp.max_seq_length
    article = encoder.encode(sample["article"])
    ids, masks, segs = [], [], []
    xlnet = hp.tokenizer == "sentencepiece"
    sp = encoder.special_ids
    for option in sample["options"]:
        qa = encoder.encode(question_with_option(sample["question"], option))[-hp.max_qa_length:]
        ctx = article[:max(L - 3 - len(qa), 0)]
        if xlnet:
            row = [*ctx, sp["<sep>"], *qa, sp["<sep>"], sp["<cls>"]]
            seg = [SEG_A] * (len(ctx) + 1) + [SEG_B] * (len(qa) + 1) + [SEG_CLS]
            pad = L - len(row)
            ids += [0] * pad + row
            masks += [1.0] * pad + [0.0] * len(row)
            segs += [SEG_PAD] * pad + seg
        else:
            row = [sp["[CLS]"], *ctx, sp["[SEP]"], *qa, sp["[SEP]"]]
            seg = [0] * (len(ctx) + 2) + [1] * (len(qa) + 1)
            pad = L - len(row)
            ids += row + [0] * pad
            masks += [1] * len(row) + [0] * pad
            segs += seg + [0] * pad
    return {"input_ids": ids, "input_mask": masks, "segment_ids": segs, "label_ids": sample["label"]}
