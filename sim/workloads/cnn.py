"""The CNNs of Horovod (Sergeev & Del Balso 2018) and Goyal et al. 2017, layer by layer from
the architectures' definitions (timing only: shapes, no weights).

- ResNet-50 and ResNet-101 (He et al. 2016, Table 1; 224x224): v1, the stride-2 of a stage's
  first block on its first 1x1 convolution, as in the paper and in tf_cnn_benchmarks'
  ``resnet50`` / ``resnet101``, which Horovod ran. 25.56 M / 44.55 M parameters, 3.86 G /
  7.57 G multiply-adds forward per image (Table 1 prints 3.8 and 7.6).
- ResNet-50 v1.5 (Goyal et al. 2017, Sec. 5.1: the fb.resnet.torch variant "with stride-2
  convolutions on 3x3 layers instead of on 1x1 layers"; torchvision's ``resnet50``): the
  same parameters, 4.09 G multiply-adds.
- Inception V3 (Szegedy et al. 2016, Table 1 and Figs 5-7, as TF-slim and torchvision build
  it; 299x299): 23.83 M parameters without the auxiliary classifier (tf_cnn_benchmarks'
  default, which Horovod ran), 27.16 M with it (torchvision's count); 5.71 G multiply-adds.
- VGG-16 (Simonyan & Zisserman 2015, configuration D; 224x224): 138.36 M parameters,
  15.47 G multiply-adds.

Convolutions have no bias where batch norm follows (its shift is the bias); batch norm
counts a scale and a shift per channel (the gradient's entries; TF-slim and Keras also keep
a moving mean and variance, which no gradient updates).

Non-GEMM elements (``other_elements``: read + written in the forward, unfused, per sample):
batch norm and ReLU read and write their tensor (2 each), a pooling reads its input and
writes its output, a residual add reads two tensors and writes one (3), a concatenation
reads its branches and writes their join (2), dropout reads and writes (2), the softmax
of the loss reads the logits and writes probabilities (2). Bias adds run in the GEMM's
epilogue (cuDNN, cuBLAS), so they cost no pass of their own.

Stashed elements (``activation_elements``: what the backward reads, per sample), each
tensor counted once, at the op that writes it: batch norm keeps its input (the conv's
output), ReLU its output (also the next layer's input, which that layer's weight gradient
reads), max pooling its output and one argmax index per output, average pooling its output,
a concatenation its join, dropout its mask and output, the loss its probabilities, and
the first layer the image.

A layer carries its own batch norm and ReLU; an op between layers (a pooling, a block's
concatenation, a residual add and the ReLU after it, dropout) goes with the next layer in
forward order, the first to read its output; a loss's softmax with the layer whose logits it
reads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from sim.workloads.profile_base import LayerProfile, Profile

IMAGENET_CLASSES = 1000


@dataclass(frozen=True)
class _Elements:
    """Per-sample elements of the non-GEMM ops that go with a layer."""

    other: float = 0.0   # read + written in the forward
    stash: float = 0.0   # kept for the backward

    def __add__(self, more: _Elements) -> _Elements:
        return _Elements(self.other + more.other, self.stash + more.stash)


_NOTHING = _Elements()


def _max_pool(channels: int, in_hw: int, out_hw: int) -> _Elements:
    """Reads its input, writes its output; keeps the output and an argmax index per output."""
    out = channels * out_hw ** 2
    return _Elements(channels * in_hw ** 2 + out, 2.0 * out)


def _avg_pool(channels: int, in_hw: int, out_hw: int) -> _Elements:
    """Reads its input, writes its output; keeps the output (the next layer's input)."""
    out = channels * out_hw ** 2
    return _Elements(channels * in_hw ** 2 + out, float(out))


def _concat(channels: int, hw: int) -> _Elements:
    """Reads the branches, writes their join (``channels`` in all) and keeps it."""
    out = channels * hw ** 2
    return _Elements(2.0 * out, float(out))


def _residual(channels: int, hw: int) -> _Elements:
    """The add (reads 2, writes 1) and the ReLU after it (reads, writes; keeps its output)."""
    out = channels * hw ** 2
    return _Elements(5.0 * out, float(out))


def _dropout(n: int) -> _Elements:
    """Reads, writes; keeps the mask and the output (the next layer's input)."""
    return _Elements(2.0 * n, 2.0 * n)


def _softmax_loss(classes: int) -> _Elements:
    """The loss's softmax: reads the logits, writes the probabilities and keeps them."""
    return _Elements(2.0 * classes, float(classes))


def _conv(name: str, k: int, cin: int, cout: int, out_hw: int, bn: bool = True, *,
          kw: int | None = None, relu: bool = True) -> LayerProfile:
    """A k x kw convolution (kw defaults to k) with batch norm (a scale and a shift per
    channel; no bias) or a bias, then ReLU unless ``relu`` is false."""
    weights = k * (kw or k) * cin * cout
    out = cout * out_hw * out_hw
    # batch norm keeps its input (the conv's output), ReLU its output; 2 elements a pass each
    ops = (bn + relu) * out
    return LayerProfile(name, weights + (2 * cout if bn else cout),
                        2.0 * weights * out_hw * out_hw, 2.0 * ops, float(ops))


def _fc(name: str, din: int, dout: int, relu: bool = False) -> LayerProfile:
    """A fully connected layer with bias, then ReLU if ``relu`` (reads, writes; keeps its
    output)."""
    return LayerProfile(name, din * dout + dout, 2.0 * din * dout, 2.0 * dout * relu,
                        float(dout * relu))


def _image(channels: int, hw: int) -> _Elements:
    """The input image, which the first layer's weight gradient reads."""
    return _Elements(stash=float(channels * hw * hw))


def _with(layer: LayerProfile, ops: _Elements) -> LayerProfile:
    """``layer`` carrying ``ops`` too."""
    return replace(layer, other_elements=layer.other_elements + ops.other,
                   activation_elements=layer.activation_elements + ops.stash)


class _Net:
    """Layers in forward order. An op between layers (a pooling, a concatenation, a residual
    add and its ReLU, dropout) goes with the next layer added, the first to read its output;
    a loss's softmax goes with the layer whose logits it reads."""

    def __init__(self, channels: int, hw: int) -> None:
        self.layers: list[LayerProfile] = []
        self.pending = _image(channels, hw)  # the first layer reads the image

    def then(self, ops: _Elements) -> None:
        """Ops whose output the next layer added reads."""
        self.pending += ops

    def add(self, *layers: LayerProfile) -> None:
        for layer in layers:
            self.layers.append(_with(layer, self.pending))
            self.pending = _NOTHING

    def loss(self, classes: int = IMAGENET_CLASSES) -> None:
        """The softmax of a loss on the last layer's ``classes`` logits."""
        self.layers.append(_with(self.layers.pop(), _softmax_loss(classes)))

    def profile(self, name: str, source: str) -> Profile:
        assert self.pending == _NOTHING, f"{name}: ops after the last layer"
        return Profile(name, tuple(self.layers), source)


# ---- ResNet --------------------------------------------------------------------------

RESNET_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}  # He et al. 2016, Table 1


def resnet(name: str, depth: int, source: str, stride_on_3x3: bool = False) -> Profile:
    """ResNet-``depth`` (224x224): v1 (the stride on the block's first 1x1) or, with
    ``stride_on_3x3``, v1.5. Raises KeyError for a depth Table 1 has no bottleneck row for."""
    net = _Net(3, 224)
    net.add(_conv("conv1", 7, 3, 64, 112))
    net.then(_max_pool(64, 112, 56))
    cin, in_hw = 64, 56
    # (blocks, bottleneck width, output size) of conv2_x .. conv5_x
    for stage, (count, width, hw) in enumerate(zip(RESNET_BLOCKS[depth], (64, 128, 256, 512),
                                                   (56, 28, 14, 7), strict=True), start=2):
        for b in range(count):
            prefix = f"conv{stage}_{b + 1}"
            net.add(_conv(f"{prefix}a", 1, cin, width, in_hw if stride_on_3x3 else hw),
                    _conv(f"{prefix}b", 3, width, width, hw),
                    _conv(f"{prefix}c", 1, width, 4 * width, hw, relu=False))
            if b == 0:  # projection shortcut
                net.add(_conv(f"{prefix}proj", 1, cin, 4 * width, hw, relu=False))
            net.then(_residual(4 * width, hw))
            cin, in_hw = 4 * width, hw
    net.then(_avg_pool(2048, 7, 1))
    net.add(_fc("fc", 2048, IMAGENET_CLASSES))
    net.loss()
    return net.profile(name, source)


def resnet50() -> Profile:
    return resnet("resnet50", 50, "He et al. 2016, Table 1: ResNet-50 v1")


def resnet101() -> Profile:
    return resnet("resnet101", 101, "He et al. 2016, Table 1: ResNet-101 v1")


def resnet50_v15() -> Profile:
    return resnet("resnet50-v1.5", 50, "Goyal et al. 2017, Sec. 5.1: ResNet-50 with the stride "
                  "on the 3x3s, from fb.resnet.torch", stride_on_3x3=True)


# ---- VGG -----------------------------------------------------------------------------

def vgg16() -> Profile:
    net, cin, hw = _Net(3, 224), 3, 224
    for block, (convs, cout) in enumerate([(2, 64), (2, 128), (3, 256), (3, 512), (3, 512)],
                                          start=1):
        for i in range(convs):
            net.add(_conv(f"conv{block}_{i + 1}", 3, cin, cout, hw, bn=False))
            cin = cout
        net.then(_max_pool(cout, hw, hw // 2))  # 2x2 max pooling after each block
        hw //= 2
    net.add(_fc("fc6", 512 * 7 * 7, 4096, relu=True))
    net.then(_dropout(4096))
    net.add(_fc("fc7", 4096, 4096, relu=True))
    net.then(_dropout(4096))
    net.add(_fc("fc8", 4096, IMAGENET_CLASSES))
    net.loss()
    return net.profile("vgg16", "Simonyan & Zisserman 2015, configuration D")


# ---- Inception V3 --------------------------------------------------------------------

class _Branch(NamedTuple):
    """One convolution of an Inception block's branch; ``hw``: its output size where it is
    not the block's; ``reads``: the ops between it and the block's input (a pooling)."""

    name: str
    kh: int
    kw: int
    cin: int
    cout: int
    hw: int = 0
    reads: _Elements = _NOTHING


def _block(net: _Net, name: str, hw: int, convs: list[_Branch], joined: int,
           beside: _Elements = _NOTHING) -> None:
    """An Inception block with output size ``hw``: its branches' convolutions, then one
    concatenation of ``joined`` channels (with ``beside``, a pooling branch without
    convolutions, which only the concatenation reads)."""
    for conv in convs:
        net.then(conv.reads)
        net.add(_conv(f"{name}.{conv.name}", conv.kh, conv.cin, conv.cout, conv.hw or hw,
                      kw=conv.kw))
    net.then(beside + _concat(joined, hw))


def _pool_branch(cin: int, hw: int, cout: int) -> _Branch:
    """A 3x3 stride-1 average pooling, then a 1x1 convolution to ``cout``."""
    return _Branch("branch_pool", 1, 1, cin, cout, reads=_avg_pool(cin, hw, hw))


def _inception_a(net: _Net, name: str, cin: int, pool: int) -> None:
    """Fig. 5 at 35x35 (its 5x5 branch as the released model has it: 1x1 48, 5x5 64)."""
    _block(net, name, 35, [_Branch("branch1x1", 1, 1, cin, 64),
                           _Branch("branch5x5_1", 1, 1, cin, 48),
                           _Branch("branch5x5_2", 5, 5, 48, 64),
                           _Branch("branch3x3dbl_1", 1, 1, cin, 64),
                           _Branch("branch3x3dbl_2", 3, 3, 64, 96),
                           _Branch("branch3x3dbl_3", 3, 3, 96, 96),
                           _pool_branch(cin, 35, pool)],
           64 + 64 + 96 + pool)


def _inception_b(net: _Net, name: str, cin: int) -> None:
    """The 35 -> 17 grid reduction (Fig. 10): stride-2 3x3s beside a max pooling."""
    _block(net, name, 17, [_Branch("branch3x3", 3, 3, cin, 384),
                           _Branch("branch3x3dbl_1", 1, 1, cin, 64, 35),
                           _Branch("branch3x3dbl_2", 3, 3, 64, 96, 35),
                           _Branch("branch3x3dbl_3", 3, 3, 96, 96)],
           384 + 96 + cin, _max_pool(cin, 35, 17))


def _inception_c(net: _Net, name: str, cin: int, c7: int) -> None:
    """Fig. 6 at 17x17 (n = 7: 1x7 and 7x1 convolutions in place of 7x7s)."""
    _block(net, name, 17, [_Branch("branch1x1", 1, 1, cin, 192),
                           _Branch("branch7x7_1", 1, 1, cin, c7),
                           _Branch("branch7x7_2", 1, 7, c7, c7),
                           _Branch("branch7x7_3", 7, 1, c7, 192),
                           _Branch("branch7x7dbl_1", 1, 1, cin, c7),
                           _Branch("branch7x7dbl_2", 7, 1, c7, c7),
                           _Branch("branch7x7dbl_3", 1, 7, c7, c7),
                           _Branch("branch7x7dbl_4", 7, 1, c7, c7),
                           _Branch("branch7x7dbl_5", 1, 7, c7, 192),
                           _pool_branch(cin, 17, 192)],
           4 * 192)


def _inception_d(net: _Net, name: str, cin: int) -> None:
    """The 17 -> 8 grid reduction: stride-2 3x3s beside a max pooling."""
    _block(net, name, 8, [_Branch("branch3x3_1", 1, 1, cin, 192, 17),
                          _Branch("branch3x3_2", 3, 3, 192, 320),
                          _Branch("branch7x7x3_1", 1, 1, cin, 192, 17),
                          _Branch("branch7x7x3_2", 1, 7, 192, 192, 17),
                          _Branch("branch7x7x3_3", 7, 1, 192, 192, 17),
                          _Branch("branch7x7x3_4", 3, 3, 192, 192)],
           320 + 192 + cin, _max_pool(cin, 17, 8))


def _inception_e(net: _Net, name: str, cin: int) -> None:
    """Fig. 7 at 8x8: 1x3 and 3x1 convolutions side by side in place of 3x3s."""
    _block(net, name, 8, [_Branch("branch1x1", 1, 1, cin, 320),
                          _Branch("branch3x3_1", 1, 1, cin, 384),
                          _Branch("branch3x3_2a", 1, 3, 384, 384),
                          _Branch("branch3x3_2b", 3, 1, 384, 384),
                          _Branch("branch3x3dbl_1", 1, 1, cin, 448),
                          _Branch("branch3x3dbl_2", 3, 3, 448, 384),
                          _Branch("branch3x3dbl_3a", 1, 3, 384, 384),
                          _Branch("branch3x3dbl_3b", 3, 1, 384, 384),
                          _pool_branch(cin, 8, 192)],
           320 + 2 * 384 + 2 * 384 + 192)


def inception_v3(aux: bool = False) -> Profile:
    """Inception V3 at 299x299 (Table 1), with the auxiliary classifier (Sec. 4, Fig. 8) if
    ``aux``."""
    net = _Net(3, 299)
    net.add(_conv("Conv2d_1a_3x3", 3, 3, 32, 149), _conv("Conv2d_2a_3x3", 3, 32, 32, 147),
            _conv("Conv2d_2b_3x3", 3, 32, 64, 147))
    net.then(_max_pool(64, 147, 73))
    net.add(_conv("Conv2d_3b_1x1", 1, 64, 80, 73), _conv("Conv2d_4a_3x3", 3, 80, 192, 71))
    net.then(_max_pool(192, 71, 35))
    for name, cin, pool in (("Mixed_5b", 192, 32), ("Mixed_5c", 256, 64), ("Mixed_5d", 288, 64)):
        _inception_a(net, name, cin, pool)
    _inception_b(net, "Mixed_6a", 288)
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        _inception_c(net, name, 768, c7)
    if aux:  # on Mixed_6e's 17x17x768: 5x5 stride-3 average pooling, 1x1 to 128, 5x5 to 768
        net.then(_avg_pool(768, 17, 5))
        net.add(_conv("AuxLogits.conv0", 1, 768, 128, 5), _conv("AuxLogits.conv1", 5, 128, 768, 1),
                _fc("AuxLogits.fc", 768, IMAGENET_CLASSES))
        net.loss()
    _inception_d(net, "Mixed_7a", 768)
    _inception_e(net, "Mixed_7b", 1280)
    _inception_e(net, "Mixed_7c", 2048)
    net.then(_avg_pool(2048, 8, 1) + _dropout(2048))
    net.add(_fc("fc", 2048, IMAGENET_CLASSES))
    net.loss()
    return net.profile("inception-v3" + "-aux" * aux,
                       "Szegedy et al. 2016, Table 1: Inception V3 at 299x299, "
                       + ("with" if aux else "no") + " auxiliary classifier")


BUILDERS = {
    "resnet50": resnet50,
    "resnet101": resnet101,
    "resnet50-v1.5": resnet50_v15,
    "inception-v3": inception_v3,
    "vgg16": vgg16,
}
