#!/usr/bin/env bash
# The main job on the bundled public-domain sample (tests/data/austen_emma.txt, Jane Austen's Emma):
# install -> bert_pretrain datagen -> a short pretraining of a tiny BERT, each step printing its figures.
# Everything lands in demo_out/ (ignored by git); re-running reuses the finished steps.
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL=2
OUT=${DEMO_OUT:-demo_out}
STEPS=${DEMO_STEPS:-600}

echo "== 1/3 install"
python3 -m pip install -q --disable-pip-version-check -e .

echo "== 2/3 datagen: bert_pretrain on Emma (WordPiece vocab built from the sample, 2 workers)"
textrain-datagen --problem=bert_pretrain --input_file=tests/data/austen_emma.txt \
  --data_dir="$OUT/data" --vocab_size=4000 --max_seq_length=128 --max_predictions_per_seq=20 \
  --dupe_factor=3 --num_workers=2 --seed=1

# Bias-corrected Adam: BERT's uncorrected AdamW takes steps several times the learning rate at first,
# which stalls a model this small at the unigram level (mlm_accuracy ~0.06).
echo "== 3/3 pretraining: a tiny BERT (2 layers, hidden 128) for $STEPS steps on CPU"
textrain-train-gpu --problem=bert_pretrain --model=bert --model_size=tiny --data_dir="$OUT/data" \
  --model_dir="$OUT/bert_tiny" --max_seq_length=128 --max_predictions_per_seq=20 \
  --train_batch_size=32 --num_train_steps="$STEPS" --num_warmup_steps=60 --learning_rate=1e-3 \
  --optimizer=adam --save_checkpoints_steps=200 --log_steps=100 --num_gpus=1
