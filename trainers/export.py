"""Export a fine-tuned classifier as a SavedModel with serving signatures.

    textrain-finetune ... --gin_param='finetune.export=True'      # -> {model_dir}/export/

Signatures:
- `serving_default`: token ids in — input_ids, input_mask, segment_ids int32 `[batch, seq]` (the
  records' layout of the model family; XLNet's input_mask is 1 = padding) — out: logits and
  probabilities (regression: predictions), and `label` (the predicted label string) for
  classification.
- A tagger (`task_type` "tagging", models/tagging_heads.py): `serving_default` gives per-position logits,
  probabilities and tag_ids; `serve_text` takes sentences — text `[batch]` — and returns one tag per
  whitespace-separated word: `tags` string `[batch, max words]` (padded with ""), `tag_ids` (padded with -1)
  and `num_words`, from the windows the records were made with (framework/graph_tagging.py, the task's
  `serving_doc_stride`), so they equal the trainer's predictions. BERT and ELECTRA only, as below.
- `serve_text`: raw strings in — text_a `[batch]` — and `serve_text_pair`: text_a, text_b — tokenised
  IN the graph by framework/graph_wordpiece.GraphWordpieceTokenizer (same ids as the WordPiece
  encoder the records were made with; the batch is cut to its longest row, padding changes no output),
  then the same outputs. BERT and ELECTRA only: XLNet's
  SentencePiece has no core-TensorFlow op (it needs tensorflow-text's, which would install the full
  `tensorflow` wheel over `tensorflow-cpu`), so an XLNet export has the ids signature only.

Decisions:
- What the export needs of the task comes from the task contract (framework/tasks.py): the label names
  (`serving_labels`) and the WordPiece vocabulary of the raw-string signatures (`serving_vocab`).
- The exported weights are the best checkpoint's when evaluation kept one (what one deploys), else the
  model as trained; the checkpoint is restored into the model with every object matched.
- The SavedModel is written to `{export_dir}.tmp` and renamed, so a failed export leaves nothing.
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf
from absl import logging

from textrain.framework.tasks import FinetuneTask
from textrain.models.base import FinetuneModel
from textrain.models.checkpoints import backing_variable


class ServingModule(tf.Module):
    """The classifier plus its serving functions (and the tokenizer, when raw strings are served)."""

    def __init__(self, model, max_seq_length: int, labels: list[str] | None = None, tokenizer: Any = None,
                 doc_stride: int = 0):
        super().__init__(name="serving")
        # The Keras model is NOT an attribute: saving would make Keras trace its call() with guessed
        # inputs. The module tracks its variables (the SavedModel's weights); the functions close over it.
        self.model_variables = [backing_variable(v) for v in model.variables]
        self._get_model = lambda: model
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.labels = tf.constant(list(labels or []), tf.string)
        ids = tf.TensorSpec([None, None], tf.int32)
        self.serve_ids = tf.function(self._serve_ids, input_signature=[ids, ids, ids])
        text = tf.TensorSpec([None], tf.string)
        self.doc_stride = doc_stride
        self.tags_words = tokenizer is not None and model.task_type == "tagging"
        if self.tags_words:
            self.serve_text = tf.function(self._serve_words, input_signature=[text])
        elif tokenizer is not None:
            self.serve_text = tf.function(lambda text_a: self._serve_tokens(tokenizer(text_a)),
                                          input_signature=[text])
            self.serve_text_pair = tf.function(
                lambda text_a, text_b: self._serve_tokens(tokenizer(text_a, text_b)), input_signature=[text, text])

    def _serve_tokens(self, tokens: dict) -> dict:
        # The tokenizer pads every row to max_seq_length; the encoder's cost grows with the length, and a real
        # token's output does not depend on padding (masked keys get exactly zero attention weight): cut the
        # batch to its longest row. Truncation is unchanged (still at max_seq_length).
        mask = tf.cast(tokens["input_mask"], tf.int32)
        length = tf.maximum(tf.reduce_max(tf.reduce_sum(mask, axis=1)), 1)  # an empty batch: max is INT_MIN
        return self._serve_ids(tf.cast(tokens["input_ids"][:, :length], tf.int32), mask[:, :length],
                               tf.cast(tokens["segment_ids"][:, :length], tf.int32))

    def _serve_words(self, text) -> dict:
        """Sentences -> one tag per whitespace word (framework/graph_tagging.py's windows, one model call)."""
        from textrain.framework.graph_tagging import word_windows

        windows = word_windows(self.tokenizer, text, self.doc_stride)
        features = windows.features
        tag_ids = self._serve_ids(features["input_ids"], features["input_mask"], features["segment_ids"])["tag_ids"]
        per_word = windows.words.with_flat_values(tf.gather_nd(tf.cast(tag_ids, tf.int32), windows.pick))
        return {"tags": tf.gather(self.labels, per_word).to_tensor(default_value=""),
                "tag_ids": per_word.to_tensor(default_value=-1),
                "num_words": tf.cast(per_word.row_lengths(), tf.int32)}

    def _serve_ids(self, input_ids, input_mask, segment_ids) -> dict:
        model = self._get_model()
        outputs = dict(model.predict_outputs(model.serving_features(input_ids, input_mask, segment_ids)))
        if "probabilities" in outputs and model.task_type == "classification" and self.labels.shape[0]:
            outputs["label"] = tf.gather(self.labels, tf.argmax(outputs["probabilities"], -1, output_type=tf.int32))
        return outputs

    def signatures(self) -> dict:
        sigs = {"serving_default": self.serve_ids}
        if self.tags_words:
            sigs["serve_text"] = self.serve_text
        elif self.tokenizer is not None:
            sigs["serve_text"] = self.serve_text
            sigs["serve_text_pair"] = self.serve_text_pair
        return sigs


def make_tokenizer(problem: FinetuneTask, data_dir: str, model: FinetuneModel, family: str, max_seq_length: int):
    """The in-graph WordPiece tokenizer of the task's serving vocabulary, or None (XLNet / no vocab)."""
    if not model.serves_raw_text:
        logging.info("%s: raw-string signatures are not exported (SentencePiece has no core TF op)", family)
        return None
    vocab = problem.serving_vocab(data_dir)
    if vocab is None:
        logging.warning("no WordPiece vocab file found for %s: raw-string signatures not exported", problem.name)
        return None
    from textrain.framework.graph_wordpiece import GraphWordpieceTokenizer

    return GraphWordpieceTokenizer(vocab.vocab_file, do_lower_case=vocab.do_lower_case, max_seq_length=max_seq_length)


def export_classifier(model: FinetuneModel, export_dir: str, *, problem: FinetuneTask | None = None, data_dir: str = "",
                      family: str = "", checkpoint: str | None = None, max_seq_length: int = 128,
                      labels: list[str] | None = None, tokenizer: Any = None, doc_stride: int = 0) -> str:
    """Write the SavedModel (see the module docstring) to `export_dir`; returns it. `doc_stride`: a tagger's
    window stride in serve_text without a `problem` (which otherwise says it)."""
    if checkpoint:
        tf.train.Checkpoint(model=model).read(checkpoint).assert_existing_objects_matched()
        logging.info("exporting the weights of %s", checkpoint)
    if problem is not None:
        if labels is None:
            labels = list(problem.serving_labels(data_dir))
        if tokenizer is None:
            tokenizer = make_tokenizer(problem, data_dir, model, family, max_seq_length)
    doc_stride = problem.serving_doc_stride(data_dir) if problem is not None else doc_stride
    module = ServingModule(model, max_seq_length, labels, tokenizer, doc_stride)
    tmp = export_dir.rstrip("/") + ".tmp"
    for path in (tmp,):
        if tf.io.gfile.exists(path):
            tf.io.gfile.rmtree(path)
    tf.saved_model.save(module, tmp, signatures=module.signatures())
    if tf.io.gfile.exists(export_dir):
        tf.io.gfile.rmtree(export_dir)
    tf.io.gfile.rename(tmp, export_dir)
    logging.info("exported %s (signatures: %s)", export_dir, ", ".join(module.signatures()))
    return export_dir
