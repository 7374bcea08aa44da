"""Token classification end to end: a tiny BERT tagger trained from scratch against a majority-tag and a
per-word-most-frequent-tag baseline, on the same held-out sentences, in the same run.

    nice -n 10 python3 benchmarks/bench_tagging.py [--work /tmp/textrain_bench_tagging] [--steps 3000] [--learning_rate 5e-4]

The data (made here, nothing downloaded): the sentences of tests/data/austen_emma.txt (Jane Austen's *Emma*,
chapters 1-24, public domain), cut into words (`\\w+` and single punctuation marks), tagged PER / LOC in BIO by
a gazetteer of the novel's people and places (`PEOPLE`, `PLACES`; consecutive words of one type are one
entity; titles such as "Mr" stay O). Silver labels: the benchmark measures whether the pipeline learns the
labelling, not NER on news.
Held out (the dev file; never seen in training, also not by the WordPiece vocabulary, learned from the train
sentences only):
- "unseen names": every sentence that mentions a name of `HELD_OUT` (a third of the gazetteer's frequent
  names): a word-memorising tagger cannot know them; the context ("Mr", "said", "at") can;
- "other": every 10th remaining sentence (names seen in training).
Train: all other sentences.

What runs, each a real CLI: textrain-datagen --problem=tagging (CoNLL files, BIO checked, max_seq_length 64,
doc_stride 32), then textrain-finetune --gin_file=tagging.gin with bert_tagger, model_size tiny (2 layers,
hidden 128) from random initialisation, --steps steps of batch 32 (~38 epochs of 2,536 windows), --learning_rate (AdamW, 10 %
warmup, linear decay), no seed.
Scores come from predict_dev.conll through framework/metrics.entity_scores (conlleval's definition), per
subset; the baselines are scored by the same function on the same sentences:
- majority tag: every word gets the train file's most frequent tag (O);
- per-word most frequent tag: each word's most frequent train tag, the majority tag for an unseen word.
Prints one table (entity F1 and token accuracy per subset) and writes --work/results.json.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMMA = os.path.join(REPO, "tests", "data", "austen_emma.txt")

PEOPLE = {"Emma", "Woodhouse", "Woodhouses", "Harriet", "Smith", "Knightley", "Knightleys", "Elton", "Eltons",
          "Weston", "Westons", "Churchill", "Churchills", "Frank", "Jane", "Fairfax", "Bates", "Martin", "Martins",
          "Taylor", "Perry", "Perrys", "Cole", "Coles", "Goddard", "Isabella", "John", "Campbell", "Campbells",
          "Dixon", "Hawkins", "Robert", "Elizabeth", "Nash", "James", "Henry", "George", "Wingfield", "Hannah",
          "Bella", "Serle"}
PLACES = {"Highbury", "Hartfield", "Randalls", "London", "Donwell", "Abbey", "Enscombe", "Weymouth", "Ireland",
          "Bath", "Brunswick", "Square", "Bristol", "Surry", "Cromer", "Kingston", "Richmond"}
HELD_OUT = {"Weston", "Westons", "Fairfax", "Bates", "Goddard", "Perry", "Perrys", "Dixon", "Hawkins", "Nash",
            "Henry", "Randalls", "Enscombe", "Weymouth", "Bath", "Bristol", "Cromer"}
WORD = re.compile(r"\w+|[^\w\s]")


def tag_sentence(words: list[str]) -> list[str]:
    """BIO tags by the gazetteer: a run of words of one type is one entity."""
    tags, prev = [], "O"
    for w in words:
        kind = "PER" if w in PEOPLE else "LOC" if w in PLACES else ""
        if not kind:
            tags.append("O")
        else:
            tags.append(("I-" if prev == kind else "B-") + kind)
        prev = kind or "O"
    return tags


def make_data(work: str) -> dict[str, list]:
    """{train, unseen, other}: lists of (words, tags), written as train.conll / dev.conll (unseen then other)."""
    with open(EMMA, encoding="utf-8") as f:
        sentences = [WORD.findall(line) for line in f if line.strip()]
    sentences = [s for s in sentences if len(s) >= 3]
    split = {"train": [], "unseen": [], "other": []}
    kept = 0
    for words in sentences:
        item = (words, tag_sentence(words))
        if HELD_OUT & set(words):
            split["unseen"].append(item)
        else:
            split["other" if kept % 10 == 9 else "train"].append(item)
            kept += 1
    conll = lambda items: "\n".join("".join(f"{w} {t}\n" for w, t in zip(*it)) for it in items)  # noqa: E731
    with open(os.path.join(work, "train.conll"), "w", encoding="utf-8") as f:
        f.write(conll(split["train"]))
    with open(os.path.join(work, "dev.conll"), "w", encoding="utf-8") as f:
        f.write(conll(split["unseen"] + split["other"]))
    with open(os.path.join(work, "train.txt"), "w", encoding="utf-8") as f:
        f.write("".join(" ".join(w) + "\n" for w, _ in split["train"]))
    return split


def baselines(train: list, held: list) -> dict[str, list[list[str]]]:
    counts = collections.Counter(t for _, tags in train for t in tags)
    majority = counts.most_common(1)[0][0]
    per_word: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for words, tags in train:
        for w, t in zip(words, tags):
            per_word[w][t] += 1
    best = {w: c.most_common(1)[0][0] for w, c in per_word.items()}
    return {"majority tag": [[majority] * len(w) for w, _ in held],
            "per-word most frequent tag": [[best.get(x, majority) for x in w] for w, _ in held]}


def run(cmd: list[str], log: str) -> float:
    """Run a CLI, its output to `log`; returns its CPU seconds (children rusage)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}; see {log}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="/tmp/textrain_bench_tagging")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--learning_rate", type=float, default=5e-4)
    args = parser.parse_args()
    from textrain.framework.encoders import build_wordpiece_vocab
    from textrain.framework.metrics import entity_scores

    if os.path.exists(args.work):
        shutil.rmtree(args.work)
    os.makedirs(args.work)
    split = make_data(args.work)
    vocab = build_wordpiece_vocab(os.path.join(args.work, "train.txt"), vocab_size=2000,
                                  out_file=os.path.join(args.work, "vocab.txt"), do_lower_case=False)
    data, model_dir = os.path.join(args.work, "data"), os.path.join(args.work, "run")
    start = time.time()
    cpu_datagen = run([sys.executable, "-m", "textrain.framework.datagen", "--problem=tagging",
                       f"--train_file={args.work}/train.conll", f"--dev_file={args.work}/dev.conll",
                       f"--vocab_file={vocab}", "--do_lower_case=false", "--max_seq_length=64", "--doc_stride=32",
                       f"--data_dir={data}"], os.path.join(args.work, "datagen.log"))
    cpu_train = run([sys.executable, "-m", "textrain.trainers.finetune", "--gin_file=tagging.gin",
                     "--gin_param=finetune.model='bert_tagger'", "--gin_param=finetune.model_size='tiny'",
                     f"--gin_param=finetune.data_dir='{data}'", f"--gin_param=finetune.model_dir='{model_dir}'",
                     f"--gin_param=finetune.vocab_file='{vocab}'", "--gin_param=finetune.do_lower_case=False",
                     "--gin_param=finetune.max_seq_length=64", "--gin_param=finetune.datagen=False",
                     f"--gin_param=finetune.num_train_steps={args.steps}", "--gin_param=finetune.train_batch_size=32",
                     f"--gin_param=finetune.learning_rate={args.learning_rate}", "--gin_param=finetune.log_steps=100",
                     "--gin_param=finetune.eval_batch_size=64", "--gin_param=finetune.predict_batch_size=64"],
                    os.path.join(args.work, "finetune.log"))
    wall = time.time() - start
    with open(os.path.join(model_dir, "predict_dev.conll"), encoding="utf-8") as f:
        blocks = [b for b in f.read().split("\n\n") if b.strip()]
    predicted = [[line.split()[2] for line in b.splitlines()] for b in blocks]
    held = split["unseen"] + split["other"]
    assert [[line.split()[0] for line in b.splitlines()] for b in blocks] == [w for w, _ in held]
    systems = {**baselines(split["train"], held), "bert_tagger (tiny, from scratch)": predicted}
    n_unseen = len(split["unseen"])
    subsets = {"all held-out": slice(None), "unseen names": slice(0, n_unseen), "other": slice(n_unseen, None)}
    gold = [t for _, t in held]
    results = {name: {subset: entity_scores(gold[s], tags[s]) for subset, s in subsets.items()}
               for name, tags in systems.items()}
    print(f"sentences: train {len(split['train'])}, held out {len(held)} (unseen names {n_unseen}, "
          f"other {len(held) - n_unseen}); {args.steps} steps; wall {wall:.0f} s, CPU datagen {cpu_datagen:.0f} s, "
          f"finetune {cpu_train:.0f} s")
    print("| system | " + " | ".join(f"F1 {s}" for s in subsets) + " | token acc. all |")
    print("|---|" + "---|" * (len(subsets) + 1))
    for name, by_subset in results.items():
        print(f"| {name} | " + " | ".join(f"{by_subset[s]['f1']:.3f}" for s in subsets)
              + f" | {by_subset['all held-out']['token_accuracy']:.3f} |")
    with open(os.path.join(args.work, "results.json"), "w") as f:
        json.dump({"results": results, "steps": args.steps, "wall_s": wall, "cpu_datagen_s": cpu_datagen,
                   "cpu_finetune_s": cpu_train, "train_sentences": len(split["train"]),
                   "held_out": {"unseen": n_unseen, "other": len(held) - n_unseen}}, f, indent=1)


if __name__ == "__main__":
    main()
