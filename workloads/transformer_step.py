"""The ``transformer_step`` workload: one full training step of a GPT-style decoder.

One step is ``forward`` (logits and next-token cross-entropy), ``backward`` (gradients of every parameter), and
``optimizer`` (gradient clipping to norm 1, then AdamW on FP32 master weights; under FP16 a dynamic loss scaler
scales the loss, unscales the gradients and skips steps whose gradients overflowed). Those are the three phases;
``end_to_end`` is the whole step, ``zero_grad`` included. The model and its dtype policy are described in
:mod:`fp8bench.workloads.model`.

Shapes: ``PRESET[,key=value...]`` or ``key=value,...`` with keys ``layers, width, heads, kv_heads, ffn, vocab,
seq, batch, max_seq`` (missing keys come from the ``tiny`` preset). Presets: ``tiny`` and ``small`` (CPU),
``gpt2_small`` and ``llama_1b`` (GPU). ``heads`` must divide ``width``, ``kv_heads`` must divide ``heads``, and
``seq`` may not exceed the preset's ``max_seq``.

FLOPs: the model FLOPs of a forward and backward pass (:func:`fp8bench.workloads.model.model_flops`, causal
attention counted as half); the optimizer's elementwise work is not counted. Record extras: ``tokens_per_step``,
``tokens_per_s`` (derived by the runner from the median step), ``model_flops``, ``parameters``, peak memory.

Reference for numerics: the FP64 model on the same initial weights and batch. A pipeline's ``output()`` runs one
forward and backward pass from the *initial* weights and returns the loss followed by every parameter's gradient,
flattened; the reference is the same vector from the FP64 model, so SQNR measures how faithfully a precision
computes the training signal. The timed step returns its loss after an update, a different quantity: the pipeline
declares so (:data:`STEP_RETURNS`), and its records say why their timed output is not compared.

Backend contract: :func:`build_training_pipeline` takes a ``convert`` callable that receives ``model.blocks`` (an
``nn.ModuleList`` whose precision-controlled projections are plain ``nn.Linear`` layers) and returns it with those
layers swapped for the backend's own (fp8bench's :class:`~fp8bench.numerics.fp8_linear.Fp8Linear`, torchao's
``Float8Linear``, Transformer Engine's ``te.Linear`` ...). Embeddings, norms and the head are never passed to it.
:data:`LAYER_CONVERTERS` maps a backend name to a factory ``(precision, device) -> convert`` so that the
convergence check can train with any backend that registers one.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch
from torch import nn

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline, TimedReturn
from fp8bench.core.plugins import WORKLOADS, Workload
from fp8bench.core.precisions import FloatPrecision, Precision, ScaledRecipe
from fp8bench.core.shapes import Shape, ShapeError
from fp8bench.numerics.fp8_linear import alignment_reason
from fp8bench.workloads.corpus import SyntheticCorpus
from fp8bench.workloads.memory import peak_memory, refusal
from fp8bench.workloads.model import (
    PRESETS,
    Decoder,
    ModelConfig,
    build_decoder,
    init_parameters,
    model_flops,
    parse_preset_shape,
    precision_context,
    training_memory_bytes,
)

Convert = Callable[[nn.Module], nn.Module]
ConvertFactory = Callable[[Precision, Device], Convert]

# backend name -> (precision, device) -> convert; backends register theirs next to their builders.
LAYER_CONVERTERS: dict[str, ConvertFactory] = {}

CONFIG_KEYS = ("layers", "width", "heads", "kv_heads", "ffn", "vocab", "seq", "batch", "max_seq")
LEARNING_RATE = 3e-3  # AdamW on the tiny model; a warm-up of WARMUP_STEPS steps ramps it linearly
WARMUP_STEPS = 10
WEIGHT_DECAY = 0.01
CLIP_NORM = 1.0
PROBE_MIN_RATIO = 50  # probe only steps with more than this many times the probe level's FLOPs


def config_of(shape: Shape) -> ModelConfig:
    return ModelConfig(**{k: shape[k] for k in CONFIG_KEYS})


def _meta(cfg: ModelConfig) -> torch.Tensor:
    return torch.tensor([getattr(cfg, k) for k in CONFIG_KEYS], dtype=torch.int64)


def config_from_inputs(inputs: dict[str, torch.Tensor]) -> ModelConfig:
    return ModelConfig(**dict(zip(CONFIG_KEYS, inputs["config"].tolist(), strict=True)))


class TransformerStep(Workload):
    name = "transformer_step"
    phases = ("forward", "backward", "optimizer")
    description = "one training step of a GPT-style decoder: forward, loss, backward, clipped AdamW"
    default_shape = "tiny"

    def parse_shape(self, text: str) -> Shape:
        presets = {name: asdict(cfg) for name, cfg in PRESETS.items()}
        _, values = parse_preset_shape(text, presets, "tiny", CONFIG_KEYS, what="transformer_step shape")
        config_of(values)  # validates divisibility and the context limit
        return {k: values[k] for k in CONFIG_KEYS}

    def trains(self, shape: Shape) -> bool:
        return True

    def flops(self, shape: Shape) -> int:
        return model_flops(config_of(shape), backward=True)

    def min_bytes(self, shape: Shape, precision: Precision) -> int:
        # Every FP32 master weight, gradient and both AdamW moments are read and written once per step.
        return 4 * 4 * 2 * config_of(shape).parameters()

    def make_inputs(self, shape: Shape, device: Device, seed: int) -> dict[str, torch.Tensor]:
        cfg = config_of(shape)
        tokens = SyntheticCorpus(cfg.vocab, seed).batch(0, cfg.batch, cfg.seq)
        params = {f"param.{k}": v.to(device.torch) for k, v in init_parameters(cfg, seed).items()}
        return {"tokens": tokens.to(device.torch), "config": _meta(cfg), **params}

    def reference(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        cfg = config_from_inputs(inputs)
        model = build_decoder(cfg, _params(inputs), inputs["tokens"].device, torch.float64)
        return loss_and_gradients(model, inputs["tokens"])

    def shape_reason(self, shape: Shape, precision: Precision) -> str | None:
        """FP8 recipes: every projection's forward, dgrad and wgrad GEMM must meet the recipe's alignment."""
        if not isinstance(precision, ScaledRecipe):
            return None
        cfg = config_of(shape)
        qkv = (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
        return alignment_reason(precision, cfg.tokens, {
            "attn.qkv": (cfg.width, qkv), "attn.out": (cfg.heads * cfg.head_dim, cfg.width),
            "mlp.gate_up": (cfg.width, 2 * cfg.ffn), "mlp.down": (cfg.ffn, cfg.width)})

    def memory_reason(self, shape: Shape, precision: Precision, device: Device) -> str | None:
        return refusal(device, training_memory_bytes(config_of(shape)), "a training step",
                       "weights, gradients, AdamW state, activations", bound="at least")

    def probe_shape(self, shape: Shape, max_flops: float) -> Shape | None:
        # A small step is dominated by per-call overheads, so extrapolating it from an even smaller one by FLOPs
        # would be far too pessimistic: only steps well above the probe level are probed.
        if self.flops(shape) <= PROBE_MIN_RATIO * max_flops:
            return None
        probe = dict(shape)
        # Shrink depth, batch, sequence and vocabulary (in that order) until the step fits the probe's FLOPs;
        # width and heads stay, so the per-token cost of the projections keeps its character, and at least 128
        # tokens remain, so every FP8 recipe's weight-gradient GEMM still gets whole blocks.
        for key, floor in (("layers", 1), ("batch", 1), ("seq", min(shape["seq"], 128)), ("vocab", 256)):
            while probe[key] > floor and self.flops(probe) > max_flops:
                probe[key] = max(floor, probe[key] // 2)
        return probe


def _params(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k.removeprefix("param."): v for k, v in inputs.items() if k.startswith("param.")}


def loss_and_gradients(model: Decoder, tokens: torch.Tensor, context: Any = None,
                       scale: float = 1.0) -> torch.Tensor:
    """``[loss, *flattened gradients]`` of one forward/backward pass (FP32, or FP64 for an FP64 model)."""
    model.zero_grad(set_to_none=True)
    with context if context is not None else contextlib.nullcontext():
        loss = model.loss(tokens)
    (loss * scale).backward()
    dtype = torch.float64 if loss.dtype == torch.float64 else torch.float32
    grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(dtype) / scale
             for p in model.parameters()]
    return torch.cat([loss.detach().reshape(1).to(dtype), *grads])


class TrainingStep:
    """A decoder, its AdamW optimizer and (for FP16) loss scaler, stepping on given batches.

    ``forward``, ``backward`` and ``optimizer_step`` are the three phases; ``step`` runs all of them. ``backward``
    keeps the graph (``retain_graph``) so the phase can be timed repeatedly on one forward pass.
    """

    def __init__(self, cfg: ModelConfig, params: dict[str, torch.Tensor], precision: Precision, device: Device,
                 convert: Convert, lr: float | None = None, warmup_steps: int = WARMUP_STEPS) -> None:
        self.cfg, self.precision, self.device = cfg, precision, device
        self.model = build_decoder(cfg, params, device.torch)
        self.model.blocks = convert(self.model.blocks)
        # The fused kernel keeps every optimizer value on the device: the foreach path reads its step counters on
        # the host, and with a loss scaler only the fused kernel skips an overflowed step without reading found-inf
        # back (GradScaler.step); either read would put a host synchronization inside the timed optimizer phase.
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr if lr is not None else LEARNING_RATE,
                                           betas=(0.9, 0.95), weight_decay=WEIGHT_DECAY, fused=True)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / max(1, warmup_steps)))
        fp16 = isinstance(precision, FloatPrecision) and precision.dtype == torch.float16
        self.scaler = torch.amp.GradScaler(device.torch.type) if fp16 else None
        self.loss: torch.Tensor | None = None
        self.grad_norm: torch.Tensor | None = None  # before clipping, on the device (reading it would synchronize)

    def context(self) -> Any:
        return precision_context(self.precision, self.device)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        with self.context():
            self.loss = self.model.loss(tokens)
        return self.loss

    def backward(self, retain_graph: bool = False) -> None:
        assert self.loss is not None, "backward before forward"
        loss = self.scaler.scale(self.loss) if self.scaler else self.loss
        loss.backward(retain_graph=retain_graph)

    def optimizer_step(self) -> None:
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        self.grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP_NORM)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.schedule.step()

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """One full training step; returns the loss as a 0-dim tensor on the device (``float()`` of it waits for the
        step to finish, so a timed step leaves that to its caller)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward(tokens)
        self.backward()
        self.optimizer_step()
        return loss.detach()


# The one pipeline whose timed call does not return the workload's output: a step returns its loss and moves the
# weights, so no two calls share a loss, and output() (a fresh model's loss and gradients) is another quantity.
STEP_RETURNS = TimedReturn.other(
    "a training step's loss, and each step updates the weights, so no two calls compute the same loss; the "
    "numerics come from output(), the loss and gradients of a fresh model at the initial weights")


def build_training_pipeline(ctx: BuildContext, convert: Convert) -> Pipeline:
    """The ``transformer_step`` pipeline of any backend whose layers ``convert`` swaps in (module docstring)."""
    cfg = config_of(ctx.shape)
    params = _params(ctx.inputs)
    tokens = ctx.inputs["tokens"]
    # ``output()`` starts from a pristine copy: timing moves the trained model's weights.
    pristine = copy.deepcopy(params)
    trainer = TrainingStep(cfg, params, ctx.precision, ctx.device, convert)

    def forward() -> torch.Tensor:
        return trainer.forward(tokens)

    def backward() -> None:
        trainer.backward(retain_graph=True)

    def end_to_end() -> torch.Tensor:
        return trainer.step(tokens)

    def output() -> torch.Tensor:
        fresh = TrainingStep(cfg, pristine, ctx.precision, ctx.device, convert)
        scale = 2.0**12 if fresh.scaler else 1.0  # FP16: a fixed loss scale keeps small gradients representable
        return loss_and_gradients(fresh.model, tokens, fresh.context(), scale)

    with peak_memory(ctx.device) as peak:
        end_to_end()  # fills every phase's state and checks the backend accepts the model
    forward()
    extra = {"tokens_per_step": cfg.tokens, "model_flops": model_flops(cfg), "parameters": cfg.parameters(),
             "estimated_memory_bytes": training_memory_bytes(cfg), **peak.fields()}
    return Pipeline(end_to_end=end_to_end, phases={"forward": forward, "backward": backward,
                                                   "optimizer": trainer.optimizer_step},
                    output=output, extra=extra, returns=STEP_RETURNS,
                    notes=["phases: forward (loss), backward (retained graph), optimizer (clip + AdamW)"])


TRANSFORMER_STEP = WORKLOADS.add("transformer_step", TransformerStep())

__all__ = ["LAYER_CONVERTERS", "TRANSFORMER_STEP", "TrainingStep", "build_training_pipeline", "config_of",
           "loss_and_gradients", "ShapeError"]
