"""Timing profiles of real networks, by name: the registry and BERT-base.

Each profile is computed from the published architecture, not typed in, so the totals can
be checked against the papers. The CNNs (ResNet-50, ResNet-101, Inception V3, VGG-16) are
built in :mod:`sim.workloads.cnn`; what a profile is made of, and how FLOPs are counted,
in :mod:`sim.workloads.profile_base`.

- BERT-base (Devlin et al. 2019; 12 layers, hidden 768, 12 heads, FFN 3072, WordPiece
  vocabulary 30522, sequence length 128): ~110 M parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from sim.names import unknown
from sim.workloads import cnn
from sim.workloads.profile_base import LayerProfile, Profile
from sim.workloads.transformer import TRANSFORMERS

__all__ = ["PROFILES", "LayerProfile", "Profile", "bert_base", "get_profile"]


def _dense(name: str, din: int, dout: int, tokens: int = 1) -> LayerProfile:
    return LayerProfile(name, din * dout + dout, 2.0 * din * dout * tokens)


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
    **cnn.BUILDERS,
    "bert-base": bert_base,
    # GPT and BERT stacks from their published shapes (sim.workloads.transformer)
    **{name: partial(transformer, name) for name in TRANSFORMERS},
}


def get_profile(name: str) -> Profile:
    """A profile by name; raises KeyError listing the known ones."""
    if name not in PROFILES:
        raise KeyError(unknown("profile", name, PROFILES))
    return PROFILES[name]()
