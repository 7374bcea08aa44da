"""Does pretraining with this framework help fine-tuning? Movie-review sentence polarity (Pang & Lee,
4,000 sentences) after a short CPU pretraining of a tiny BERT and a tiny ELECTRA, each fine-tuned from
its pretraining run and from random initialisation with the same protocol.

    nice -n 10 python3 benchmarks/bench_finetune_movies.py [--work /tmp/textrain_ft_movies] [--jobs 2]

What it runs, every stage a real CLI (textrain-datagen / textrain-train-gpu / textrain-finetune as
`python3 -m ...`), outputs cached in --work so a re-run resumes (finished stages are skipped, an
interrupted pretraining resumes from its last checkpoint):
1. a deterministic 80/20 split of ../shared/corpora/cls/movie_sentences_pang_lee.tsv.gz (every 5th row
   to dev) into --work/movies/{train,dev}.tsv (3,200 / 800 sentences);
2. a bag-of-words logistic regression baseline in numpy (lower-cased whitespace tokens seen >= 2 times in
   train, binary features, full-batch gradient descent with L2, 1000 steps), its dev accuracy;
3. pretraining corpus: --corpus files of ../shared/corpora/en (default wikipedia_sample,
   fortunes_quotes, lee_news: ~5 MB of prose; no movie text), plus with --task_text=N the train split's
   sentences without their labels, N times (task-adaptive pretraining; the dev split is never read)
   -> bert_pretrain datagen (WordPiece vocab of
   --vocab_size learned from it, max_seq_length 64, dupe_factor 2) and electra_pretrain datagen with the
   same vocab;
4. pretraining, BERT and ELECTRA side by side (--jobs): BERT tiny (2 layers, hidden 128, MLM + NSP) and
   ELECTRA with a 2 x 128 discriminator, for --pretrain_steps steps each, batch 64, Adam (bias-corrected),
   peak learning rate --pretrain_lr after 10 % linear warmup, linear decay to 0: a tiny model in a CPU
   budget needs a high rate and many steps (docs/HISTORY.md). ELECTRA's generator is --generator_size of the discriminator's width (the paper finds
   1/4 to 1/2 best; 1/4 of 128 is a 32-wide generator that stays at unigram level) and its samples are
   drawn at --temperature (the original's `temperature` setting, default 1.0): a unigram-level generator
   sampled at 1.0 replaces tokens mostly by frequent function words the tiny discriminator cannot spot;
   flatter samples (2.0) give it a signal it learns from within the budget (recall 0.05 by step 400).
5. fine-tuning, one protocol for every cell: tsv_classification (the pretraining vocab, lower-cased,
   max_seq_length 64, segment 0), batch 32, --epochs, warmup 10 %, Adam with weight decay as
   textrain-finetune's default, ELECTRA with its layer-wise LR decay 0.8; for each model x init
   (pretrained / random) every learning rate of --lr_grid x every seed of --seeds; dev accuracy of the last
   step. The learning rate of a cell is chosen on dev by the mean over seeds, from the SAME grid for both
   inits (dev is used for that choice, equally for both: the figures are slightly optimistic for both);
   reported: mean, min and max over the seeds of the chosen learning rate, and every run in results.json;
6. XLNet end to end: a tiny XLNet (2 layers, d_model 128) fine-tuned from random initialisation with a
   SentencePiece model trained on the movie train split (XLNet layout: left padding, <cls> last).
It prints one table and writes --work/results.json. Timings are CPU-seconds of each subprocess (its own
rusage; the machine was shared, so wall time says little). The defaults take about an hour of one core
(the breakdown is in docs/HISTORY.md). Figures and their reading: benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = os.path.join(os.path.dirname(REPO), "shared", "corpora")
MOVIES = os.path.join(CORPORA, "cls", "movie_sentences_pang_lee.tsv.gz")


class Job:
    """One CLI run: its results key, command, log file, and the keys of the jobs it must wait for."""

    def __init__(self, key: str, cmd: list[str], log_path: str, after: tuple[str, ...] = ()):
        self.key, self.cmd, self.log_path, self.after = key, cmd, log_path, after


def _final(log_path: str) -> dict:
    """The `final {...}` json line a trainer prints last (stdout and stderr share the log)."""
    final = {}
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("final "):
                final = json.loads(line[len("final "):])
    return final


def run_jobs(jobs: list[Job], parallel: int, record) -> None:
    """Run `jobs`, at most `parallel` at a time, each once the jobs named in its `after` (among `jobs`)
    have finished. `record(job, final, complete)` gets each one's `final` json plus its own CPU seconds
    (`os.wait4` rusage of that child) and wall seconds; `complete` is False for a run that stopped early
    (a trainer stopped by a signal saves a checkpoint, and the next run resumes it). A failure stops the
    others (SIGTERM: they save and are recorded as stopped early) and ends the script."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    keys = {job.key for job in jobs}
    pending, running, finished = list(jobs), {}, set()

    def reap(pid: int, status: int, usage) -> tuple[Job, int]:
        job, proc, log, start = running.pop(pid)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.close()
        final = _final(job.log_path)
        final["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 1)
        final["wall_s"] = round(time.time() - start, 1)
        record(job, final, proc.returncode == 0)
        return job, proc.returncode

    while pending or running:
        ready = [j for j in pending if all(k in finished or k not in keys for k in j.after)]
        while ready and len(running) < max(1, parallel):
            job = ready.pop(0)
            pending.remove(job)
            log = open(job.log_path, "a")  # a resumed run keeps the earlier part's log; its last `final` counts
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(job.cmd)}\n")
            log.flush()
            proc = subprocess.Popen(job.cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
            running[proc.pid] = (job, proc, log, time.time())
            print(f"  started {job.key} (log {job.log_path})", flush=True)
        if not running:
            raise SystemExit(f"jobs waiting for jobs that cannot run: {[j.key for j in pending]}")
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            continue
        job, returncode = reap(pid, status, usage)
        if returncode != 0:
            for _, other, _, _ in running.values():
                other.terminate()  # trainers save a checkpoint on SIGTERM: a re-run resumes them
            for other_pid in list(running):
                reap(*os.wait4(other_pid, 0))
            raise SystemExit(f"failed ({returncode}): {' '.join(job.cmd)}\n  see {job.log_path}")
        finished.add(job.key)


def run(cmd: list[str], log_path: str) -> dict:
    """Run one CLI; returns its `final {...}` json (if any) and CPU seconds."""
    out = {}

    def record(job, final, complete):
        if not complete:
            raise SystemExit(f"failed: {' '.join(cmd)}\n  see {log_path}")
        out.update(final)

    run_jobs([Job("run", cmd, log_path)], 1, record)
    return out


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
    return logistic_regression_accuracy(x, y, xd, yd, steps, lr, l2)


def logistic_regression_accuracy(x: np.ndarray, y: np.ndarray, x_dev: np.ndarray, y_dev: np.ndarray,
                                 steps: int = 1000, lr: float = 1.0, l2: float = 1e-4) -> float:
    """Dev accuracy of a binary logistic regression on features `x` (bias column included by the caller),
    full-batch gradient descent with L2; labels 0/1."""
    w = np.zeros(x.shape[1], np.float32)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        w -= lr * (x.T @ (p - y) / len(y) + l2 * w)
    return float(np.mean(((x_dev @ w) > 0) == (y_dev > 0.5)))


# ------------------------------------------------------------------------------------------- runs
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/textrain_ft_movies")
    ap.add_argument("--corpus", default="wikipedia_sample,fortunes_quotes,lee_news",
                    help="comma list of ../shared/corpora/en/<name>.txt.gz files to pretrain on ('': none, "
                         "with --task_text: task-adaptive pretraining alone)")
    ap.add_argument("--task_text", type=int, default=0,
                    help="task-adaptive pretraining: add the movie TRAIN split's sentences (labels dropped, dev "
                         "untouched) this many times to the pretraining corpus, one sentence per document (0: none)")
    ap.add_argument("--vocab_size", type=int, default=8000)
    ap.add_argument("--pretrain_steps", type=int, default=3000)
    ap.add_argument("--pretrain_lr", type=float, default=2e-3)
    ap.add_argument("--generator_size", type=float, default=0.5, help="ELECTRA generator width / discriminator's")
    ap.add_argument("--temperature", type=float, default=2.0, help="ELECTRA generator sampling temperature")
    ap.add_argument("--epochs", type=float, default=4.0)
    ap.add_argument("--lr_grid", default="1e-4,3e-4,1e-3", help="fine-tuning learning rates (the same for every cell)")
    ap.add_argument("--seeds", default="1,2", help="fine-tuning seeds of every (model, init, learning rate)")
    ap.add_argument("--xlnet_lr", type=float, default=2e-4)
    ap.add_argument("--jobs", type=int, default=2, help="subprocesses at a time (pretraining, fine-tuning)")
    ap.add_argument("--only", default="", help="comma list of runs: bert,electra,xlnet (default all)")
    return ap.parse_args()


def pretrain_settings(args: argparse.Namespace) -> dict:
    """What a pretraining run depends on: a cached run made with other settings is refused, not reused."""
    return {k: getattr(args, k) for k in ("corpus", "task_text", "vocab_size", "pretrain_steps", "pretrain_lr",
                                          "generator_size", "temperature")}


def write_task_text(train: list, path: str, repeat: int) -> None:
    """The train split's sentences without labels, each its own document, `repeat` times (the corpus reader
    de-duplicates file names, so repetition lives in the file). One sentence per document: the file is sorted
    by label (2,000 pos, then 2,000 neg), so grouping neighbours into documents would let NSP see labels."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for _ in range(repeat):
            for text, _ in train:
                f.write(text + "\n\n")
    os.replace(path + ".tmp", path)


def spread(values: list[float]) -> dict:
    return {"mean": float(np.mean(values)), "min": float(min(values)), "max": float(max(values)), "n": len(values)}


def main() -> None:
    args = parse_args()
    if not os.path.exists(MOVIES):
        print(f"{MOVIES} is absent: nothing to benchmark")
        return
    os.makedirs(args.work, exist_ok=True)
    w = lambda *p: os.path.join(args.work, *p)  # noqa: E731
    only = set(filter(None, args.only.split(","))) or {"bert", "electra", "xlnet"}
    lrs = [float(x) for x in args.lr_grid.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    py = sys.executable
    results: dict = {}
    if os.path.exists(w("results.json")):
        with open(w("results.json")) as f:
            results.update({k: v for k, v in json.load(f).items() if k not in ("settings", "summary")})
    results["settings"] = vars(args)

    def save():
        tmp = w("results.json.tmp")
        with open(tmp, "w") as f:
            json.dump(results, f, indent=2)
        os.replace(tmp, w("results.json"))

    train, dev = split_movies(w("movies"))
    results["baseline_bow_logreg_dev_accuracy"] = bow_logistic_regression(train, dev)
    print(f"bag-of-words logistic regression: dev accuracy {results['baseline_bow_logreg_dev_accuracy']:.4f} "
          f"({len(train)} train / {len(dev)} dev)", flush=True)
    save()

    # ---- pretraining data (one vocab for both models and for fine-tuning)
    if not args.corpus and not args.task_text:
        raise SystemExit("--corpus '' (no en/ text) needs --task_text: there would be nothing to pretrain on")
    corpus = [os.path.join(CORPORA, "en", f"{n}.txt.gz") for n in filter(None, args.corpus.split(","))]
    if args.task_text:
        write_task_text(train, w("movies", "train_text.txt"), args.task_text)
        corpus.append(w("movies", "train_text.txt"))
    corpus = ",".join(corpus)
    vocab = w("data", "bert_pretrain", "vocab.txt")
    common_gen = ["--max_seq_length=64", "--num_workers=2", "--seed=1", f"--input_file={corpus}"]
    if "bert" in only or "electra" in only:
        if not os.path.exists(w("data", "bert_pretrain", "bert_pretrain-train.manifest.json")):
            results["datagen_bert"] = run([py, "-m", "textrain.framework.datagen", "--problem=bert_pretrain", f"--data_dir={w('data')}",
                                           f"--vocab_size={args.vocab_size}", "--max_predictions_per_seq=10",
                                           "--dupe_factor=2", *common_gen], w("datagen_bert.log"))
            save()
    if "electra" in only and not os.path.exists(w("data", "electra_pretrain", "electra_pretrain-train.manifest.json")):
        results["datagen_electra"] = run([py, "-m", "textrain.framework.datagen", "--problem=electra_pretrain",
                                          f"--data_dir={w('data')}", f"--vocab_file={vocab}", *common_gen],
                                         w("datagen_electra.log"))
        save()
    vocab_size = args.vocab_size
    if os.path.exists(vocab):
        with open(vocab) as f:
            vocab_size = sum(1 for _ in f)
    electra_config = w("electra_config.json")
    with open(electra_config, "w") as f:
        json.dump({"vocab_size": vocab_size, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                   "intermediate_size": 512, "embedding_size": 128, "max_position_embeddings": 512,
                   "type_vocab_size": 2, "hidden_act": "gelu"}, f)

    # ---- one list of jobs: the two pretrainings, then every fine-tune (a pretrained cell waits for its
    # pretraining; the random-init cells and XLNet need nothing and fill the other slot meanwhile)
    def record(job: Job, final: dict, complete: bool) -> None:
        previous = results.get(job.key, {})
        if previous.get("partial"):  # this run resumed a stopped one: count both parts
            final["cpu_s"] = round(final["cpu_s"] + previous.get("cpu_s", 0.0), 1)
            final["wall_s"] = round(final["wall_s"] + previous.get("wall_s", 0.0), 1)
        if "settings" in previous:
            final["settings"] = previous["settings"]
        if not complete:
            final["partial"] = True
        elif job.key.startswith("finetune_"):
            final["dev_accuracy"] = final["eval"]["dev"]["accuracy"]
        results[job.key] = final
        save()
        if not complete:
            print(f"{job.key}: stopped at step {final.get('step')} ({final['cpu_s']} CPU-s so far)", flush=True)
        elif job.key.startswith("finetune_"):
            print(f"{job.key}: dev accuracy {final['dev_accuracy']:.4f}, {final['cpu_s']} CPU-s", flush=True)
        else:
            print(f"{job.key}: {json.dumps(final)}", flush=True)

    pretrain = {"bert": ["--problem=bert_pretrain", "--model=bert", "--model_size=tiny", "--max_predictions_per_seq=10"],
                "electra": ["--problem=electra_pretrain", "--model=electra", f"--electra_config_file={electra_config}",
                            f"--generator_hidden_size={args.generator_size}", f"--temperature={args.temperature}"]}
    jobs = []
    for name in ("bert", "electra"):
        key = f"pretrain_{name}"
        if name not in only:
            continue
        done = results.get(key, {})
        if done.get("settings") not in (None, pretrain_settings(args)) and os.path.exists(w(key, "checkpoint")):
            raise SystemExit(f"{w(key)} holds a pretraining run with other settings ({done.get('settings')}): "
                             f"use another --work or delete that folder")
        if done.get("step") == args.pretrain_steps and not done.get("partial"):
            print(f"{key}: cached ({done['cpu_s']} CPU-s)", flush=True)
            continue
        results[key] = {**done, "settings": pretrain_settings(args), "partial": True}  # claims the folder
        save()
        jobs.append(Job(key, [py, "-m", "textrain.trainers.train_gpu", *pretrain[name], f"--data_dir={w('data')}",
                              f"--model_dir={w(key)}", "--max_seq_length=64", "--train_batch_size=64",
                              f"--num_train_steps={args.pretrain_steps}",
                              f"--num_warmup_steps={args.pretrain_steps // 10}", f"--learning_rate={args.pretrain_lr}",
                              "--optimizer=adam", "--save_checkpoints_steps=500", "--keep_checkpoint_max=1",
                              "--iterations_per_loop=100", "--log_steps=100", "--num_gpus=1", "--seed=1"],
                        w(f"{key}.log")))

    movies = {"train_file": w("movies", "train.tsv"), "dev_file": w("movies", "dev.tsv"),
              "text_a_column": "sentence", "label_column": "label"}

    def finetune_job(tag: str, model: str, data: str, lr: float, seed: int, extra: list[str],
                     after: tuple[str, ...] = ()) -> Job | None:
        key = f"finetune_{tag}"
        if "dev_accuracy" in results.get(key, {}):
            return None
        if key not in results and os.path.exists(w("runs", tag)):
            # A run folder results.json knows nothing of (copied, or from an earlier pretraining): the
            # trainer would resume it, even a finished one, so its accuracy would be stale. Start afresh.
            shutil.rmtree(w("runs", tag))
        params = [f"finetune.model='{model}'", "finetune.task='tsv_classification'",
                  f"finetune.problem_hparams={movies!r}", f"finetune.data_dir='{data}'",
                  f"finetune.model_dir='{w('runs', tag)}'", "finetune.max_seq_length=64",
                  "finetune.train_batch_size=32", "finetune.eval_batch_size=64", f"finetune.num_train_epochs={args.epochs}",
                  f"finetune.learning_rate={lr}", "finetune.warmup_proportion=0.1", f"finetune.seed={seed}",
                  "finetune.save_checkpoints_steps=10000", "finetune.log_steps=50", *extra]
        return Job(key, [py, "-m", "textrain.trainers.finetune", *[f"--gin_param={p}" for p in params]], w(f"{key}.log"), after)

    common = {"bert": ["finetune.model_size='tiny'", f"finetune.vocab_file='{vocab}'"],
              "electra": [f"finetune.model_config_file='{electra_config}'", f"finetune.vocab_file='{vocab}'",
                          "finetune.layerwise_lr_decay=0.8"]}
    cells = {}  # (model, init) -> {lr: [result keys]}
    # The fine-tunes share one records folder, generated by the first of them: the others wait for it.
    first_key = None if os.path.exists(w("ft_data_wp", "tsv_classification")) else "finetune_first_wp"
    finetunes = {"pretrained": [], "random": []}
    for name in ("bert", "electra"):
        if name not in only:
            continue
        for init in ("pretrained", "random"):
            extra = common[name] + ([f"finetune.init_checkpoint='{w(f'pretrain_{name}')}'"] if init == "pretrained" else [])
            after = (f"pretrain_{name}",) if init == "pretrained" else ()
            for lr in lrs:
                for seed in seeds:
                    tag = f"{name}_{init}_lr{lr:g}_seed{seed}"
                    cells.setdefault((name, init), {}).setdefault(lr, []).append(f"finetune_{tag}")
                    job = finetune_job(tag, f"{name}_classifier", w("ft_data_wp"), lr, seed, extra, after)
                    if job:
                        finetunes[init].append(job)
    ordered = finetunes["random"] + finetunes["pretrained"]
    if first_key and ordered:
        first_key = ordered[0].key
        for job in ordered[1:]:
            job.after = job.after + (first_key,)
    jobs += ordered
    if "xlnet" in only:
        sp = w("movies_sp.model")
        if not os.path.exists(sp):
            sys.path.insert(0, REPO)
            from textrain.framework.encoders import train_sentencepiece

            train_sentencepiece(iter(t for t, _ in train), w("movies_sp"), vocab_size=4000, hard_vocab_limit=False)
        job = finetune_job("xlnet_random", "xlnet_classifier", w("ft_data_sp"), args.xlnet_lr, 1,
                           [f"finetune.sp_model='{sp}'", "finetune.model_size='base'", "finetune.optimizer='adam'",
                            "finetune.model_overrides={'n_layer': 2, 'd_model': 128, 'n_head': 2, 'd_head': 64, "
                            "'d_inner': 512, 'dropout': 0.1, 'dropatt': 0.1}"])
        if job:
            jobs.append(job)
    run_jobs(jobs, args.jobs, record)

    # ---- the table
    summary = {}
    print(f"\nbag-of-words logistic regression (numpy): dev accuracy {results['baseline_bow_logreg_dev_accuracy']:.4f}")
    print(f"\nfine-tuning, dev accuracy of the last step; lr chosen on dev from {lrs} by the mean over seeds {seeds}")
    print("| model | init | chosen lr | dev accuracy mean [min, max] | every lr: mean | CPU-s (all runs) |\n|---|---|---|---|---|---|")
    for (name, init), by_lr in cells.items():
        means = {lr: spread([results[k]["dev_accuracy"] for k in keys]) for lr, keys in by_lr.items()}
        best = max(means, key=lambda lr: means[lr]["mean"])
        cpu = round(sum(results[k]["cpu_s"] for keys in by_lr.values() for k in keys), 1)
        summary[f"{name}_{init}"] = {"lr": best, **means[best], "per_lr": {f"{lr:g}": m for lr, m in means.items()},
                                     "cpu_s": cpu}
        m = means[best]
        every = ", ".join(f"{lr:g}: {v['mean']:.4f}" for lr, v in means.items())
        print(f"| {name} | {init} | {best:g} | {m['mean']:.4f} [{m['min']:.4f}, {m['max']:.4f}] | {every} | {cpu} |")
    for name in ("bert", "electra"):
        if f"{name}_pretrained" in summary and f"{name}_random" in summary:
            gain = summary[f"{name}_pretrained"]["mean"] - summary[f"{name}_random"]["mean"]
            summary[f"{name}_gain"] = gain
            print(f"{name}: pretrained - random = {100 * gain:+.2f} points (means over seeds)")
    if "finetune_xlnet_random" in results:
        r = results["finetune_xlnet_random"]
        print(f"xlnet (random init, lr {args.xlnet_lr:g}, seed 1): dev accuracy {r['dev_accuracy']:.4f}, {r['cpu_s']} CPU-s")
    for key in ("pretrain_bert", "pretrain_electra"):
        r = results.get(key, {})
        if "step" in r:
            figures = {k: round(v, 4) for k, v in r.items() if isinstance(v, float) and k not in ("cpu_s", "wall_s")}
            print(f"{key}: {r['step']} steps, {r['cpu_s']} CPU-s, last 100 steps {figures}")
    results["summary"] = summary
    save()


if __name__ == "__main__":
    main()
