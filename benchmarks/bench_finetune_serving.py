"""Fine-tuning step and raw-text serving of BERT, ours beside keras-hub's `BertTextClassifier` in the same run.

    nice -n 10 python3 benchmarks/bench_finetune_serving.py                      # BERT-base, L128, both parts
    python3 benchmarks/bench_finetune_serving.py --size tiny --num_layers 1 --sides ours   # ~1 minute: a smoke run

The task (GLUE-shaped, SST-2 like): movie-review sentence polarity, ../shared/corpora/cls/
movie_sentences_pang_lee.tsv.gz (relative to the project root; when it is absent the script says so and
exits 0), every 5th row to dev (3,200 train / 800 dev sentences, labels pos/neg). The WordPiece vocabulary
(--vocab_size, lower-cased) is learned with `build_wordpiece_vocab` from the train sentences and four en/
prose sources; the script caches it, the split and both exports in --work.

Part A, one fine-tuning step (forward + backward + AdamW update with global-norm clipping) on the same batch
of --batch train sentences tokenised to --seq_len by our WordPiece encoder:
- ours: `trainers.core.Trainer` with `bert_classifier` built by `trainers.run.build_model` from the
  settings textrain-finetune gives it (configs/bert_base.gin + tsv_classification: pooler -> dropout ->
  dense, 2 labels) and the optimizer those bindings make (adamw = BERT's, no bias correction; lr 2e-5,
  10 % warmup of 3 epochs, weight decay 0.01 off LayerNorm/bias, epsilon 1e-6, clip 1.0);
- peer: keras-hub `BertBackbone` of the same sizes (random init) inside `BertTextClassifier` (its own
  dropout -> dense head), Keras `AdamW` with the same schedule, decay exclusions, epsilon and
  `global_clipnorm=1.0`, in a `tf.function` train step (XLA off, as ours). Keras' AdamW applies bias
  correction; ours, like BERT's, does not: the FLOPs are the same.

Part B, serving raw strings:
- ours: the real export path, textrain-finetune (`python3 -m textrain.trainers.finetune`) run for one step
  with `finetune.export=True`: the SavedModel's `serve_text` signature (strings -> in-graph WordPiece,
  framework/graph_wordpiece.py -> logits, probabilities, label);
- peer: `BertTextClassifierPreprocessor` (a `BertTokenizer` on the same vocab file, lowercase and accent
  stripping as BERT uncased, sequence_length --seq_len) + the classifier, exported with Keras'
  `keras.export.ExportArchive` as ONE SavedModel whose `serve` signature takes strings (tensorflow-text
  ops inside: the loading process imports tensorflow_text). The export child also counts the dev sentences
  whose keras-hub token ids equal ours (what each side computes is the same only when they do).
- each SavedModel is loaded in a fresh process and timed on the same unseen dev sentences: latency at
  batch 1 (median and p90 of --latency_calls calls, one new sentence each, after 3 warm-up calls) and
  throughput at batch --serve_batch (--throughput_batches batches of new sentences, after one warm-up
  batch). Both truncate at --seq_len. keras-hub's preprocessor pads every row to it; our `serve_text` cuts
  the batch to its longest row (trainers/export.py; padding changes no output). `--ours_baseline DIR` times
  one more SavedModel of ours in the same run, e.g. one exported before that change (it pads to --seq_len:
  the same shapes as the peer).

Every measured side runs in a FRESH process (`same_run.run_measured`: its peak RSS is its own); wall and
CPU seconds of that process are printed (on a shared machine CPU seconds are the steadier figure), with the
1-minute load. keras-hub is NOT a dependency: it runs from --peer_python (.venv-bench: keras-hub 0.32.0 and
tensorflow-text; see bench_bert_step.py); without it the script prints "peer not installed: <command>" and
runs ours alone.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.lib import same_run, step_bench  # noqa: E402

REPO = step_bench.REPO
CORPORA = os.path.join(os.path.dirname(REPO), "shared", "corpora")
MOVIES = os.path.join(CORPORA, "cls", "movie_sentences_pang_lee.tsv.gz")
VOCAB_PROSE = ("wikipedia_sample", "fortunes_quotes", "lee_news", "jane_austen_novels")
PEER_PYTHON = os.path.join(REPO, ".venv-bench", "bin", "python")
PEER_INSTALL = ("python3 -m venv --system-site-packages .venv-bench && .venv-bench/bin/pip install --no-deps "
                "keras-hub==0.32.0 tensorflow-text==2.21.1")  # --no-deps: the main tensorflow-cpu serves both
LEARNING_RATE, EPOCHS, WARMUP = 2e-5, 3.0, 0.1  # configs/_bert.gin


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="/tmp/textrain_bench_ft_serving", help="cache: split, vocab, exports")
    parser.add_argument("--size", default="base", help="BERT preset (tiny, mini, small, medium, base, large)")
    parser.add_argument("--num_layers", type=int, default=0, help="override the preset's depth (0 = keep)")
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32, help="fine-tuning batch")
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--steps", type=int, default=3, help="timed fine-tuning steps per side")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps (tracing)")
    parser.add_argument("--latency_calls", type=int, default=50, help="batch-1 calls timed per side")
    parser.add_argument("--serve_batch", type=int, default=64)
    parser.add_argument("--throughput_batches", type=int, default=4, help="timed batches of --serve_batch")
    parser.add_argument("--parts", default="step,serve", help="step, serve or both")
    parser.add_argument("--sides", default="ours,peer", help="ours, peer or both")
    parser.add_argument("--peer_python", default=PEER_PYTHON, help="the interpreter that has keras-hub")
    parser.add_argument("--ours_baseline", default="", help="part B: also time this SavedModel of ours (e.g. one an "
                        "earlier commit exported) in the same run, as 'textrain, baseline'")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--shapes", default="", help=argparse.SUPPRESS)  # the parent's shapes(), as json
    args = parser.parse_args(argv)
    for flag, known in (("parts", ("step", "serve")), ("sides", ("ours", "peer"))):
        for name in filter(None, getattr(args, flag).split(",")):
            if name not in known:
                parser.error(f"--{flag}: unknown {name!r}; known: {', '.join(known)}")
    dev_needed = 3 + args.latency_calls + (1 + args.throughput_batches) * args.serve_batch  # child_serve's use
    if dev_needed > 800:
        parser.error(f"3 + --latency_calls + (1 + --throughput_batches) x --serve_batch = {dev_needed} sentences: "
                     "the dev split has 800")
    return args


# ------------------------------------------------------------------------------------------ the task
def shapes(args: argparse.Namespace) -> dict:
    """The encoder's sizes, from our preset (the peer is built to the same numbers; its process gets them
    from the parent, so it never imports textrain's models)."""
    if args.shapes:
        return json.loads(args.shapes)
    from textrain.models.bert import BertConfig

    overrides = {"num_hidden_layers": args.num_layers} if args.num_layers else {}
    config = BertConfig.preset(args.size, vocab_size=vocab_size(args), **overrides)
    return dict(layers=config.num_hidden_layers, hidden=config.hidden_size, heads=config.num_attention_heads,
                intermediate=config.intermediate_size, vocab=config.vocab_size,
                positions=config.max_position_embeddings, dropout=config.hidden_dropout_prob)


def work(args: argparse.Namespace, *parts: str) -> str:
    return os.path.join(args.work, *parts)


def vocab_size(args: argparse.Namespace) -> int:
    with open(work(args, "vocab.txt"), encoding="utf-8") as f:
        return sum(1 for _ in f)


def train_steps(num_train: int, batch: int) -> tuple[int, int]:
    """(num_train_steps, num_warmup_steps) as textrain-finetune derives them from the bindings."""
    steps = int(num_train / batch * EPOCHS)
    return steps, int(steps * WARMUP)


def prepare_task(args: argparse.Namespace) -> dict:
    """Split, vocab, the fine-tuning batch and the serving sentences, in --work (made once)."""
    os.makedirs(args.work, exist_ok=True)
    with gzip.open(MOVIES, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    train = [r for i, r in enumerate(rows) if i % 5 != 4]
    dev = [r for i, r in enumerate(rows) if i % 5 == 4]
    for name, part in (("train", train), ("dev", dev)):
        path = work(args, f"{name}.tsv")
        if not os.path.exists(path):
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                f.write("sentence\tlabel\n" + "".join(f"{s}\t{label}\n" for s, label in part))
            os.replace(path + ".tmp", path)
    vocab = work(args, "vocab.txt")
    if not os.path.exists(vocab):
        from textrain.framework.encoders import build_wordpiece_vocab

        prose = [os.path.join(CORPORA, "en", f"{name}.txt.gz") for name in VOCAB_PROSE]

        def lines():
            yield from (s for s, _ in train)
            for path in prose:
                with gzip.open(path, "rt", encoding="utf-8") as f:
                    yield from f

        build_wordpiece_vocab(lines(), args.vocab_size, vocab + ".tmp", source="movie train + " + ", ".join(prose))
        os.replace(vocab + ".tmp", vocab)
    from textrain.framework.encoders import WordpieceEncoder
    from textrain.problems.layouts import bert_layout

    encoder = WordpieceEncoder(vocab, do_lower_case=True)
    cls_id, sep_id = encoder.special_ids["[CLS]"], encoder.special_ids["[SEP]"]

    def features(sentences: list[str]) -> dict[str, list]:
        rows = [bert_layout(encoder.encode(s), None, args.seq_len, cls_id, sep_id) for s in sentences]
        return {k: [r[k] for r in rows] for k in ("input_ids", "input_mask", "segment_ids")}

    batch = features([s for s, _ in train[:args.batch]])
    batch["label_ids"] = [int(label == "pos") for _, label in train[:args.batch]]
    serving = [s for s, _ in dev]
    task = {"batch": batch, "serving_sentences": serving, "serving_ids": features(serving)["input_ids"],
            "num_train": len(train), "vocab_file": vocab}
    with open(work(args, "task.json"), "w", encoding="utf-8") as f:
        json.dump(task, f)
    return task


def load_task(args: argparse.Namespace) -> dict:
    with open(work(args, "task.json"), encoding="utf-8") as f:
        return json.load(f)


def export_key(args: argparse.Namespace) -> str:
    return f"{args.size}_l{args.num_layers or 'preset'}_len{args.seq_len}_v{vocab_size(args)}"


# ------------------------------------------------------------------------------------- part A: step
def child_step_ours(args: argparse.Namespace) -> dict:
    import tensorflow as tf

    from textrain.trainers.run import build_model

    task = load_task(args)
    batch = {k: tf.constant(v, tf.int32) for k, v in task["batch"].items()}
    batch["is_real_example"] = tf.ones([args.batch], tf.int32)
    overrides = {"num_hidden_layers": args.num_layers} if args.num_layers else None
    settings = dict(num_labels=2, task_type="classification", size=args.size, config_file=None, overrides=overrides,
                    task_name="tsv_classification")
    manifest = {"settings": {"vocab_size": vocab_size(args), "max_seq_length": args.seq_len}}
    steps, warmup = train_steps(task["num_train"], args.batch)
    trainer, model_dir = step_bench.make_trainer(lambda: build_model("bert_classifier", settings, manifest), batch,
                                                 learning_rate=LEARNING_RATE, num_warmup_steps=warmup,
                                                 num_train_steps=steps)
    try:
        return step_bench.time_steps(step_bench.trainer_step_fn(trainer), args.warmup, args.steps)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)


def peer_classifier(args: argparse.Namespace, preprocessor=None):
    """keras-hub's BertTextClassifier on a randomly initialised BertBackbone of our sizes."""
    import keras_hub

    s = shapes(args)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=s["vocab"], num_layers=s["layers"], num_heads=s["heads"], hidden_dim=s["hidden"],
        intermediate_dim=s["intermediate"], dropout=s["dropout"], max_sequence_length=s["positions"],
        num_segments=2)
    return keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=preprocessor,
                                               dropout=s["dropout"])


def child_step_peer(args: argparse.Namespace) -> dict:
    import keras
    import tensorflow as tf

    task = load_task(args)
    b = task["batch"]
    inputs = {"token_ids": tf.constant(b["input_ids"], tf.int32), "segment_ids": tf.constant(b["segment_ids"], tf.int32),
              "padding_mask": tf.constant(b["input_mask"], tf.int32)}
    labels = tf.constant(b["label_ids"], tf.int32)
    steps, warmup = train_steps(task["num_train"], args.batch)
    classifier = peer_classifier(args)

    class WarmupLinear(keras.optimizers.schedules.LearningRateSchedule):
        """Ours (trainers/optimization.py WarmupDecaySchedule): linear warmup, then linear decay to 0."""

        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            decayed = LEARNING_RATE * (1.0 - tf.minimum(step / steps, 1.0))
            return tf.where(step < warmup, LEARNING_RATE * step / warmup, decayed)

    optimizer = keras.optimizers.AdamW(learning_rate=WarmupLinear(), weight_decay=0.01, beta_1=0.9, beta_2=0.999,
                                       epsilon=1e-6, global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])
    variables = classifier.trainable_variables
    optimizer.build(variables)

    @tf.function(jit_compile=False)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = tf.cast(classifier(x, training=True), tf.float32)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return step_bench.time_steps(lambda: float(train_step(inputs, labels)), args.warmup, args.steps)


# ----------------------------------------------------------------------------------- part B: exports
def export_ours(args: argparse.Namespace, task: dict) -> str:
    """The raw-text SavedModel of textrain-finetune (one training step, export=True), made once per key."""
    export_dir = work(args, f"ours_export_{export_key(args)}")
    if os.path.exists(export_dir):
        return export_dir
    run_dir = work(args, "ours_run")
    shutil.rmtree(run_dir, ignore_errors=True)
    hparams = {"train_file": work(args, "train.tsv"), "dev_file": work(args, "dev.tsv")}
    params = [f"finetune.problem_hparams={hparams!r}", f"finetune.vocab_file={task['vocab_file']!r}",
              f"finetune.data_dir={work(args, 'data_' + str(args.seq_len))!r}", f"finetune.model_dir={run_dir!r}",
              f"finetune.model_size={args.size!r}", f"finetune.max_seq_length={args.seq_len}",
              "finetune.num_train_steps=1", "finetune.do_eval=False", "finetune.export=True",
              f"finetune.export_dir={export_dir!r}", "finetune.iterations_per_loop=1", "finetune.log_steps=1",
              "finetune.seed=0"]
    if args.num_layers:
        params.append(f"finetune.model_overrides={{'num_hidden_layers': {args.num_layers}}}")
    cmd = [sys.executable, "-m", "textrain.trainers.finetune", "--gin_file=bert_base.gin",
           "--gin_file=tsv_classification.gin", *[f"--gin_param={p}" for p in params]]
    print(f"exporting ours: {' '.join(cmd[:3])} ... (textrain-finetune, 1 step, export=True)", flush=True)
    proc = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True,
                          text=True)
    shutil.rmtree(run_dir, ignore_errors=True)  # the checkpoint (3x the weights): only the export is kept
    if proc.returncode or not os.path.exists(export_dir):
        raise RuntimeError(f"textrain-finetune export failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return export_dir


def child_export_peer(args: argparse.Namespace) -> dict:
    """keras-hub's preprocessor + classifier as one strings-in SavedModel (ExportArchive)."""
    import keras
    import keras_hub
    import numpy as np
    import tensorflow as tf

    task = load_task(args)
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=task["vocab_file"], lowercase=True, strip_accents=True)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=args.seq_len)
    classifier = peer_classifier(args, preprocessor)
    sentences = task["serving_sentences"]
    peer_ids = preprocessor(tf.constant(sentences))["token_ids"].numpy()
    same = int(np.sum(np.all(peer_ids == np.asarray(task["serving_ids"]), axis=1)))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(text):
        logits = tf.cast(classifier(preprocessor(text), training=False), tf.float32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1)}

    archive = keras.export.ExportArchive()
    archive.track(classifier)
    archive.track(preprocessor)
    archive.add_endpoint("serve", serve)
    path = args.child.split(":", 2)[2]
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    archive.write_out(tmp, verbose=False)
    os.replace(tmp, path)
    return {"same_ids": same, "sentences": len(sentences)}


def export_peer(args: argparse.Namespace) -> tuple[str, dict]:
    path = work(args, f"peer_export_{export_key(args)}")
    info_path = path + ".json"
    if not (os.path.exists(path) and os.path.exists(info_path)):
        print("exporting peer: keras-hub BertTextClassifierPreprocessor + BertTextClassifier (ExportArchive)",
              flush=True)
        shutil.rmtree(path, ignore_errors=True)
        measured = run_child(args, f"export:peer:{path}", args.peer_python)
        with open(info_path, "w", encoding="utf-8") as f:
            json.dump(measured, f)
    with open(info_path, encoding="utf-8") as f:
        return path, json.load(f)


# ----------------------------------------------------------------------------------- part B: serving
def child_serve(args: argparse.Namespace) -> dict:
    """Load a SavedModel, time batch-1 latency and batch-N throughput on the dev sentences."""
    import numpy as np
    import tensorflow as tf

    _, side, path = args.child.split(":", 2)
    if side == "peer":
        import tensorflow_text  # noqa: F401  (registers the ops the keras-hub tokenizer put in the graph)
    signature = "serve_text" if side == "ours" else "serve"
    sentences = load_task(args)["serving_sentences"]
    start, start_cpu = time.perf_counter(), time.process_time()
    fn = tf.saved_model.load(path).signatures[signature]
    load_s, load_cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
    arg = next(iter(fn.structured_input_signature[1]))

    def call(texts: list[str]) -> np.ndarray:
        return fn(**{arg: tf.constant(texts)})["logits"].numpy()  # numpy(): the call has finished

    def timed(texts: list[str]) -> tuple[float, float]:
        w, c = time.perf_counter(), time.process_time()
        call(texts)
        return time.perf_counter() - w, time.process_time() - c

    first_call_s = timed(sentences[:1])[0]
    for s in sentences[1:3]:
        call([s])
    n, size = args.latency_calls, args.serve_batch
    latency = [timed([s]) for s in sentences[3:3 + n]]
    rest = sentences[3 + n:]
    call(rest[:size])  # warm-up at the serving batch size
    batches = [timed(rest[size * (i + 1):size * (i + 2)]) for i in range(args.throughput_batches)]
    walls = sorted(w for w, _ in latency)
    return {"load_s": load_s, "load_cpu_s": load_cpu_s, "first_call_s": first_call_s,
            "latency_p50_ms": 1e3 * statistics.median(walls),
            "latency_p90_ms": 1e3 * walls[min(len(walls) - 1, int(0.9 * len(walls)))],
            "latency_cpu_ms": 1e3 * statistics.mean(c for _, c in latency),
            "throughput_sps": size * len(batches) / sum(w for w, _ in batches),
            "throughput_cpu_s_per_batch": statistics.mean(c for _, c in batches),
            "peak_rss_mib": step_bench.peak_rss_mib(), "load_avg_1m": os.getloadavg()[0]}


# --------------------------------------------------------------------------------------------- parent
def run_child(args: argparse.Namespace, child: str, python: str) -> dict:
    argv = [python, os.path.abspath(__file__), f"--child={child}"] + [
        f"--{k}={getattr(args, k)}" for k in ("work", "size", "num_layers", "seq_len", "batch", "vocab_size", "steps",
                                               "warmup", "latency_calls", "serve_batch", "throughput_batches")]
    argv.append(f"--shapes={json.dumps(shapes(args))}")
    measured = same_run.run_measured(argv, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    result = step_bench.parse_child(measured["output"])
    result["process_cpu_s"], result["process_wall_s"] = measured["cpu"], measured["wall"]
    return result


def peer_available(python: str) -> bool:
    if not os.path.exists(python):
        return False
    probe = subprocess.run([python, "-c", "import keras_hub, tensorflow_text"], capture_output=True,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return probe.returncode == 0


def label(side: str) -> str:
    return {"ours": "textrain", "peer": "keras-hub", "baseline": "textrain, baseline"}[side]


def part_step(args: argparse.Namespace, sides: list[str]) -> dict:
    print(f"\nA. fine-tuning step, batch {args.batch} x L{args.seq_len}, {args.warmup} warm-up + {args.steps} timed "
          "steps, fp32")
    print(f"{'side':<10} {'s/step':>7} {'CPU s/step':>10} {'ex/s':>6} {'warm-up s':>9} {'peak RSS MiB':>12} "
          f"{'load':>5} {'loss':>7}")
    rows = {}
    for side in sides:
        r = rows[side] = run_child(args, f"step:{side}", args.peer_python if side == "peer" else sys.executable)
        wall, cpu = statistics.mean(r["step_wall_s"]), statistics.mean(r["step_cpu_s"])
        print(f"{label(side):<10} {wall:7.2f} {cpu:10.2f} {args.batch / wall:6.2f} {r['warmup_wall_s']:9.1f} "
              f"{r['peak_rss_mib']:12,.0f} {r['load_avg_1m']:5.1f} {r['loss']:7.3f}", flush=True)
    if len(rows) == 2:
        o, p = rows["ours"], rows["peer"]
        print(f"ours/peer: step wall {statistics.mean(o['step_wall_s']) / statistics.mean(p['step_wall_s']):.2f}x, "
              f"CPU {statistics.mean(o['step_cpu_s']) / statistics.mean(p['step_cpu_s']):.2f}x, "
              f"peak RSS {o['peak_rss_mib'] / p['peak_rss_mib']:.2f}x")
    return rows


def part_serve(args: argparse.Namespace, sides: list[str], task: dict) -> dict:
    paths = {}
    if "ours" in sides:
        paths["ours"] = export_ours(args, task)
    if "peer" in sides:
        paths["peer"], info = export_peer(args)
        print(f"keras-hub token ids equal ours on {info['same_ids']}/{info['sentences']} dev sentences")
    print(f"\nB. serving raw strings from the SavedModel, truncated at L{args.seq_len}: batch 1 x "
          f"{args.latency_calls} calls, batch {args.serve_batch} x {args.throughput_batches} batches, fresh process")
    print(f"{'side':<18} {'load s':>6} {'1st call s':>10} {'b1 p50 ms':>9} {'p90 ms':>7} {'CPU ms':>7} "
          f"{f'b{args.serve_batch} sent/s':>12} {'CPU s/batch':>11} {'peak RSS MiB':>12} {'load':>5}")
    if args.ours_baseline:
        paths["baseline"] = args.ours_baseline
    rows = {}
    for side in paths:
        r = rows[side] = run_child(args, f"serve:{'peer' if side == 'peer' else 'ours'}:{paths[side]}",
                                   args.peer_python if side == "peer" else sys.executable)
        print(f"{label(side):<18} {r['load_s']:6.1f} {r['first_call_s']:10.2f} {r['latency_p50_ms']:9.1f} "
              f"{r['latency_p90_ms']:7.1f} {r['latency_cpu_ms']:7.1f} {r['throughput_sps']:12.1f} "
              f"{r['throughput_cpu_s_per_batch']:11.2f} {r['peak_rss_mib']:12,.0f} {r['load_avg_1m']:5.1f}", flush=True)
    for side in [x for x in ("ours", "baseline") if x in rows and "peer" in rows]:
        o, p = rows[side], rows["peer"]
        print(f"{label(side)}/keras-hub: batch-1 p50 latency {o['latency_p50_ms'] / p['latency_p50_ms']:.2f}x, p90 "
              f"{o['latency_p90_ms'] / p['latency_p90_ms']:.2f}x; batch-{args.serve_batch} throughput "
              f"{o['throughput_sps'] / p['throughput_sps']:.2f}x (higher is better), CPU s/batch "
              f"{o['throughput_cpu_s_per_batch'] / p['throughput_cpu_s_per_batch']:.2f}x; peak RSS "
              f"{o['peak_rss_mib'] / p['peak_rss_mib']:.2f}x")
    return rows


CHILDREN = {"step:ours": child_step_ours, "step:peer": child_step_peer, "export:peer": child_export_peer,
            "serve:ours": child_serve, "serve:peer": child_serve}


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = parse_args(argv)
    if args.child:
        print(step_bench.child_result(CHILDREN[":".join(args.child.split(":")[:2])](args)), flush=True)
        return
    if not os.path.exists(MOVIES):
        print(f"bench_finetune_serving: {MOVIES} is absent (the shared corpora): nothing to measure")
        return
    task = prepare_task(args)
    sides = [x for x in args.sides.split(",") if x]
    if "peer" in sides and not peer_available(args.peer_python):
        print(f"peer not installed: {PEER_INSTALL}")
        sides.remove("peer")
    s = shapes(args)
    print(f"BERT-{args.size} ({s['layers']} layers, hidden {s['hidden']}, vocab {s['vocab']}) on movie-review polarity "
          f"({task['num_train']} train / {len(task['serving_sentences'])} dev sentences); device: CPU, "
          f"{os.cpu_count()} cores; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results = {"args": vars(args), "shapes": s}
    parts = args.parts.split(",")
    if "step" in parts:
        results["step"] = part_step(args, sides)
    if "serve" in parts:
        results["serve"] = part_serve(args, sides, task)
    with open(work(args, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
