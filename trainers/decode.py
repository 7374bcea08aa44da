"""textrain-decode: translate lines of text with a trained Text2Text model (tensor2tensor's t2t-decoder).

    textrain-decode --problem=translate_enzh_sub8k --data_dir=data --model=transformer \
        --hparams_set=transformer_small --model_dir=runs/t \
        --decode_from_file=dev.en --decode_to_file=dev.hyp.zh --reference_file=dev.zh

Decisions:
- Any file of source lines (or stdin) works: each line is encoded with the problem's `inputs`
  encoder, EOS appended (as the records were made), cut to the hparams' max_length; the output ids are
  cut at the first EOS and detokenised with the `targets` encoder. One output line per input line, in
  the input's order (an empty line gives a translation of EOS alone, as t2t does).
- Batched: lines are sorted by length, so a batch pads little, decoded `--decode_batch_size` at a time,
  and put back in order. The search is one tf.function over dynamic shapes (one trace for any batch):
  greedy for `--beam_size=1`, else beam search with t2t's length penalty (models/beam_search.py), at most
  input length + `--extra_length` tokens.
- Weights: `--checkpoint_path` (a checkpoint prefix or a directory, e.g. the output of
  textrain-avg-checkpoints), else the latest in `--model_dir`. The model is built as the trainer built it
  (same `--hparams_set` / `--hparams`); a checkpoint whose variables do not match is a one-line error
  saying so. Only the model is read (optimizer state is ignored).
- `--reference_file`: sacreBLEU (framework/bleu.py; `zh` tokenisation when the problem's target
  language is Chinese) is printed to stderr and, with `--decode_to_file`, written beside it as
  `{decode_to_file}.bleu` — printed last so stdout stays translations only.
- The output file is written to a temporary name and renamed: an interrupted run leaves nothing.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from typing import Any, Sequence

from absl import flags

from textrain.framework import lazy_tf

FLAGS = flags.FLAGS

REQUIRED = ("problem", "data_dir", "model")


def read_lines(path: str | None) -> list[str]:
    """Lines without their newline, from a (gs://) file or stdin."""
    import tensorflow as tf

    from textrain.framework.errors import UserError

    if not path:
        return [line.rstrip("\n") for line in sys.stdin]
    if not tf.io.gfile.exists(path):
        raise UserError(f"{path} does not exist")
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def write_lines_atomic(path: str, lines: Sequence[str]) -> None:
    import tensorflow as tf

    parent = os.path.dirname(path)
    if parent and not tf.io.gfile.exists(parent):
        tf.io.gfile.makedirs(parent)
    tmp = f"{path}.incomplete-{uuid.uuid4().hex[:8]}"
    try:
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        tf.io.gfile.rename(tmp, path, overwrite=True)
    finally:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.remove(tmp)


def resolve_checkpoint(checkpoint_path: str | None, model_dir: str | None) -> str:
    import tensorflow as tf

    from textrain.framework.errors import UserError

    for where, flag in ((checkpoint_path, "--checkpoint_path"), (model_dir, "--model_dir")):
        if not where:
            continue
        if tf.io.gfile.isdir(where):
            latest = tf.train.latest_checkpoint(where)
            if not latest:
                raise UserError(f"{flag}={where} holds no checkpoint")
            return latest
        if tf.io.gfile.exists(where + ".index"):
            return where
        raise UserError(f"{flag}={where} is neither a checkpoint prefix nor a directory of checkpoints")
    raise UserError("give --checkpoint_path or --model_dir")


def restore_model(model: Any, path: str) -> None:
    """Read only the model's variables; every variable of the model must be in the checkpoint."""
    import tensorflow as tf

    from textrain.framework.errors import UserError

    try:
        status = tf.train.Checkpoint(model=model).read(path)
        status.expect_partial()
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise UserError(f"{path} does not hold this model's variables (train and decode with the same "
                        f"--model, --hparams_set and --hparams): {str(e).splitlines()[0][:300]}") from None


def make_translate_fn(model: Any, beam_size: int, alpha: float):
    """One tf.function for every batch shape: (inputs [B, L] int32, decode_length) -> ids [B, T]."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)])
    def translate(inputs, decode_length):
        ids, _ = model.infer(inputs, decode_length, beam_size=beam_size, alpha=alpha)
        return ids

    return translate


def translate_lines(lines: Sequence[str], model: Any, input_encoder: Any, target_encoder: Any, *,
                    beam_size: int, alpha: float, batch_size: int, max_length: int, extra_length: int
                    ) -> list[str]:
    """Translate `lines` (batched, sorted by length); one output string per line, in order."""
    import numpy as np

    from textrain.framework.encoders import EOS_ID

    encoded = []
    for line in lines:
        ids = input_encoder.encode(line)
        if max_length > 0:
            ids = ids[:max_length - 1]
        encoded.append(ids + [EOS_ID])
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
    translate = make_translate_fn(model, beam_size, alpha)
    outputs: list[str] = [""] * len(lines)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        width = max(len(encoded[i]) for i in chunk)
        batch = np.zeros([len(chunk), width], np.int32)
        for row, i in enumerate(chunk):
            batch[row, :len(encoded[i])] = encoded[i]
        ids = translate(batch, np.int32(width + extra_length)).numpy()
        for row, i in enumerate(chunk):
            out = ids[row].tolist()
            if EOS_ID in out:
                out = out[:out.index(EOS_ID)]
            outputs[i] = target_encoder.decode([t for t in out if t != 0])
    return outputs


def main(argv: list[str]) -> None:
    del argv
    from absl import app

    missing = [f"--{n}" for n in REQUIRED if not FLAGS[n].value]
    if missing:
        raise app.UsageError(f"missing required flag(s): {', '.join(missing)}")
    from textrain.framework import bleu, errors, registry
    from textrain.framework.flags import given_flags
    from textrain.models.base import Seq2SeqModel
    from textrain.trainers.run import build_model, build_problem
    from textrain.trainers.run_spec import ProblemSpec
    from textrain.trainers.trainer_flags import model_settings_from_flags

    hparams_cls = registry.problems.get(FLAGS.problem).HParams
    names = [f.name for f in dataclasses.fields(hparams_cls)] if dataclasses.is_dataclass(hparams_cls) else []
    try:  # the problem as the trainer read it: the manifest's settings, then the flags given
        problem, manifest = build_problem(ProblemSpec(FLAGS.problem, given_flags(names), from_manifest=True),
                                          FLAGS.data_dir)
        encoders = problem.feature_encoders(FLAGS.data_dir)
    except (ValueError, FileNotFoundError) as e:
        raise errors.UserError(str(e)) from None
    if "inputs" not in encoders or "targets" not in encoders:
        raise errors.UserError(f"--problem={FLAGS.problem} is not a Text2Text problem (no inputs/targets encoders)")
    model = build_model(FLAGS.model, model_settings_from_flags(FLAGS), manifest)  # as the trainer built it
    if not isinstance(model, Seq2SeqModel):
        raise errors.UserError(f"--model={FLAGS.model} cannot decode (it has no infer method)")
    path = resolve_checkpoint(FLAGS.checkpoint_path, FLAGS.model_dir)
    restore_model(model, path)
    hp = model.hparams
    pick = lambda flag, default: flag if flag is not None else default  # noqa: E731
    beam_size, alpha = pick(FLAGS.beam_size, hp.beam_size), pick(FLAGS.alpha, hp.alpha)
    extra_length = pick(FLAGS.extra_length, hp.extra_length)
    max_length = FLAGS.max_length or hp.max_length
    if beam_size < 1 or FLAGS.decode_batch_size < 1:
        raise errors.UserError("--beam_size and --decode_batch_size must be >= 1")

    lines = read_lines(FLAGS.decode_from_file)
    references = read_lines(FLAGS.reference_file) if FLAGS.reference_file else None
    if references is not None and len(references) != len(lines):
        raise errors.UserError(f"--reference_file={FLAGS.reference_file} has {len(references)} lines but the "
                               f"input has {len(lines)}")
    print(f"textrain-decode: {len(lines)} lines, checkpoint {path}, beam_size {beam_size}, alpha {alpha}",
          file=sys.stderr, flush=True)
    outputs = translate_lines(lines, model, encoders["inputs"], encoders["targets"], beam_size=beam_size,
                              alpha=alpha, batch_size=FLAGS.decode_batch_size, max_length=max_length,
                              extra_length=extra_length)
    if FLAGS.decode_to_file:
        write_lines_atomic(FLAGS.decode_to_file, outputs)
    else:
        sys.stdout.write("".join(line + "\n" for line in outputs))
        sys.stdout.flush()
    if references is not None:
        score = bleu.corpus_bleu(outputs, references, problem.target_lang)
        report = f"{score}\nsignature: {score.signature}"
        print(report, file=sys.stderr, flush=True)
        if FLAGS.decode_to_file:
            write_lines_atomic(FLAGS.decode_to_file + ".bleu", [report])


def define_all_flags(argv: list[str]) -> None:
    from textrain.framework import registry
    from textrain.framework.flags import define_problem_flags
    from textrain.trainers.trainer_flags import define_decode_flags, define_trainer_flags

    registry.import_builtins()
    registry.import_usr_dir(registry.usr_dir_from_argv(argv))
    define_trainer_flags()
    define_decode_flags()
    define_problem_flags()


def run() -> None:
    """Console entry point `textrain-decode`."""
    lazy_tf.quiet_start(sys.argv)
    sys.path.insert(0, os.getcwd())
    define_all_flags(sys.argv)
    from textrain.framework import cli

    cli.run_main("textrain-decode", main)


if __name__ == "__main__":
    run()
