"""Timing profiles of real networks: per-layer parameters and FLOPs from their architectures.

Each profile is computed from the published architecture, not typed in, so the totals can
be checked against the papers:

- ResNet-50 (He et al. 2016, Table 1; 224x224 input): 25.6 M parameters, ~4.1 G
  multiply-adds forward per image.
- VGG-16 (Simonyan and Zisserman 2015, configuration D; 224x224 input): 138 M parameters,
  ~15.5 G multiply-adds.
- BERT-base (Devlin et al. 2019; 12 layers, hidden 768, 12 heads, FFN 3072, WordPiece
  vocabulary 30522, sequence length 128): ~110 M parameters.

FLOPs count a multiply-add as 2. Backward costs 2x forward (weight and input gradients),
except the first layer, which needs no input gradient (1x). Layers are in forward order;
a worker sends them in reverse, as backward produces them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sim.names import unknown
from sim.workloads.transformer import TRANSFORMERS


@dataclass(frozen=True)
class LayerProfile:
    name: str
    params: int            # parameters (the gradient has as many entries)
    forward_flops: float   # per sample: GEMM-class FLOPs (matrix products, convolutions)
    # per sample: elements the layer's other ops (norms, nonlinearities, softmax, pooling,
    # dropout, residual adds) read and write in the forward; memory-bound, so charged by bytes
    other_elements: float = 0.0
    # per sample: elements the forward stashes for the backward (activation memory)
    activation_elements: float = 0.0


@dataclass(frozen=True)
class Profile:
    name: str
    layers: tuple[LayerProfile, ...]
    source: str

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def forward_flops(self) -> float:
        return sum(layer.forward_flops for layer in self.layers)

    def backward_flops(self, index: int) -> float:
        """Backward FLOPs per sample of layer ``index`` (2x forward; 1x for the first)."""
        return self.layers[index].forward_flops * (1 if index == 0 else 2)


def _conv(name: str, k: int, cin: int, cout: int, out_hw: int, bn: bool = True) -> LayerProfile:
    """A k x k convolution (no bias) with batch norm (scale and shift per channel)."""
    weights = k * k * cin * cout
    return LayerProfile(name, weights + (2 * cout if bn else cout),
                        2.0 * weights * out_hw * out_hw)


def _dense(name: str, din: int, dout: int, tokens: int = 1) -> LayerProfile:
    return LayerProfile(name, din * dout + dout, 2.0 * din * dout * tokens)


def resnet50() -> Profile:
    layers = [_conv("conv1", 7, 3, 64, 112)]
    cin = 64
    # (blocks, bottleneck width, output size) of conv2_x .. conv5_x
    for stage, (blocks, width, hw) in enumerate([(3, 64, 56), (4, 128, 28), (6, 256, 14),
                                                 (3, 512, 7)], start=2):
        for b in range(blocks):
            prefix = f"conv{stage}_{b + 1}"
            layers += [_conv(f"{prefix}a", 1, cin, width, hw),
                       _conv(f"{prefix}b", 3, width, width, hw),
                       _conv(f"{prefix}c", 1, width, 4 * width, hw)]
            if b == 0:  # projection shortcut
                layers.append(_conv(f"{prefix}proj", 1, cin, 4 * width, hw))
            cin = 4 * width
    layers.append(_dense("fc", 2048, 1000))
    return Profile("resnet50", tuple(layers), "He et al. 2016, Table 1 (ResNet-50)")


def vgg16() -> Profile:
    layers, cin, hw = [], 3, 224
    for block, (convs, cout) in enumerate([(2, 64), (2, 128), (3, 256), (3, 512), (3, 512)],
                                          start=1):
        for i in range(convs):
            layer = _conv(f"conv{block}_{i + 1}", 3, cin, cout, hw, bn=False)
            layers.append(layer)
            cin = cout
        hw //= 2  # 2x2 max pooling after each block
    layers += [_dense("fc6", 512 * 7 * 7, 4096), _dense("fc7", 4096, 4096),
               _dense("fc8", 4096, 1000)]
    return Profile("vgg16", tuple(layers), "Simonyan & Zisserman 2015, configuration D")


def bert_base(seq: int = 128, hidden: int = 768, ffn: int = 3072, blocks: int = 12,
              vocab: int = 30522) -> Profile:
    # embeddings: token + position (512) + segment (2) tables and a layer norm; a lookup,
    # so almost no FLOPs
    layers = [LayerProfile("embeddings", (vocab + 512 + 2) * hidden + 2 * hidden,
                           float(seq * hidden))]
    for b in range(blocks):
        attention = _dense(f"layer{b}.attention", hidden, 3 * hidden, seq)
        output = _dense(f"layer{b}.attention_out", hidden, hidden, seq)
        scores = 2.0 * 2 * seq * seq * hidden  # Q K^T and softmax(QK^T) V
        layers += [LayerProfile(attention.name, attention.params,
                                attention.forward_flops + scores),
                   LayerProfile(output.name, output.params + 2 * hidden, output.forward_flops),
                   _dense(f"layer{b}.ffn_in", hidden, ffn, seq),
                   LayerProfile(f"layer{b}.ffn_out", hidden * ffn + hidden + 2 * hidden,
                                2.0 * hidden * ffn * seq)]
    layers.append(_dense("pooler", hidden, hidden))
    return Profile("bert-base", tuple(layers),
                   f"Devlin et al. 2019 (BERT-base), sequence length {seq}")


def transformer(name: str) -> Profile:
    """A transformer preset (:mod:`sim.workloads.transformer`): one layer per part, its
    stashed values as activation elements (its dropout masks, at a byte each, are not)."""
    spec = TRANSFORMERS[name]
    return Profile(name, tuple(LayerProfile(p.name, p.params_on(), p.flops, p.other_on(),
                                            float(p.stash_values())) for p in spec.parts()),
                   spec.source)


PROFILES: dict[str, Callable[[], Profile]] = {
    "resnet50": resnet50,
    "vgg16": vgg16,
    "bert-base": bert_base,
    # GPT and BERT stacks from their published shapes (sim.workloads.transformer)
    **{name: partial(transformer, name) for name in TRANSFORMERS},
}


def get_profile(name: str) -> Profile:
    """A profile by name; raises KeyError listing the known ones."""
    if name not in PROFILES:
        raise KeyError(unknown("profile", name, PROFILES))
    return PROFILES[name]()
