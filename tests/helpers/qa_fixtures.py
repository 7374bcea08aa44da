"""Small QA data shared by the QA tests: a hand-written WordPiece vocab, a SentencePiece model trained
on Emma, and SQuAD / RACE files in the real layouts."""
from __future__ import annotations

import json
import os

from textrain.framework import encoders

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMMA = os.path.join(TESTS, "data", "austen_emma.txt")

WORDS = """the a an man went to store and bought gallon of milk leader was john smith born what year who
when where did in is it ( ) - . , ? ' s cafe naive ##s ##ing ##ed emma woodhouse handsome clever rich
with comfortable home happy disposition seemed unite some best blessings existence had lived nearly
twenty one years world very little distress or vex her she youngest two daughters most affectionate
indulgent father highbury mr knightley harriet weston frank churchill jane fairfax 1895 1943 1816
""".split()


def write_vocab(path: str) -> str:
    tokens = list(encoders.BERT_SPECIAL_TOKENS) + sorted(set(WORDS))
    with open(path, "w") as f:
        f.write("\n".join(tokens) + "\n")
    return path


def emma_lines(n: int = 3000) -> list[str]:
    with open(EMMA, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()][:n]


def train_spm(prefix: str) -> str:
    lines = emma_lines() + [p["context"] for p in PARAGRAPHS] + [q[0] for p in PARAGRAPHS for q in p["qas"]]
    return encoders.train_sentencepiece(iter(lines), prefix, vocab_size=800, num_threads=1,
                                        hard_vocab_limit=False)


# Hand-made paragraphs (texts from Emma, and run_squad.py's own examples), with answers.
PARAGRAPHS = [
    {"context": "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, "
                "seemed to unite some of the best blessings of existence; and had lived nearly twenty-one "
                "years in the world with very little to distress or vex her.",
     "qas": [("Who was handsome, clever, and rich?", "Emma Woodhouse"),
             ("How long had she lived?", "nearly twenty-one years"),
             ("What did she have?", "a comfortable home"),
             ("Who is Mr. Knightley?", None)]},
    {"context": "The leader was John Smith (1895-1943).  He  lived in Highbury\twith  Harriet.",
     "qas": [("What year was John Smith born?", "1895"),
             ("Where did he live?", "Highbury"),
             ("Who did he live with?", "Harriet")]},
    {"context": "She was the youngest of the two daughters of a most affectionate, indulgent father; "
                "``Caf\u00e9 na\u00efve'' was the house in Highbury where Miss Jane Fairfax lived.",
     "qas": [("Which house?", "``Caf\u00e9 na\u00efve''"),
             ("Who lived there?", "Miss Jane Fairfax"),
             ("What kind of father?", "indulgent")]},
]


def squad_json(with_negative: bool = False) -> dict:
    """The paragraphs above in the SQuAD layout; unanswerable questions only with `with_negative`."""
    data = []
    for pi, para in enumerate(PARAGRAPHS):
        qas = []
        for qi, (question, answer) in enumerate(para["qas"]):
            qa = {"id": f"q{pi}-{qi}", "question": question}
            if answer is None:
                if not with_negative:
                    continue
                qa.update(answers=[], is_impossible=True)
            else:
                qa["answers"] = [{"text": answer, "answer_start": para["context"].index(answer)}]
                if with_negative:
                    qa["is_impossible"] = False
            qas.append(qa)
        data.append({"title": f"t{pi}", "paragraphs": [{"context": para["context"], "qas": qas}]})
    return {"version": "v2.0" if with_negative else "1.1", "data": data}


def write_squad(path: str, with_negative: bool = False) -> str:
    with open(path, "w") as f:
        json.dump(squad_json(with_negative), f)
    return path


def write_race(race_dir: str) -> str:
    """A RACE folder with two articles per split and level."""
    article = " ".join(PARAGRAPHS[0]["context"].split()[:30])
    for split in ("train", "dev"):
        for level in ("middle", "high"):
            folder = os.path.join(race_dir, split, level)
            os.makedirs(folder, exist_ok=True)
            for k in range(2):
                obj = {"id": f"{level}{k}.txt", "article": article,
                       "questions": ["Who was handsome?", "Emma was _ and rich."],
                       "options": [["Emma", "Harriet", "Jane", "Frank"], ["poor", "clever", "sad", "old"]],
                       "answers": ["A", "B"]}
                with open(os.path.join(folder, f"{k}.txt"), "w") as f:
                    json.dump(obj, f)
    return race_dir
