"""Benchmark: ELECTRA pretraining data generation and the ELECTRA-small training step on CPU.

    nice -n 10 python benchmarks/bench_electra.py --part=datagen            # 5 and 20 MB, original and ours
    python benchmarks/bench_electra.py --part=datagen --mb=4 --small_mb=0 --original=skip   # quick, ours only
    python benchmarks/bench_electra.py --part=step --modes=fp32,bf16,fp32_xla,bf16_xla --batch_size=16 --steps=3

Datagen, same run: a plain corpus of at least `--mb` MB (20) and one of `--small_mb` MB (5) are built
from ../shared/corpora/en by `same_run.plain_corpus` (whole documents, one sentence per line, blank lines between
documents). google-research/electra's `build_pretraining_dataset.py` runs unchanged (../shared/originals, through
`same_run.original_cmd`: 1 process, --max-seq-length=128, --do-lower-case, blank lines separate documents) and ours
runs as a user types it (`python -m framework.datagen --problem=electra_pretrain`, 1 worker, then 2 on the big
corpus; the same settings; the overflow dropped as the original does), both through `same_run.run_measured`: a
fresh process each, so both include their imports (the original imports TensorFlow; our datagen on local files does not). The WordPiece vocab (30522 requested) is learned once by
our `prepare` from the small corpus and given to both sides (not timed).
Printed per run: wall s, CPU s of the process tree, corpus WordPiece tokens (counted once with our encoder) per
CPU-second and per wall-second, ours / original on the same corpus (per core = CPU-s ratio, wall ratio), peak RSS
of the process tree [largest process], examples written and the share of tokens the builder dropped. Then the
MARGINAL rate of each side (tokens of the big corpus minus the small one, over the CPU-s difference): the per-token
cost without the fixed start-up (TF import ~2.6 CPU-s each side), which is what a large corpus pays; and ours' peak
RSS on the small vs the big corpus (memory must not grow with the corpus; `--rss_mb=60` adds ours on 60 MB).
`--baseline_repo=DIR` also runs an older checkout of ours (e.g. the branch point) on the big corpus and says
whether its shards are byte-identical to today's.
Figures: benchmarks/README.md.

Step: ELECTRA-small (hidden 256, 12 layers, embedding 128, generator 64 wide) at L128 on one batch of the
records made above (random ids in Google's vocab layout without a corpus), written once to an .npz that both sides
read. Ours: as `trainers.core.Trainer` runs it (forward + backward + global-norm clipping + AdamW 5e-4,
benchmarks/lib/step_bench.py). Peer (`--sides`, default both; keras-hub 0.32.0 in .venv-bench, else "peer not
installed: <command>" and ours alone): two keras-hub `ElectraBackbone`s with the same sizes, MLM head tied to the
shared embedding, the same in-graph masking, Gumbel sampling, RTD loss and weights, Keras AdamW with our schedule
and clipping (`peer_step_child` says what differs). fp32 or mixed bf16 (`mixed_bfloat16` on the peer), with or
without XLA (jit_compile, both sides). Each side and mode runs in a fresh process (its own peak RSS); one warm-up
step (tracing/compilation) is excluded, the next `--steps` are timed (wall and CPU seconds); the share of the matmul
peak (measured in the same run) is model FLOPs per step / step wall / matmul FLOP/s; ours/peer ratios per mode.

    nice -n 10 python3 benchmarks/bench_electra.py --part=step --modes=fp32,bf16 --steps=3     # ours and keras-hub
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.lib import same_run  # noqa: E402  (one way to measure a side, run an original, build a corpus)
from benchmarks.lib.electra_sides import SETTINGS, content_tokens, run_original, run_ours  # noqa: E402,F401


def corpus_tokens(corpus: str, vocab: str) -> int:
    """WordPiece tokens of the corpus's non-empty lines with our encoder (the rates' numerator)."""
    from textrain.framework import corpus as corpus_lib
    from textrain.framework.encoders import WordpieceEncoder
    encoder = WordpieceEncoder(vocab, do_lower_case=True)
    return sum(len(ids) for doc in corpus_lib.read_documents([corpus]) for ids in encoder.encode_batch(doc))


def bench_datagen(args, work: str) -> str:
    """The same-run comparison; returns the data_dir of ours' 1-worker run on the big corpus (for the step)."""
    from textrain.problems.electra_pretrain import ElectraPretrain, ElectraPretrainHParams
    os.makedirs(work, exist_ok=True)
    sizes = [mb for mb in (args.small_mb, args.mb) if mb > 0]
    corpora = {mb: same_run.plain_corpus(os.path.join(work, f"en_{mb:g}mb.txt"), mb) for mb in sizes}
    vocab_dir = os.path.join(work, "vocab")
    start = time.time()
    problem = ElectraPretrain(ElectraPretrainHParams(input_file=corpora[sizes[0]]))
    problem.prepare(vocab_dir, "")
    vocab = problem.vocab_path(vocab_dir)
    print(f"vocab {vocab} learned from the {sizes[0]:g} MB corpus in {time.time() - start:.0f}s (not timed); "
          f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}; work dir {work}")
    tokens = {mb: corpus_tokens(path, vocab) for mb, path in corpora.items()}
    for mb, path in corpora.items():
        print(f"corpus {path}: {os.path.getsize(path) / 1e6:.1f} MB, {tokens[mb]:,} WordPiece tokens")
    rows: list[tuple[float, str, int, dict]] = []
    for mb in sizes:
        if args.original != "skip":
            rows.append((mb, "original", 1, run_original(corpora[mb], vocab, work, f"{mb:g}mb")))
        for w in ([1] if mb != args.mb else [int(x) for x in args.workers.split(",")]):
            rows.append((mb, "textrain", w, run_ours(corpora[mb], vocab, work, f"{mb:g}mb", w)))
            print(f"  ... {mb:g} MB textrain w{w}: {rows[-1][3]['cpu']:.1f} CPU-s", flush=True)
    print(f"\n{'corpus':>7s} {'side':9s} {'proc':>4s} {'wall s':>7s} {'CPU s':>6s} {'tok/CPU-s':>10s} "
          f"{'tok/wall-s':>10s} {'x orig/core':>11s} {'x orig wall':>11s} {'peak RSS MiB':>14s} {'examples':>8s} "
          f"{'dropped':>7s}")
    originals = {mb: r for mb, side, _, r in rows if side == "original"}
    for mb, side, w, r in rows:
        examples, kept = content_tokens(r["files"], SETTINGS["max_seq_length"])
        ref = originals.get(mb)
        per_core = f"{ref['cpu'] / r['cpu']:10.2f}x" if ref else f"{'-':>11s}"
        per_wall = f"{ref['wall'] / r['wall']:10.2f}x" if ref else f"{'-':>11s}"
        print(f"{mb:5g}MB {side:9s} {w:4d} {r['wall']:7.1f} {r['cpu']:6.1f} {tokens[mb] / r['cpu']:10,.0f} "
              f"{tokens[mb] / r['wall']:10,.0f} {per_core} {per_wall} {r['rss_mib']:7.0f} [{r['rss_single_mib']:4.0f}] "
              f"{examples:8d} {100 * (1 - kept / tokens[mb]):6.1f}%")
    print("(wall and CPU include every process's imports: TensorFlow for the original, not for our datagen on local files; 'x orig/core' = original CPU-s / ours on "
          "the same corpus; RSS: process tree [largest process]; the machine is shared: CPU-s are the stable figure)")
    if len(sizes) == 2:
        small, big = sizes
        one = {(mb, side): r for mb, side, w, r in rows if w == 1}
        print(f"\nmarginal rate, {small:g} -> {big:g} MB (start-up excluded: extra tokens / extra CPU-s):")
        marginal = {}
        for side in ("original", "textrain"):
            if (small, side) in one and (big, side) in one:
                extra = one[(big, side)]["cpu"] - one[(small, side)]["cpu"]
                marginal[side] = (tokens[big] - tokens[small]) / extra
                print(f"  {side:9s} {marginal[side]:12,.0f} tokens per CPU-second")
        if len(marginal) == 2:
            print(f"  ours / original per core, marginal: {marginal['textrain'] / marginal['original']:.2f}x")
        if (small, "textrain") in one and (big, "textrain") in one:
            print(f"  ours' peak RSS: {one[(small, 'textrain')]['rss_mib']:.0f} MiB on {small:g} MB, "
                  f"{one[(big, 'textrain')]['rss_mib']:.0f} MiB on {big:g} MB")
    for mb in [float(x) for x in args.rss_mb.split(",") if x]:  # memory on bigger corpora: ours only
        path = same_run.plain_corpus(os.path.join(work, f"en_{mb:g}mb.txt"), mb)
        r = run_ours(path, vocab, work, f"{mb:g}mb", 1)
        print(f"  ours on {os.path.getsize(path) / 1e6:.1f} MB, 1 worker: peak RSS {r['rss_mib']:.0f} MiB "
              f"[largest process {r['rss_single_mib']:.0f}], "
              f"{r['cpu']:.1f} CPU-s, wall {r['wall']:.1f}s")
    big_runs = [r for mb, side, w, r in rows if mb == args.mb and side == "textrain"]
    if args.baseline_repo and big_runs:  # an older checkout of ours, e.g. the branch point, on the big corpus
        import hashlib

        def digests(files: list[str]) -> list[str]:
            return [hashlib.sha256(open(f, "rb").read()).hexdigest() for f in files]
        r = run_ours(corpora[args.mb], vocab, work, f"{args.mb:g}mb", 1, repo=os.path.abspath(args.baseline_repo))
        print(f"  baseline {args.baseline_repo} on {args.mb:g} MB, 1 worker: {r['cpu']:.1f} CPU-s "
              f"({tokens[args.mb] / r['cpu']:,.0f} tokens/CPU-s; now {big_runs[0]['cpu']:.1f}), peak RSS "
              f"[largest] {r['rss_single_mib']:.0f} MiB (now {big_runs[0]['rss_single_mib']:.0f}); shards "
              f"{'byte-identical' if digests(r['files']) == digests(big_runs[0]['files']) else 'DIFFER'}")
    if len(big_runs) > 1:
        print(f"  workers on {args.mb:g} MB: " + ", ".join(
            f"w{w}: wall {r['wall']:.1f}s ({big_runs[0]['wall'] / r['wall']:.2f}x), CPU {r['cpu']:.1f}s"
            for (mb, side, w, r) in rows if mb == args.mb and side == "textrain"))
    return big_runs[0]["data_dir"] if big_runs else ""


def electra_step_flops(config, batch_size: int, seq_len: int = 128) -> float:
    """Model FLOPs of one ELECTRA training step (2 per multiply-add, backward = 2 x forward): generator and
    discriminator encoders, their embedding projections, the generator's MLM head on the masked slots and
    the discriminator's per-token head."""
    from textrain.models.electra import ElectraObjective

    def encoder(layers: int, h: int, inner: int) -> float:
        return layers * (batch_size * seq_len * (8 * h * h + 4 * h * inner) + batch_size * 4 * seq_len ** 2 * h)

    tokens, emb = batch_size * seq_len, config.embedding_width
    gen = config.generator_config()
    slots = ElectraObjective().max_predictions(seq_len)
    forward = (encoder(gen.num_hidden_layers, gen.hidden_size, gen.intermediate_size)
               + encoder(config.num_hidden_layers, config.hidden_size, config.intermediate_size)
               + tokens * 2 * emb * (gen.hidden_size + config.hidden_size)  # embeddings_project (both)
               + batch_size * slots * 2 * (gen.hidden_size * emb + emb * config.vocab_size)  # generator MLM head
               + tokens * 2 * (config.hidden_size ** 2 + config.hidden_size))  # discriminator head
    return 3.0 * forward


# ELECTRA-small (configure_pretraining.py): both sides are built from these numbers; ours checks its preset agrees.
SMALL = dict(hidden=256, layers=12, embedding=128, generator_hidden=64, heads=4, generator_heads=1,
             max_positions=512, mask_prob=0.15, disc_weight=50.0)
GOOGLE_SPECIAL_IDS = {"[PAD]": 0, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}  # bert/electra's released vocab


def step_batch(data_dir: str | None, batch_size: int):
    """(batch, vocab_size, special ids): the first batch of the records made above, else random ids."""
    import numpy as np
    import tensorflow as tf

    from textrain.framework.problem import DataParams
    from textrain.problems.electra_pretrain import ElectraPretrain

    if data_dir:
        problem = ElectraPretrain()
        settings = problem.read_manifest(data_dir)["settings"]
        batch = next(iter(problem.dataset("train", data_dir, DataParams(batch_size=batch_size, seed=0))))
        return batch, settings["vocab_size"], settings["special_ids"]
    vocab_size, special = 30522, GOOGLE_SPECIAL_IDS  # speed does not depend on the text
    rs = np.random.RandomState(0)
    ids = rs.randint(1000, vocab_size, size=(batch_size, 128)).astype(np.int32)
    ids[:, 0], ids[:, -1] = special["[CLS]"], special["[SEP]"]
    return ({"input_ids": tf.constant(ids), "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)},
            vocab_size, special)


def write_step_batch(data_dir: str | None, batch_size: int, path: str) -> str:
    """The one batch both sides step on, as an .npz (the peer's process never imports our package)."""
    import json

    import numpy as np
    batch, vocab_size, special = step_batch(data_dir, batch_size)
    np.savez(path, **{k: np.asarray(batch[k]).astype(np.int32) for k in ("input_ids", "input_mask", "segment_ids")},
             vocab_size=vocab_size, special_ids=json.dumps(special))
    return path


def read_step_batch(path: str):
    import json

    import numpy as np
    import tensorflow as tf
    data = np.load(path)
    batch = {k: tf.constant(data[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    return batch, int(data["vocab_size"]), json.loads(str(data["special_ids"]))


def timed(step, steps: int, profile: str) -> dict:
    """`steps` timed steps after one warm-up; with `profile`, one more step under the profiler (op types)."""
    from benchmarks.lib import step_bench
    result = step_bench.time_steps(step, 1, steps)
    if profile:
        result["profile"] = step_bench.summarise_profile(step_bench.profile_steps(step, profile))
    return result


def step_child(batch_file: str, mode: str, steps: int, profile: str = "") -> dict:
    """Ours in this (fresh) process: trainers.core.Trainer's step (benchmarks/lib/step_bench.py), AdamW 5e-4."""
    import shutil

    from benchmarks.lib import step_bench
    from textrain.models import electra

    batch, vocab_size, special = read_step_batch(batch_file)
    config = electra.ElectraConfig.preset("small", vocab_size=vocab_size)
    gen = config.generator_config()
    assert (config.hidden_size, config.num_hidden_layers, config.embedding_width, gen.hidden_size,
            config.num_attention_heads, gen.num_attention_heads) == tuple(
        SMALL[k] for k in ("hidden", "layers", "embedding", "generator_hidden", "heads", "generator_heads"))
    trainer, model_dir = step_bench.make_trainer(
        lambda: electra.ElectraPretrainer(config, special_ids=special), batch, precision=mode.split("_")[0],
        jit_compile=mode.endswith("_xla"), learning_rate=5e-4)
    try:
        return timed(step_bench.trainer_step_fn(trainer), steps, profile)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)


def peer_masking(ids, input_mask, num_predictions: int, special: dict):
    """The peer's dynamic masking, in the graph as ours: distinct random positions among the real tokens
    other than [CLS]/[SEP]/[MASK]/[PAD] (15 % of the real tokens, at most `num_predictions`), 85 % of them
    shown as [MASK]. Returns (masked ids, positions, original ids there, weights)."""
    import tensorflow as tf
    length = ids.shape[1]
    candidates = tf.cast(input_mask, tf.bool)
    for token in ("[PAD]", "[CLS]", "[SEP]", "[MASK]"):
        candidates &= tf.not_equal(ids, special[token])
    quota = tf.cast(tf.round(tf.reduce_sum(tf.cast(input_mask, tf.float32), 1) * SMALL["mask_prob"]), tf.int32)
    quota = tf.minimum(tf.clip_by_value(quota, 1, num_predictions), tf.reduce_sum(tf.cast(candidates, tf.int32), 1))
    _, positions = tf.math.top_k(tf.where(candidates, tf.random.uniform(tf.shape(ids)), -1.0), k=num_predictions)
    used = tf.sequence_mask(quota, num_predictions)
    positions = tf.where(used, positions, 0)
    labels = tf.where(used, tf.gather(ids, positions, batch_dims=1), 0)
    show = used & (tf.random.uniform(tf.shape(positions)) < 0.85)
    masked_here = tf.reduce_max(tf.one_hot(positions, length, dtype=tf.int32) * tf.cast(show, tf.int32)[..., None], 1)
    masked_ids = tf.where(masked_here > 0, special["[MASK]"], ids)
    return masked_ids, positions, labels, tf.cast(used, tf.float32)


def peer_step_child(batch_file: str, mode: str, steps: int, profile: str = "") -> dict:
    """keras-hub's side: two ElectraBackbones (generator, discriminator) with ELECTRA's heads and losses.

    - Discriminator: `ElectraBackbone(hidden 256, 12 layers, 4 heads, FFN 1024, embedding 128)`, called as
      keras-hub ships it; head Dense(256, gelu) -> Dense(1), sigmoid cross-entropy over the real tokens.
    - Generator: a second `ElectraBackbone(hidden 64, 12 layers, 1 head, FFN 256, embedding 128)`. An
      ElectraBackbone cannot take another backbone's embeddings, so the embeddings are shared as ours are
      by running the DISCRIMINATOR's embedding layers, then the generator backbone's own projection
      (128 -> 64) and its 12 TransformerEncoder layers (the generator backbone's own embedding tables exist
      but are not trained). Head: `keras_hub.layers.MaskedLMHead` tied to the discriminator's token
      embedding (dense 128 + LayerNorm + tied logits + bias), as ours.
    - Masking (`peer_masking`) and Gumbel-max sampling in the graph, loss = MLM + 50 x RTD, Keras AdamW
      5e-4 (our schedule, weight decay 0.01, global_clipnorm 1.0), one `tf.function` step.
    - What differs and cannot be removed: keras-hub's encoder layers use the tanh GELU (ours and the
      original: erf), Keras' AdamW has bias correction, the backbone computes its (unused) pooler.
    """
    import keras
    import keras_hub
    import tensorflow as tf

    from benchmarks.lib import peers

    precision, xla = mode.split("_")[0], mode.endswith("_xla")
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    batch, vocab_size, special = read_step_batch(batch_file)
    num_predictions = int((SMALL["mask_prob"] + 0.005) * batch["input_ids"].shape[1])
    init = keras.initializers.TruncatedNormal(stddev=0.02)

    def backbone(hidden: int, heads: int, name: str):
        return keras_hub.models.ElectraBackbone(
            vocab_size=vocab_size, num_layers=SMALL["layers"], num_heads=heads, hidden_dim=hidden,
            embedding_dim=SMALL["embedding"], intermediate_dim=4 * hidden, dropout=0.1,
            max_sequence_length=SMALL["max_positions"], name=name)

    disc = backbone(SMALL["hidden"], SMALL["heads"], "discriminator")
    gen = backbone(SMALL["generator_hidden"], SMALL["generator_heads"], "generator")
    policy = disc.dtype_policy
    gen_head = keras_hub.layers.MaskedLMHead(vocabulary_size=vocab_size, token_embedding=disc.token_embedding,
                                             intermediate_activation="gelu", kernel_initializer=init, dtype=policy)
    disc_dense = keras.layers.Dense(SMALL["hidden"], activation="gelu", kernel_initializer=init, dtype=policy)
    disc_logit = keras.layers.Dense(1, dtype=policy)

    def generator_output(ids, segments, mask, training):
        tokens = disc.token_embedding(ids)
        x = disc.embeddings_add((tokens, disc.position_embedding(tokens), disc.segment_embedding(segments)))
        x = disc.embeddings_dropout(disc.embeddings_layer_norm(x), training=training)
        x = gen.embeddings_projection(x)
        for layer in gen.transformer_layers:
            x = layer(x, padding_mask=mask, training=training)
        return x

    def loss_fn(features, training):
        ids, mask, segments = features["input_ids"], features["input_mask"], features["segment_ids"]
        masked_ids, positions, labels, weights = peer_masking(ids, mask, num_predictions, special)
        logits = tf.cast(gen_head(generator_output(masked_ids, segments, mask, training), mask_positions=positions),
                         tf.float32)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        mlm = tf.reduce_sum(ce * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
        gumbel = -tf.math.log(-tf.math.log(tf.random.uniform(tf.shape(logits)) + 1e-9) + 1e-9)
        sampled = tf.stop_gradient(tf.argmax(logits + gumbel, -1, output_type=tf.int32))
        hits = tf.one_hot(positions, ids.shape[1], dtype=tf.int32) * tf.cast(weights, tf.int32)[..., None]
        fake = tf.where(tf.reduce_max(hits, 1) > 0, tf.reduce_sum(hits * sampled[..., None], 1), ids)
        replaced = tf.cast(tf.not_equal(fake, ids), tf.float32)
        hidden = disc({"token_ids": fake, "segment_ids": segments, "padding_mask": mask},
                      training=training)["sequence_output"]
        disc_logits = tf.cast(tf.squeeze(disc_logit(disc_dense(hidden)), -1), tf.float32)
        real = tf.cast(mask, tf.float32)
        bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=replaced, logits=disc_logits)
        return mlm + SMALL["disc_weight"] * tf.reduce_sum(bce * real) / tf.reduce_sum(real)

    loss_fn({k: v[:2] for k, v in batch.items()}, training=False)  # builds every layer (eager, batch 2)
    variables = (disc.trainable_variables + gen.embeddings_projection.trainable_variables
                 + [v for layer in gen.transformer_layers for v in layer.trainable_variables]
                 + gen_head.trainable_variables + disc_dense.trainable_variables + disc_logit.trainable_variables)
    optimizer = peers.keras_optimizer(5e-4)
    optimizer.build(variables)

    @tf.function(jit_compile=xla)
    def train_step(features):
        with tf.GradientTape() as tape:
            loss = loss_fn(features, training=True)
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return timed(lambda: float(train_step(batch)), steps, profile)


def bench_step(data_dir: str | None, modes: list[str], batch_size: int, steps: int, sides_spec: str,
               work: str, profile: str = "") -> None:
    """Each mode and side in a fresh process (its own peak RSS), beside the matmul peak measured in this run."""
    from benchmarks.lib import peers, step_bench
    from textrain.models import electra
    sides = peers.choose_sides(sides_spec)
    batch_file = write_step_batch(data_dir, batch_size, os.path.join(work, "step_batch.npz"))
    vocab_size = read_step_batch(batch_file)[1]
    flops = electra_step_flops(electra.ElectraConfig.preset("small", vocab_size=vocab_size), batch_size)
    peak = step_bench.matmul_peak()
    print(f"\nELECTRA-small step (generator 64 wide + discriminator 256, embedding 128, 12 layers each), batch "
          f"{batch_size} x L128, vocab {vocab_size}, 1 warm-up + {steps} timed steps, each side and mode a fresh "
          f"process; model {flops / 1e9:,.0f} GFLOP/step; {peak['gpu'] or f'CPU, {os.cpu_count()} cores'}; measured "
          f"matmul peak fp32 {peak['fp32']:,.0f} GFLOP/s ({peak['fp32_cpu']:,.0f} per CPU-s), bf16 {peak['bf16']:,.0f} "
          f"GFLOP/s ({peak['bf16_cpu']:,.0f} per CPU-s)")
    print(peers.HEADER)
    for mode in modes:
        rows = {}
        for side in sides:
            python = peers.PEER_PYTHON if side == "peer" else sys.executable
            argv = [python, os.path.abspath(__file__), "--part=step", f"--step_child={side}:{mode}",
                    f"--steps={steps}", f"--step_batch_file={batch_file}"]
            if profile:
                argv.append(f"--profile={os.path.join(profile, f'{side}_{mode}')}")
            try:
                r = rows[side] = step_bench.run_child(argv)
            except RuntimeError as e:
                print(f"{mode:<10} {side:<16} FAILED: {str(e)[-1500:]}")
                continue
            label = "textrain" if side == "ours" else "keras-hub"
            print(peers.row(mode, label, r, batch_size, flops, peak, mode.split("_")[0]), flush=True)
            for op, ms, count in r.get("profile", []):
                print(f"    {op:<40} {ms:10.1f} ms  x{count}")
        if "ours" in rows and "peer" in rows:
            print(step_bench.ratio_line(mode, [rows["ours"]], [rows["peer"]], peers.GOAL), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["all", "datagen", "step"], default="all")
    parser.add_argument("--mb", type=float, default=20, help="datagen: the big corpus, MB of ../shared/corpora/en")
    parser.add_argument("--small_mb", type=float, default=5, help="datagen: the small corpus (0: none)")
    parser.add_argument("--workers", default="1,2", help="datagen: our worker counts on the big corpus")
    parser.add_argument("--original", choices=["auto", "skip"], default="auto", help="datagen: run the original")
    parser.add_argument("--baseline_repo", default="", help="datagen: also run ours from this checkout (e.g. "
                        "`git archive 13ae266 | tar -x -C DIR`) on the big corpus: CPU-s and identical shards")
    parser.add_argument("--rss_mb", default="", help="datagen: also run ours (1 worker) on corpora of these MB, "
                        "comma-separated, to show its peak RSS does not grow with the corpus")
    parser.add_argument("--modes", default="fp32,bf16,fp32_xla,bf16_xla")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--work_dir", default="", help="keep outputs here (default: a temporary folder)")
    parser.add_argument("--step_child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--sides", default="ours,peer", help="step: ours, peer (keras-hub, in .venv-bench) or both")
    parser.add_argument("--profile", default="", help="step: profile one more step of each side into this folder "
                        "and print the op types that took the time")
    parser.add_argument("--step_batch_file", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step_child:
        from benchmarks.lib import step_bench
        side, mode = args.step_child.split(":")
        child = peer_step_child if side == "peer" else step_child
        print(step_bench.child_result(child(args.step_batch_file, mode, args.steps, args.profile)), flush=True)
        return

    work = args.work_dir or tempfile.mkdtemp(prefix="bench_electra_")
    data_dir = None
    if args.part in ("all", "datagen"):
        if not os.path.isdir(same_run.CORPUS_EN):
            print(f"{same_run.CORPUS_EN} is absent (../shared/corpora not available): datagen skipped; "
                  f"the step runs on random ids")
        else:
            data_dir = bench_datagen(args, work)
    if args.part in ("all", "step"):
        bench_step(data_dir, [m for m in args.modes.split(",") if m], args.batch_size, args.steps, args.sides, work,
                   args.profile)


if __name__ == "__main__":
    main()
