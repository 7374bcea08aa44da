"""Optimizers and learning-rate schedules for the one training loop (trainers/core.py).

Decisions:
- The optimizers are small `tf.Module`s that own their slot variables (created eagerly by `build`, in the
  strategy scope, in the order of the model's trainable variables), not `keras.optimizers.Optimizer`
  subclasses: Keras computes one learning rate per step, while layer-wise LR decay (ELECTRA fine-tuning)
  needs a *real per-variable learning rate*, and the original BERT AdamW has no bias correction, which no
  Keras optimizer reproduces. Because every slot exists before the first `Checkpoint.restore`, restoring
  is immediate and exact (no deferred slot restoration). Keras 3 variables are unwrapped to their
  `tf.Variable` for the distributed update.
- `apply_gradients` expects gradients that are ALREADY aggregated across replicas (the loop all-reduces
  and clips them); it applies them with `merge_call` + `strategy.extended.update`, the one mechanism that
  works for OneDevice, Mirrored, MultiWorkerMirrored and TPU strategies alike.
- AdamW follows google-research/bert `AdamWeightDecayOptimizer`: no bias correction, epsilon 1e-6,
  update = m / (sqrt(v) + eps) + weight_decay * param, param -= lr * update; decay skipped for variables
  whose name matches "LayerNorm", "layer_norm" or "bias" (searched in the variable's path).
- LAMB follows You et al. (2019): bias-corrected Adam direction plus decoupled decay, scaled by the trust
  ratio ||param|| / ||update|| (1 where either norm is 0, and for variables excluded from layer adaptation,
  which default to the weight-decay exclusions).
- Schedules: linear warmup from 0 to the peak, then polynomial (power 1 = linear) or cosine decay to
  `end_lr`. By default, as BERT/ELECTRA, the decay runs over the whole `num_train_steps` and warmup
  overrides its start; `offset_warmup=True` starts the decay at the end of warmup (XLNet).
- `rsqrt_decay` is tensor2tensor's Transformer schedule `constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size`:
  lr(step) = peak * min(1, step / warmup) * rsqrt(max(step, warmup)) * rsqrt(hidden) (the hidden factor
  only when `hidden_size` is given), where `peak` is t2t's learning_rate_constant (2.0). It peaks at
  step = warmup at peak / sqrt(warmup * hidden) and falls as 1/sqrt(step); `num_train_steps` plays no part.
- Layer-wise LR decay: `layerwise_lr_multipliers` gives each variable `decay ** (top - depth(var))`;
  the optimizer multiplies the scheduled LR by it (ELECTRA's `_get_layer_lrs` depths: embeddings 0,
  encoder layer_N N+1, task heads n_layers+2 — see `electra_depth_fn`).
- `skip` (a boolean tensor) makes the whole update a no-op (slots, params and the iteration counter all
  untouched): the loop uses it for a non-finite loss or non-finite fp16 gradients.
- Fused update: each large variable's update runs as ONE XLA-compiled function (the same formulas, one
  pass instead of ~12); TensorFlow's ApplyAdam computes 1 - beta_2 in float32, so it is not used. The
  measurements are in docs/HISTORY.md.
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable, Iterable, Sequence

import tensorflow as tf

from textrain.models.checkpoints import backing_variable
from textrain.trainers.run_spec import OptimizerSpec

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
JIT_MIN_SIZE = 1 << 16  # elements: smaller variables are updated op by op (see "Fused update")


# ----------------------------------------------------------------------------------------- schedules
class RsqrtDecaySchedule:
    """tensor2tensor's `constant*linear_warmup*rsqrt_decay[*rsqrt_hidden_size]` (see the module docstring)."""

    def __init__(self, constant: float, num_warmup_steps: int, hidden_size: int = 0):
        if num_warmup_steps <= 0:
            raise ValueError(f"rsqrt_decay needs num_warmup_steps > 0 (got {num_warmup_steps})")
        self.constant = float(constant)
        self.num_warmup_steps = int(num_warmup_steps)
        self.hidden_size = int(hidden_size)

    def __call__(self, step) -> tf.Tensor:
        step = tf.cast(step, tf.float32)
        warmup = float(self.num_warmup_steps)
        lr = self.constant * tf.minimum(1.0, step / warmup) * tf.math.rsqrt(tf.maximum(step, warmup))
        if self.hidden_size > 0:
            lr *= self.hidden_size ** -0.5
        return lr


class WarmupDecaySchedule:
    """Learning rate as a function of the (int) optimizer step.

    decay: "linear" | "polynomial" (uses `power`) | "cosine" | "constant".
    """

    def __init__(self, peak_lr: float, num_train_steps: int, num_warmup_steps: int = 0,
                 decay: str = "linear", power: float = 1.0, end_lr: float = 0.0,
                 offset_warmup: bool = False):
        if decay not in ("linear", "polynomial", "cosine", "constant"):
            raise ValueError(f"unknown learning-rate decay {decay!r}; use linear, polynomial, cosine or constant")
        if num_train_steps <= 0 and decay != "constant":
            raise ValueError(f"num_train_steps must be > 0 for {decay} decay (got {num_train_steps})")
        if num_warmup_steps < 0:
            raise ValueError(f"num_warmup_steps must be >= 0 (got {num_warmup_steps})")
        self.peak_lr = float(peak_lr)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.decay = decay
        self.power = 1.0 if decay == "linear" else float(power)
        self.end_lr = float(end_lr)
        self.offset_warmup = offset_warmup

    def _decayed(self, step: tf.Tensor) -> tf.Tensor:
        if self.decay == "constant":
            return tf.constant(self.peak_lr, tf.float32)
        start = float(self.num_warmup_steps) if self.offset_warmup else 0.0
        span = max(float(self.num_train_steps) - start, 1.0)
        progress = tf.clip_by_value((step - start) / span, 0.0, 1.0)
        if self.decay == "cosine":
            shape = 0.5 * (1.0 + tf.cos(math.pi * progress))
        else:
            shape = tf.pow(1.0 - progress, self.power)
        return (self.peak_lr - self.end_lr) * shape + self.end_lr

    def __call__(self, step) -> tf.Tensor:
        step = tf.cast(step, tf.float32)
        lr = self._decayed(step)
        if self.num_warmup_steps > 0:
            warm = self.peak_lr * step / float(self.num_warmup_steps)
            lr = tf.where(step < float(self.num_warmup_steps), warm, lr)
        return lr


# ------------------------------------------------------------------------------ per-variable settings
def variable_name(var) -> str:
    """The most specific name of a Keras 3 or tf variable ("bert/encoder/layer_0/.../kernel")."""
    path = getattr(var, "path", None)
    if isinstance(path, str) and path:
        return path
    return var.name.split(":")[0]


def layerwise_lr_multipliers(variables: Sequence, depth_fn: Callable[[object], int], decay: float,
                             top_depth: int | None = None) -> list[float]:
    """`decay ** (top_depth - depth_fn(var))` for each variable; `top_depth` defaults to the max depth."""
    depths = [int(depth_fn(v)) for v in variables]
    top = max(depths) if top_depth is None else int(top_depth)
    bad = [(variable_name(v), d) for v, d in zip(variables, depths, strict=True) if d < 0 or d > top]
    if bad:
        raise ValueError(f"depth_fn gave depths outside [0, {top}]: {bad[:5]}")
    return [float(decay) ** (top - d) for d in depths]


def electra_depth_fn(n_layers: int) -> Callable[[object], int]:
    """ELECTRA's depths by variable name: embeddings 0, `layer_N` N+1, everything else n_layers+2."""
    layer = re.compile(r"layer_(\d+)/")

    def depth(var) -> int:
        name = variable_name(var)
        if "embeddings" in name:
            return 0
        found = layer.search(name + "/")
        if found:
            return int(found.group(1)) + 1
        return n_layers + 2

    return depth


def model_depth_fn(model) -> tuple[Callable[[object], int], int]:
    """(depth_fn, top_depth) of a model for layer-wise LR decay, from its ORIGINAL variable names
    (`model.tf1_variable_map()`), so the rule reads as the originals wrote it whatever our Keras paths are.

    `model.lr_decay_style`:
    - "electra" (default; ELECTRA's `_get_layer_lrs`): names with `/embeddings/` or `/embeddings_project/`
      depth 0, `layer_N/` depth N+1, everything else (pooler, task heads) n_layers+2 = top.
    - "xlnet" (XLNet's `lr_layer_decay_rate`): only `model/transformer/layer_N/` is scaled, by
      decay ** (n_layer - 1 - N): depth N+1, top n_layer, everything else at the top (multiplier 1).
    Variables outside the map (a fresh head) are at the top.
    """
    names = model.tf1_variable_map()
    layer = re.compile(r"layer_(\d+)/")
    layers = {int(m.group(1)) for n in names for m in [layer.search(n)] if m}
    n_layers = int(model.num_layers or (max(layers) + 1 if layers else 0))
    style = model.lr_decay_style
    top = n_layers if style == "xlnet" else n_layers + 2
    depths: dict[int, int] = {}
    for name, var in names.items():
        found = layer.search(name)
        if found:
            depth = int(found.group(1)) + 1
        elif style != "xlnet" and re.search(r"/embeddings(_project)?/", name + "/"):
            depth = 0
        else:
            depth = top
        depths[id(backing_variable(var))] = depth

    def depth(var) -> int:
        return depths.get(id(backing_variable(var)), top)

    return depth, top


def _scaled(grad, scale: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.convert_to_tensor(grad), tf.float32) * scale


def _matches_any(name: str, patterns: Iterable[str]) -> bool:
    return any(re.search(p, name) for p in patterns)


# --------------------------------------------------------------------------------------- optimizers
class Optimizer(tf.Module):
    """Base: slots per variable, distributed apply, per-variable LR multipliers, skip on demand."""

    slot_names: tuple[str, ...] = ()

    def __init__(self, learning_rate: Callable[[tf.Tensor], tf.Tensor] | float, weight_decay: float = 0.0,
                 exclude_from_weight_decay: Sequence[str] = DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
                 lr_multiplier_fn: Callable[[Sequence], list[float]] | None = None, name: str | None = None,
                 jit_update: bool = True):
        super().__init__(name=name)
        self.jit_update = bool(jit_update)
        self._compiled_update = None
        self.learning_rate = learning_rate if callable(learning_rate) else (lambda _s, lr=float(learning_rate): tf.constant(lr))
        self.weight_decay = float(weight_decay)
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay)
        self._lr_multiplier_fn = lr_multiplier_fn
        self.iterations: tf.Variable | None = None
        self.slots: dict[str, list[tf.Variable]] = {}
        self._variables: list = []
        self._multipliers: list[float] = []
        self._decay: list[bool] = []

    # -- building
    def build(self, variables: Sequence) -> None:
        """Create the iteration counter and every slot, in the current (strategy) scope."""
        if self.iterations is not None:
            raise RuntimeError("optimizer already built")
        self._variables = list(variables)
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self.slots = {
            slot: [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, name=f"{slot}_{i}")
                   for i, v in enumerate(self._variables)]
            for slot in self.slot_names}
        self._multipliers = (list(self._lr_multiplier_fn(self._variables)) if self._lr_multiplier_fn
                             else [1.0] * len(self._variables))
        self._decay = [self.weight_decay > 0 and not _matches_any(variable_name(v), self.exclude_from_weight_decay)
                       for v in self._variables]

    def lr_multiplier(self, var) -> float:
        return self._multipliers[self._index(var)]

    def uses_weight_decay(self, var) -> bool:
        return self._decay[self._index(var)]

    def _index(self, var) -> int:
        for i, v in enumerate(self._variables):
            if v is var:
                return i
        raise KeyError(f"variable {variable_name(var)} is not handled by this optimizer")

    def current_learning_rate(self) -> tf.Tensor:
        return tf.cast(self.learning_rate(self.iterations), tf.float32)

    # -- applying
    def apply_gradients(self, grads_and_vars: Iterable[tuple[tf.Tensor | None, object]],
                        skip: tf.Tensor | bool = False, grad_scale: tf.Tensor | float | None = None):
        """Apply already-aggregated gradients; `None` gradients leave their variable (and slots) alone.

        `grad_scale` (a scalar, e.g. global-norm clipping's factor) multiplies every gradient inside the
        update, the same float32 product `tf.clip_by_global_norm` forms, without a separate pass over all
        gradients (in the fused update it costs nothing)."""
        if self.iterations is None:
            raise RuntimeError("call optimizer.build(model.trainable_variables) inside the strategy scope first")
        index = {id(v): i for i, v in enumerate(self._variables)}
        items = []
        for g, v in grads_and_vars:
            if g is None:
                continue
            if id(v) not in index:
                raise KeyError(f"variable {variable_name(v)} was not passed to optimizer.build")
            items.append((g, index[id(v)]))
        skip = tf.convert_to_tensor(skip, tf.bool)
        scale = tf.constant(1.0, tf.float32) if grad_scale is None else tf.cast(grad_scale, tf.float32)
        ctx = tf.distribute.get_replica_context()
        if ctx is None:  # cross-replica context
            return self._distributed_apply(tf.distribute.get_strategy(), items, skip, scale)
        return ctx.merge_call(self._distributed_apply, args=(items, skip, scale))

    def _distributed_apply(self, strategy, items, skip, scale):
        step = self.iterations + 1
        lr = self.current_learning_rate()
        ops = []
        for grad, i in items:
            slots = tuple(self.slots[s][i] for s in self.slot_names)
            kwargs = self._update_kwargs(i, lr, step)

            def update(var, g, skip_, scale_, *slot_vars, _kw=kwargs):
                return tf.cond(skip_, tf.no_op,
                               lambda: tf.group(self._apply_one(var, g, scale_, *slot_vars, **_kw)))

            # `skip` and `scale` (like `grad`) may be per-replica values: `args` hands each device its own.
            ops.append(strategy.extended.update(backing_variable(self._variables[i]), update,
                                                args=(grad, skip, scale) + slots, group=True))
        with tf.control_dependencies(ops):
            inc = strategy.extended.update(
                self.iterations, lambda it, skip_: it.assign_add(tf.where(skip_, tf.constant(0, tf.int64), 1)),
                args=(skip,), group=True)
        return inc

    def _apply_one(self, var, grad, scale, *slots, **kwargs):
        """`_update` of one variable with its gradient times `scale`, XLA-fused when `jit_update` (see the
        module docstring)."""
        if not self.jit_update or var.shape.num_elements() is None or var.shape.num_elements() < JIT_MIN_SIZE:
            return self._update(var, _scaled(grad, scale), *slots, **kwargs)
        if self._compiled_update is None:
            def fused(var, grad, scale, *slots, **kw):
                self._update(var, _scaled(grad, scale), *slots, **kw)
                return tf.constant(True)

            self._compiled_update = tf.function(fused, jit_compile=True)
        return [self._compiled_update(var, grad, scale, *slots, **kwargs)]

    def _update_kwargs(self, i: int, lr: tf.Tensor, step: tf.Tensor) -> dict:
        """Per-variable constants of one update (subclasses add their own)."""
        return dict(lr=lr * self._multipliers[i], decay=self._decay[i], step=step)

    def _update(self, var, grad, *slots, lr, decay, step):
        raise NotImplementedError


class AdamW(Optimizer):
    """Adam with decoupled weight decay. Default: BERT's AdamWeightDecayOptimizer (no bias correction,
    epsilon 1e-6). `bias_correction=True` is XLNet's optimizer (tf.train.AdamOptimizer + decay): without
    the correction the first updates are several times the learning rate, which stalls small models at
    the learning rates XLNet uses."""

    slot_names = ("m", "v")

    def __init__(self, learning_rate, weight_decay: float = 0.01, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-6, bias_correction: bool = False, **kwargs):
        super().__init__(learning_rate, weight_decay=weight_decay, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.bias_correction = bias_correction

    def _update(self, var, grad, m, v, *, lr, decay, step):
        grad = tf.cast(tf.convert_to_tensor(grad), tf.float32)
        m_new = self.beta_1 * m + (1.0 - self.beta_1) * grad
        v_new = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
        m_hat, v_hat = m_new, v_new
        if self.bias_correction:
            t = tf.cast(step, tf.float32)
            m_hat = m_new / (1.0 - tf.pow(self.beta_1, t))
            v_hat = v_new / (1.0 - tf.pow(self.beta_2, t))
        update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
        if decay:
            update += self.weight_decay * tf.cast(var, tf.float32)
        return [m.assign(m_new), v.assign(v_new), var.assign_sub(tf.cast(lr * update, var.dtype))]


class LAMB(Optimizer):
    """LAMB: bias-corrected Adam direction + decoupled decay, scaled per variable by the trust ratio."""

    slot_names = ("m", "v")

    def __init__(self, learning_rate, weight_decay: float = 0.01, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-6, exclude_from_layer_adaptation: Sequence[str] | None = None, **kwargs):
        super().__init__(learning_rate, weight_decay=weight_decay, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.exclude_from_layer_adaptation = tuple(
            self.exclude_from_weight_decay if exclude_from_layer_adaptation is None else exclude_from_layer_adaptation)

    def build(self, variables: Sequence) -> None:
        super().build(variables)
        self._adapt = [not _matches_any(variable_name(v), self.exclude_from_layer_adaptation) for v in self._variables]

    def _update_kwargs(self, i: int, lr: tf.Tensor, step: tf.Tensor) -> dict:
        return dict(super()._update_kwargs(i, lr, step), adapt=self._adapt[i])

    def _update(self, var, grad, m, v, *, lr, decay, step, adapt):
        grad = tf.cast(tf.convert_to_tensor(grad), tf.float32)
        t = tf.cast(step, tf.float32)
        m_new = self.beta_1 * m + (1.0 - self.beta_1) * grad
        v_new = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
        m_hat = m_new / (1.0 - tf.pow(self.beta_1, t))
        v_hat = v_new / (1.0 - tf.pow(self.beta_2, t))
        update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
        param = tf.cast(var, tf.float32)
        if decay:
            update += self.weight_decay * param
        ratio = 1.0
        if adapt:
            w_norm, u_norm = tf.norm(param), tf.norm(update)
            ratio = tf.where((w_norm > 0) & (u_norm > 0), w_norm / tf.maximum(u_norm, 1e-30), 1.0)
        return [m.assign(m_new), v.assign(v_new), var.assign_sub(tf.cast(lr * ratio * update, var.dtype))]


# ------------------------------------------------------------------------------------------ factory
def create_optimizer(init_lr: float, num_train_steps: int, num_warmup_steps: int = 0, *,
                     optimizer: str = "adamw", weight_decay: float = 0.01, decay: str = "linear",
                     power: float = 1.0, end_lr: float = 0.0, offset_warmup: bool = False,
                     beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
                     layerwise_lr_decay: float = 1.0, depth_fn: Callable[[object], int] | None = None,
                     top_depth: int | None = None,
                     exclude_from_weight_decay: Sequence[str] = DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
                     lr_hidden_size: int = 0) -> Optimizer:
    """An unbuilt optimizer with a warmup + decay schedule (call `.build(variables)` in the strategy scope).

    Layer-wise LR decay is on when `layerwise_lr_decay != 1`; it then needs `depth_fn(var) -> int`.
    decay="rsqrt_decay" is tensor2tensor's schedule with `init_lr` as its constant and `lr_hidden_size`
    (0: no hidden-size factor).
    """
    if decay == "rsqrt_decay":
        schedule = RsqrtDecaySchedule(init_lr, num_warmup_steps, lr_hidden_size)
    else:
        schedule = WarmupDecaySchedule(init_lr, num_train_steps, num_warmup_steps, decay=decay, power=power,
                                       end_lr=end_lr, offset_warmup=offset_warmup)
    multipliers = None
    if layerwise_lr_decay != 1.0:
        if depth_fn is None:
            raise ValueError("layerwise_lr_decay != 1 needs depth_fn(var) -> int (e.g. electra_depth_fn(n_layers))")
        multipliers = lambda vs: layerwise_lr_multipliers(vs, depth_fn, layerwise_lr_decay, top_depth)  # noqa: E731
    common = dict(weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                  exclude_from_weight_decay=exclude_from_weight_decay, lr_multiplier_fn=multipliers)
    if optimizer == "adamw":
        return AdamW(schedule, **common)
    if optimizer == "adam":
        return AdamW(schedule, bias_correction=True, **common)
    if optimizer == "lamb":
        return LAMB(schedule, **common)
    raise ValueError(f"unknown optimizer {optimizer!r}; use adamw, adam or lamb")


def optimizer_from_spec(settings: OptimizerSpec, num_train_steps: int, model: Any = None) -> Optimizer:
    """The optimizer of a run's OptimizerSpec (trainers/run_spec.py), its settings under their own names:
    the one place they meet `create_optimizer`'s keywords. `model` gives the depths of layer-wise LR decay."""
    o = settings
    depth_fn, top_depth = model_depth_fn(model) if o.layerwise_lr_decay != 1.0 else (None, None)
    return create_optimizer(
        o.learning_rate, num_train_steps, o.num_warmup_steps, optimizer=o.optimizer,
        weight_decay=o.weight_decay, decay=o.lr_decay, power=o.poly_power,
        end_lr=o.learning_rate * o.min_lr_ratio, epsilon=o.adam_epsilon,
        layerwise_lr_decay=o.layerwise_lr_decay, depth_fn=depth_fn, top_depth=top_depth,
        beta_1=o.adam_beta1, beta_2=o.adam_beta2, lr_hidden_size=o.lr_hidden_size)
