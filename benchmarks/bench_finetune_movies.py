"""Does pretraining with this framework help fine-tuning? Movie-review sentence polarity (Pang & Lee,
4,000 sentences) after a short CPU pretraining of a small BERT and a small ELECTRA.

    nice -n 10 python3 benchmarks/bench_finetune_movies.py [--work /tmp/ft_movies] [--pretrain_steps 1500]

What it runs, every stage a real CLI (textrain-datagen / textrain-train-gpu / textrain-finetune as
`python3 -m ...`), outputs cached in --work so a re-run skips finished stages:
1. a deterministic 80/20 split of ../shared/corpora/cls/movie_sentences_pang_lee.tsv.gz (every 5th row
   to dev) into --work/movies/{train,dev}.tsv;
2. a bag-of-words logistic regression baseline in numpy (lower-cased whitespace tokens seen >= 2 times in
   train, binary features, full-batch gradient descent with L2, 1000 steps), its dev accuracy;
3. pretraining corpus: --corpus files of ../shared/corpora/en (default wikipedia_sample, fortunes_quotes,
   lee_news: ~5 MB of prose) -> bert_pretrain datagen (WordPiece vocab of --vocab_size learned from it,
   max_seq_length 64) and electra_pretrain datagen with the same vocab;
4. pretraining: BERT tiny (2 layers, hidden 128) and a small ELECTRA (discriminator 2 layers x 128,
   generator 1/4 width) for --pretrain_steps steps each, batch 64, bias-corrected Adam lr 1e-3;
5. fine-tuning with tsv_classification (same vocab, max_seq_length 64, batch 32, --epochs, lr --lr,
   warmup 10 %) from each pretraining run AND from random initialisation, same settings; ELECTRA with
   its layer-wise LR decay 0.8; dev accuracy of the last step;
6. XLNet end to end: a tiny XLNet (2 layers, d_model 128) fine-tuned from random initialisation with a
   SentencePiece model trained on the movie train split (XLNet layout: left padding, <cls> last).
It prints one table and writes --work/results.json. Timings are CPU-seconds of each subprocess.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = os.path.join(os.path.dirname(REPO), "shared", "corpora")
MOVIES = os.path.join(CORPORA, "cls", "movie_sentences_pang_lee.tsv.gz")


def run(cmd: list[str], log_path: str) -> dict:
    """Run a CLI; returns its `final {...}` json (if any) and CPU seconds. Output goes to log_path."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        log.write(proc.stdout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n  see {log_path}")
    final = {}
    for line in proc.stdout.splitlines():
        if line.startswith("final "):
            final = json.loads(line[len("final "):])
    final["cpu_s"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)
    final["wall_s"] = round(time.time() - start, 1)
    return final


# ------------------------------------------------------------------------------------------- data
def split_movies(out_dir: str) -> tuple[list, list]:
    """Every 5th row (1-based row 5, 10, ...) to dev; header kept in both files."""
    os.makedirs(out_dir, exist_ok=True)
    with gzip.open(MOVIES, "rt", encoding="utf-8") as f:
        header, *rows = f.read().splitlines()
    train = [r for i, r in enumerate(rows, 1) if i % 5]
    dev = [r for i, r in enumerate(rows, 1) if not i % 5]
    for name, part in (("train", train), ("dev", dev)):
        with open(os.path.join(out_dir, f"{name}.tsv"), "w", encoding="utf-8") as f:
            f.write("\n".join([header] + part) + "\n")
    return [r.split("\t") for r in train], [r.split("\t") for r in dev]


def bow_logistic_regression(train: list, dev: list, steps: int = 1000, lr: float = 1.0, l2: float = 1e-4) -> float:
    """Dev accuracy of a binary bag-of-words logistic regression (numpy, full-batch gradient descent)."""
    counts = collections.Counter(w for text, _ in train for w in set(text.lower().split()))
    vocab = {w: i for i, w in enumerate(sorted(w for w, c in counts.items() if c >= 2))}

    def featurise(rows):
        x = np.zeros((len(rows), len(vocab) + 1), np.float32)
        x[:, -1] = 1.0  # bias
        for r, (text, _) in enumerate(rows):
            for w in set(text.lower().split()):
                if w in vocab:
                    x[r, vocab[w]] = 1.0
        return x, np.array([1.0 if label == "pos" else 0.0 for _, label in rows], np.float32)

    x, y = featurise(train)
    xd, yd = featurise(dev)
    w = np.zeros(x.shape[1], np.float32)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        w -= lr * (x.T @ (p - y) / len(y) + l2 * w)
    return float(np.mean(((xd @ w) > 0) == (yd > 0.5)))


# ------------------------------------------------------------------------------------------- runs
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/textrain_ft_movies")
    ap.add_argument("--corpus", default="wikipedia_sample,fortunes_quotes,lee_news")
    ap.add_argument("--vocab_size", type=int, default=8000)
    ap.add_argument("--pretrain_steps", type=int, default=1500)
    ap.add_argument("--epochs", type=float, default=4.0)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--only", default="", help="comma list of runs: bert,electra,xlnet (default all)")
    args = ap.parse_args()
    if not os.path.exists(MOVIES):
        print(f"{MOVIES} is absent: nothing to benchmark")
        return
    os.makedirs(args.work, exist_ok=True)
    w = lambda *p: os.path.join(args.work, *p)  # noqa: E731
    only = set(filter(None, args.only.split(","))) or {"bert", "electra", "xlnet"}
    py = sys.executable
    results: dict = {"settings": vars(args)}
    if os.path.exists(w("results.json")):
        results.update({k: v for k, v in json.load(open(w("results.json"))).items() if k != "settings"})

    def save():
        with open(w("results.json"), "w") as f:
            json.dump(results, f, indent=2)

    train, dev = split_movies(w("movies"))
    results["baseline_bow_logreg_dev_accuracy"] = bow_logistic_regression(train, dev)
    print(f"bag-of-words logistic regression: dev accuracy {results['baseline_bow_logreg_dev_accuracy']:.4f} "
          f"({len(train)} train / {len(dev)} dev)", flush=True)
    save()

    corpus = ",".join(os.path.join(CORPORA, "en", f"{n}.txt.gz") for n in args.corpus.split(","))
    vocab = w("data", "bert_pretrain", "vocab.txt")
    common_gen = ["--max_seq_length=64", "--num_workers=2", "--seed=1", f"--input_file={corpus}"]
    if "bert" in only or "electra" in only:
        if not os.path.exists(w("data", "bert_pretrain", "bert_pretrain-train.manifest.json")):
            results["datagen_bert"] = run([py, "-m", "framework.datagen", "--problem=bert_pretrain", f"--data_dir={w('data')}",
                                           f"--vocab_size={args.vocab_size}", "--max_predictions_per_seq=10",
                                           "--dupe_factor=2", *common_gen], w("datagen_bert.log"))
            save()
    if "electra" in only and not os.path.exists(w("data", "electra_pretrain", "electra_pretrain-train.manifest.json")):
        results["datagen_electra"] = run([py, "-m", "framework.datagen", "--problem=electra_pretrain",
                                          f"--data_dir={w('data')}", f"--vocab_file={vocab}", *common_gen],
                                         w("datagen_electra.log"))
        save()
    with open(vocab) as f:
        vocab_size = sum(1 for _ in f)
    electra_config = w("electra_config.json")
    with open(electra_config, "w") as f:
        json.dump({"vocab_size": vocab_size, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                   "intermediate_size": 512, "embedding_size": 128, "max_position_embeddings": 512,
                   "type_vocab_size": 2, "hidden_act": "gelu"}, f)

    pretrain = {"bert": ["--problem=bert_pretrain", "--model=bert", "--model_size=tiny", "--max_predictions_per_seq=10"],
                "electra": ["--problem=electra_pretrain", "--model=electra", f"--electra_config_file={electra_config}"]}
    for name in ("bert", "electra"):
        if name not in only:
            continue
        model_dir = w(f"pretrain_{name}")
        key = f"pretrain_{name}"
        if key not in results or results[key].get("step") != args.pretrain_steps:
            results[key] = run([py, "-m", "trainers.train_gpu", *pretrain[name], f"--data_dir={w('data')}",
                                f"--model_dir={model_dir}", "--max_seq_length=64", "--train_batch_size=64",
                                f"--num_train_steps={args.pretrain_steps}", f"--num_warmup_steps={args.pretrain_steps // 10}",
                                "--learning_rate=1e-3", "--optimizer=adam", "--save_checkpoints_steps=500",
                                "--iterations_per_loop=100", "--log_steps=100", "--num_gpus=1", "--seed=1"],
                               w(f"{key}.log"))
            save()
        print(f"pretrain {name}: {json.dumps(results[key])}", flush=True)

    movies = {"train_file": w("movies", "train.tsv"), "dev_file": w("movies", "dev.tsv"),
              "text_a_column": "sentence", "label_column": "label"}

    def finetune(tag: str, model: str, data: str, extra: list[str]) -> None:
        key = f"finetune_{tag}"
        if key in results and "dev_accuracy" in results[key]:
            print(f"{key}: {json.dumps(results[key])}", flush=True)
            return
        params = [f"finetune.model='{model}'", "finetune.task='tsv_classification'",
                  f"finetune.problem_hparams={movies!r}", f"finetune.data_dir='{data}'",
                  f"finetune.model_dir='{w('runs', tag)}'", "finetune.max_seq_length=64",
                  "finetune.train_batch_size=32", "finetune.eval_batch_size=64", f"finetune.num_train_epochs={args.epochs}",
                  f"finetune.learning_rate={args.lr}", "finetune.warmup_proportion=0.1", "finetune.seed=1",
                  "finetune.save_checkpoints_steps=10000", "finetune.log_steps=50", *extra]
        out = run([py, "-m", "trainers.finetune", *[f"--gin_param={p}" for p in params]], w(f"{key}.log"))
        out["dev_accuracy"] = out["eval"]["dev"]["accuracy"]
        results[key] = out
        save()
        print(f"{key}: dev accuracy {out['dev_accuracy']:.4f} (best {out['best']['value']:.4f} at step "
              f"{out['best']['step']}), {out['cpu_s']} CPU-s", flush=True)

    bert_common = ["finetune.model_size='tiny'", f"finetune.vocab_file='{vocab}'"]
    electra_common = [f"finetune.model_config_file='{electra_config}'", f"finetune.vocab_file='{vocab}'",
                      "finetune.layerwise_lr_decay=0.8"]
    if "bert" in only:
        finetune("bert_pretrained", "bert_classifier", w("ft_data_wp"),
                 bert_common + [f"finetune.init_checkpoint='{w('pretrain_bert')}'"])
        finetune("bert_random", "bert_classifier", w("ft_data_wp"), bert_common)
    if "electra" in only:
        finetune("electra_pretrained", "electra_classifier", w("ft_data_wp"),
                 electra_common + [f"finetune.init_checkpoint='{w('pretrain_electra')}'"])
        finetune("electra_random", "electra_classifier", w("ft_data_wp"), electra_common)
    if "xlnet" in only:
        sp = w("movies_sp.model")
        if not os.path.exists(sp):
            sys.path.insert(0, REPO)
            from framework.text_encoders import train_sentencepiece

            train_sentencepiece(iter(t for t, _ in train), w("movies_sp"), vocab_size=4000, hard_vocab_limit=False)
        finetune("xlnet_random", "xlnet_classifier", w("ft_data_sp"),
                 [f"finetune.sp_model='{sp}'", "finetune.model_size='base'", "finetune.optimizer='adam'",
                  "finetune.model_overrides={'n_layer': 2, 'd_model': 128, 'n_head': 2, 'd_head': 64, "
                  "'d_inner': 512, 'dropout': 0.1, 'dropatt': 0.1}"])

    print("\n| run | dev accuracy | CPU-s |\n|---|---|---|")
    print(f"| bag-of-words logistic regression (numpy) | {results['baseline_bow_logreg_dev_accuracy']:.4f} | - |")
    for key, value in results.items():
        if key.startswith("finetune_"):
            print(f"| {key[len('finetune_'):]} | {value['dev_accuracy']:.4f} | {value['cpu_s']} |")
    for key in ("pretrain_bert", "pretrain_electra"):
        if key in results:
            r = results[key]
            figures = {k: round(v, 4) for k, v in r.items() if isinstance(v, float) and ("acc" in k or k == "loss")}
            print(f"{key}: {r.get('step')} steps, {r['cpu_s']} CPU-s, last loop {figures}")


if __name__ == "__main__":
    main()
