"""The originals' launch flags, translated to ours: ONE thin layer applied to argv before absl parses.

A user's launch line for google-research/bert (create_pretraining_data.py, run_pretraining.py),
zihangdai/xlnet (data_utils.py, train_gpu.py) or google-research/electra (build_pretraining_dataset.py,
run_pretraining.py with `--hparams`) runs with only the binary name changed:

    textrain-datagen   <create_pretraining_data.py / data_utils.py / build_pretraining_dataset.py flags>
    textrain-train-gpu <run_pretraining.py / train_gpu.py flags>      (textrain-train-tpu: same flags)

`translate_argv(argv, side)` ("datagen" or "train") is called by the console entry points
(framework/datagen.py, trainers/launch.py). `ALIASES` is the whole table; docs/ORIGINAL_FLAGS.md shows it
and tests/test_original_flags.py checks that the two agree.

Decisions:
- Which original a line comes from is recognised by its flags (`ORIGINALS[...].signature`: e.g.
  `--output_file` is create_pretraining_data.py, `--record_info_dir` is XLNet's train_gpu.py,
  `--data-dir`/`--model-name` (both required there) ELECTRA's run_pretraining.py). `--hparams` alone is
  no signature: it is also tensor2tensor's comma-list override, which our trainers take as t2t-trainer
  does. Only that original's aliases apply, so a name that means different things in two originals
  (`--input_file`: text for create_pretraining_data.py, a record glob for run_pretraining.py;
  `--num_core_per_host`) is translated as its script meant it. A line with none of the signatures is
  ours and passes unchanged.
- `--problem` and `--model` are added (bert_pretrain/bert, xlnet_pretrain/xlnet, electra_pretrain/electra)
  unless given.
- The original's own defaults for settings whose default differs from ours (XLNet's learning rate 1e-4,
  ELECTRA's 5e-4 ...; data_utils.py's `--uncased=True`) are put BEFORE the user's flags, so the run
  behaves as the original would; what the user gave comes later and wins (absl: last value wins). On the
  training side data settings are never defaulted this way: they come from the data manifest.
- Paths: an original file name becomes the directory our sharded records live in: create_pretraining_data
  `--output_file=out/x.tfrecord` writes `out/bert_pretrain/...` (data_dir = the file's directory) and
  run_pretraining `--input_file=out/x.tfrecord` (or a glob, or comma list, in one directory) reads
  data_dir `out`. XLNet's `--save_dir=S` is data_dir S and train_gpu's `--record_info_dir=S/tfrecords`
  reads S. ELECTRA's `--output-dir=D/pretrain_tfrecords` is data_dir D/pretrain_tfrecords and
  run_pretraining `--data-dir=D --model-name=M` reads it and trains into D/models/M, as the original.
- A flag whose meaning we cannot keep is refused with one line saying what to do (`ValueError`; the
  entry points print it as `<prog>: error: ...`), never silently dropped; flags that only steered the
  original's machinery (`--master`, `--pass_id=0`, `--from_raw_text`) are dropped, as the table says.
- `--flagfile=` files are expanded first (absl's own reader), so original names work inside them too.
- ELECTRA's `build_pretraining_dataset.py` is argparse: dashed names and `--name value` are accepted,
  and `--blanks-separate-docs` takes argparse's `type=bool` meaning (any non-empty value is True).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable, Sequence

Translate = Callable[[str], list]

DATAGEN, TRAIN = "datagen", "train"


@dataclasses.dataclass(frozen=True)
class Original:
    script: str                 # repository/script, as the table names it
    side: str                   # datagen | train
    signature: tuple            # flags only this script has: seeing one selects it
    problem: str
    model: str | None
    defaults: tuple = ()        # our flags carrying the original's defaults (before the user's flags)


ORIGINALS = {
    "bert/create_pretraining_data.py": Original(
        "bert/create_pretraining_data.py", DATAGEN, ("output_file",), "bert_pretrain", None),
    "xlnet/data_utils.py": Original(
        "xlnet/data_utils.py", DATAGEN, ("save_dir", "input_glob", "sp_path"), "xlnet_pretrain", None,
        ("--uncased=True",)),  # data_utils.py's default (ours is cased); its other defaults equal ours
    "electra/build_pretraining_dataset.py": Original(
        "electra/build_pretraining_dataset.py", DATAGEN, ("corpus-dir", "output-dir"), "electra_pretrain", None),
    "bert/run_pretraining.py": Original(
        "bert/run_pretraining.py", TRAIN, ("output_dir", "input_file"), "bert_pretrain",
        "bert", ("--do_train=False", "--do_eval=False", "--learning_rate=5e-5", "--num_train_steps=100000", "--num_warmup_steps=10000",
                 "--train_batch_size=32", "--save_checkpoints_steps=1000", "--iterations_per_loop=1000",
                 "--max_eval_steps=100", "--optimizer=adamw", "--weight_decay=0.01", "--lr_decay=polynomial",
                 "--poly_power=1.0", "--adam_epsilon=1e-6")),
    "xlnet/train_gpu.py": Original(
        "xlnet/train_gpu.py", TRAIN, ("record_info_dir",), "xlnet_pretrain", "xlnet",
        ("--learning_rate=1e-4", "--clip_norm=1.0", "--min_lr_ratio=0.001", "--num_warmup_steps=0",
         "--adam_epsilon=1e-8", "--lr_decay=polynomial", "--weight_decay=0.0", "--optimizer=adam",
         "--train_batch_size=16", "--num_train_steps=100000", "--log_steps=1000", "--save_checkpoints_steps=1000",
         "--mem_len=0")),
    "electra/run_pretraining.py": Original(
        "electra/run_pretraining.py", TRAIN, ("data-dir", "model-name"), "electra_pretrain", "electra",
        ("--learning_rate=5e-4", "--lr_decay=polynomial", "--poly_power=1.0", "--weight_decay=0.01",
         "--num_warmup_steps=10000", "--iterations_per_loop=200", "--save_checkpoints_steps=1000",
         "--num_train_steps=1000000", "--max_eval_steps=100", "--model_size=small", "--train_batch_size=128",
         "--optimizer=adamw", "--adam_epsilon=1e-6")),
}


@dataclasses.dataclass(frozen=True)
class Alias:
    script: str
    original: str               # the original flag name (without dashes)
    ours: str                   # what it becomes, as the table says it
    translate: Translate        # value -> our argv entries
    is_bool: bool = False       # takes no separate value (`--flag`, `--noflag`, `--flag=true`)


class _Context:
    """Values an alias needs from other flags of the same line (ELECTRA's --data-dir + --model-name)."""

    def __init__(self, pairs: Sequence[tuple[str, str | None]]):
        self.values = {name: value for name, value in pairs}


def _same(name: str) -> Translate:
    return lambda v: [f"--{name}={v}"]


def _bool_same(name: str) -> Translate:
    return lambda v: [f"--{name}={_truth(v)}"]


def _truth(value: str | None) -> bool:
    if value is None:
        return True
    low = str(value).strip().lower()
    if low in ("1", "true", "t", "yes", "y"):
        return True
    if low in ("0", "false", "f", "no", "n"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _drop(v: str) -> list:
    return []


def _one_directory(value: str, flag: str) -> str:
    """The directory holding every path of a comma list of files/globs."""
    dirs = {os.path.dirname(p.strip().rstrip("/")) or "." for p in value.split(",") if p.strip()}
    if len(dirs) != 1:
        raise ValueError(f"--{flag}={value}: the records must be in one directory (textrain reads the "
                         f"directory textrain-datagen wrote); got {sorted(dirs)}")
    return dirs.pop()


def _record_info_dir(value: str) -> list:
    value = value.rstrip("/")
    return [f"--data_dir={os.path.dirname(value) if os.path.basename(value) == 'tfrecords' else value}"]


def _refuse_unless(expected: str, message: str) -> Translate:
    def check(v: str) -> list:
        if str(v).strip().lower() != expected:
            raise ValueError(message.format(v=v))
        return []
    return check


def _decay_method(v: str) -> list:
    table = {"poly": "polynomial", "cos": "cosine"}
    if v not in table:
        raise ValueError(f"--decay_method={v}: use poly or cos (as the original)")
    return [f"--lr_decay={table[v]}"]


def _num_tpu_cores(v: str) -> list:
    cores = int(v)
    per_host = min(cores, 8)  # a Cloud TPU host has 8 cores
    if cores % per_host:
        raise ValueError(f"--num_tpu_cores={v}: a multi-host TPU has a multiple of 8 cores")
    return [f"--num_core_per_host={per_host}", f"--num_hosts={cores // per_host}"]


# ------------------------------------------------------------------------------------- the table
_B_DATA, _X_DATA, _E_DATA = "bert/create_pretraining_data.py", "xlnet/data_utils.py", "electra/build_pretraining_dataset.py"
_B_RUN, _X_RUN, _E_RUN = "bert/run_pretraining.py", "xlnet/train_gpu.py", "electra/run_pretraining.py"

ALIASES: list[Alias] = [
    # BERT create_pretraining_data.py: the HParams of bert_pretrain carry the original names.
    Alias(_B_DATA, "input_file", "--input_file (same: comma-separated globs of text)", _same("input_file")),
    Alias(_B_DATA, "output_file", "--data_dir = the file's directory; shards + manifest in {dir}/bert_pretrain/",
          lambda v: [f"--data_dir={_one_directory(v, 'output_file')}"]),
    Alias(_B_DATA, "vocab_file", "--vocab_file (same)", _same("vocab_file")),
    Alias(_B_DATA, "do_lower_case", "--do_lower_case (same)", _bool_same("do_lower_case"), True),
    Alias(_B_DATA, "do_whole_word_mask", "--do_whole_word_mask (same)", _bool_same("do_whole_word_mask"), True),
    Alias(_B_DATA, "max_seq_length", "--max_seq_length (same)", _same("max_seq_length")),
    Alias(_B_DATA, "max_predictions_per_seq", "--max_predictions_per_seq (same)", _same("max_predictions_per_seq")),
    Alias(_B_DATA, "random_seed", "--random_seed (same; folded together with --seed)", _same("random_seed")),
    Alias(_B_DATA, "dupe_factor", "--dupe_factor (same)", _same("dupe_factor")),
    Alias(_B_DATA, "masked_lm_prob", "--masked_lm_prob (same)", _same("masked_lm_prob")),
    Alias(_B_DATA, "short_seq_prob", "--short_seq_prob (same)", _same("short_seq_prob")),
    # XLNet data_utils.py
    Alias(_X_DATA, "input_glob", "--input_file (a glob of text files)", _same("input_file")),
    Alias(_X_DATA, "sp_path", "--sp_model", _same("sp_model")),
    Alias(_X_DATA, "save_dir", "--data_dir (records in {save_dir}/xlnet_pretrain/, record_info json too)",
          _same("data_dir")),
    Alias(_X_DATA, "bsz_per_host", "--bsz_per_host (same)", _same("bsz_per_host")),
    Alias(_X_DATA, "num_core_per_host", "--num_core_per_host (same)", _same("num_core_per_host")),
    Alias(_X_DATA, "seq_len", "--seq_len (same)", _same("seq_len")),
    Alias(_X_DATA, "reuse_len", "--reuse_len (same)", _same("reuse_len")),
    Alias(_X_DATA, "num_predict", "--num_predict (same)", _same("num_predict")),
    Alias(_X_DATA, "mask_alpha", "--mask_alpha (same)", _same("mask_alpha")),
    Alias(_X_DATA, "mask_beta", "--mask_beta (same)", _same("mask_beta")),
    Alias(_X_DATA, "bi_data", "--bi_data (same)", _bool_same("bi_data"), True),
    Alias(_X_DATA, "uncased", "--uncased (same)", _bool_same("uncased"), True),
    Alias(_X_DATA, "use_eod", "--use_eod (same)", _bool_same("use_eod"), True),
    Alias(_X_DATA, "num_passes", "--num_passes (same; all passes in one run)", _same("num_passes")),
    Alias(_X_DATA, "use_tpu", "dropped: the original forces 1 core without TPU; ours lays every core's "
          "rows out for any --num_core_per_host, so give the number of GPUs/cores you train on", _drop, True),
    Alias(_X_DATA, "from_raw_text", "dropped (must be true: we read raw text)",
          _refuse_unless("true", "--from_raw_text={v}: only raw text input is supported")),
    Alias(_X_DATA, "split", "train only (every split is made in one run; dev text: --dev_input_file)",
          _refuse_unless("train", "--split={v}: textrain-datagen makes every split in one run; give the dev "
                                  "text as --dev_input_file")),
    Alias(_X_DATA, "pass_id", "dropped when 0 (passes: --num_passes)",
          _refuse_unless("0", "--pass_id={v}: every pass is made in one run; use --num_passes")),
    Alias(_X_DATA, "task", "--task_id", _same("task_id")),
    Alias(_X_DATA, "num_task", "--num_tasks", _same("num_tasks")),
    # ELECTRA build_pretraining_dataset.py (argparse)
    Alias(_E_DATA, "corpus-dir", "--input_file={dir}/* (every file of the directory, as the original)",
          lambda v: [f"--input_file={v.rstrip('/')}/*"]),
    Alias(_E_DATA, "vocab-file", "--vocab_file", _same("vocab_file")),
    Alias(_E_DATA, "output-dir", "--data_dir (records in {output-dir}/electra_pretrain/)", _same("data_dir")),
    Alias(_E_DATA, "max-seq-length", "--max_seq_length", _same("max_seq_length")),
    Alias(_E_DATA, "num-processes", "--num_workers", _same("num_workers")),
    Alias(_E_DATA, "blanks-separate-docs", "--blanks_separate_docs (argparse type=bool: any non-empty value is true)",
          lambda v: [f"--blanks_separate_docs={bool(v)}"]),
    Alias(_E_DATA, "do-lower-case", "--do_lower_case", lambda v: ["--do_lower_case"], True),
    Alias(_E_DATA, "no-lower-case", "--nodo_lower_case", lambda v: ["--nodo_lower_case"], True),
    Alias(_E_DATA, "do-strip-accents", "--strip_accents", lambda v: ["--strip_accents"], True),
    Alias(_E_DATA, "no-strip-accents", "--nostrip_accents", lambda v: ["--nostrip_accents"], True),
    # BERT run_pretraining.py
    Alias(_B_RUN, "input_file", "--data_dir = the directory of the record file/glob/comma list",
          lambda v: [f"--data_dir={_one_directory(v, 'input_file')}"]),
    Alias(_B_RUN, "output_dir", "--model_dir", _same("model_dir")),
    Alias(_B_RUN, "bert_config_file", "--bert_config_file (same)", _same("bert_config_file")),
    Alias(_B_RUN, "init_checkpoint", "--init_checkpoint (same; TF1 release checkpoints load by name)",
          _same("init_checkpoint")),
    Alias(_B_RUN, "do_train", "--do_train (same)", _bool_same("do_train"), True),
    Alias(_B_RUN, "do_eval", "--do_eval (same)", _bool_same("do_eval"), True),
    Alias(_B_RUN, "max_seq_length", "--max_seq_length (same; checked against the data)", _same("max_seq_length")),
    Alias(_B_RUN, "max_predictions_per_seq", "--max_predictions_per_seq (same; checked)",
          _same("max_predictions_per_seq")),
    Alias(_B_RUN, "train_batch_size", "--train_batch_size (same: global)", _same("train_batch_size")),
    Alias(_B_RUN, "eval_batch_size", "--eval_batch_size (same)", _same("eval_batch_size")),
    Alias(_B_RUN, "learning_rate", "--learning_rate (same)", _same("learning_rate")),
    Alias(_B_RUN, "num_train_steps", "--num_train_steps (same)", _same("num_train_steps")),
    Alias(_B_RUN, "num_warmup_steps", "--num_warmup_steps (same)", _same("num_warmup_steps")),
    Alias(_B_RUN, "save_checkpoints_steps", "--save_checkpoints_steps (same)", _same("save_checkpoints_steps")),
    Alias(_B_RUN, "iterations_per_loop", "--iterations_per_loop (same: steps per device loop)",
          _same("iterations_per_loop")),
    Alias(_B_RUN, "max_eval_steps", "--max_eval_steps (same)", _same("max_eval_steps")),
    Alias(_B_RUN, "use_tpu", "--use_tpu (same)", _bool_same("use_tpu"), True),
    Alias(_B_RUN, "tpu_name", "--tpu", _same("tpu")),
    Alias(_B_RUN, "tpu_zone", "--tpu_zone (same)", _same("tpu_zone")),
    Alias(_B_RUN, "gcp_project", "--gcp_project (same)", _same("gcp_project")),
    Alias(_B_RUN, "master", "dropped (the TPU is found from --tpu)", _drop),
    Alias(_B_RUN, "num_tpu_cores", "--num_core_per_host=min(N, 8) --num_hosts=N/8", _num_tpu_cores),
    # XLNet train_gpu.py
    Alias(_X_RUN, "record_info_dir", "--data_dir = the directory above tfrecords/ (data_utils' --save_dir)",
          _record_info_dir),
    Alias(_X_RUN, "model_dir", "--model_dir (same)", _same("model_dir")),
    Alias(_X_RUN, "init_checkpoint", "--init_checkpoint (same)", _same("init_checkpoint")),
    Alias(_X_RUN, "num_hosts", "--num_hosts (same)", _same("num_hosts")),
    Alias(_X_RUN, "num_core_per_host", "--num_core_per_host: GPUs per host (sets --num_gpus; checked against "
          "the data's cores)", _same("num_core_per_host")),
    Alias(_X_RUN, "use_tpu", "--use_tpu (same)", _bool_same("use_tpu"), True),
    Alias(_X_RUN, "num_passes", "--num_passes (same; checked against the data)", _same("num_passes")),
    Alias(_X_RUN, "learning_rate", "--learning_rate (same)", _same("learning_rate")),
    Alias(_X_RUN, "clip", "--clip_norm", _same("clip_norm")),
    Alias(_X_RUN, "min_lr_ratio", "--min_lr_ratio (same)", _same("min_lr_ratio")),
    Alias(_X_RUN, "warmup_steps", "--num_warmup_steps", _same("num_warmup_steps")),
    Alias(_X_RUN, "adam_epsilon", "--adam_epsilon (same)", _same("adam_epsilon")),
    Alias(_X_RUN, "decay_method", "--lr_decay: poly -> polynomial, cos -> cosine", _decay_method),
    Alias(_X_RUN, "weight_decay", "--weight_decay (same)", _same("weight_decay")),
    Alias(_X_RUN, "train_batch_size", "--train_batch_size (per host in the original = global on one host)",
          _same("train_batch_size")),
    Alias(_X_RUN, "train_steps", "--num_train_steps", _same("num_train_steps")),
    Alias(_X_RUN, "iterations", "--log_steps (the original's log interval)", _same("log_steps")),
    Alias(_X_RUN, "save_steps", "--save_checkpoints_steps", _same("save_checkpoints_steps")),
    Alias(_X_RUN, "seq_len", "--seq_len (same; checked)", _same("seq_len")),
    Alias(_X_RUN, "reuse_len", "--reuse_len (same; checked)", _same("reuse_len")),
    Alias(_X_RUN, "bi_data", "--bi_data (same; checked)", _bool_same("bi_data"), True),
    Alias(_X_RUN, "mask_alpha", "--mask_alpha (same; checked)", _same("mask_alpha")),
    Alias(_X_RUN, "mask_beta", "--mask_beta (same; checked)", _same("mask_beta")),
    Alias(_X_RUN, "num_predict", "--num_predict (same; checked)", _same("num_predict")),
    Alias(_X_RUN, "perm_size", "--perm_size (same)", _same("perm_size")),
    Alias(_X_RUN, "uncased", "--uncased (same; checked)", _bool_same("uncased"), True),
    Alias(_X_RUN, "n_token", "--n_token (same)", _same("n_token")),
    Alias(_X_RUN, "mem_len", "--mem_len (same)", _same("mem_len")),
    Alias(_X_RUN, "same_length", "--same_length (same)", _bool_same("same_length"), True),
    Alias(_X_RUN, "clamp_len", "--clamp_len (same)", _same("clamp_len")),
    Alias(_X_RUN, "n_layer", "--n_layer (same)", _same("n_layer")),
    Alias(_X_RUN, "d_model", "--d_model (same)", _same("d_model")),
    Alias(_X_RUN, "d_embed", "--d_embed (same)", _same("d_embed")),
    Alias(_X_RUN, "n_head", "--n_head (same)", _same("n_head")),
    Alias(_X_RUN, "d_head", "--d_head (same)", _same("d_head")),
    Alias(_X_RUN, "d_inner", "--d_inner (same)", _same("d_inner")),
    Alias(_X_RUN, "dropout", "--dropout (same)", _same("dropout")),
    Alias(_X_RUN, "dropatt", "--dropatt (same)", _same("dropatt")),
    Alias(_X_RUN, "untie_r", "--untie_r (same)", _bool_same("untie_r"), True),
    Alias(_X_RUN, "summary_type", "dropped (a fine-tuning setting; pretraining does not read it)", _drop),
    Alias(_X_RUN, "ff_activation", "--ff_activation (same)", _same("ff_activation")),
    Alias(_X_RUN, "use_bfloat16", "--use_bfloat16 (same: --precision=bf16)", _bool_same("use_bfloat16"), True),
    Alias(_X_RUN, "init", "--init (same)", _same("init")),
    Alias(_X_RUN, "init_std", "--init_std (same)", _same("init_std")),
    Alias(_X_RUN, "init_range", "--init_range (same)", _same("init_range")),
    Alias(_X_RUN, "pass_id", "dropped when 0 (every pass is in the data)",
          _refuse_unless("0", "--pass_id={v}: the records hold every pass; use --num_passes")),
    Alias(_X_RUN, "task", "dropped (multi-worker: TF_CONFIG)", _drop),
    # ELECTRA run_pretraining.py (the settings are in --hparams: see HPARAMS below)
    Alias(_E_RUN, "data-dir", "--data_dir={data-dir}/pretrain_tfrecords; --model_dir={data-dir}/models/{model-name}",
          lambda v: []),  # resolved with --model-name in translate_argv
    Alias(_E_RUN, "model-name", "(with --data-dir: the model_dir)", lambda v: []),
    Alias(_E_RUN, "hparams", "JSON (or a .json file): each key as in the HPARAMS table", lambda v: _hparams(v)),
]

# ELECTRA's --hparams keys (configure_pretraining.PretrainingConfig) -> our flags.
HPARAMS: dict[str, tuple[str, Callable[[object], list]]] = {
    "do_train": ("--do_train", lambda v: [f"--do_train={bool(v)}"]),
    "do_eval": ("--do_eval", lambda v: [f"--do_eval={bool(v)}"]),
    "electra_objective": ("must be true (the BERT objective: --model=bert)", lambda v: _require(
        "electra_objective", v, True, "train the BERT objective with --model=bert on bert_pretrain data")),
    "gen_weight": ("--gen_weight", lambda v: [f"--gen_weight={v}"]),
    "disc_weight": ("--disc_weight", lambda v: [f"--disc_weight={v}"]),
    "mask_prob": ("--mask_prob", lambda v: [f"--mask_prob={v}"]),
    "learning_rate": ("--learning_rate", lambda v: [f"--learning_rate={v}"]),
    "lr_decay_power": ("--lr_decay=polynomial --poly_power", lambda v: ["--lr_decay=polynomial", f"--poly_power={v}"]),
    "weight_decay_rate": ("--weight_decay", lambda v: [f"--weight_decay={v}"]),
    "num_warmup_steps": ("--num_warmup_steps", lambda v: [f"--num_warmup_steps={v}"]),
    "iterations_per_loop": ("--iterations_per_loop", lambda v: [f"--iterations_per_loop={v}"]),
    "save_checkpoints_steps": ("--save_checkpoints_steps", lambda v: [f"--save_checkpoints_steps={v}"]),
    "num_train_steps": ("--num_train_steps", lambda v: [f"--num_train_steps={v}"]),
    "num_eval_steps": ("--max_eval_steps", lambda v: [f"--max_eval_steps={v}"]),
    "model_size": ("--model_size", lambda v: [f"--model_size={v}"]),
    "model_hparam_overrides": ("must be {} (give a BERT-format config as --electra_config_file)",
                               lambda v: _require("model_hparam_overrides", v, {},
                                                  "write the discriminator config JSON and pass --electra_config_file")),
    "embedding_size": ("--embedding_size", lambda v: [] if v is None else [f"--embedding_size={v}"]),
    "vocab_size": ("--vocab_size", lambda v: [f"--vocab_size={v}"]),
    "do_lower_case": ("--do_lower_case (checked against the data)", lambda v: [f"--do_lower_case={bool(v)}"]),
    "uniform_generator": ("must be false", lambda v: _require("uniform_generator", v, False,
                                                              "a uniform generator is not implemented")),
    "untied_generator_embeddings": ("--untied_generator_embeddings",
                                    lambda v: [f"--untied_generator_embeddings={bool(v)}"]),
    "untied_generator": ("must be true (separate generator weights)", lambda v: _require(
        "untied_generator", v, True, "a generator sharing all discriminator weights is not implemented")),
    "generator_layers": ("--generator_layers", lambda v: [f"--generator_layers={v}"]),
    "generator_hidden_size": ("--generator_hidden_size", lambda v: [f"--generator_hidden_size={v}"]),
    "disallow_correct": ("--disallow_correct", lambda v: [f"--disallow_correct={bool(v)}"]),
    "temperature": ("--temperature", lambda v: [f"--temperature={v}"]),
    "max_seq_length": ("--max_seq_length (checked against the data)", lambda v: [f"--max_seq_length={v}"]),
    "train_batch_size": ("--train_batch_size", lambda v: [f"--train_batch_size={v}"]),
    "eval_batch_size": ("--eval_batch_size", lambda v: [f"--eval_batch_size={v}"]),
    "use_tpu": ("--use_tpu", lambda v: [f"--use_tpu={bool(v)}"]),
    "num_tpu_cores": ("--num_core_per_host=min(N, 8) --num_hosts=N/8", lambda v: _num_tpu_cores(str(v))),
    "tpu_job_name": ("dropped", lambda v: []),
    "tpu_name": ("--tpu", lambda v: [] if v is None else [f"--tpu={v}"]),
    "tpu_zone": ("--tpu_zone", lambda v: [] if v is None else [f"--tpu_zone={v}"]),
    "gcp_project": ("--gcp_project", lambda v: [] if v is None else [f"--gcp_project={v}"]),
    "debug": ("true: --train_batch_size=8 --num_train_steps=20 --iterations_per_loop=1 (before the other keys)",
              lambda v: ["--train_batch_size=8", "--num_train_steps=20", "--iterations_per_loop=1",
                         "--max_eval_steps=2"] if v else []),
}


def _require(key: str, value: object, expected: object, what: str) -> list:
    if value != expected:
        raise ValueError(f"--hparams {key}={json.dumps(value)} is not supported: {what}")
    return []


def _hparams(text: str) -> list:
    """ELECTRA's --hparams: a JSON object, or the path of a .json file (as the original)."""
    if text.strip().endswith(".json"):
        import tensorflow as tf

        with tf.io.gfile.GFile(text) as f:
            text = f.read()
    try:
        values = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--hparams is not valid JSON ({e})") from None
    unknown = sorted(set(values) - set(HPARAMS))
    if unknown:
        raise ValueError(f"--hparams: unknown key(s) {', '.join(unknown)} (known: see docs/ORIGINAL_FLAGS.md)")
    out = HPARAMS["debug"][1](values.get("debug", False))  # debug sets defaults; the other keys win
    for key, value in values.items():
        if key != "debug":
            out += HPARAMS[key][1](value)
    return out


# ------------------------------------------------------------------------------------ translation
def _split(token: str) -> tuple[str, str | None]:
    body = token[2:]
    name, eq, value = body.partition("=")
    return name, (value if eq else None)


def detect(argv: Sequence[str], side: str) -> Original | None:
    """The original whose signature flags appear in argv (or None: our own flags)."""
    names = {_split(t)[0] for t in argv if t.startswith("--")}
    for original in ORIGINALS.values():
        if original.side == side and names & set(original.signature):
            return original
    return None


def _expand_flagfiles(argv: list[str]) -> list[str]:
    if not any(t.startswith("--flagfile") for t in argv):
        return argv
    from absl import flags

    return flags.FLAGS.read_flags_from_files(argv, force_gnu=False)


def translate_argv(argv: Sequence[str], side: str) -> list[str]:
    """argv with one original's flags replaced by ours (see the module docstring); ValueError if refused."""
    argv = _expand_flagfiles(list(argv))
    original = detect(argv[1:], side)
    if original is None:
        return list(argv)
    table = {a.original: a for a in ALIASES if a.script == original.script}
    given_ours = {_split(t)[0] for t in argv[1:] if t.startswith("--")}
    out: list[str] = [argv[0], *original.defaults]
    pairs: list[tuple[str, str | None]] = []
    i = 1
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--"):
            out.append(token)
            continue
        name, value = _split(token)
        alias = table.get(name)
        negated = alias is None and name.startswith("no") and table.get(name[2:]) is not None \
            and table[name[2:]].is_bool
        if negated:
            alias, value = table[name[2:]], "false"
        if alias is None:
            out.append(token)
            continue
        if value is None and not alias.is_bool:
            if i >= len(argv):
                raise ValueError(f"--{name} needs a value")
            value = argv[i]
            i += 1
        elif value is None and alias.is_bool and i < len(argv) and not argv[i].startswith("--") \
                and argv[i].lower() in ("true", "false"):  # `--flag True` (python-fire / argparse habits)
            value = argv[i]
            i += 1
        pairs.append((name, value))
        try:
            out += alias.translate(value)
        except ValueError as e:
            message = str(e)
            raise ValueError(message if message.startswith("--") else f"--{name}={value}: {message}") from None
    if original.script == _E_RUN:
        out += _electra_dirs(_Context(pairs))
    if "problem" not in given_ours:
        out.append(f"--problem={original.problem}")
    if original.model and "model" not in given_ours:
        out.append(f"--model={original.model}")
    return out


def _electra_dirs(ctx: _Context) -> list[str]:
    data_dir, name = ctx.values.get("data-dir"), ctx.values.get("model-name")
    if data_dir is None or name is None:
        raise ValueError("ELECTRA's run_pretraining.py needs both --data-dir and --model-name")
    data_dir = data_dir.rstrip("/")
    return [f"--data_dir={data_dir}/pretrain_tfrecords", f"--model_dir={data_dir}/models/{name}"]


def markdown_table() -> str:
    """The table of docs/ORIGINAL_FLAGS.md (tests check the document holds exactly these rows)."""
    lines = ["| original | flag | textrain |", "|---|---|---|"]
    for a in ALIASES:
        lines.append(f"| {a.script} | `--{a.original}` | {a.ours} |")
    lines += ["", "| ELECTRA `--hparams` key | textrain |", "|---|---|"]
    for key, (ours, _) in HPARAMS.items():
        lines.append(f"| `{key}` | {ours} |")
    return "\n".join(lines)
