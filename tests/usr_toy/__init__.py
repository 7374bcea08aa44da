"""A --usr_dir package for the trainer CLI tests (tests/test_train_gpu.py, test_train_tpu.py): a tiny problem and model, as a
user would write them, and a fine-tuning head (`usr_toy_classifier`) that docs/new_model.md walks through train,
finetune and export (tests/test_new_model.py). `TOY_SLOW_INPUT=<seconds>` makes every batch that long to read (tf.data's own
sleep transformation, outside the compiled step; a py_function would hang the interpreter's exit), so a
test can kill a run mid-way."""
import atexit
import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

from textrain.framework.problem import Problem
from textrain.framework.registry import register_model, register_problem
from textrain.models.base import FinetuneModel, StepOutput, Term, TrainableModel


@dataclasses.dataclass
class UsrToyProblemHParams:
    toy_dim: int = 4


@register_problem
class UsrToyProblem(Problem):
    HParams = UsrToyProblemHParams

    def dataset_splits(self):
        return [("train", 2), ("dev", 1)]

    def generate_samples(self, data_dir, tmp_dir, split):
        rng = np.random.default_rng(0 if split == "train" else 1)
        for _ in range(256):
            x = rng.normal(size=self.hparams.toy_dim)
            yield {"x": [float(v) for v in x], "y": int(x[0] > 0) + int(x[1] > 0.5), "w": float(rng.random() > 0.3)}

    def example_reading_spec(self):
        d = self.hparams.toy_dim
        return {"x": tf.io.FixedLenFeature([d], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64),
                "w": tf.io.FixedLenFeature([], tf.float32)}

    def preprocess_example(self, example, mode, params):
        return dict(example, y=tf.cast(example["y"], tf.int32))

    def dataset(self, mode, data_dir, params, input_context=None, split=None):
        ds = super().dataset(mode, data_dir, params, input_context=input_context, split=split)
        pause = float(os.environ.get("TOY_SLOW_INPUT", "0"))
        if pause > 0:
            from tensorflow.python.data.experimental.ops import testing  # test-only: tf.data's sleep

            ds = ds.apply(testing.sleep(int(pause * 1e6)))
        return ds


@register_model
class UsrToyModel(TrainableModel):
    """Linear classifier with deterministic initial weights (runs compare their checkpoints)."""

    def __init__(self):
        super().__init__(name="usr_toy")
        init = np.linspace(-0.5, 0.5, 4 * 3, dtype=np.float32).reshape(4, 3)
        self.dense = tf.keras.layers.Dense(3, kernel_initializer=tf.keras.initializers.Constant(init))

    def step_output(self, f, state, training):
        logits = tf.cast(self.dense(f["x"]), tf.float32)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(f["y"], logits)
        return StepOutput({"ce": Term(tf.reduce_sum(ce * f["w"]), tf.reduce_sum(f["w"]))}, {}, state)

    @classmethod
    def from_settings(cls, *, manifest=None, **settings):
        """The model; with TOY_DUMP_DIR set its final weights go to worker_<task>.npy at exit (multi-worker tests)."""
        model = cls()
        dump = os.environ.get("TOY_DUMP_DIR")
        if dump:
            task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0)
            atexit.register(lambda: np.save(os.path.join(dump, f"worker_{task}.npy"),
                                            np.concatenate([v.numpy().ravel() for v in model.trainable_variables])))
        return model


@register_model
class UsrToyClassifier(FinetuneModel):
    """A fine-tuning head for any WordPiece sentence task: the mean of the real tokens' embeddings -> logits."""

    serves_raw_text = True  # WordPiece ids (the default `tokenizer`): export also serves raw strings

    def __init__(self, vocab_size: int, num_labels: int, width: int = 8):
        super().__init__(name="usr_toy_classifier")
        self.embedding = tf.keras.layers.Embedding(vocab_size, width)
        self.head = tf.keras.layers.Dense(num_labels)

    def logits(self, f, training=False):
        mask = tf.cast(f["input_mask"], tf.float32)[:, :, None]  # BERT layout: 1 = real token
        pooled = tf.reduce_sum(self.embedding(f["input_ids"]) * mask, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0)
        return tf.cast(self.head(pooled), tf.float32)

    def step_output(self, f, state, training):
        logits = self.logits(f, training)
        labels = tf.cast(f["label_ids"], tf.int32)
        real = tf.cast(f["is_real_example"], tf.float32)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        right = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
        count = tf.reduce_sum(real)
        return StepOutput({"ce": Term(tf.reduce_sum(ce * real), count)},
                          {"accuracy": Term(tf.reduce_sum(right * real), count)}, state)

    def predict_outputs(self, f):
        logits = self.logits(f)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits)}

    @classmethod
    def from_settings(cls, *, manifest=None, num_labels=None, **settings):
        """Vocabulary size and labels from the task's train manifest (textrain-finetune also passes num_labels)."""
        made = (manifest or {}).get("settings", {})
        return cls(int(made["vocab_size"]), int(num_labels or made["num_labels"]))

    @classmethod
    def from_config(cls, config, *, num_labels=None, n_top=(5, 5), head="original"):
        """textrain-convert: the model of a config file ({"vocab_size": ..., "width": ...}), variables made."""
        model = cls(int(config["vocab_size"]), int(num_labels), int(config.get("width", 8)))
        model.embedding.build((None,))
        model.head.build((None, model.embedding.output_dim))
        return model

    def tf1_variable_map(self):
        """The names textrain-convert --to_tf1 writes."""
        return {"usr_toy/embeddings": self.embedding.embeddings, "usr_toy/head/kernel": self.head.kernel,
                "usr_toy/head/bias": self.head.bias}

