"""Question-answering heads: SQuAD span extraction (BERT, ELECTRA, XLNet) and multiple choice (RACE).

Each model is a `TrainableModel` (models/base.py): `step_output` gives the originals' losses as sums
and counts, `predict_outputs(features)` the tensors post-processing reads (problems/qa_postprocess.py),
`tf1_variable_map()` the originals' checkpoint names (encoder + head).

- `bert_squad` (google-research/bert run_squad.py): one `[2, hidden]` matrix `cls/squad/output_weights`
  (+ `output_bias`) over the final hidden states gives start and end logits; loss = mean over the
  batch of (start CE + end CE) / 2. Outputs: `start_logits`, `end_logits` `[B, L]`.
- `electra_squad` (google-research/electra finetune/qa/qa_tasks.py with its defaults
  joint_prediction, beam_size 20, answerable_classifier, answerable_uses_start_logits,
  answerable_weight 0.5): logits are restricted to the context and [CLS] (`input_mask * segment_ids`
  plus position 0; others get -1000); the end logits are conditioned on the start: dense 512 gelu
  (`qa_hidden`) over concat(start state, each state) then dense 1 — the gold start at training, the
  `beam_size` best starts at inference. v2 (`with_negative`): an answerable logit from concat([CLS]
  state, start-probability-weighted state) through dense 512 gelu and dense 1, sigmoid CE against
  `is_impossible` weighted 0.5. ELECTRA's configs add that classifier to v1 too; we add it only for v2
  (on v1 its target is always 0). Names under `task_specific/{squad|squadv1}/`: `dense` (start),
  `qa_hidden`, `dense_1` (end), `dense_2`, `dense_3` (answerable), tf.layers' default names in the
  original's order; kernels Glorot-uniform as tf.layers' default.
- `xlnet_squad` (zihangdai/xlnet function_builder.get_qa_outputs): start logits `start_logits/dense`
  masked by `p_mask` (-1e30); end logits from concat(state, start state) through `end_logits/dense_0`
  (tanh), `end_logits/LayerNorm`, `end_logits/dense_1` — the gold start at training, the `start_n_top`
  best starts at inference keeping `end_n_top` ends each; the answer class from concat(start-probability
  -weighted state, <cls> state) through `answer_class/dense_0` (tanh), dropout, `answer_class/dense_1`
  (no bias). Loss = (start + end) / 2 + 0.5 x sigmoid CE(cls_logits, is_impossible), always (as the
  original; v1 data marks out-of-window answers impossible too).
- `bert_race` / `xlnet_race`: multiple choice with `num_choices` rows per example (`input_ids`
  `[B, num_choices * L]`, XLNet run_race.py's record layout); one logit per row, softmax over the
  choices. BERT: pooled output -> dropout -> `cls/race/output_weights` `[1, hidden]`. XLNet:
  summary_type "last" (the <cls> at the end: XLNet pads on the left) -> `model/sequnece_summary/summary`
  (tanh projection; the original's spelling) -> dropout -> `logits/dense`.

Logits and losses are float32 under any precision policy.
"""
from __future__ import annotations

import tensorflow as tf

from textrain.framework.encoders import XLNET_SPECIAL_IDS
from textrain.framework.registry import register_model
from textrain.models import bert as bert_lib
from textrain.models import electra as electra_lib
from textrain.models import hf_format
from textrain.models import xlnet as xlnet_lib
from textrain.models.base import StepOutput, Term
from textrain.models.bert import BertConfig, BertModel, TransposedDense, encoder_from_config, resolve_config
from textrain.models.checkpoints import backing_variable
from textrain.models.electra import ElectraConfig
from textrain.models.layers.activations import get_activation
from textrain.models.layers.dense import Dense
from textrain.models.layers.transformer import dense_variable_map, layer_norm_variable_map
from textrain.models.task_heads import EncoderFinetuneModel
from textrain.models.xlnet import XLNetConfig, XLNetEncoder

NEG_INF = -1e30


def _f32(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x, tf.float32)


def position_ce(logits: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """Per-example cross-entropy of `positions` `[B]` under `logits` `[B, L]` (the originals'
    -sum(one_hot * log_softmax))."""
    positions = tf.reshape(tf.cast(positions, tf.int32), [-1])
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=positions, logits=_f32(logits))


def span_terms(start_logits: tf.Tensor, end_logits: tf.Tensor, features: dict[str, tf.Tensor]
               ) -> tuple[dict[str, Term], dict[str, Term]]:
    """(losses, metrics): start and end CE, each weight 0.5 (the originals' (start + end) / 2), and
    the argmax accuracies."""
    count = _f32(tf.shape(start_logits)[0])
    losses, metrics = {}, {}
    for name, logits in (("start", start_logits), ("end", end_logits)):
        gold = tf.reshape(tf.cast(features[f"{name}_positions"], tf.int32), [-1])
        losses[name] = Term(tf.reduce_sum(position_ce(logits, gold)), count, 0.5)
        hit = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), gold)
        metrics[f"{name}_accuracy"] = Term(tf.reduce_sum(_f32(hit)), count)
    return losses, metrics


def answer_class_term(logits: tf.Tensor, features: dict[str, tf.Tensor], weight: float = 0.5) -> Term:
    labels = tf.reshape(_f32(features["is_impossible"]), [-1])
    ce = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    return Term(tf.reduce_sum(ce), _f32(tf.shape(logits)[0]), weight)


def gather_rows(sequence: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """`[B, L, H]` at `index` `[B]` -> `[B, H]`, or at `[B, K]` -> `[B, K, H]`."""
    return tf.gather(sequence, tf.cast(index, tf.int32), batch_dims=1)


def _unique_ids(features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {"unique_ids": tf.reshape(features["unique_ids"], [-1])} if "unique_ids" in features else {}


# =============================================================================================== #
# Encoders, as the heads see them
# =============================================================================================== #
def xlnet_sequence(encoder: XLNetEncoder, features: dict[str, tf.Tensor], training: bool) -> tf.Tensor:
    """XLNet's final states `[B, L, d]` (float32) for fine-tuning: no memory, no permutation;
    `input_mask` is XLNet's 1 = padding."""
    mask = features.get("input_mask")
    out = encoder(features["input_ids"], seg_ids=features.get("segment_ids"),
                  input_mask=None if mask is None else _f32(mask), training=training)
    return _f32(out["output"])


def bert_like_inputs(features: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor | None, tf.Tensor | None]:
    return features["input_ids"], features.get("input_mask"), features.get("segment_ids")


class QAModel(EncoderFinetuneModel):
    """What the fine-tuning trainer asks of a model (trainers/finetune.py), shared with the classifiers:
    `from_settings`, `load_init_checkpoint` (encoder from an original TF1 release or a textrain
    pretraining run, head fresh: models/task_heads.py's one implementation, reading `encoder_attribute`,
    `encoder_tf1_variable_map` and `init_allow_unexpected`), `serving_features`, `num_layers` and
    `lr_decay_style` (layer-wise LR decay)."""

    task_type = "span_extraction"

    def tf1_variable_map(self, include_head: bool = True) -> dict[str, tf.Variable]:
        raise NotImplementedError

    def encoder_tf1_variable_map(self) -> dict[str, tf.Variable]:
        return self.tf1_variable_map(include_head=False)

    def init_from_pretrained(self, path: str) -> list[str]:
        """The encoder from a pretraining checkpoint (original or textrain); the head stays fresh."""
        return self.load_init_checkpoint(path)

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)  # BERT and ELECTRA configs; the XLNet heads count n_layer


def _bert_config(size, config_file, overrides, manifest) -> BertConfig:
    config, source = bert_lib.config_from_settings(size, config_file, overrides, manifest)
    bert_lib.check_data_fits(config, manifest, source)
    return config


def _with_negative(manifest: dict | None) -> bool:
    return bool(((manifest or {}).get("settings") or {}).get("with_negative", False))


# =============================================================================================== #
# BERT
# =============================================================================================== #
@register_model(name="bert_squad")
class BertSquad(QAModel):
    """BERT + run_squad.py's span head. Features: input_ids, input_mask, segment_ids, start_positions,
    end_positions (+ unique_ids, passed through predict_outputs)."""

    encoder_attribute = "bert"
    init_allow_unexpected = (r"^cls/",)

    def __init__(self, config: BertConfig | str | dict, name: str = "bert_squad", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = resolve_config(config)
        self.bert = BertModel(self.config)
        self.qa = TransposedDense(2, self.config.initializer_range, name="squad")
        self.bert.build(None)
        self.qa.build((None, self.config.hidden_size))
        self.built = True

    def call(self, features: dict[str, tf.Tensor], training: bool = False) -> dict[str, tf.Tensor]:
        sequence, _ = self.bert(*bert_like_inputs(features), training=training)
        logits = self.qa(sequence)
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

    def step_output(self, features, state, training) -> StepOutput:
        out = self(features, training=training)
        losses, metrics = span_terms(out["start_logits"], out["end_logits"], features)
        return StepOutput(losses, metrics, state if state is not None else {})

    def predict_outputs(self, features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return {**_unique_ids(features), **self(features, training=False)}

    def tf1_variable_map(self, include_head: bool = True) -> dict[str, tf.Variable]:
        names = self.bert.tf1_variable_map("bert")
        if include_head:
            names.update(self.qa.tf1_variable_map("cls/squad"))
        return names

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original"):
        return cls(BertConfig.from_dict(config))

    @classmethod
    def from_settings(cls, *, size=None, config_file=None, overrides=None, manifest=None, **_) -> "BertSquad":
        return cls(_bert_config(size, config_file, overrides, manifest))


# =============================================================================================== #
# ELECTRA
# =============================================================================================== #
@register_model(name="electra_squad")
class ElectraSquad(QAModel):
    """ELECTRA's discriminator + its QA head (joint start/end prediction, answerable classifier for v2).

    `head="hf"`: transformers' ElectraForQuestionAnswering head instead: one linear layer (`qa_outputs`)
    gives start and end logits per token, as bert_squad's (BERT's n-best, v2 by the [CLS] null score).
    """

    Settings = electra_lib.ElectraHeadSettings
    encoder_attribute = "discriminator"  # as in the pretrainer: textrain checkpoints load by this path
    init_allow_unexpected = (r"^generator/", r"^generator_predictions/", r"^discriminator_predictions/")

    def __init__(self, config: ElectraConfig, with_negative: bool = False, beam_size: int = 20,
                 answerable_weight: float = 0.5, head: str = "original", name: str = "electra_squad", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config
        self.with_negative = with_negative
        self.beam_size = beam_size
        self.answerable_weight = answerable_weight
        self.head_variant = electra_lib.check_head(head)
        self.scope = "task_specific/squad" if with_negative else "task_specific/squadv1"
        disc = config.discriminator_config()
        self.discriminator = encoder_from_config(disc, name="discriminator")
        if head == "hf":
            self.qa_outputs = Dense(2, name="qa_outputs")
            ids = tf.zeros([1, 2], tf.int32)
            self.qa_outputs(self.discriminator(ids, tf.ones([1, 2], tf.int32), ids))
            self.built = True
            return
        gelu = get_activation("gelu_exact")
        self.start_dense = Dense(1, name="dense")
        self.qa_hidden = Dense(512, activation=gelu, name="qa_hidden")
        self.end_dense = Dense(1, name="dense_1")
        self.answerable_hidden = Dense(512, activation=gelu, name="dense_2")
        self.answerable_dense = Dense(1, name="dense_3")
        h = disc.hidden_size
        ids = tf.zeros([1, 2], tf.int32)
        self.discriminator(ids, tf.ones([1, 2], tf.int32), ids)
        self.start_dense.build((None, h))
        self.qa_hidden.build((None, 2 * h))
        self.end_dense.build((None, 512))
        if with_negative:
            self.answerable_hidden.build((None, 2 * h))
            self.answerable_dense.build((None, 512))
        self.built = True

    def _answer_mask(self, features, length) -> tf.Tensor:
        mask = _f32(features["input_mask"]) * _f32(features["segment_ids"])
        return tf.minimum(mask + tf.one_hot(0, length), 1.0)

    def _end_logits(self, start_states: tf.Tensor, states: tf.Tensor) -> tf.Tensor:
        return tf.squeeze(self.end_dense(self.qa_hidden(tf.concat([start_states, states], -1))), -1)

    def _forward(self, features, training: bool, beams: bool) -> dict[str, tf.Tensor]:
        h = _f32(self.discriminator(*bert_like_inputs(features), training=training))
        length = tf.shape(h)[1]
        penalty = 1000.0 * (self._answer_mask(features, length) - 1.0)
        start_logits = tf.squeeze(self.start_dense(h), -1) + penalty
        out = {"start_logits": start_logits}
        if "start_positions" in features:  # teacher-forced end logits (training, eval loss)
            start = gather_rows(h, tf.reshape(features["start_positions"], [-1]))
            start = tf.tile(start[:, None], [1, length, 1])
            out["end_logits"] = self._end_logits(start, h) + penalty
        if beams:
            k = self.beam_size
            top_lp, top_idx = tf.math.top_k(tf.nn.log_softmax(start_logits), k=k)
            start = tf.tile(gather_rows(h, top_idx)[:, :, None], [1, 1, length, 1])  # [B, k, L, H]
            states = tf.tile(h[:, None], [1, k, 1, 1])
            end_logits = self._end_logits(start, states) + penalty[:, None]
            end_lp, end_idx = tf.math.top_k(tf.nn.log_softmax(end_logits), k=k)
            out.update(start_top_log_probs=top_lp, start_top_index=top_idx,
                       end_top_log_probs=tf.reshape(end_lp, [-1, k * k]),
                       end_top_index=tf.reshape(end_idx, [-1, k * k]))
        if self.with_negative:
            start_p = tf.nn.softmax(start_logits)
            pooled = tf.concat([h[:, 0], tf.einsum("bl,blh->bh", start_p, h)], -1)
            out["answerable_logit"] = tf.squeeze(self.answerable_dense(self.answerable_hidden(pooled)), -1)
        return out

    def _linear(self, features, training: bool) -> dict[str, tf.Tensor]:
        """The hf head: start and end logits of every token, unmasked (as transformers')."""
        logits = _f32(self.qa_outputs(self.discriminator(*bert_like_inputs(features), training=training)))
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

    def call(self, features, training: bool = False) -> dict[str, tf.Tensor]:
        if self.head_variant == "hf":
            return self._linear(features, training)
        return self._forward(features, training, beams=False)

    def step_output(self, features, state, training) -> StepOutput:
        out = self(features, training=training)
        losses, metrics = span_terms(out["start_logits"], out["end_logits"], features)
        if self.with_negative and self.head_variant != "hf":
            losses["answerable"] = answer_class_term(out["answerable_logit"], features, self.answerable_weight)
        return StepOutput(losses, metrics, state if state is not None else {})

    def predict_outputs(self, features) -> dict[str, tf.Tensor]:
        if self.head_variant == "hf":
            return {**_unique_ids(features), **self._linear(features, False)}
        features = {k: v for k, v in features.items() if k != "start_positions"}
        out = self._forward(features, False, beams=True)
        keep = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index",
                "answerable_logit")
        return {**_unique_ids(features), **{k: v for k, v in out.items() if k in keep}}

    def tf1_variable_map(self, include_head: bool = True) -> dict[str, tf.Variable]:
        names = self.discriminator.tf1_variable_map("electra")
        if include_head and self.head_variant == "hf":  # models/hf_format.py's name of ElectraForQuestionAnswering's head
            names.update(dense_variable_map(f"{hf_format.HF_ONLY_SCOPE}/qa_outputs", self.qa_outputs))
        elif include_head:
            layers = [self.start_dense, self.qa_hidden, self.end_dense]
            if self.with_negative:
                layers += [self.answerable_hidden, self.answerable_dense]
            for layer in layers:
                names.update(dense_variable_map(f"{self.scope}/{layer.name}", layer))
        return names

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original") -> "ElectraSquad":
        return cls(ElectraConfig.from_dict(config), head=head)

    @classmethod
    def from_settings(cls, *, size=None, config_file=None, overrides=None, manifest=None, head=None,
                      **_) -> "ElectraSquad":
        """v2 (answerable classifier; with head="hf" the null score) when the data was made with negatives
        (squad_v2); `head` the variant (default original)."""
        config = electra_lib.config_from_settings(size, config_file, overrides, manifest)
        return cls(config, with_negative=_with_negative(manifest), head=head or "original")


# =============================================================================================== #
# XLNet
# =============================================================================================== #
@register_model(name="xlnet_squad")
class XLNetSquad(QAModel):
    """XLNet + its SQuAD head. Features: input_ids, input_mask (1 = padding), segment_ids, p_mask,
    cls_index, start_positions, end_positions, is_impossible (+ unique_ids)."""

    encoder_attribute = "transformer"
    tokenizer = "sentencepiece"
    init_allow_unexpected = (r"^model/lm_loss/",)
    lr_decay_style = "xlnet"

    @property
    def num_layers(self) -> int:
        return int(self.config.n_layer)

    def __init__(self, config: XLNetConfig, start_n_top: int = 5, end_n_top: int = 5,
                 name: str = "xlnet_squad", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config
        self.start_n_top, self.end_n_top = start_n_top, end_n_top
        init = config.initializer()
        d = config.d_model
        self.transformer = XLNetEncoder(config, name="transformer")
        self.start_dense = Dense(1, kernel_initializer=init, name="start_logits_dense")
        self.end_dense_0 = Dense(d, activation="tanh", kernel_initializer=init, name="end_logits_dense_0")
        self.end_norm = tf.keras.layers.LayerNormalization(epsilon=1e-12, name="end_logits_LayerNorm")
        self.end_dense_1 = Dense(1, kernel_initializer=init, name="end_logits_dense_1")
        self.cls_dense_0 = Dense(d, activation="tanh", kernel_initializer=init, name="answer_class_dense_0")
        self.cls_dense_1 = Dense(1, use_bias=False, kernel_initializer=init, name="answer_class_dense_1")
        self.start_dense.build((None, d))
        self.end_dense_0.build((None, 2 * d))
        self.end_norm.build((None, d))
        self.end_dense_1.build((None, d))
        self.cls_dense_0.build((None, 2 * d))
        self.cls_dense_1.build((None, d))
        self.built = True

    def _end_logits(self, states: tf.Tensor, start_states: tf.Tensor, training: bool) -> tf.Tensor:
        x = self.end_norm(self.end_dense_0(tf.concat([states, start_states], -1)))
        return tf.squeeze(self.end_dense_1(x), -1)

    def _forward(self, features, training: bool, beams: bool) -> dict[str, tf.Tensor]:
        h = xlnet_sequence(self.transformer, features, training)
        length = tf.shape(h)[1]
        p_mask = _f32(features["p_mask"])
        start_logits = tf.squeeze(self.start_dense(h), -1)
        start_masked = start_logits * (1 - p_mask) + NEG_INF * p_mask
        out = {"start_logits": start_masked}
        if "start_positions" in features:
            start = gather_rows(h, tf.reshape(features["start_positions"], [-1]))
            end = self._end_logits(h, tf.tile(start[:, None], [1, length, 1]), training)
            out["end_logits"] = end * (1 - p_mask) + NEG_INF * p_mask
        if beams:
            k1, k2 = self.start_n_top, self.end_n_top
            top_lp, top_idx = tf.math.top_k(tf.nn.log_softmax(start_masked), k=k1)
            start = tf.tile(gather_rows(h, top_idx)[:, :, None], [1, 1, length, 1])  # [B, k1, L, d]
            states = tf.tile(h[:, None], [1, k1, 1, 1])
            end = self._end_logits(states, start, training)
            end = end * (1 - p_mask[:, None]) + NEG_INF * p_mask[:, None]
            end_lp, end_idx = tf.math.top_k(tf.nn.log_softmax(end), k=k2)
            out.update(start_top_log_probs=top_lp, start_top_index=top_idx,
                       end_top_log_probs=tf.reshape(end_lp, [-1, k1 * k2]),
                       end_top_index=tf.reshape(end_idx, [-1, k1 * k2]))
        cls_state = gather_rows(h, tf.reshape(features["cls_index"], [-1]))
        start_state = tf.einsum("bl,blh->bh", tf.nn.softmax(start_masked), h)
        x = self.cls_dense_0(tf.concat([start_state, cls_state], -1))
        if training and self.config.dropout > 0:
            x = tf.nn.dropout(x, rate=self.config.dropout)
        out["cls_logits"] = tf.squeeze(self.cls_dense_1(x), -1)
        return out

    def call(self, features, training: bool = False) -> dict[str, tf.Tensor]:
        return self._forward(features, training, beams=False)

    def step_output(self, features, state, training) -> StepOutput:
        out = self._forward(features, training, beams=False)
        losses, metrics = span_terms(out["start_logits"], out["end_logits"], features)
        losses["answer_class"] = answer_class_term(out["cls_logits"], features, 0.5)
        return StepOutput(losses, metrics, state if state is not None else {})

    def predict_outputs(self, features) -> dict[str, tf.Tensor]:
        features = {k: v for k, v in features.items() if k != "start_positions"}
        out = self._forward(features, False, beams=True)
        keep = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits")
        return {**_unique_ids(features), **{k: v for k, v in out.items() if k in keep}}

    def tf1_variable_map(self, include_head: bool = True) -> dict[str, tf.Variable]:
        names = self.transformer.tf1_variable_map("model/transformer")
        if include_head:
            names.update(dense_variable_map("start_logits/dense", self.start_dense))
            names.update(dense_variable_map("end_logits/dense_0", self.end_dense_0))
            names.update(layer_norm_variable_map("end_logits/LayerNorm", self.end_norm))
            names.update(dense_variable_map("end_logits/dense_1", self.end_dense_1))
            names.update(dense_variable_map("answer_class/dense_0", self.cls_dense_0))
            names["answer_class/dense_1/kernel"] = self.cls_dense_1.kernel
        return {k: backing_variable(v) for k, v in names.items()}

    def serving_features(self, input_ids, input_mask, segment_ids) -> dict[str, tf.Tensor]:
        """The ids signature's three tensors in run_squad.py's layout (`context <sep> question <sep> <cls>`,
        segments 0/1/2/3): `p_mask` and `cls_index` follow from them (an answer may start on a context
        token or the <cls>), `input_mask` is float, 1 = padding."""
        seg = tf.cast(segment_ids, tf.int32)
        context = tf.logical_and(tf.equal(seg, 0), tf.not_equal(tf.cast(input_ids, tf.int32), XLNET_SPECIAL_IDS["<sep>"]))
        cls = tf.equal(seg, 2)
        return {"input_ids": input_ids, "input_mask": tf.cast(input_mask, tf.float32), "segment_ids": seg,
                "p_mask": 1.0 - tf.cast(tf.logical_or(context, cls), tf.float32),
                "cls_index": tf.argmax(tf.cast(cls, tf.int32), axis=-1, output_type=tf.int32)}

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original"):
        return cls(XLNetConfig(**config), start_n_top=n_top[0], end_n_top=n_top[1])

    @classmethod
    def from_settings(cls, *, size=None, config_file=None, overrides=None, manifest=None, **_) -> "XLNetSquad":
        return cls(xlnet_lib.config_from_settings(size, config_file, overrides, manifest))


# =============================================================================================== #
# Multiple choice (RACE)
# =============================================================================================== #
def choice_rows(x: tf.Tensor, num_choices: int) -> tf.Tensor:
    """`[B, num_choices * L]` -> `[B * num_choices, L]` (row b*C + c is choice c of example b)."""
    return tf.reshape(x, [-1, tf.shape(x)[-1] // num_choices])


def choice_terms(logits: tf.Tensor, features: dict[str, tf.Tensor]) -> tuple[dict[str, Term], dict[str, Term]]:
    """Softmax CE over the choices and accuracy, weighted by `is_real_example` when present."""
    labels = tf.reshape(tf.cast(features["label_ids"], tf.int32), [-1])
    weights = tf.reshape(_f32(features.get("is_real_example", tf.ones_like(labels))), [-1])
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    hit = _f32(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels))
    count = tf.reduce_sum(weights)
    return {"choice": Term(tf.reduce_sum(ce * weights), count)}, {"accuracy": Term(tf.reduce_sum(hit * weights), count)}


class ChoiceModel(QAModel):
    """Multiple choice: `call` gives one logit per option [B, num_choices]; softmax over the options."""

    task_type = "multiple_choice"

    def step_output(self, features, state, training) -> StepOutput:
        losses, metrics = choice_terms(self(features, training=training), features)
        return StepOutput(losses, metrics, state if state is not None else {})

    def predict_outputs(self, features) -> dict[str, tf.Tensor]:
        logits = self(features, training=False)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits)}


@register_model(name="bert_race")
class BertRace(ChoiceModel):
    """BERT multiple choice: pooled output of each (article, question + option) row -> one logit."""

    encoder_attribute = "bert"
    init_allow_unexpected = (r"^cls/",)

    def __init__(self, config: BertConfig | str | dict, num_choices: int = 4, name: str = "bert_race", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = resolve_config(config)
        self.num_choices = num_choices
        self.bert = BertModel(self.config)
        self.dropout = tf.keras.layers.Dropout(self.config.hidden_dropout_prob)
        self.scorer = TransposedDense(1, self.config.initializer_range, name="race")
        self.bert.build(None)
        self.scorer.build((None, self.config.hidden_size))
        self.built = True

    def call(self, features, training: bool = False) -> tf.Tensor:
        c = self.num_choices
        rows = [choice_rows(features[k], c) if k in features else None
                for k in ("input_ids", "input_mask", "segment_ids")]
        _, pooled = self.bert(*rows, training=training)
        return tf.reshape(self.scorer(self.dropout(pooled, training=training)), [-1, c])

    def tf1_variable_map(self, include_head: bool = True) -> dict[str, tf.Variable]:
        names = self.bert.tf1_variable_map("bert")
        if include_head:
            names.update(self.scorer.tf1_variable_map("cls/race"))
        return names

    @classmethod
    def from_settings(cls, *, num_labels: int = 4, size=None, config_file=None, overrides=None, manifest=None,
                      **_) -> "BertRace":
        """`num_labels`: the task's number of choices."""
        return cls(_bert_config(size, config_file, overrides, manifest), num_choices=num_labels)


@register_model(name="xlnet_race")
class XLNetRace(ChoiceModel):
    """XLNet multiple choice as run_race.py: last state (<cls>) -> summary projection -> logits/dense."""

    encoder_attribute = "transformer"
    tokenizer = "sentencepiece"
    init_allow_unexpected = (r"^model/lm_loss/",)
    lr_decay_style = "xlnet"

    @property
    def num_layers(self) -> int:
        return int(self.config.n_layer)

    def __init__(self, config: XLNetConfig, num_choices: int = 4, name: str = "xlnet_race", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config
        self.num_choices = num_choices
        init = config.initializer()
        self.transformer = XLNetEncoder(config, name="transformer")
        self.summary = Dense(config.d_model, activation="tanh", kernel_initializer=init, name="summary")
        self.logits_dense = Dense(1, kernel_initializer=init, name="logits_dense")
        self.summary.build((None, config.d_model))
        self.logits_dense.build((None, config.d_model))
        self.built = True

    def call(self, features, training: bool = False) -> tf.Tensor:
        c = self.num_choices
        rows = {k: choice_rows(features[k], c) for k in ("input_ids", "input_mask", "segment_ids") if k in features}
        h = xlnet_sequence(self.transformer, rows, training)
        x = self.summary(h[:, -1])
        if training and self.config.dropout > 0:
            x = tf.nn.dropout(x, rate=self.config.dropout)
        return tf.reshape(self.logits_dense(x), [-1, c])

    def tf1_variable_map(self, include_head: bool = True) -> dict[str, tf.Variable]:
        names = self.transformer.tf1_variable_map("model/transformer")
        if include_head:
            names.update(dense_variable_map("model/sequnece_summary/summary", self.summary))
            names.update(dense_variable_map("logits/dense", self.logits_dense))
        return {k: backing_variable(v) for k, v in names.items()}

    def serving_features(self, input_ids, input_mask, segment_ids) -> dict[str, tf.Tensor]:
        return {"input_ids": input_ids, "input_mask": tf.cast(input_mask, tf.float32), "segment_ids": segment_ids}

    @classmethod
    def from_settings(cls, *, num_labels: int = 4, size=None, config_file=None, overrides=None, manifest=None,
                      **_) -> "XLNetRace":
        return cls(xlnet_lib.config_from_settings(size, config_file, overrides, manifest), num_choices=num_labels)

