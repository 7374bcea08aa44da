"""ELECTRA (Clark et al., 2020): a small masked-LM generator and a replaced-token-detection discriminator.

Facts kept from google-research/electra (`run_pretraining.py`, `pretrain/pretrain_helpers.py`,
`configure_pretraining.py`, `util/training_utils.py`, `model/modeling.py`):
- Sizes: small = hidden 256, 12 layers, embedding_size 128; base = 768/12; large = 1024/24 (embedding = hidden);
  heads = hidden // 64, FFN = 4 * hidden. The generator has `round(hidden * generator_hidden_size)` units
  (fraction 0.25 for small and large, 1/3 for base), `round(layers * generator_layers)` layers, FFN 4x, heads
  max(1, hidden // 64). Large masks 25 % of the tokens, the others 15 %.
- "gelu" is the exact erf form in ELECTRA (the tanh form in BERT); LayerNorm epsilon 1e-12; dropout 0.1.
- Word/position/type embeddings (and their LayerNorm) are SHARED: both networks read `electra/embeddings/*`; each
  network projects them to its own width with its own `{scope}/embeddings_project` when the widths differ. With
  `untied_generator_embeddings` the generator has its own `generator/embeddings/*` at its own width.
- Dynamic masking, per step, in the graph: `N = int((mask_prob + 0.005) * seq_len)` prediction slots; each example
  predicts `max(1, min(N, round(num_real_tokens * mask_prob)))` positions drawn from its real tokens other than
  [CLS]/[SEP]/[MASK]/[PAD]; a chosen position shows [MASK] to the generator with probability 0.85 and its own token
  otherwise (no random-token replacement). Unused slots have position 0 and weight 0.
- Generator head: dense(embedding width, gelu) + LayerNorm, logits tied to the word embeddings, plus output_bias.
  Samples: Gumbel-max over `logits / temperature` (with `disallow_correct`, the true token's logit is lowered by
  1000 first); no gradient reaches the generator through them. The discriminator reads the original ids with the
  samples written at the chosen positions; a token is "replaced" when it differs from the original (a sample equal
  to the original counts as real).
- Discriminator head: dense(hidden, gelu) then dense(1); sigmoid cross-entropy over real (non-pad) tokens.
  Loss = gen_weight (1) x MLM + disc_weight (50) x discriminator.
- Variable names of the released checkpoints (`tf1_variable_map`): electra/embeddings/*,
  electra/embeddings_project/*, electra/encoder/layer_N/*, generator/embeddings_project/*,
  generator/encoder/layer_N/*, generator_predictions/{dense,LayerNorm,output_bias},
  discriminator_predictions/{dense,dense_1}.

Decisions that differ from the original, on purpose:
- Positions are drawn WITHOUT replacement (Gumbel top-k over the candidates). The original draws N times with
  replacement (`tf.random.categorical`), so a few positions repeat: the example then has fewer distinct masked tokens
  than intended and the repeated targets count twice in the MLM loss. An example with fewer candidates than its
  quota masks them all (the original would divide by zero on an example with none).
- Losses and metrics are sums and counts (`models.base.Term`), divided after the all-reduce, so N replicas equal one.
- The AUC the original reports in eval is computed by `evaluate()` over an eval set (a streaming Keras AUC with the
  real tokens as sample weights; the original fed padding into it as label 0 / prob 0), not in the train step.
- The special ids come from the data's manifest (`settings.special_ids`, written by problems/electra_pretrain.py):
  a vocab built by this framework has [PAD] [UNK] [CLS] [SEP] [MASK] at 0-4, Google's at 0/100/101/102/103.
- Only the default generator is implemented (a separate, smaller network: the original's `untied_generator=True`);
  the original's experimental `uniform_generator` and `electra_objective=False` (BERT) modes are not.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, NamedTuple

import tensorflow as tf
from absl import logging

from textrain.framework.registry import register_model
from textrain.models import hf_format
from textrain.models.base import StepOutput, Term, TrainableModel, model_setting
from textrain.models.bert import BertConfig, MaskedLMHead, check_data_fits, encoder_from_config
from textrain.models.checkpoints import load_tf1_checkpoint
from textrain.models.layers.activations import get_activation
from textrain.models.layers.dense import Dense
from textrain.models.layers.embeddings import TransformerEmbeddings, truncated_normal
from textrain.models.layers.fused import sparse_softmax_cross_entropy
from textrain.models.layers.transformer import dense_variable_map, layer_norm_variable_map
from textrain.models.task_heads import ClassifierModel, num_labels_from_manifest, task_type_from_manifest

# configure_pretraining.py / training_utils.get_bert_config and the paper's Table 6.
SIZES: dict[str, dict[str, Any]] = {
    "small": dict(hidden_size=256, num_hidden_layers=12, embedding_size=128, generator_hidden_size=0.25,
                  mask_prob=0.15),
    "base": dict(hidden_size=768, num_hidden_layers=12, embedding_size=768, generator_hidden_size=1 / 3,
                 mask_prob=0.15),
    "large": dict(hidden_size=1024, num_hidden_layers=24, embedding_size=1024, generator_hidden_size=0.25,
                  mask_prob=0.25),
}
# The ids of bert/electra's released uncased vocab.txt; used only when the data's manifest does not say.
GOOGLE_VOCAB_SPECIAL_IDS = {"[PAD]": 0, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
MASK_TOKEN_PROB = 0.85  # a chosen position shows [MASK]; otherwise it keeps its token
DISALLOW_PENALTY = 1000.0


# =============================================================================================== #
# Configuration
# =============================================================================================== #
@dataclasses.dataclass
class ElectraConfig(BertConfig):
    """The discriminator's transformer (BertConfig fields, ELECTRA-small defaults) plus the
    generator's size relative to it. Parsing and validation are BertConfig's."""

    vocab_size: int
    hidden_size: int = 256
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    hidden_act: str = "gelu_exact"
    embedding_size: int | None = 128
    generator_hidden_size: float = 0.25  # fraction of hidden_size
    generator_layers: float = 1.0  # fraction of num_hidden_layers
    untied_generator_embeddings: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.generator_hidden_size <= 1 or not 0 < self.generator_layers <= 1:
            raise ValueError(f"generator_hidden_size ({self.generator_hidden_size}) and generator_layers "
                             f"({self.generator_layers}) are fractions of the discriminator's, in (0, 1]")
        self.generator_config()  # validates the generator's transformer too

    @classmethod
    def preset(cls, size: str, vocab_size: int = 30522, **overrides: Any) -> "ElectraConfig":
        """The released sizes: `small`, `base`, `large`."""
        if size not in SIZES:
            raise ValueError(f"unknown ELECTRA size {size!r}; known: {', '.join(SIZES)}")
        values = {k: v for k, v in SIZES[size].items() if k != "mask_prob"}
        hidden = values["hidden_size"]
        values.update(num_attention_heads=max(1, hidden // 64), intermediate_size=4 * hidden)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(vocab_size=vocab_size, **values)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config dict") -> "ElectraConfig":
        """From an ELECTRA/BERT-style json dict; "gelu" means the erf form there (ELECTRA's modeling.py),
        and a missing embedding_size means the hidden size, as in the original."""
        values = dict(values)
        if values.get("hidden_act") == "gelu":
            values["hidden_act"] = "gelu_exact"
        values.setdefault("embedding_size", None)
        return super().from_dict(values, source)

    @property
    def embedding_width(self) -> int:
        return self.embedding_size or self.hidden_size

    def _bert(self, **changes: Any) -> BertConfig:
        fields = {f.name for f in dataclasses.fields(BertConfig)}
        values = {k: v for k, v in dataclasses.asdict(self).items() if k in fields}
        values.update(changes)
        return BertConfig(**values)

    def discriminator_config(self) -> BertConfig:
        return self._bert(embedding_size=self.embedding_width)

    def generator_config(self) -> BertConfig:
        """run_pretraining.get_generator_config: a narrower (and optionally shallower) transformer."""
        hidden = int(round(self.hidden_size * self.generator_hidden_size))
        return self._bert(
            hidden_size=hidden, num_hidden_layers=max(1, int(round(self.num_hidden_layers * self.generator_layers))),
            intermediate_size=4 * hidden, num_attention_heads=max(1, hidden // 64),
            embedding_size=None if self.untied_generator_embeddings else self.embedding_width)


@dataclasses.dataclass
class ElectraObjective:
    """The pretraining task's knobs (configure_pretraining.py defaults)."""

    mask_prob: float = 0.15
    gen_weight: float = 1.0
    disc_weight: float = 50.0
    temperature: float = 1.0
    disallow_correct: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.mask_prob < 1:
            raise ValueError(f"--mask_prob must be in (0, 1), got {self.mask_prob}")
        if self.temperature <= 0:
            raise ValueError(f"--temperature must be > 0, got {self.temperature}")
        if self.gen_weight < 0 or self.disc_weight < 0:
            raise ValueError(f"--gen_weight ({self.gen_weight}) and --disc_weight ({self.disc_weight}) must be >= 0")

    def max_predictions(self, seq_length: int) -> int:
        """configure_pretraining's max_predictions_per_seq."""
        return int((self.mask_prob + 0.005) * seq_length)


# =============================================================================================== #
# Masking and sampling (pure tensor functions)
# =============================================================================================== #
class MaskedInputs(NamedTuple):
    input_ids: tf.Tensor  # [B, L] int32, what the generator reads
    positions: tf.Tensor  # [B, N] int32, 0 in unused slots
    label_ids: tf.Tensor  # [B, N] int32 original ids, 0 in unused slots
    weights: tf.Tensor  # [B, N] float32, 1 for used slots


class SeededDraws:
    """Training-time draws (masking, sampling) from a Keras SeedGenerator, one fresh stateless seed per
    draw with the replica id folded in (replicas mask differently). The generator's state is in the
    trainer's checkpoint (trainers/checkpointing.seed_states), so a resumed run draws what the uninterrupted one would;
    stateful `tf.random` ops would restart from their first draw."""

    def __init__(self, seed_generator: tf.keras.random.SeedGenerator):
        self.seed_generator = seed_generator

    def uniform(self, shape, dtype=tf.float32) -> tf.Tensor:
        ctx = tf.distribute.get_replica_context()
        replica = 0 if ctx is None else ctx.replica_id_in_sync_group
        seed = tf.random.experimental.stateless_fold_in(tf.cast(self.seed_generator.next(), tf.int64), replica)
        return tf.random.stateless_uniform(shape, seed=seed, dtype=dtype)


def _uniform(shape, rng: tf.random.Generator | SeededDraws | None) -> tf.Tensor:
    if rng is not None:
        return rng.uniform(shape, dtype=tf.float32)
    return tf.random.uniform(shape, dtype=tf.float32)


def _gumbel(shape, rng: tf.random.Generator | SeededDraws | None) -> tf.Tensor:
    u = _uniform(shape, rng)
    return -tf.math.log(-tf.math.log(u + 1e-9) + 1e-9)


def scatter_positions(values: tf.Tensor, positions: tf.Tensor, weights: tf.Tensor, length: int
                      ) -> tuple[tf.Tensor, tf.Tensor]:
    """`[B, N]` values at distinct `positions` -> (`[B, L]` values, `[B, L]` bool hit mask); weight-0 slots ignored."""
    hits = tf.one_hot(positions, length, dtype=tf.int32) * tf.cast(weights, tf.int32)[..., tf.newaxis]
    placed = tf.reduce_sum(hits * tf.cast(values, tf.int32)[..., tf.newaxis], axis=1)
    return placed, tf.reduce_max(hits, axis=1) > 0


def mask_tokens(input_ids: tf.Tensor, input_mask: tf.Tensor, *, num_predictions: int, mask_prob: float,
                mask_id: int, ignore_ids: Iterable[int], rng: tf.random.Generator | SeededDraws | None = None,
                word_start: tf.Tensor | None = None) -> MaskedInputs:
    """ELECTRA's dynamic masking (see the module docstring), positions drawn without replacement.

    With `word_start` ([B, L], 1 where a token starts a word: records of electra_pretrain
    --do_whole_word_mask) whole words are masked instead (`_whole_word_scores`)."""
    input_ids = tf.cast(input_ids, tf.int32)
    length = input_ids.shape[1]
    if length is None:
        raise ValueError("mask_tokens needs a static sequence length (fixed-length batches)")
    if not 0 < num_predictions <= length:
        raise ValueError(f"num_predictions must be in [1, {length}], got {num_predictions} "
                         f"(mask_prob too small for the sequence length?)")
    real = tf.cast(input_mask, tf.bool)
    candidates = real
    for token_id in ignore_ids:
        candidates &= tf.not_equal(input_ids, token_id)
    num_real = tf.reduce_sum(tf.cast(real, tf.float32), axis=-1)
    quota = tf.clip_by_value(tf.cast(tf.round(num_real * mask_prob), tf.int32), 1, num_predictions)
    quota = tf.minimum(quota, tf.reduce_sum(tf.cast(candidates, tf.int32), axis=-1))
    batch = tf.shape(input_ids)[0]
    scores = tf.where(candidates, _gumbel([batch, length], rng), tf.constant(-1e9, tf.float32))
    if word_start is not None:
        scores, quota = _whole_word_scores(scores, candidates, word_start, quota, _gumbel([batch, length], rng))
    _, positions = tf.math.top_k(scores, k=num_predictions)  # candidates first, in random order
    used = tf.sequence_mask(quota, num_predictions)
    positions = tf.where(used, positions, 0)
    weights = tf.cast(used, tf.float32)
    label_ids = tf.where(used, tf.gather(input_ids, positions, batch_dims=1), 0)
    show_mask = used & (_uniform([batch, num_predictions], rng) < MASK_TOKEN_PROB)
    _, to_mask = scatter_positions(tf.zeros_like(positions), positions, tf.cast(show_mask, tf.float32), length)
    masked_ids = tf.where(to_mask, tf.constant(mask_id, tf.int32), input_ids)
    return MaskedInputs(tf.stop_gradient(masked_ids), positions, label_ids, weights)


def _whole_word_scores(token_scores: tf.Tensor, candidates: tf.Tensor, word_start: tf.Tensor, quota: tf.Tensor,
                       word_keys: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """BERT's whole-word choice in the graph: words in a uniformly random order (`word_keys`, one random key
    per word slot), a word that would overflow the quota skipped and later ones still tried (bert_pretrain's
    rule). Returns token scores that rank the chosen tokens first (the others -1e9) and their number (the new
    quota, <= the old).

    A word is a token with word_start = 1 and the tokens after it with 0; its size counts its candidate
    tokens only, so [CLS]/[SEP] or a word cut at an example's start never block others.
    """
    batch, length = tf.shape(token_scores)[0], token_scores.shape[1]
    word = tf.maximum(tf.cumsum(tf.cast(word_start, tf.int32), axis=1) - 1, 0)          # [B, L] word index
    flat = word + tf.range(batch)[:, tf.newaxis] * length
    sizes = tf.reshape(tf.math.unsorted_segment_sum(tf.cast(candidates, tf.int32), flat, batch * length),
                       [batch, length])                                                  # [B, W] candidates
    keys = tf.where(sizes > 0, word_keys, tf.constant(-2e9, tf.float32))
    order = tf.argsort(keys, axis=1, direction="DESCENDING")                             # visit order
    sorted_sizes = tf.gather(sizes, order, batch_dims=1)

    def visit(count: tf.Tensor, size: tf.Tensor) -> tf.Tensor:  # one word per step, all rows at once
        take = (size > 0) & (count + size <= quota)
        return count + tf.where(take, size, 0)

    counts = tf.scan(visit, tf.transpose(sorted_sizes), initializer=tf.zeros_like(quota))  # [W, B] running
    before = tf.concat([tf.zeros_like(quota)[tf.newaxis], counts[:-1]], axis=0)
    taken_sorted = tf.transpose(counts > before)                                           # [B, W]
    taken = tf.gather(taken_sorted, tf.argsort(order, axis=1), batch_dims=1)              # by word index
    chosen = candidates & tf.gather(taken, word, batch_dims=1)
    scores = tf.where(chosen, token_scores, tf.constant(-1e9, tf.float32))
    return scores, tf.reduce_sum(tf.cast(chosen, tf.int32), axis=1)


def sample_tokens(logits: tf.Tensor, temperature: float = 1.0, disallow_ids: tf.Tensor | None = None,
                  rng: tf.random.Generator | SeededDraws | None = None) -> tf.Tensor:
    """Gumbel-max samples `[B, N]` from softmax(logits / temperature); `disallow_ids` get their logit lowered."""
    logits = tf.cast(logits, tf.float32) / temperature
    if disallow_ids is not None:
        logits -= DISALLOW_PENALTY * tf.one_hot(disallow_ids, tf.shape(logits)[-1], dtype=tf.float32)
    noisy = logits + _gumbel(tf.shape(logits), rng)
    return tf.stop_gradient(tf.argmax(noisy, axis=-1, output_type=tf.int32))


def replace_tokens(input_ids: tf.Tensor, masked: MaskedInputs, sampled: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(the discriminator's ids: originals with the samples at the chosen positions, labels 1 = replaced)."""
    input_ids = tf.cast(input_ids, tf.int32)
    placed, hit = scatter_positions(sampled, masked.positions, masked.weights, input_ids.shape[1])
    fake_ids = tf.where(hit, placed, input_ids)
    labels = tf.cast(hit & tf.not_equal(fake_ids, input_ids), tf.int32)
    return tf.stop_gradient(fake_ids), labels


# =============================================================================================== #
# The model
# =============================================================================================== #
class DiscriminatorHead(tf.keras.layers.Layer):
    """dense(hidden, act) -> dense(1): one float32 logit per token."""

    def __init__(self, hidden_size: int, hidden_act: str, initializer_range: float,
                 name: str = "discriminator_predictions", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense = Dense(hidden_size, activation=get_activation(hidden_act),
                                           kernel_initializer=truncated_normal(initializer_range), name="dense")
        # The original's dense_1 has tf.layers' default (Glorot uniform) initialiser.
        self.dense_1 = Dense(1, name="dense_1")

    def build(self, input_shape) -> None:
        # Built here, not lazily in call: sub-layers first built inside call get TF variable names without
        # their own scope (both kernels "discriminator_predictions/kernel"), so a checkpoint recorded one
        # name for two variables and --model_dir's resume check (trainers/checkpoint_checks.py, which reads
        # those names) refused every ELECTRA pretraining checkpoint.
        self.dense.build(input_shape)
        self.dense_1.build((None, self.dense.units))
        self.built = True

    def call(self, sequence_output: tf.Tensor) -> tf.Tensor:
        return tf.cast(tf.squeeze(self.dense_1(self.dense(sequence_output)), -1), tf.float32)

    def tf1_variable_map(self, scope: str = "discriminator_predictions") -> dict[str, tf.Variable]:
        names = dense_variable_map(f"{scope}/dense", self.dense)
        names.update(dense_variable_map(f"{scope}/dense_1", self.dense_1))
        return names


@dataclasses.dataclass
class ElectraSettings:
    """ELECTRA's model flags (google-research/electra configure_pretraining.py); None: the preset."""

    model_size: str | None = model_setting('small | base | large preset (BERT and ELECTRA).')
    vocab_size: int | None = model_setting("Vocabulary size (default: the data manifest's).")
    mask_prob: float | None = model_setting('Masking probability (original 0.15).')
    gen_weight: float | None = model_setting('Generator MLM loss weight (original 1.0).')
    disc_weight: float | None = model_setting('Discriminator loss weight (original 50.0).')
    generator_hidden_size: float | None = model_setting(
        "Generator width as a fraction of the discriminator's (original 0.25).")
    temperature: float | None = model_setting('Gumbel sampling temperature (original 1.0).')
    disallow_correct: bool | None = model_setting('Never sample the original token (original False).')
    generator_layers: float | None = model_setting(
        "Generator depth as a fraction of the discriminator's (original 1.0).")
    embedding_size: int | None = model_setting('Embedding width; projected when it differs from the hidden size.')
    untied_generator_embeddings: bool | None = model_setting('Separate generator embeddings (original: tied).')
    electra_config_file: str | None = model_setting('ELECTRA discriminator config JSON (BERT format).')


@register_model(name="electra")
class ElectraPretrainer(TrainableModel):
    """Generator + discriminator trained with replaced token detection.

    Features: `input_ids`, `input_mask`, `segment_ids` `[B, L]` (problems/electra_pretrain.py records).
    """

    Settings = ElectraSettings  # its fields are trainer flags (trainers/trainer_flags.py)

    def __init__(self, config: ElectraConfig, objective: ElectraObjective | None = None,
                 special_ids: dict[str, int] | None = None, name: str = "electra_pretrainer", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config
        self.objective = objective or ElectraObjective()
        special_ids = dict(special_ids or GOOGLE_VOCAB_SPECIAL_IDS)
        missing = [t for t in GOOGLE_VOCAB_SPECIAL_IDS if t not in special_ids]
        if missing:
            raise ValueError(f"special_ids lacks {', '.join(missing)}")
        self.special_ids = special_ids
        disc_config, gen_config = config.discriminator_config(), config.generator_config()
        self.discriminator = encoder_from_config(disc_config, name="discriminator")
        shared = None if config.untied_generator_embeddings else self.discriminator.embeddings
        self.generator = encoder_from_config(gen_config, embeddings=shared, name="generator")
        self.generator_head = MaskedLMHead(self.generator.embeddings, gen_config.hidden_act,
                                           gen_config.initializer_range, name="generator_predictions")
        self.discriminator_head = DiscriminatorHead(disc_config.hidden_size, disc_config.hidden_act,
                                                    disc_config.initializer_range)
        self.seed_generator = tf.keras.random.SeedGenerator(seed=None, name="replacement_seed")
        self._train_draws = SeededDraws(self.seed_generator)
        self._build_variables()

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original"):
        return cls(ElectraConfig.from_dict(config))

    @classmethod
    def from_settings(cls, *, size: str | None = None, config_file: str | None = None,
                      vocab_size: int | None = None, mask_prob: float | None = None, gen_weight: float = 1.0,
                      disc_weight: float = 50.0, temperature: float = 1.0, disallow_correct: bool = False,
                      generator_hidden_size: float | None = None, generator_layers: float | None = None,
                      embedding_size: int | None = None, untied_generator_embeddings: bool | None = None,
                      manifest: dict | None = None, **_other: Any) -> "ElectraPretrainer":
        """The one constructor (every trainer builds the model through it): the config of
        `pretraining_config`, the objective (configure_pretraining.py's names; `mask_prob` defaults to
        the size's), the special ids from the data manifest. Settings of other families are not ELECTRA's."""
        generator = dict(generator_hidden_size=generator_hidden_size, generator_layers=generator_layers,
                         embedding_size=embedding_size, untied_generator_embeddings=untied_generator_embeddings)
        config, source = pretraining_config(size, config_file, vocab_size, generator, manifest)
        check_data_fits(config.discriminator_config(), manifest, source)
        special_ids = ((manifest or {}).get("settings") or {}).get("special_ids")
        if not special_ids:
            logging.warning("the data manifest has no special_ids; assuming Google's vocab ids %s",
                           GOOGLE_VOCAB_SPECIAL_IDS)
        default_mask = SIZES.get(size or "small", SIZES["small"])["mask_prob"]
        objective = ElectraObjective(
            mask_prob=float(default_mask if mask_prob is None else mask_prob), gen_weight=float(gen_weight),
            disc_weight=float(disc_weight), temperature=float(temperature), disallow_correct=bool(disallow_correct))
        return cls(config, objective, special_ids)

    @property
    def embeddings(self) -> TransformerEmbeddings:
        return self.discriminator.embeddings

    def _build_variables(self) -> None:
        """Create every variable now (a tiny forward pass), so maps, optimizers and restores work at once."""
        ids = tf.zeros([1, 2], tf.int32)
        ones = tf.ones([1, 2], tf.int32)
        self.discriminator_head(self.discriminator(ids, ones, ids))  # first: the shared embeddings live here
        self.generator_head(self.generator(ids, ones, ids), tf.zeros([1, 1], tf.int32))

    # ------------------------------------------------------------------ forward
    def generator_logits(self, input_ids, input_mask, segment_ids, positions, training: bool = False) -> tf.Tensor:
        """float32 `[B, N, vocab]` MLM logits at `positions`."""
        hidden = self.generator(input_ids, input_mask, segment_ids, training=training)
        return self.generator_head(hidden, positions)

    def discriminator_logits(self, input_ids, input_mask, segment_ids, training: bool = False) -> tf.Tensor:
        """float32 `[B, L]` replaced-token logits."""
        return self.discriminator_head(self.discriminator(input_ids, input_mask, segment_ids, training=training))

    def call(self, features: dict[str, tf.Tensor], training: bool = False,
             rng: tf.random.Generator | SeededDraws | None = None) -> dict[str, tf.Tensor]:
        """Mask, run the generator, sample, run the discriminator. Returns every intermediate."""
        input_ids = tf.cast(features["input_ids"], tf.int32)
        input_mask = tf.cast(features["input_mask"], tf.int32)
        segment_ids = tf.cast(features["segment_ids"], tf.int32)
        obj, ids = self.objective, self.special_ids
        masked = mask_tokens(input_ids, input_mask, num_predictions=obj.max_predictions(input_ids.shape[1]),
                             mask_prob=obj.mask_prob, mask_id=ids["[MASK]"],
                             ignore_ids=[ids[t] for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]")], rng=rng,
                             word_start=features.get("word_start"))  # whole-word data (electra_pretrain)
        mlm_logits = self.generator_logits(masked.input_ids, input_mask, segment_ids, masked.positions, training)
        sampled = sample_tokens(mlm_logits, obj.temperature,
                                masked.label_ids if obj.disallow_correct else None, rng)
        fake_ids, labels = replace_tokens(input_ids, masked, sampled)
        disc_logits = self.discriminator_logits(fake_ids, input_mask, segment_ids, training)
        return {"masked": masked, "mlm_logits": mlm_logits, "sampled_ids": sampled, "fake_ids": fake_ids,
                "disc_labels": labels, "disc_logits": disc_logits, "input_mask": input_mask}

    def step_output(self, features: dict[str, tf.Tensor], state: Any, training: bool) -> StepOutput:
        out = self(features, training=training, rng=self._train_draws if training else None)
        losses, metrics = electra_terms(out, self.objective)
        return StepOutput(losses=losses, metrics=metrics, state=state if state is not None else {})

    # ------------------------------------------------------------------ original checkpoints
    def tf1_variable_map(self) -> dict[str, tf.Variable]:
        names = self.discriminator.tf1_variable_map("electra")
        names.update(self.generator.tf1_variable_map(
            "generator", include_embeddings=self.config.untied_generator_embeddings))
        head = self.generator_head
        names.update(dense_variable_map("generator_predictions/dense", head.dense))
        names.update(layer_norm_variable_map("generator_predictions/LayerNorm", head.layer_norm))
        names["generator_predictions/output_bias"] = head.output_bias
        names.update(self.discriminator_head.tf1_variable_map())
        return names

    def load_tf1_checkpoint(self, path: str) -> list[str]:
        """Import an original ELECTRA pretraining checkpoint (generator and discriminator)."""
        return load_tf1_checkpoint(path, self.tf1_variable_map())


def electra_terms(out: dict[str, Any], objective: ElectraObjective) -> tuple[dict[str, Term], dict[str, Term]]:
    """(losses, metrics) as sums and counts: the original's loss and its eval metrics except AUC."""
    masked: MaskedInputs = out["masked"]
    weights = masked.weights
    count = tf.reduce_sum(weights)
    ce = sparse_softmax_cross_entropy(masked.label_ids, out["mlm_logits"])
    predicted = tf.argmax(out["mlm_logits"], axis=-1, output_type=tf.int32)

    real = tf.cast(out["input_mask"], tf.float32)
    labels = out["disc_labels"]
    logits = out["disc_logits"]
    bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits)
    preds = tf.cast(logits > 0, tf.int32)
    right = tf.cast(tf.equal(preds, labels), tf.float32) * real
    predicted_fake = tf.cast(preds, tf.float32) * real
    actual_fake = tf.cast(labels, tf.float32) * real

    def weighted_hits(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.cast(tf.equal(a, b), tf.float32) * weights)

    losses = {
        "mlm": Term(tf.reduce_sum(ce * weights), count, float(objective.gen_weight)),
        "disc": Term(tf.reduce_sum(bce * real), tf.reduce_sum(real), float(objective.disc_weight)),
    }
    metrics = {
        "mlm_accuracy": Term(weighted_hits(predicted, masked.label_ids), count),
        "sampled_accuracy": Term(weighted_hits(out["sampled_ids"], masked.label_ids), count),
        "disc_accuracy": Term(tf.reduce_sum(right), tf.reduce_sum(real)),
        "disc_precision": Term(tf.reduce_sum(right * predicted_fake), tf.reduce_sum(predicted_fake)),
        "disc_recall": Term(tf.reduce_sum(right * actual_fake), tf.reduce_sum(actual_fake)),
        "replaced_fraction": Term(tf.reduce_sum(actual_fake), tf.reduce_sum(real)),
    }
    return losses, metrics


def evaluate(model: ElectraPretrainer, dataset: tf.data.Dataset, num_batches: int | None = None,
             seed: int = 0) -> dict[str, float]:
    """Eval-set means of the losses and metrics, plus the discriminator's AUC over real tokens.

    Masking and sampling use a `tf.random.Generator` from `seed`, so two evaluations of one model agree.
    """
    rng = tf.random.Generator.from_seed(seed)
    auc = tf.keras.metrics.AUC(num_thresholds=200)
    sums: dict[str, list[float]] = {}

    @tf.function
    def run(features):
        out = model(features, training=False, rng=rng)
        losses, metrics = electra_terms(out, model.objective)
        return out, {**{f"{k}_loss": v for k, v in losses.items()}, **metrics}

    for i, features in enumerate(dataset):
        if num_batches is not None and i >= num_batches:
            break
        out, terms = run(features)
        auc.update_state(out["disc_labels"], tf.sigmoid(out["disc_logits"]),
                         sample_weight=tf.cast(out["input_mask"], tf.float32))
        for k, t in terms.items():
            total, count = sums.setdefault(k, [0.0, 0.0])
            sums[k] = [total + float(t.total), count + float(t.count)]
    result = {k: (total / count if count else float("nan")) for k, (total, count) in sums.items()}
    result["disc_auc"] = float(auc.result())
    return result


# =============================================================================================== #
# Fine-tuning
# =============================================================================================== #
# The fine-tuning heads' variants: "original" (google-research/electra's, the default) or "hf" (transformers'
# Electra*: what an HF checkpoint with a fine-tuned head holds). An HF directory's architecture names its variant.
HEADS = ("original", "hf")


def check_head(head: str) -> str:
    if head not in HEADS:
        raise ValueError(f"head={head!r}: use one of {', '.join(HEADS)}")
    return head


@dataclasses.dataclass
class ElectraHeadSettings:
    """The trainer flag (and finetune.model_settings key) of the ELECTRA fine-tuning heads."""

    head: str | None = model_setting("ELECTRA fine-tuning head: original (default) | hf (transformers' "
                                     "ElectraForSequenceClassification / ElectraForQuestionAnswering head).")


@register_model(name="electra_classifier")
class ElectraClassifier(ClassifierModel):
    """The discriminator with ELECTRA's sequence-level head (finetune/classification/classification_tasks.py).

    As the original: the representation is the discriminator's final hidden state of the first token
    ([CLS]) with NO pooler dense (ELECTRA's `get_pooled_output` is `sequence_output[:, 0]`), then dropout
    0.1 (hard-coded `keep_prob=0.9` there) in training, then one dense to `num_labels` with tf.layers'
    default Glorot-uniform kernel, under `task_specific/{task_name}/dense` (run_finetuning.py's scope).
    Regression is the same dense with one unit (squared error), as its RegressionTask.

    `head="hf"`: transformers' ElectraClassificationHead instead: [CLS] state -> dropout -> dense(hidden)
    -> exact gelu -> dropout -> dense(num_labels) (`classifier_dense`, `out_proj`; HF `classifier.dense`,
    `classifier.out_proj`), dropout the encoder's hidden_dropout_prob as HF's default.
    """

    Settings = ElectraHeadSettings
    serves_raw_text = True  # WordPiece: tokenised in the serving graph (trainers/export.py)

    encoder_attribute = "discriminator"
    # Pretraining-only parts of an original ELECTRA checkpoint.
    init_allow_unexpected = (r"^generator/", r"^generator_predictions/", r"^discriminator_predictions/")
    HEAD_DROPOUT = 0.1

    def __init__(self, config: ElectraConfig, num_labels: int = 2, task_type: str = "classification",
                 task_name: str = "task", head: str = "original", name: str = "electra_classifier", **kwargs):
        super().__init__(num_labels, task_type, name=name, **kwargs)
        self.config = config
        self.task_name = task_name or "task"
        self.head_variant = check_head(head)
        self.discriminator = encoder_from_config(config.discriminator_config(), name="discriminator")
        ids = tf.zeros([1, 2], tf.int32)
        cls = self.discriminator(ids, tf.ones([1, 2], tf.int32), ids)[:, 0]
        if head == "hf":
            self.head_dropout = tf.keras.layers.Dropout(config.hidden_dropout_prob)
            self.classifier_dense = Dense(config.hidden_size, activation=get_activation("gelu_exact"),
                                          name="classifier_dense")
            self.out_proj = Dense(num_labels, name="out_proj")
            self.out_proj(self.classifier_dense(cls))  # create every variable now
        else:
            self.head_dropout = tf.keras.layers.Dropout(self.HEAD_DROPOUT)
            self.dense = Dense(num_labels, name="dense")
            self.dense(cls)

    @property
    def num_layers(self) -> int:
        return self.config.num_hidden_layers

    def logits(self, features: dict[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        hidden = self.discriminator(features["input_ids"], features.get("input_mask"), features.get("segment_ids"),
                                    training=training)
        x = self.head_dropout(hidden[:, 0], training=training)
        if self.head_variant == "hf":
            x = self.out_proj(self.head_dropout(self.classifier_dense(x), training=training))
        else:
            x = self.dense(x)
        return tf.cast(x, tf.float32)

    def encoder_tf1_variable_map(self) -> dict[str, tf.Variable]:
        return self.discriminator.tf1_variable_map("electra")

    def head_tf1_variable_map(self) -> dict[str, tf.Variable]:
        if self.head_variant == "hf":  # models/hf_format.py's names of ElectraForSequenceClassification's head
            scope = f"{hf_format.HF_ONLY_SCOPE}/classifier"
            return {**dense_variable_map(f"{scope}/dense", self.classifier_dense),
                    **dense_variable_map(f"{scope}/out_proj", self.out_proj)}
        return dense_variable_map(f"task_specific/{self.task_name}/dense", self.dense)

    @classmethod
    def from_config(cls, config: dict, *, num_labels: int | None = None, n_top: tuple[int, int] = (5, 5),
                    head: str = "original") -> "ElectraClassifier":
        return cls(ElectraConfig.from_dict(config), num_labels=int(num_labels or 2), head=head)

    @classmethod
    def from_settings(cls, *, num_labels: int | None = None, task_type: str | None = None, size: str | None = None,
                      config_file: str | None = None, overrides: dict | None = None,
                      manifest: dict | None = None, task_name: str | None = None, head: str | None = None,
                      **_other: Any) -> "ElectraClassifier":
        """The one constructor: a size preset (default small) or a config json, `overrides`; the label
        count, task type and head scope name default to the data manifest's; `head` the variant (default
        original). Settings of other model families (`_other`) are not ELECTRA's."""
        task_type = task_type or task_type_from_manifest(manifest)
        num_labels = num_labels_from_manifest(manifest, task_type) if num_labels is None else num_labels
        if task_name is None:
            task_name = str((manifest or {}).get("problem", ""))
        config = config_from_settings(size, config_file, overrides, manifest)
        return cls(config, num_labels=num_labels, task_type=task_type, task_name=task_name,
                   head=check_head(head or "original"))


def config_from_settings(size: str | None, config_file: str | None, overrides: dict | None,
                         manifest: dict | None) -> ElectraConfig:
    """A fine-tuning model's config (every ELECTRA fine-tuning head): a size preset (default small)
    with the data's vocab size, or a config json; `overrides` replace fields. Refuses data it cannot embed."""
    settings = (manifest or {}).get("settings") or {}
    if config_file and hf_format.is_hf_directory(config_file):  # a Hugging Face discriminator's config.json
        values = hf_format.electra_config_dicts(hf_format.read_config(config_file), None, config_file)
        config, source = ElectraConfig.from_dict(values, source=config_file), config_file
    elif config_file:
        config, source = ElectraConfig.from_json_file(config_file), config_file
    else:
        size = size or "small"
        vocab_size = int(settings.get("vocab_size") or settings.get("inputs_vocab_size") or 30522)
        config, source = ElectraConfig.preset(size, vocab_size=vocab_size), f"size {size} (vocab_size {vocab_size})"
    if overrides:
        config = dataclasses.replace(config, **overrides)
    check_data_fits(config.discriminator_config(), manifest, source)
    return config


def pretraining_config(size: str | None, config_file: str | None, vocab_size: int | None,
                       generator: dict[str, Any], manifest: dict | None) -> tuple[ElectraConfig, str]:
    """(config, where it came from): `config_file` if given, else the `size` preset (default small)
    with the data's vocab size (else `vocab_size`); `generator` (generator_hidden_size, generator_layers,
    embedding_size, untied_generator_embeddings; None = not given) replaces fields of either."""
    given = {k: v for k, v in generator.items() if v is not None}
    if config_file:
        config = ElectraConfig.from_json_file(config_file)
        return dataclasses.replace(config, **given), f"config file {config_file}"
    size = size or "small"
    settings = (manifest or {}).get("settings") or {}
    vocab_size = int(settings.get("vocab_size") or vocab_size or 30522)
    return ElectraConfig.preset(size, vocab_size=vocab_size, **given), f"model_size={size} (vocab_size {vocab_size})"
