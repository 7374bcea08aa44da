"""en->zh Transformer on ../shared/corpora/parallel: sacreBLEU on the dev split beside two baselines.

    nice -n 10 python benchmarks/bench_translate_train.py --work_dir /tmp/t2t_bench --train_steps 2400 \
        [--train_minutes 25] [--hparams_set transformer_tiny] [--num_warmup_steps 1000] [--beam_size 4]

Steps (each a command a user types; the script prints them):
1. textrain-datagen --problem=translate_enzh_sub8k (skipped when the data exists);
2. textrain-train-gpu --model=transformer (skipped when --model_dir already holds a checkpoint), stopped
   with SIGTERM (the trainer saves a checkpoint and exits) after `--train_minutes` if it has not reached
   `--train_steps` by then;
3. textrain-avg-checkpoints of the last `--average` checkpoints (when there are that many);
4. textrain-decode of the dev split's English lines against its Chinese lines (sacreBLEU, tok zh);
5. the baselines, scored the same way: copying the English source, and the most frequent Chinese
   sentence of the training split repeated for every line.
The dev split is the problem's own hold-out (every 100th pair), re-read from the raw files.
"""
from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CORPUS = os.path.join(os.path.dirname(REPO), "shared", "corpora", "parallel")


def cli(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def show(cmd: list[str]) -> None:
    print("$ " + " ".join(["python3"] + cmd[1:]), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work_dir", default="/tmp/t2t_bench")
    ap.add_argument("--hparams_set", default="transformer_tiny")
    ap.add_argument("--hparams", default="")
    ap.add_argument("--train_steps", type=int, default=2400)
    ap.add_argument("--train_minutes", type=float, default=25.0)
    ap.add_argument("--num_warmup_steps", type=int, default=1000)
    ap.add_argument("--average", type=int, default=4)
    ap.add_argument("--beam_size", type=int, default=4)
    args = ap.parse_args()
    if not os.path.isdir(CORPUS):
        print(f"{CORPUS} is absent: nothing to measure")
        return
    from textrain.framework import bleu
    from textrain.problems.translate import TranslateEnzhSub8k

    data_dir = os.path.join(args.work_dir, "data")
    model_dir = os.path.join(args.work_dir, "model")
    problem_flags = ["--problem=translate_enzh_sub8k", f"--data_dir={data_dir}"]
    model_flags = ["--model=transformer", f"--hparams_set={args.hparams_set}", f"--hparams={args.hparams}"]
    problem = TranslateEnzhSub8k()
    if not os.path.exists(os.path.join(problem.problem_dir(data_dir), "translate_enzh_sub8k-dev.manifest.json")):
        cmd = cli("textrain.framework.datagen", *problem_flags, f"--tmp_dir={CORPUS}", "--num_workers=2")
        show(cmd)
        subprocess.run(cmd, cwd=REPO, check=True)

    import tensorflow as tf

    if not tf.train.latest_checkpoint(model_dir):
        cmd = cli("textrain.trainers.train_gpu", *problem_flags, *model_flags, f"--model_dir={model_dir}",
                  f"--num_train_steps={args.train_steps}", f"--num_warmup_steps={args.num_warmup_steps}",
                  "--save_checkpoints_steps=200", "--keep_checkpoint_max=6", "--log_steps=50",
                  "--iterations_per_loop=50")
        show(cmd)
        start, cpu0 = time.time(), os.times()
        proc = subprocess.Popen(cmd, cwd=REPO)
        try:
            proc.wait(timeout=args.train_minutes * 60)
        except subprocess.TimeoutExpired:
            print(f"{args.train_minutes} minutes: SIGTERM (the trainer saves a checkpoint and exits)", flush=True)
            proc.send_signal(signal.SIGTERM)
            proc.wait()
        cpu1 = os.times()
        print(f"training: {time.time() - start:.0f} s wall, "
              f"{cpu1.children_user + cpu1.children_system - cpu0.children_user - cpu0.children_system:.0f} "
              f"CPU-s", flush=True)
    latest = tf.train.latest_checkpoint(model_dir)
    print(f"latest checkpoint: {latest}")

    checkpoint = model_dir
    state = tf.train.get_checkpoint_state(model_dir)
    if args.average > 1 and state and len(state.all_model_checkpoint_paths) >= args.average:
        avg_dir = os.path.join(args.work_dir, "avg")
        cmd = cli("textrain.trainers.avg_checkpoints", f"--model_dir={model_dir}",
                  f"--num_last_checkpoints={args.average}", f"--output_dir={avg_dir}")
        show(cmd)
        subprocess.run(cmd, cwd=REPO, check=True)
        checkpoint = avg_dir

    dev = list(problem.generate_samples(data_dir, CORPUS, "dev"))
    src, ref = os.path.join(args.work_dir, "dev.en"), os.path.join(args.work_dir, "dev.zh")
    with open(src, "w", encoding="utf-8") as f:
        f.writelines(d["inputs"] + "\n" for d in dev)
    with open(ref, "w", encoding="utf-8") as f:
        f.writelines(d["targets"] + "\n" for d in dev)
    references = [d["targets"] for d in dev]

    rows = []
    for beam in sorted({1, args.beam_size}):
        hyp = os.path.join(args.work_dir, f"dev.hyp.beam{beam}.zh")
        cmd = cli("textrain.trainers.decode", *problem_flags, *model_flags, f"--checkpoint_path={checkpoint}",
                  f"--decode_from_file={src}", f"--decode_to_file={hyp}", f"--reference_file={ref}",
                  f"--beam_size={beam}")
        show(cmd)
        start = time.time()
        subprocess.run(cmd, cwd=REPO, check=True)
        with open(hyp, encoding="utf-8") as f:
            hyps = f.read().split("\n")[:-1]
        name = "greedy" if beam == 1 else f"beam {beam}, alpha 0.6"
        rows.append((f"Transformer ({args.hparams_set}), {name}", bleu.corpus_bleu(hyps, references, "zh"),
                     time.time() - start))

    rows.append(("baseline: copy the English source",
                 bleu.corpus_bleu([d["inputs"] for d in dev], references, "zh"), 0.0))
    counts = collections.Counter(s["targets"] for s in problem.generate_samples(data_dir, CORPUS, "train"))
    frequent, n = counts.most_common(1)[0]
    rows.append((f"baseline: most frequent train target ({frequent!r}, {n}x)",
                 bleu.corpus_bleu([frequent] * len(dev), references, "zh"), 0.0))
    print(f"\ndev split: {len(dev)} pairs; sacreBLEU {rows[0][1].signature}")
    for name, score, seconds in rows:
        extra = f"  ({seconds:.0f} s to decode)" if seconds else ""
        print(f"{score.score:6.2f}  {name}{extra}\n        {score}")


if __name__ == "__main__":
    main()
