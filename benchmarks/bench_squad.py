"""SQuAD acceptance and a real-text extractive QA fine-tune.

    nice -n 10 python3 benchmarks/bench_squad.py                       # part A only
    nice -n 10 python3 benchmarks/bench_squad.py --finetune=bert,electra,xlnet --train_steps=1500

Part A (acceptance, `../shared/corpora/qa/squad_like.json`):
  1. the file parses (problems/squad.read_squad_examples);
  2. the official v1.1 metrics of the gold answers themselves are EM = F1 = 100;
  3. every question's features map back to a span containing its answer text, for WordPiece (BERT,
     ELECTRA) and SentencePiece (XLNet), with the originals' settings (max_seq_length 384, doc_stride 128,
     max_query_length 64): some window holds the answer, and the text that window's start/end positions map
     back to (the post-processing used at prediction time) contains the normalised answer.
  Vocabularies: a WordPiece vocab and an XLNet-recipe SentencePiece model (8k each) learned from
  `../shared/corpora/en/wikipedia_sample.txt.gz` (cached in --work_dir).

Part B (--finetune): an extractive QA set made from real text, then textrain-finetune per model.
  The rule (deterministic): documents of `wikipedia_sample.txt.gz` are cut into contexts of 3 consecutive
  sentences. In each sentence of 6+ words the first candidate answer is taken: a year (1000-2099) -> the
  question replaces it by "what year"; else a run of capitalised words not at the sentence start -> the
  question replaces it by "what". The question is the sentence with that replacement and "?" for its final
  punctuation (a cloze question), the answer the replaced text at its offset in the context. Contexts of
  every 10th document form the dev set, the rest the training set (at most --max_train questions).
  Baselines, computed on the same dev set:
  - "random candidate": a span of the question's answer type drawn at random (seed 0) from the context
    spans not in the question;
  - "first candidate": the first span of the question's answer type (year / capitalised run) in the
    context that is not already in the question (no reading of the question beyond its wh-phrase);
  - "overlap rule" (for reference, not a learned model): the same, but in the context sentence sharing the
    most words with the question — this rule knows how the questions were made, so it is near the ceiling.
  Models are fine-tuned FROM RANDOM INITIALISATION (no pretrained checkpoint is available on this machine)
  with the tiny presets, max_seq_length 128, through the command printed for each run.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
CORPORA = os.path.join(os.path.dirname(REPO), "shared", "corpora")
SQUAD_LIKE = os.path.join(CORPORA, "qa", "squad_like.json")
WIKI = os.path.join(CORPORA, "en", "wikipedia_sample.txt.gz")

YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")
CAPS = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*")


# ---------------------------------------------------------------------------------------------- #
# Vocabularies
# ---------------------------------------------------------------------------------------------- #
def wiki_lines(limit: int | None = None) -> list[str]:
    out = []
    with gzip.open(WIKI, "rt", encoding="utf-8") as f:
        for line in f:
            out.append(line.rstrip("\n"))
            if limit and len(out) >= limit:
                break
    return out


def vocabularies(work_dir: str) -> tuple[str, str]:
    from framework import text_encoders
    vocab, sp_prefix = os.path.join(work_dir, "wiki_vocab.txt"), os.path.join(work_dir, "wiki_sp")
    os.makedirs(work_dir, exist_ok=True)
    lines = [line for line in wiki_lines() if line.strip()]
    if not os.path.exists(vocab):
        text_encoders.build_wordpiece_vocab(iter(lines), vocab_size=8000, out_file=vocab)
    if not os.path.exists(sp_prefix + ".model"):
        text_encoders.train_sentencepiece(iter(lines), sp_prefix, vocab_size=8000, num_threads=2,
                                          hard_vocab_limit=False)
    return vocab, sp_prefix + ".model"


# ---------------------------------------------------------------------------------------------- #
# Part A
# ---------------------------------------------------------------------------------------------- #
def part_a(vocab: str, sp_model: str, path: str = SQUAD_LIKE) -> dict:
    from framework import text_encoders
    from problems import qa_postprocess as qp
    from problems import squad

    examples = squad.read_squad_examples(path, with_negative=False)
    with open(path) as f:
        data = json.load(f)
    gold = qp.gold_pairs_from_dataset(data)
    gold_metrics = qp.squad_v1_metrics(gold, {q: answers[0] for q, answers in gold})
    print(f"[A] {path}: parsed {len(examples)} questions ({len(set(q for q, _ in gold))} distinct ids); "
          f"official v1.1 metrics of the gold answers over {gold_metrics['total']} questions: "
          f"EM {gold_metrics['exact_match']:.1f} F1 {gold_metrics['f1']:.1f}")
    result = {"questions": len(examples), "gold_em": gold_metrics["exact_match"], "gold_f1": gold_metrics["f1"]}
    encoders = {"wordpiece": (text_encoders.WordpieceEncoder(vocab), squad.wordpiece_features),
                "sentencepiece": (text_encoders.SentencePieceEncoder(sp_model), squad.sentencepiece_features)}
    for name, (encoder, featurize) in encoders.items():
        start = time.process_time()
        mapped, windows, failures = 0, 0, []
        for i, ex in enumerate(examples):
            out = featurize(ex, i, encoder, 384, 128, 64, True)
            if out is None:
                failures.append((ex["qas_id"], "skipped (answer not found / no alignment)"))
                continue
            feats, entry = out
            windows += len(feats)
            answer = qp.normalize_answer(ex["answers"][0]["text"])
            texts = []
            for f, side in zip(feats, entry["features"]):
                impossible = f["start_positions"] == (f["cls_index"] if "cls_index" in f else 0)
                if not impossible:
                    texts.append(qp.span_text(entry, side, f["start_positions"], f["end_positions"]))
            if texts and all(answer in qp.normalize_answer(t) for t in texts):
                mapped += 1
            else:
                failures.append((ex["qas_id"], f"{ex['answers'][0]['text']!r} -> {texts!r}"))
        cpu = time.process_time() - start
        print(f"[A] {name}: {mapped}/{len(examples)} questions map back to a span containing the answer "
              f"({windows} windows, {cpu:.2f} CPU-s)")
        for qid, why in failures:
            print(f"      {qid}: {why}")
        result[name] = {"mapped": mapped, "windows": windows, "failures": failures}
    return result


# ---------------------------------------------------------------------------------------------- #
# Part B: questions from real text
# ---------------------------------------------------------------------------------------------- #
def documents() -> list[list[str]]:
    docs, cur = [], []
    for line in wiki_lines():
        if line.strip():
            cur.append(line.strip())
        elif cur:
            docs.append(cur)
            cur = []
    if cur:
        docs.append(cur)
    return docs


def candidate(sentence: str) -> tuple[int, int, str] | None:
    """(start, end, wh-phrase) of the sentence's first answer candidate (see the module docstring)."""
    if len(sentence.split()) < 6:
        return None
    m = YEAR.search(sentence)
    if m:
        return m.start(), m.end(), "what year"
    for m in CAPS.finditer(sentence):
        if m.start() > 0:
            return m.start(), m.end(), "what"
    return None


def make_question(sentence: str, start: int, end: int, wh: str) -> str:
    question = (sentence[:start] + wh + sentence[end:]).rstrip()
    return re.sub(r"[.!;:]*$", "", question) + "?"


def build_sets(max_train: int, max_dev: int) -> tuple[dict, dict]:
    sets = {"train": [], "dev": []}
    n = 0
    for d, doc in enumerate(documents()):
        split = "dev" if d % 10 == 0 else "train"
        for c in range(0, len(doc) - 2, 3):
            sentences = doc[c:c + 3]
            context = " ".join(sentences)
            qas, offset = [], 0
            for s in sentences:
                cand = candidate(s)
                if cand is not None:
                    start, end, wh = cand
                    answer = s[start:end]
                    qas.append({"id": f"w{n}", "question": make_question(s, start, end, wh),
                                "answers": [{"text": answer, "answer_start": offset + start}]})
                    assert context[offset + start:offset + end] == answer
                    n += 1
                offset += len(s) + 1
            if qas:
                sets[split].append({"context": context, "qas": qas})
    out = {}
    for split, limit in (("train", max_train), ("dev", max_dev)):
        paragraphs, count = [], 0
        for p in sets[split]:
            if count >= limit:
                break
            paragraphs.append(p)
            count += len(p["qas"])
        out[split] = {"version": "1.1", "data": [{"title": f"wikipedia_{split}", "paragraphs": paragraphs}]}
    return out["train"], out["dev"]


def _type_candidates(context: str, wh: str) -> list[tuple[int, int]]:
    regex = YEAR if wh == "what year" else CAPS
    return [(m.start(), m.end()) for m in regex.finditer(context)]


def baselines(dev: dict) -> dict[str, float]:
    from problems import qa_postprocess as qp
    import random
    rng = random.Random(0)
    first, overlap, chance = {}, {}, {}
    for para in dev["data"][0]["paragraphs"]:
        context = para["context"]
        sentences, pos = [], 0
        for s in re.split(r"(?<=[.!?])\s+", context):
            i = context.index(s, pos)
            sentences.append((i, s))
            pos = i + len(s)
        for qa in para["qas"]:
            q = qa["question"]
            wh = "what year" if "what year" in q else "what"
            qwords = set(q.lower().split())
            cands = [(s, e) for s, e in _type_candidates(context, wh) if context[s:e] not in q]
            first[qa["id"]] = context[cands[0][0]:cands[0][1]] if cands else ""
            pick = rng.choice(cands) if cands else (0, 0)
            chance[qa["id"]] = context[pick[0]:pick[1]]
            best = max(sentences, key=lambda t: len(qwords & set(t[1].lower().split())))
            inside = [(s, e) for s, e in cands if best[0] <= s < best[0] + len(best[1])]
            overlap[qa["id"]] = context[inside[0][0]:inside[0][1]] if inside else first[qa["id"]]
    gold = qp.gold_from_dataset(dev)
    return {"random candidate": qp.squad_v1_metrics(gold, chance)["f1"],
            "first candidate": qp.squad_v1_metrics(gold, first)["f1"],
            "overlap rule": qp.squad_v1_metrics(gold, overlap)["f1"]}


FINETUNE = {
    "bert": ("bert_squad_v1.gin", ["finetune.model_size='tiny'"]),
    "electra": ("electra_squad_v1.gin", ["finetune.model_size='small'",
                                        "finetune.model_overrides={'hidden_size': 128, 'num_hidden_layers': 2, "
                                        "'embedding_size': 128, 'num_attention_heads': 2, 'intermediate_size': 512}"]),
    "xlnet": ("xlnet_squad_v1.gin", ["finetune.model_size='base'",
                                     "finetune.model_overrides={'n_layer': 2, 'd_model': 128, 'n_head': 2, "
                                     "'d_head': 64, 'd_inner': 512}"]),
}


def finetune(model: str, work_dir: str, train_path: str, dev_path: str, vocab: str, sp_model: str,
             steps: int, batch: int, lr: float) -> dict:
    gin_file, extra = FINETUNE[model]
    run_dir = os.path.join(work_dir, f"run_{model}_{steps}")
    tok = f"finetune.sp_model='{sp_model}'" if model == "xlnet" else f"finetune.vocab_file='{vocab}'"
    params = [f"finetune.problem_hparams={{'train_file': '{train_path}', 'predict_file': '{dev_path}', "
              f"'doc_stride': 64}}", tok, *extra, "finetune.max_seq_length=128",
              f"finetune.num_train_steps={steps}", f"finetune.train_batch_size={batch}",
              f"finetune.learning_rate={lr}", "finetune.warmup_proportion=0.1", "finetune.layerwise_lr_decay=1.0",
              "finetune.eval_batch_size=64", "finetune.do_predict=False", "finetune.log_steps=100",
              f"finetune.data_dir='{run_dir}/data'", f"finetune.model_dir='{run_dir}/model'", "finetune.seed=1"]
    cmd = ["nice", "-n", "10", sys.executable, "-m", "trainers.finetune", f"--gin_file=configs/{gin_file}",
           *[f"--gin_param={p}" for p in params]]
    print("[B] $ nice -n 10 python3 -m trainers.finetune " + " ".join(f'"{c}"' if " " in c else c for c in cmd[6:]),
          flush=True)
    start = time.time()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    wall = time.time() - start
    if proc.returncode != 0:
        print(proc.stderr[-3000:])
        raise SystemExit(f"fine-tuning {model} failed")
    summary = json.loads([line for line in proc.stdout.splitlines() if line.startswith("final ")][-1][6:])
    dev = summary["eval"]["dev"]
    return {"f1": dev["f1"], "exact_match": dev["exact_match"], "wall_s": wall, "steps": steps,
            "train_windows": summary["train_examples"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", default="/tmp/textrain_bench_squad")
    parser.add_argument("--finetune", default="", help="comma list of bert, electra, xlnet (part B)")
    parser.add_argument("--train_steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--max_train", type=int, default=6000)
    parser.add_argument("--max_dev", type=int, default=600)
    args = parser.parse_args()
    if not os.path.exists(SQUAD_LIKE) or not os.path.exists(WIKI):
        print(f"{CORPORA} (squad_like.json, en/wikipedia_sample.txt.gz) is absent: nothing to measure")
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    vocab, sp_model = vocabularies(args.work_dir)
    part_a(vocab, sp_model)
    if not args.finetune:
        return
    train, dev = build_sets(args.max_train, args.max_dev)
    paths = {}
    for split, data in (("train", train), ("dev", dev)):
        paths[split] = os.path.join(args.work_dir, f"wiki_qa_{split}.json")
        with open(paths[split], "w") as f:
            json.dump(data, f)
    n = {s: sum(len(p["qas"]) for p in d["data"][0]["paragraphs"]) for s, d in (("train", train), ("dev", dev))}
    print(f"[B] questions: train {n['train']}, dev {n['dev']} ({paths['train']}, {paths['dev']})")
    example = dev["data"][0]["paragraphs"][0]["qas"][0]
    print(f"[B] e.g. Q: {example['question']!r}  A: {example['answers'][0]['text']!r}")
    for name, f1 in baselines(dev).items():
        print(f"[B] baseline {name}: dev F1 {f1:.1f}")
    for model in [m for m in args.finetune.split(",") if m]:
        r = finetune(model, args.work_dir, paths["train"], paths["dev"], vocab, sp_model, args.train_steps,
                     args.batch, args.learning_rate)
        print(f"[B] {model} (random init, {r['steps']} steps x {args.batch}, {r['train_windows']} train windows): "
              f"dev EM {r['exact_match']:.1f} F1 {r['f1']:.1f} ({r['wall_s']:.0f} s wall, loaded 2-core machine)",
              flush=True)


if __name__ == "__main__":
    main()
