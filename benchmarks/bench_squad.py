"""SQuAD acceptance and a real-text extractive QA fine-tune.

    nice -n 10 python3 benchmarks/bench_squad.py                       # part A only
    nice -n 10 python3 benchmarks/bench_squad.py --finetune=bert,electra,xlnet     # part A + B

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
  sentences. In each sentence of 6+ words every answer candidate is asked about: a year (1000-2099) -> the
  wh-phrase "what year"; a run of capitalised words (ending at a word end) not at the sentence start and
  not overlapping a year -> "what". The question is a LOCAL cloze: the --window (5) words either side of
  the candidate in its sentence, the candidate replaced by the wh-phrase, trailing punctuation replaced by
  "?" (e.g. 'of this word was in what year?' -> '1539'); the answer is the candidate at its offset in the
  context. Contexts of every 10th document form the dev set, the rest the training set (all questions
  unless --max_train / --max_dev cap them).
  Why local: the first version asked the WHOLE sentence with the blank, often longer than
  max_query_length 64 (truncated, sometimes past the blank) and leaving short context windows at
  max_seq_length 128; tiny models from scratch stayed below the baselines (dev F1 ~31 against 47). A few
  words either side fit easily and are what a reader (or a model) matches against the context.
  Baselines, computed on the same dev set; their candidates are the spans the rule itself can ask about
  in the context, of the question's answer type (its wh-phrase), whose text is not in the question:
  - "random candidate": one drawn at random (seed 0);
  - "first candidate": the first one (no reading of the question beyond its wh-phrase);
  - "overlap rule" (for reference, not a learned model): the one whose --window words before and after
    share the most words with the question's words before and after its wh-phrase (first on ties) --
    this rule knows how the questions were made, so it is near the ceiling.
  Models are fine-tuned FROM RANDOM INITIALISATION (no pretrained checkpoint is available on this machine)
  with the tiny presets (2 layers, hidden 128), max_seq_length 128, doc_stride 64, max_query_length 64,
  --train_steps x --batch at --learning_rate (10% warmup, no layer-wise decay), one --seed, an evaluation
  at half way and at the end (or every --eval_every steps), through the command printed for each run, its
  output appended to the run directory's log.txt (cached: a run directory holding result.json is not run
  again; an interrupted run resumes from its last checkpoint, its log kept). BERT and ELECTRA read a CASED
  WordPiece vocabulary learned from the same text (as BERT-Base cased): a "what" answer is by definition a
  capitalised run, which an uncased vocabulary hides from the model (XLNet's SentencePiece model keeps
  case). The default steps (bert=4000, electra=3000, xlnet=3000: about 15 CPU-minutes each on the loaded
  2-core machine) are the protocol reported in benchmarks/README.md. The wall-clock and CPU-seconds of
  each run are printed; the dev EM/F1 are the official v1.1 metrics reported by the fine-tuning run's final
  evaluation, followed by a table of models and baselines.
  --init=electra=DIR (and --vocab_file/--do_lower_case of that run) starts a model from a textrain
  pretraining run instead (e.g. the tiny ELECTRA of bench_finetune_movies.py: its encoder has the
  tiny preset's shape), through `finetune.init_checkpoint`, everything else the same.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
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
# A capitalised run ends at a word end: "Br" of "Brønsted" is no candidate.
CAPS = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*(?![^\W\d_])")


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


def vocabularies(work_dir: str, cased: bool = False) -> tuple[str, str]:
    """(WordPiece vocab, SentencePiece model) learned from the Wikipedia sample, cached in work_dir."""
    from textrain.framework import encoders
    vocab = os.path.join(work_dir, "wiki_vocab_cased.txt" if cased else "wiki_vocab.txt")
    sp_prefix = os.path.join(work_dir, "wiki_sp")
    os.makedirs(work_dir, exist_ok=True)
    lines = [line for line in wiki_lines() if line.strip()]
    if not os.path.exists(vocab):
        encoders.build_wordpiece_vocab(iter(lines), vocab_size=8000, out_file=vocab, do_lower_case=not cased)
    if not os.path.exists(sp_prefix + ".model"):
        encoders.train_sentencepiece(iter(lines), sp_prefix, vocab_size=8000, num_threads=2,
                                     hard_vocab_limit=False)
    return vocab, sp_prefix + ".model"


# ---------------------------------------------------------------------------------------------- #
# Part A
# ---------------------------------------------------------------------------------------------- #
def part_a(vocab: str, sp_model: str, path: str = SQUAD_LIKE) -> dict:
    from textrain.framework.encoders import SentencePieceEncoder, WordpieceEncoder
    from textrain.problems import qa_postprocess as qp
    from textrain.problems import squad

    examples = squad.read_squad_examples(path, with_negative=False)
    with open(path) as f:
        data = json.load(f)
    gold = qp.gold_pairs_from_dataset(data)
    gold_metrics = qp.squad_v1_metrics(gold, {q: answers[0] for q, answers in gold})
    print(f"[A] {path}: parsed {len(examples)} questions ({len(set(q for q, _ in gold))} distinct ids); "
          f"official v1.1 metrics of the gold answers over {gold_metrics['total']} questions: "
          f"EM {gold_metrics['exact_match']:.1f} F1 {gold_metrics['f1']:.1f}")
    result = {"questions": len(examples), "gold_em": gold_metrics["exact_match"], "gold_f1": gold_metrics["f1"]}
    encoders = {"wordpiece": (WordpieceEncoder(vocab), squad.wordpiece_features),
                "sentencepiece": (SentencePieceEncoder(sp_model), squad.sentencepiece_features)}
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


def candidates(sentence: str) -> list[tuple[int, int, str]]:
    """(start, end, wh-phrase) of every answer candidate of a sentence of 6+ words, in order: the years,
    then the capitalised runs not at the sentence start that do not overlap a year (see the module
    docstring)."""
    if len(sentence.split()) < 6:
        return []
    years = [(m.start(), m.end(), "what year") for m in YEAR.finditer(sentence)]
    caps = [(m.start(), m.end(), "what") for m in CAPS.finditer(sentence)
            if m.start() > 0 and not any(s < m.end() and m.start() < e for s, e, _ in years)]
    return sorted(years + caps)


def make_question(sentence: str, start: int, end: int, wh: str, window: int = 5) -> str:
    """The local cloze: `window` words either side of the answer, the answer replaced by `wh`."""
    left = sentence[:start].split()[-window:] if window else []
    right = sentence[end:].split()[:window] if window else []
    question = " ".join([*left, wh, *right])
    return re.sub(r"[\s.!?;:,]*$", "", question) + "?"


def build_sets(max_train: int, max_dev: int, window: int = 5) -> tuple[dict, dict]:
    sets = {"train": [], "dev": []}
    n = 0
    for d, doc in enumerate(documents()):
        split = "dev" if d % 10 == 0 else "train"
        for c in range(0, len(doc) - 2, 3):
            sentences = doc[c:c + 3]
            context = " ".join(sentences)
            qas, offset = [], 0
            for s in sentences:
                for start, end, wh in candidates(s):
                    answer = s[start:end]
                    qas.append({"id": f"w{n}", "question": make_question(s, start, end, wh, window),
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


def _sentences(context: str) -> list[tuple[int, str]]:
    """(offset, text) of the context's sentences as build_sets joined them (one space between)."""
    out, pos = [], 0
    for s in re.split(r"(?<=[.!?])\s+", context):
        i = context.index(s, pos)
        out.append((i, s))
        pos = i + len(s)
    return out


def _rule_candidates(context: str) -> list[tuple[int, int, str]]:
    """(start, end, wh) of every span the question rule could have asked about in the context."""
    return [(off + s, off + e, wh) for off, sent in _sentences(context) for s, e, wh in candidates(sent)]


def _words(text: str) -> list[str]:
    return [w.strip(".,;:!?").lower() for w in text.split()]


def baselines(dev: dict, window: int = 5) -> dict[str, dict]:
    """Dev F1 of the reference rules (module docstring). Their candidates are the spans the question
    rule itself can ask about, of the question's answer type (its wh-phrase), whose text is not already
    in the question."""
    import random

    from textrain.problems import qa_postprocess as qp
    rng = random.Random(0)
    first, overlap, chance = {}, {}, {}
    for para in dev["data"][0]["paragraphs"]:
        context = para["context"]
        spans = _rule_candidates(context)
        for qa in para["qas"]:
            q = qa["question"]
            wh = "what year" if re.search(r"\bwhat year\b", q) else "what"
            q_left, q_right = (_words(part) for part in re.split(rf"\b{wh}\b", q.rstrip("?"), maxsplit=1))
            cands = [(s, e) for s, e, w in spans if w == wh and context[s:e] not in q]
            text = (lambda span: context[span[0]:span[1]])
            first[qa["id"]] = text(cands[0]) if cands else ""
            chance[qa["id"]] = text(rng.choice(cands)) if cands else ""

            def shared(span: tuple[int, int]) -> int:
                left, right = _words(context[:span[0]])[-window:], _words(context[span[1]:])[:window]
                return len(set(q_left) & set(left)) + len(set(q_right) & set(right))
            overlap[qa["id"]] = text(max(cands, key=shared)) if cands else ""
    gold = qp.gold_from_dataset(dev)
    return {name: qp.squad_v1_metrics(gold, preds) for name, preds in
            (("random candidate", chance), ("first candidate", first), ("overlap rule", overlap))}


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
             steps: int, batch: int, lr: float, seed: int = 1, init: str = "", lower_case: bool = False,
             layerwise_decay: float = 1.0, eval_every: int = 0) -> dict:
    """Fine-tune one model through the CLI; the result is cached in its run directory (result.json),
    keyed by the run's settings (a changed question set gets a new --work_dir subfolder). `init`: a
    textrain pretraining run (its model_dir) to start from, with its own `vocab` and `lower_case`.
    `eval_every`: steps between dev evaluations (0: half way and at the end)."""
    gin_file, extra = FINETUNE[model]
    tag = f"_from_{os.path.basename(os.path.normpath(init))}_{hashlib.sha1(init.encode()).hexdigest()[:6]}" if init else ""
    if layerwise_decay != 1.0:  # a different run: it must not resume (or reuse) another decay's checkpoints
        tag += f"_lwd{layerwise_decay:g}"
    run_dir = os.path.join(work_dir, f"run_{model}{tag}_{steps}x{batch}_lr{lr:g}_seed{seed}")
    cached = os.path.join(run_dir, "result.json")
    if os.path.exists(cached):
        with open(cached) as f:
            result = json.load(f)
        print(f"[B] {model}: cached result of {run_dir}", flush=True)
        return result
    # Cased WordPiece (as BERT-Base cased): a "what" answer IS a capitalised run, which an uncased
    # vocabulary hides from BERT/ELECTRA (XLNet's SentencePiece model keeps case).
    tok = ([f"finetune.sp_model='{sp_model}'"] if model == "xlnet"
           else [f"finetune.vocab_file='{vocab}'", f"finetune.do_lower_case={lower_case}"])
    if init:
        tok.append(f"finetune.init_checkpoint='{init}'")
    params = [f"finetune.problem_hparams={{'train_file': '{train_path}', 'predict_file': '{dev_path}', "
              f"'doc_stride': 64}}", *tok, *extra, "finetune.max_seq_length=128",
              f"finetune.num_train_steps={steps}", f"finetune.train_batch_size={batch}",
              f"finetune.learning_rate={lr}", "finetune.warmup_proportion=0.1",
              f"finetune.layerwise_lr_decay={layerwise_decay}",
              "finetune.eval_batch_size=64", "finetune.do_predict=False", "finetune.log_steps=100",
              f"finetune.eval_every_steps={eval_every or max(steps // 2, 1)}",
              f"finetune.data_dir='{run_dir}/data'", f"finetune.model_dir='{run_dir}/model'",
              f"finetune.seed={seed}"]
    cmd = ["nice", "-n", "10", sys.executable, "-m", "textrain.trainers.finetune", f"--gin_file=configs/{gin_file}",
           *[f"--gin_param={p}" for p in params]]
    print("[B] $ nice -n 10 python3 -m textrain.trainers.finetune " + " ".join(f'"{c}"' if " " in c else c for c in cmd[6:]),
          flush=True)
    start, cpu0 = time.time(), _children_cpu()
    os.makedirs(run_dir, exist_ok=True)
    log_path = os.path.join(run_dir, "log.txt")
    with open(log_path, "a") as log:  # appended: a resumed run keeps the evaluations of its earlier part
        returncode = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True,
                                    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")).returncode
    wall, cpu = time.time() - start, _children_cpu() - cpu0
    with open(log_path) as f:
        output = f.read()
    if returncode != 0:
        print(output[-3000:])
        raise SystemExit(f"fine-tuning {model} failed (its log: {log_path})")
    summary = json.loads([line for line in output.splitlines() if line.startswith("final ")][-1][6:])
    dev = summary["eval"]["dev"]
    result = {"f1": dev["f1"], "exact_match": dev["exact_match"], "wall_s": wall, "cpu_s": cpu,
              "steps": steps, "batch": batch, "learning_rate": lr, "seed": seed,
              "train_windows": summary["train_examples"], "init": init or "random", "command": cmd[3:]}
    with open(cached + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(cached + ".tmp", cached)
    return result


def _children_cpu() -> float:
    """User + system CPU-seconds of the finished child processes (the fine-tuning runs)."""
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _steps(spec: str, model: str) -> int:
    """--train_steps: "N" for every model, or "bert=N,electra=N,xlnet=N"."""
    if "=" not in spec:
        return int(spec)
    steps = dict(item.split("=") for item in spec.split(","))
    return int(steps[model])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", default="/tmp/textrain_bench_squad")
    parser.add_argument("--finetune", default="", help="comma list of bert, electra, xlnet (part B)")
    parser.add_argument("--train_steps", default="bert=4000,electra=3000,xlnet=3000",
                        help="steps for every model (N) or per model (bert=N,electra=N,xlnet=N)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--window", type=int, default=5, help="words either side of the blank in a question")
    parser.add_argument("--max_train", type=int, default=0, help="cap on training questions (0: all)")
    parser.add_argument("--max_dev", type=int, default=0, help="cap on dev questions (0: all)")
    parser.add_argument("--init", default="", help="model=DIR,...: start that model from a textrain pretraining "
                        "run (DIR = its --model_dir; its encoder config must be the tiny preset's)")
    parser.add_argument("--vocab_file", default="", help="WordPiece vocab of BERT/ELECTRA (default: a cased one "
                        "learned here); give the pretraining run's vocab with --init")
    parser.add_argument("--do_lower_case", action="store_true", help="with --vocab_file: an uncased vocab")
    parser.add_argument("--layerwise_lr_decay", type=float, default=1.0)
    parser.add_argument("--eval_every", type=int, default=0,
                        help="steps between dev evaluations (0: half way and at the end); "
                        "not part of the run's cache key")
    args = parser.parse_args()
    inits = dict(item.split("=", 1) for item in args.init.split(",") if item)
    if not os.path.exists(SQUAD_LIKE) or not os.path.exists(WIKI):
        print(f"{CORPORA} (squad_like.json, en/wikipedia_sample.txt.gz) is absent: nothing to measure")
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    vocab, sp_model = vocabularies(args.work_dir)
    part_a(vocab, sp_model)
    if not args.finetune:
        return
    vocab = args.vocab_file or vocabularies(args.work_dir, cased=True)[0]
    lower_case = bool(args.vocab_file) and args.do_lower_case
    train, dev = build_sets(args.max_train or 10 ** 9, args.max_dev or 10 ** 9, args.window)
    qa_dir = os.path.join(args.work_dir, f"local_cloze_w{args.window}_train{args.max_train}_dev{args.max_dev}")
    os.makedirs(qa_dir, exist_ok=True)
    paths = {}
    for split, data in (("train", train), ("dev", dev)):
        paths[split] = os.path.join(qa_dir, f"wiki_qa_{split}.json")
        if not os.path.exists(paths[split]):
            with open(paths[split] + ".tmp", "w") as f:
                json.dump(data, f)
            os.replace(paths[split] + ".tmp", paths[split])
    n = {s: sum(len(p["qas"]) for p in d["data"][0]["paragraphs"]) for s, d in (("train", train), ("dev", dev))}
    print(f"[B] questions: train {n['train']}, dev {n['dev']} ({paths['train']}, {paths['dev']})")
    for qa in dev["data"][0]["paragraphs"][0]["qas"][:3]:
        print(f"[B] e.g. Q: {qa['question']!r}  A: {qa['answers'][0]['text']!r}")
    rows = []
    for name, m in baselines(dev, args.window).items():
        print(f"[B] baseline {name}: dev EM {m['exact_match']:.1f} F1 {m['f1']:.1f}")
        rows.append((f"baseline: {name}", m["exact_match"], m["f1"], "", ""))
    for model in [m for m in args.finetune.split(",") if m]:
        r = finetune(model, qa_dir, paths["train"], paths["dev"], vocab, sp_model, _steps(args.train_steps, model),
                     args.batch, args.learning_rate, args.seed, inits.get(model, ""), lower_case,
                     args.layerwise_lr_decay, args.eval_every)
        init = "random init" if model not in inits else f"from {inits[model]}"
        print(f"[B] {model} ({init}, {r['steps']} steps x {r['batch']}, lr {r['learning_rate']:g}, "
              f"{r['train_windows']} train windows): dev EM {r['exact_match']:.1f} F1 {r['f1']:.1f} "
              f"({r['wall_s']:.0f} s wall, {r['cpu_s']:.0f} CPU-s, loaded 2-core machine)", flush=True)
        rows.append((f"{model} ({init})", r["exact_match"], r["f1"], f"{r['steps']} x {r['batch']}", f"{r['cpu_s']:.0f}"))
    print(f"\n| dev ({n['dev']} questions) | EM | F1 | steps x batch | CPU-s |\n|---|---|---|---|---|")
    for name, em, f1, steps, cpu in rows:
        print(f"| {name} | {em:.1f} | {f1:.1f} | {steps} | {cpu} |")


if __name__ == "__main__":
    main()
