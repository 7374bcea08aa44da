"""RACE-style multiple choice: reading the release layout, the rows of each option, records."""
import json

import numpy as np
import pytest
from helpers import qa_fixtures

from textrain.framework import encoders
from textrain.framework.problem import DataParams, ModeKeys
from textrain.problems import race


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    return qa_fixtures.write_vocab(str(tmp_path_factory.mktemp("wp") / "vocab.txt"))


def test_read_race_split_and_blank_filling(tmp_path):
    qa_fixtures.write_race(str(tmp_path / "race"))
    examples = race.read_race_split(str(tmp_path / "race"), "train")
    assert len(examples) == 8  # 2 levels x 2 files x 2 questions
    assert [e["level"] for e in examples[:4]] == ["middle"] * 4
    assert examples[1]["label"] == 1 and examples[0]["options"][0] == "Emma"
    assert race.question_with_option("Emma was _ and rich.", "clever") == "Emma was clever and rich."
    assert race.question_with_option("Who was handsome?", "Emma") == "Who was handsome? Emma"
    bad = tmp_path / "bad" / "train" / "high"
    bad.mkdir(parents=True)
    (bad / "1.txt").write_text(json.dumps({"article": "a", "questions": ["q"], "options": [["a", "b"]],
                                           "answers": ["E"]}))
    with pytest.raises(race.RaceFormatError, match=r"1.txt: question 0: answer 'E'"):
        race.read_race_split(str(tmp_path / "bad"), "train")


def test_wordpiece_rows(vocab):
    enc = encoders.WordpieceEncoder(vocab)
    hp = race.RaceHParams(vocab_file=vocab, max_seq_length=12, max_qa_length=4)
    sample = {"id": "x", "article": "emma woodhouse handsome clever rich with a comfortable home",
              "question": "who was _ ?", "options": ["emma", "harriet", "jane", "frank"], "label": 2}
    rec = race.encode_choices(sample, enc, hp)
    rows = np.reshape(rec["input_ids"], (4, 12))
    tokens = enc.convert_ids_to_tokens(rows[1])
    # qa keeps its last 4 tokens, the article its first 12 - 3 - 4 = 5
    assert tokens == ["[CLS]", "emma", "woodhouse", "handsome", "clever", "rich", "[SEP]", "who", "was",
                      "harriet", "?", "[SEP]"]
    assert np.reshape(rec["segment_ids"], (4, 12))[1].tolist() == [0] * 7 + [1] * 5
    assert rec["label_ids"] == 2


def test_sentencepiece_rows_pad_left_with_cls_last(tmp_path):
    sp = encoders.SentencePieceEncoder(qa_fixtures.train_spm(str(tmp_path / "sp")))
    hp = race.RaceHParams(tokenizer="sentencepiece", sp_model=sp.model_file, max_seq_length=40)
    sample = {"id": "x", "article": "Emma was rich.", "question": "Who?", "options": ["Emma", "Jane", "A", "B"],
              "label": 0}
    rec = race.encode_choices(sample, sp, hp)
    ids = np.reshape(rec["input_ids"], (4, 40))
    mask = np.reshape(rec["input_mask"], (4, 40))
    seg = np.reshape(rec["segment_ids"], (4, 40))
    ctx, qa = sp.encode("Emma was rich."), sp.encode("Who? Emma")
    n = len(ctx) + len(qa) + 3
    assert ids[0, -n:].tolist() == ctx + [4] + qa + [4, 3] and ids[0, :-n].tolist() == [0] * (40 - n)
    assert mask[0].tolist() == [1.0] * (40 - n) + [0.0] * n
    assert seg[0].tolist() == [3] * (40 - n) + [0] * (len(ctx) + 1) + [1] * (len(qa) + 1) + [2]


def test_race_records_read_back(tmp_path, vocab):
    qa_fixtures.write_race(str(tmp_path / "race"))
    problem = race.Race(race.RaceHParams(race_dir=str(tmp_path / "race"), vocab_file=vocab, max_seq_length=32,
                                         train_shards=2))
    manifests = problem.generate_data(str(tmp_path / "data"), str(tmp_path / "tmp"))
    assert set(manifests) == {"train", "dev"} and manifests["train"]["num_examples"] == 8
    batch = next(iter(problem.dataset(ModeKeys.EVAL, str(tmp_path / "data"),
                                      DataParams(batch_size=8, drop_remainder=False))))
    assert batch["input_ids"].shape == (8, 4 * 32) and sorted(batch["label_ids"].numpy().tolist()) == [0] * 4 + [1] * 4
    logits = np.eye(4)[batch["label_ids"].numpy()]
    logits[0] = np.roll(logits[0], 1)
    assert problem.compute_metrics(batch["label_ids"].numpy(), {"logits": logits})["accuracy"] == 7 / 8
