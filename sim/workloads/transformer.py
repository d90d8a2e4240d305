"""Transformer stacks (GPT, BERT) from their published shapes: per-layer parameters, FLOPs,
non-GEMM elements and stashed activations, per sample (one sequence of ``seq`` tokens).

A stack of hidden size h, a heads, l layers, sequence length s, vocabulary V and FFN width
f (4h unless given) is cut into plan-sized parts: the embedding, each layer's attention
block and MLP block (each one Megatron column/row pair under tensor parallelism: Shoeybi et
al. 2019, Fig. 3), and the head (final layer norm and logits; BERT's pooler and MLM
transform too). Counts, per sample:

- GEMM FLOPs (multiply-add = 2; Narayanan et al. 2021, Sec. 5.1): attention 8 s h^2
  (QKV 6 s h^2, output projection 2 s h^2) + 4 s^2 h (Q K^T and scores x V, the "core"),
  MLP 4 s h f (16 s h^2 at f = 4h), logits 2 s h V. A layer: 24 s h^2 + 4 s^2 h.
- parameters: a layer 4h^2 + 2hf + 9h + f (12 h^2 + 13 h at f = 4h: QKV and projection
  weights and biases, two FFN matrices and biases, two layer norms); embeddings V h + P h
  (P positions: s for GPT, Megatron-LM's max positions; BERT's 512 and 2 segments) and a
  layer norm for BERT; GPT's final layer norm 2h. GPT's logits reuse the word embedding
  (tied, counted once, as the papers count).
- other elements (read + written by the forward's memory-bound ops, bias adds taken as
  fused into their GEMMs): attention: layer norm 2 s h, softmax 2 a s^2, its dropout
  2 a s^2 (the core's), output dropout 2 s h, residual add 3 s h; MLP: layer norm 2 s h,
  GeLU 2 s f, dropout 2 s h, residual add 3 s h.
- stashed activations (Korthikanti et al. 2022, Sec. 4.1, at 2 bytes per value and 1 byte
  per dropout mask: s h (34 + 5 a s / h) bytes per layer): values are stored at the run's
  precision (the ``activation_elements`` of its timing profile), dropout masks as 1 byte
  each (:meth:`Part.stash_bytes` adds them). Attention: its layer norm's input, the QKV
  input, Q, K, V, the softmax output, the dropout output, the projection input (6 s h + 2 a
  s^2 values) and masks a s^2 + s h; MLP: layer norm input, FFN input, GeLU input, second
  FFN input (2 s h + 2 s f values) and mask s h. With t tensor shards (no sequence
  parallelism), what sits outside the column/row pairs (layer norm inputs, the pairs'
  inputs, the hidden dropout masks) stays whole on every shard and the rest is split: s h
  (10 + 24/t + 5 a s / (h t)) bytes at 16 bits (Korthikanti et al. 2022, eq. 3).

Recomputation (``recompute``, Korthikanti et al. 2022, Sec. 5): "full" keeps only each
layer's input (s h values: 2 s h bytes at 16 bits) and recomputes the layer's forward
before its backward; "selective" drops the attention core's softmax output, dropout mask
and dropout output (5 a s^2 bytes at 16 bits) and recomputes the core (4 s^2 h FLOPs and
its softmax and dropout elements). The embedding and the head are never recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sim.names import unknown

Kind = Literal["embedding", "attention", "mlp", "head"]
Recompute = Literal["none", "selective", "full"]
RECOMPUTE: tuple[Recompute, ...] = ("none", "selective", "full")
MASK_BYTES = 1  # a dropout mask element (Korthikanti et al. 2022 store masks as bytes)


@dataclass(frozen=True)
class Part:
    """One plan-sized part of a transformer, per sample; ``*_split`` terms divide over t
    tensor shards, ``*_whole`` terms stay on every shard. ``core_*``: the attention core's
    share of the split terms (what selective recomputation drops and recomputes)."""

    name: str
    kind: Kind
    width_in: int  # elements per sample entering the part (s h; s token ids for embeddings)
    width_out: int  # elements per sample leaving it (s h; s V logits for the head)
    params_split: int
    params_whole: int
    flops: float  # GEMM FLOPs, all split over the shards
    core_flops: float = 0.0
    other_split: float = 0.0
    other_whole: float = 0.0
    core_other: float = 0.0
    values_split: int = 0
    values_whole: int = 0
    masks_split: int = 0
    masks_whole: int = 0
    core_values: int = 0
    core_masks: int = 0
    # "full" recomputation keeps this many values (whole on every shard): the layer's input
    # for its attention part, nothing for its MLP part (recomputed from the attention's)
    checkpoint_values: int = 0
    forward_allreduce: bool = False  # under t > 1: partial outputs summed (width_out)
    backward_allreduce: bool = False  # under t > 1: partial input gradients summed (width_in)

    @property
    def recomputable(self) -> bool:
        """Whether full recomputation redoes it (the layers' parts, not embedding or head)."""
        return self.kind in ("attention", "mlp")

    def params_on(self, tensor: int = 1) -> int:
        """Parameters one of ``tensor`` shards holds."""
        return self.params_split // tensor + self.params_whole

    def other_on(self, tensor: int = 1) -> float:
        """Forward non-GEMM elements per sample on one shard."""
        return self.other_split / tensor + self.other_whole

    def recompute_flops(self, tensor: int, recompute: Recompute) -> float:
        """GEMM FLOPs per sample one shard recomputes before its backward."""
        if recompute == "full" and self.recomputable:
            return self.flops / tensor
        return self.core_flops / tensor if recompute == "selective" else 0.0

    def recompute_other(self, tensor: int, recompute: Recompute) -> float:
        """Non-GEMM elements per sample one shard recomputes before its backward."""
        if recompute == "full" and self.recomputable:
            return self.other_on(tensor)
        return self.core_other / tensor if recompute == "selective" else 0.0

    def stash_values(self, tensor: int = 1, recompute: Recompute = "none") -> int:
        """Values per sample one shard stashes for the backward."""
        if recompute == "full" and self.recomputable:
            return self.checkpoint_values
        split = self.values_split - (self.core_values if recompute == "selective" else 0)
        return split // tensor + self.values_whole

    def stash_masks(self, tensor: int = 1, recompute: Recompute = "none") -> int:
        """Dropout-mask elements per sample one shard stashes (1 byte each)."""
        if recompute == "full" and self.recomputable:
            return 0
        split = self.masks_split - (self.core_masks if recompute == "selective" else 0)
        return split // tensor + self.masks_whole

    def stash_bytes(self, itemsize: int, tensor: int = 1, recompute: Recompute = "none") -> int:
        """Bytes per sample one shard stashes: values at ``itemsize``, masks at 1 byte."""
        return (self.stash_values(tensor, recompute) * itemsize
                + self.stash_masks(tensor, recompute) * MASK_BYTES)


@dataclass(frozen=True)
class Transformer:
    """A transformer stack's published shape (``ffn`` 0: 4 x hidden; ``positions`` 0: seq)."""

    name: str
    family: Literal["gpt", "bert"]
    hidden: int
    heads: int
    layers: int
    seq: int
    vocab: int
    source: str
    ffn: int = 0
    positions: int = 0

    @property
    def f(self) -> int:
        return self.ffn or 4 * self.hidden

    def attention(self, i: int) -> Part:
        s, h, a = self.seq, self.hidden, self.heads
        core_values, core_masks = 2 * a * s * s, a * s * s  # softmax out, dropout out; mask
        return Part(f"layer{i}.attention", "attention", s * h, s * h,
                    params_split=4 * h * h + 3 * h, params_whole=h + 2 * h,  # + proj bias, LN
                    flops=8.0 * s * h * h + 4.0 * s * s * h, core_flops=4.0 * s * s * h,
                    other_split=4.0 * a * s * s, other_whole=2.0 * s * h + 2 * s * h + 3 * s * h,
                    core_other=4.0 * a * s * s,
                    values_split=4 * s * h + core_values, values_whole=2 * s * h,
                    masks_split=core_masks, masks_whole=s * h,
                    core_values=core_values, core_masks=core_masks, checkpoint_values=s * h,
                    forward_allreduce=True, backward_allreduce=True)

    def mlp(self, i: int) -> Part:
        s, h, f = self.seq, self.hidden, self.f
        return Part(f"layer{i}.mlp", "mlp", s * h, s * h,
                    params_split=2 * h * f + f, params_whole=h + 2 * h,  # + FFN2 bias, LN
                    flops=4.0 * s * h * f,
                    other_split=2.0 * s * f, other_whole=2.0 * s * h + 2 * s * h + 3 * s * h,
                    values_split=2 * s * f, values_whole=2 * s * h, masks_whole=s * h,
                    forward_allreduce=True, backward_allreduce=True)

    def embedding(self) -> Part:
        """Word embedding split over the shards by vocabulary (Megatron-LM's vocab-parallel
        lookup: partial rows summed by one forward allreduce), positions (and BERT's
        segments and layer norm) whole; its dropout mask stashed."""
        s, h = self.seq, self.hidden
        positions = self.positions or s
        bert = self.family == "bert"
        whole = positions * h + (2 * h + 2 * h if bert else 0)  # BERT: segments, layer norm
        # word + position (+ segment) sum, dropout (BERT: and its layer norm)
        other = (3 + 2) * s * h + (3 * s * h if bert else 0)
        return Part("embedding", "embedding", s, s * h, params_split=self.vocab * h,
                    params_whole=whole, flops=0.0, other_whole=float(other),
                    masks_whole=s * h, forward_allreduce=True)

    def head(self) -> Part:
        """Final layer norm (GPT) or pooler, MLM transform and NSP (BERT), then the logits
        over the (tied, vocab-parallel) word embedding; the logits are stashed for the loss.
        Its backward allreduce sums the logits' partial input gradients (the cross
        entropy's three per-token scalar allreduces, Megatron-LM's vocab-parallel loss, are
        left out: s values against the layers' s h)."""
        s, h, v = self.seq, self.hidden, self.vocab
        if self.family == "gpt":
            return Part("head", "head", s * h, s * v, params_split=0, params_whole=2 * h,
                        flops=2.0 * s * h * v, other_whole=2.0 * s * h + 2.0 * s * v,
                        values_split=s * v, values_whole=2 * s * h, backward_allreduce=True)
        # BERT (Devlin et al. 2019): pooler h^2 + h on the first token, MLM transform
        # h^2 + h + LN 2h and output bias V, NSP classifier 2h + 2
        return Part("head", "head", s * h, s * v,
                    params_split=v, params_whole=2 * (h * h + h) + 2 * h + 2 * h + 2,
                    flops=2.0 * s * h * v + 2.0 * s * h * h + 2.0 * h * h,
                    other_whole=2 * s * h + 2 * s * h + 2.0 * s * v,  # GeLU, LN, softmax
                    values_split=s * v, values_whole=4 * s * h, backward_allreduce=True)

    def parts(self) -> tuple[Part, ...]:
        """Embedding, each layer's attention then MLP, head: forward order."""
        body = [part for i in range(self.layers) for part in (self.attention(i), self.mlp(i))]
        return (self.embedding(), *body, self.head())

    @property
    def params(self) -> int:
        return sum(part.params_on() for part in self.parts())

    def layer_activation_bytes(self, itemsize: int = 2, tensor: int = 1,
                               recompute: Recompute = "none") -> int:
        """Bytes per sample one shard stashes for one layer (attention + MLP)."""
        return sum(part.stash_bytes(itemsize, tensor, recompute)
                   for part in (self.attention(0), self.mlp(0)))


# ---- presets --------------------------------------------------------------------------

_MEGATRON_2019 = "Shoeybi et al. 2019 (Megatron-LM), Table 1"
_NARAYANAN_2021 = "Narayanan et al. 2021, Table 1"
_GPIPE = "Huang et al. 2019 (GPipe), Sec. 3, Table 2"


def _gpt(name: str, hidden: int, heads: int, layers: int, seq: int, source: str) -> Transformer:
    return Transformer(name, "gpt", hidden, heads, layers, seq, 51200, source)


TRANSFORMERS: dict[str, Transformer] = {
    # Shoeybi et al. 2019, Table 1: GPT-2-like, s 1024, vocabulary 51,200 (50,257 padded
    # to a multiple of 1024 for 8-way tensor parallelism)
    "megatron-1.2b": _gpt("megatron-1.2b", 1536, 16, 40, 1024, _MEGATRON_2019),
    "megatron-2.5b": _gpt("megatron-2.5b", 1920, 20, 54, 1024, _MEGATRON_2019),
    "megatron-4.2b": _gpt("megatron-4.2b", 2304, 24, 64, 1024, _MEGATRON_2019),
    "megatron-8.3b": _gpt("megatron-8.3b", 3072, 32, 72, 1024, _MEGATRON_2019),
    # Narayanan et al. 2021, Table 1 (heads, hidden, layers; s 2048, vocabulary 51,200)
    "gpt-1.7b": _gpt("gpt-1.7b", 2304, 24, 24, 2048, _NARAYANAN_2021),
    "gpt-3.6b": _gpt("gpt-3.6b", 3072, 32, 30, 2048, _NARAYANAN_2021),
    "gpt-7.5b": _gpt("gpt-7.5b", 4096, 32, 36, 2048, _NARAYANAN_2021),
    "gpt-18b": _gpt("gpt-18b", 6144, 48, 40, 2048, _NARAYANAN_2021),
    "gpt-39b": _gpt("gpt-39b", 8192, 64, 48, 2048, _NARAYANAN_2021),
    "gpt-76b": _gpt("gpt-76b", 10240, 80, 60, 2048, _NARAYANAN_2021),
    "gpt-145b": _gpt("gpt-145b", 12288, 96, 80, 2048, _NARAYANAN_2021),
    "gpt-310b": _gpt("gpt-310b", 16384, 128, 96, 2048, _NARAYANAN_2021),
    "gpt-530b": _gpt("gpt-530b", 20480, 128, 105, 2048, _NARAYANAN_2021),
    "gpt-1t": _gpt("gpt-1t", 25600, 160, 128, 2048, _NARAYANAN_2021),
    # Devlin et al. 2019, Sec. 3: L 24, H 1024, A 16 (340 M); WordPiece vocabulary 30,522,
    # 512 positions; sequence length 128, as 90% of its pre-training steps (App. A.2)
    "bert-large": Transformer("bert-large", "bert", 1024, 16, 24, 128, 30522,
                              "Devlin et al. 2019 (BERT-large), sequence length 128",
                              positions=512),
    # Huang et al. 2019 (GPipe), Sec. 3 and Table 2: Transformer-L, L layers of model
    # dimension 2048, feed-forward 8192, 32 heads; sequence 1024, vocabulary 32k. Modelled
    # as a decoder stack (GPipe's is an encoder-decoder for translation: the same layers)
    "gpipe-transformer-48": Transformer("gpipe-transformer-48", "gpt", 2048, 32, 48, 1024,
                                        32000, _GPIPE, ffn=8192),
    "gpipe-transformer-24": Transformer("gpipe-transformer-24", "gpt", 2048, 32, 24, 1024,
                                        32000, _GPIPE + " (Table 3's 24 layers)", ffn=8192),
}


def get_transformer(name: str) -> Transformer:
    """A preset by name; raises KeyError listing the known ones."""
    if name not in TRANSFORMERS:
        raise KeyError(unknown("transformer", name, TRANSFORMERS))
    return TRANSFORMERS[name]
