#!/usr/bin/env bash
# The main job on the bundled public-domain sample (tests/data/austen_emma.txt, Jane Austen's Emma):
# install -> bert_pretrain datagen -> a short pretraining of a tiny BERT -> fine-tuning it on a labelled
# sample made from the same text (is a sentence speech or narration? quote marks removed) -> evaluation ->
# export of a SavedModel -> one raw sentence classified by the SavedModel -> the fine-tuned model written in
# Hugging Face format (textrain-convert); each step printing its figures.
# Everything lands in demo_out/ (ignored by git); re-running reuses the finished steps.
set -euo pipefail
cd "$(dirname "$0")/.."
# TF_CPP_MIN_LOG_LEVEL is left unset: the CLIs then hide TensorFlow's C++ start-up lines themselves
# (a user who sets it asks for them).
OUT=${DEMO_OUT:-demo_out}
STEPS=${DEMO_STEPS:-600}

# DEMO_SKIP_INSTALL=1: use the textrain already importable (a test run beside other work on one machine).
if [ "${DEMO_SKIP_INSTALL:-0}" = 1 ]; then
  echo "== 1/7 install (skipped: DEMO_SKIP_INSTALL=1)"
else
  echo "== 1/7 install"
  python3 -m pip install -q --disable-pip-version-check -e .
fi

# --dev_fraction: each document is held out with this probability, by a hash of its text; Emma has 24
# documents, and 0.2 holds out 3 of them.
echo "== 2/7 datagen: bert_pretrain on Emma (WordPiece vocab built from the sample, 2 workers)"
textrain-datagen --problem=bert_pretrain --input_file=tests/data/austen_emma.txt \
  --data_dir="$OUT/data" --vocab_size=4000 --max_seq_length=128 --max_predictions_per_seq=20 \
  --dupe_factor=3 --num_workers=2 --seed=1 --dev_fraction=0.2

# Bias-corrected Adam: BERT's uncorrected AdamW takes steps several times the learning rate at first,
# which stalls a model this small at the unigram level (mlm_accuracy ~0.06).
echo "== 3/7 pretraining: a tiny BERT (2 layers, hidden 128) for $STEPS steps on CPU"
textrain-train-gpu --problem=bert_pretrain --model=bert --model_size=tiny --data_dir="$OUT/data" \
  --model_dir="$OUT/bert_tiny" --max_seq_length=128 --max_predictions_per_seq=20 \
  --train_batch_size=32 --num_train_steps="$STEPS" --num_warmup_steps=60 --learning_rate=1e-3 \
  --optimizer=adam --save_checkpoints_steps=200 --log_steps=100 --num_gpus=1 --do_eval --max_eval_steps=20

echo "== 4/7 labelled sample: Emma's sentences, speech or narration (every 5th to dev)"
mkdir -p "$OUT/emma_speech"
python3 - "$OUT/emma_speech" <<'PY'
import sys
rows = [(l.strip().replace('"', ''), 'speech' if '"' in l else 'narration')
        for l in open('tests/data/austen_emma.txt', encoding='utf-8') if l.strip()]
for name, keep in (('train', lambda i: i % 5), ('dev', lambda i: not i % 5)):
    with open(f'{sys.argv[1]}/{name}.tsv', 'w', encoding='utf-8') as f:
        f.write('sentence\tlabel\n' + ''.join(f'{t}\t{l}\n' for i, (t, l) in enumerate(rows, 1) if keep(i)))
print(f'{len(rows)} sentences, {sum(l == "speech" for _, l in rows)} speech')
PY

echo "== 5/7 fine-tuning the pretrained BERT (tsv_classification, gin) + evaluation + export"
textrain-finetune --gin_file=configs/bert_base.gin --gin_file=configs/tsv_classification.gin \
  --gin_param="finetune.model_size='tiny'" \
  --gin_param="finetune.init_checkpoint='$OUT/bert_tiny'" \
  --gin_param="finetune.vocab_file='$OUT/data/bert_pretrain/vocab.txt'" \
  --gin_param="finetune.problem_hparams={'train_file': '$OUT/emma_speech/train.tsv', 'dev_file': '$OUT/emma_speech/dev.tsv'}" \
  --gin_param="finetune.data_dir='$OUT/ft_data'" --gin_param="finetune.model_dir='$OUT/emma_speech_run'" \
  --gin_param="finetune.max_seq_length=64" --gin_param="finetune.learning_rate=1e-4" \
  --gin_param="finetune.num_train_epochs=2" --gin_param="finetune.eval_every_steps=100" \
  --gin_param="finetune.export=True" | tail -1
echo "eval_results.json:"; cat "$OUT/emma_speech_run/eval_results.json"

echo "== 6/7 one raw sentence through the exported SavedModel (tokenised in the graph)"
python3 - "$OUT/emma_speech_run/export" <<'PY'
import sys
from textrain.framework import lazy_tf
lazy_tf.quiet_start(sys.argv)  # TensorFlow imported without its C++ start-up lines, as the CLIs do
import tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
for text in ["I am sure you will like her very much, my dear.",
             "Emma walked slowly home through the shrubbery."]:
    out = model.signatures["serve_text"](text_a=tf.constant([text]))
    print(f"{out['label'][0].numpy().decode():9s} {out['probabilities'][0].numpy().round(3)}  {text}")
PY

# From best/, the checkpoint the SavedModel was exported from; with the fine-tuning length and casing, so
# transformers' tokenizer truncates and lowercases as the model was tuned.
echo "== 7/7 the fine-tuned model in Hugging Face format (transformers' AutoModelForSequenceClassification loads it)"
[ -d "$OUT/emma_speech_hf" ] || textrain-convert --from_textrain="$OUT/emma_speech_run/best" --model=bert_classifier \
  --model_size=tiny --labels_file="$OUT/ft_data/tsv_classification/labels.json" \
  --vocab_file="$OUT/data/bert_pretrain/vocab.txt" --max_seq_length=64 --do_lower_case \
  --to_hf="$OUT/emma_speech_hf"
ls "$OUT/emma_speech_hf"
