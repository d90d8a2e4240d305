"""The CNN timing profiles (sim/workloads/cnn.py) against their papers' and frameworks'
published counts, and their non-GEMM and stashed elements against closed forms."""

from __future__ import annotations

import re

import pytest

from sim.workloads import cnn
from sim.workloads.timing_profiles import PROFILES, get_profile

G = 1e9

# (profile, published parameters, published multiply-adds forward per sample, where from)
PUBLISHED = [
    # He et al. 2016 Table 1 print 3.8 G for the v1 network, 1.5% below the 3.86 G its own
    # shapes give (Table 1 rounds 7.57 to 7.6 and 11.28 to 11.3, so 3.86 to 3.8 is a slip of
    # theirs); the parameters are torchvision's count of the same network
    (cnn.resnet50(), 25.557e6, 3.8 * G, 0.016, "He et al. 2016, Table 1; torchvision"),
    (cnn.resnet101(), 44.549e6, 7.6 * G, 0.01, "He et al. 2016, Table 1; torchvision"),
    # torchvision's resnet50 / resnet101 are v1.5 (stride on the 3x3, as Goyal et al. used):
    # 4.09 / 7.80 GFLOPS in its model table, which counts multiply-adds (fvcore)
    (cnn.resnet50_v15(), 25.557e6, 4.089 * G, 0.01, "torchvision ResNet50_Weights"),
    (cnn.resnet("resnet101-v1.5", 101, "", stride_on_3x3=True), 44.549e6, 7.801 * G, 0.01,
     "torchvision ResNet101_Weights"),
    # Szegedy et al. 2016 say "5 billion multiply-adds" for the network of Table 1; the
    # released model (TF-slim, torchvision, which this builds: the 5x5 branch of Fig. 5 and
    # the 8x8 blocks of Fig. 7 as released) counts 5.71 G in torchvision's table, so that is
    # the figure checked. Parameters: Keras / TF-slim without the auxiliary classifier
    # (23,851,784: they keep a shift, a moving mean and a moving variance per batch-norm
    # channel, where this counts a scale and a shift; 0.07% apart)
    (cnn.inception_v3(), 23.851784e6, 5.713 * G, 0.01, "Keras InceptionV3; torchvision"),
    # torchvision's Inception_V3 counts its parameters with the auxiliary classifier
    (cnn.inception_v3(aux=True), 27.161264e6, 5.713 * G, 0.01, "torchvision Inception_V3"),
    (cnn.vgg16(), 138.357544e6, 15.47 * G, 0.01, "Simonyan & Zisserman 2015; torchvision"),
]


@pytest.mark.parametrize("profile, params, macs, rel, source", PUBLISHED,
                         ids=[p.name for p, *_ in PUBLISHED])
def test_parameters_and_forward_flops_match_the_published_counts(profile, params, macs, rel,
                                                                 source):
    assert profile.params == pytest.approx(params, rel=0.01), source
    assert profile.forward_flops / 2 == pytest.approx(macs, rel=rel), source


def test_the_counts_are_the_frameworks_exactly():
    """torchvision's parameter counts to the unit (its resnet50/101 are v1.5, which has v1's
    parameters), and the 4.09 G of its ResNet-50 to the multiply-add."""
    assert cnn.resnet50().params == cnn.resnet50_v15().params == 25_557_032
    assert cnn.resnet101().params == 44_549_160
    assert cnn.inception_v3(aux=True).params == 27_161_264
    assert cnn.vgg16().params == 138_357_544
    assert cnn.resnet50_v15().forward_flops == 2 * 4_089_184_256


def test_v1_5_moves_the_stride_from_the_first_1x1_to_the_3x3():
    """Only the first 1x1 of stages 3-5 changes: it runs at twice the side, 4x the area."""
    v1, v15 = cnn.resnet50(), cnn.resnet50_v15()
    for a, b in zip(v1.layers, v15.layers, strict=True):
        if re.fullmatch(r"conv[345]_1a", a.name):
            assert b.forward_flops == 4 * a.forward_flops
        else:
            assert (a.name, a.params, a.forward_flops) == (b.name, b.params, b.forward_flops)
    # 1x1 from 256, 512, 1024 channels to 128, 256, 512 at 28, 14, 7, now at 56, 28, 14
    extra = sum(2 * cin * (cin // 2) * (4 - 1) * hw * hw for cin, hw in ((256, 28), (512, 14),
                                                                          (1024, 7)))
    assert v15.forward_flops - v1.forward_flops == extra


def test_the_registry_builds_every_cnn_under_its_name():
    for name in ("resnet50", "resnet101", "resnet50-v1.5", "inception-v3", "vgg16"):
        assert name in PROFILES and get_profile(name).name == name


# ---- forward order ---------------------------------------------------------------------

def _prefixes(profile, pattern):
    """The distinct name prefixes matching ``pattern``, in the order the layers first use them."""
    return list(dict.fromkeys(re.match(pattern, layer.name).group(0) for layer in profile.layers))


def test_resnet_layers_run_stage_by_stage_block_by_block():
    for profile, blocks in ((cnn.resnet50(), (3, 4, 6, 3)), (cnn.resnet101(), (3, 4, 23, 3))):
        names = [layer.name for layer in profile.layers]
        expected = ["conv1"]
        for stage, count in enumerate(blocks, start=2):
            for b in range(1, count + 1):
                expected += [f"conv{stage}_{b}{part}" for part in "abc"]
                expected += [f"conv{stage}_{b}proj"] if b == 1 else []
        assert names == expected + ["fc"]


def test_inception_blocks_run_in_table_1_order():
    order = ["Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "Conv2d_3b_1x1",
             "Conv2d_4a_3x3", "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b",
             "Mixed_6c", "Mixed_6d", "Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c", "fc"]
    assert _prefixes(cnn.inception_v3(), r"[^.]+") == order
    # the auxiliary classifier reads Mixed_6e's output; Mixed_7a does too, after it
    assert _prefixes(cnn.inception_v3(aux=True), r"[^.]+") == \
        order[:13] + ["AuxLogits"] + order[13:]
    # each block's branches as in Fig. 5: the 1x1, the 5x5, the double 3x3, the pooling
    assert [layer.name for layer in cnn.inception_v3().layers if "Mixed_5b" in layer.name] == \
        [f"Mixed_5b.{b}" for b in ("branch1x1", "branch5x5_1", "branch5x5_2", "branch3x3dbl_1",
                                   "branch3x3dbl_2", "branch3x3dbl_3", "branch_pool")]


def test_vgg16_is_its_13_convolutions_then_3_fully_connected_layers():
    assert [layer.name for layer in cnn.vgg16().layers] == \
        [f"conv{b}_{i}" for b, n in enumerate((2, 2, 3, 3, 3), 1) for i in range(1, n + 1)] \
        + ["fc6", "fc7", "fc8"]


# ---- non-GEMM and stashed elements -----------------------------------------------------

@pytest.mark.parametrize("name", ["resnet50", "resnet101", "resnet50-v1.5", "inception-v3",
                                  "vgg16"])
def test_every_layer_has_non_gemm_and_stashed_elements(name):
    for layer in get_profile(name).layers:
        assert layer.other_elements > 0 and layer.activation_elements > 0, layer.name


def _layer(profile, name):
    return next(layer for layer in profile.layers if layer.name == name)


def test_a_convolution_with_batch_norm_and_relu_reads_and_keeps_its_output():
    """BN and ReLU each read and write the conv's output (4x its elements); BN keeps its
    input and ReLU its output (2x)."""
    out = 64 * 56 * 56  # conv2_1b: 3x3, 64 -> 64 channels at 56x56
    b = _layer(cnn.resnet50(), "conv2_1b")
    assert (b.other_elements, b.activation_elements) == (4 * out, 2 * out)
    # without ReLU (before the residual add): batch norm alone
    c = _layer(cnn.resnet50(), "conv2_1c")
    assert (c.other_elements, c.activation_elements) == (2 * 4 * out, 4 * out)
    # Inception's factorised 1x7 at 17x17 to 128 channels
    seven = _layer(cnn.inception_v3(), "Mixed_6b.branch7x7_2")
    assert (seven.other_elements, seven.activation_elements) == (4 * 128 * 17 ** 2,
                                                                 2 * 128 * 17 ** 2)


def test_the_ops_between_layers_go_with_the_layer_reading_their_output():
    r50, v1_5 = cnn.resnet50(), cnn.resnet50_v15()
    # conv1 keeps the image its weight gradient reads; conv2_1a reads the 3x3 stride-2
    # max pooling of conv1's 64x112x112 (it reads that, writes 64x56x56, keeps the output
    # and an argmax index per output)
    own = 64 * 56 * 56
    assert _layer(r50, "conv1").activation_elements == 2 * 64 * 112 ** 2 + 3 * 224 ** 2
    a = _layer(r50, "conv2_1a")
    assert a.other_elements == 4 * own + 64 * 112 ** 2 + own
    assert a.activation_elements == 2 * own + 2 * own
    # conv2_2a reads the first block's residual add (reads 2, writes 1) and ReLU (reads,
    # writes, keeps its output) on 256x56x56
    res = 256 * 56 * 56
    a2 = _layer(r50, "conv2_2a")
    assert (a2.other_elements, a2.activation_elements) == (4 * own + 5 * res, 2 * own + res)
    # v1.5's conv3_1a runs at 56x56 where v1's runs at 28x28: its own elements 4x, the
    # residual it reads the same
    res3 = 256 * 56 * 56
    assert _layer(v1_5, "conv3_1a").other_elements - 5 * res3 == \
        4 * (_layer(r50, "conv3_1a").other_elements - 5 * res3)
    # an Inception block's first layer reads the previous block's concatenation (read and
    # written once, kept once): Mixed_5c's first 1x1 after Mixed_5b's 256 channels at 35x35
    first = _layer(cnn.inception_v3(), "Mixed_5c.branch1x1")
    join, out = 256 * 35 ** 2, 64 * 35 ** 2
    assert (first.other_elements, first.activation_elements) == (4 * out + 2 * join,
                                                                 2 * out + join)
    # the pooling branch's 1x1 reads a 3x3 stride-1 average pooling of the block's input
    pool = _layer(cnn.inception_v3(), "Mixed_5c.branch_pool")
    assert pool.other_elements == 4 * out + 2 * join and pool.activation_elements == \
        2 * out + join


def test_the_last_layer_carries_the_loss_softmax_and_vgg_its_dropout():
    fc8 = _layer(cnn.vgg16(), "fc8")
    # dropout after fc7 (reads, writes; keeps mask and output), then softmax of 1000 logits
    assert (fc8.other_elements, fc8.activation_elements) == (2 * 4096 + 2 * 1000,
                                                             2 * 4096 + 1000)
    fc7 = _layer(cnn.vgg16(), "fc7")
    assert (fc7.other_elements, fc7.activation_elements) == (2 * 4096 + 2 * 4096,
                                                             4096 + 2 * 4096)


def test_elements_scale_with_the_output_area_between_stages():
    """A stage later, a layer has twice the channels at half the side: half the output
    elements (so half the non-GEMM and stashed ones), and 4x the weights on a quarter of the
    area (the same FLOPs)."""
    r = cnn.resnet101()
    a, b = _layer(r, "conv4_5b"), _layer(r, "conv3_3b")  # 3x3, 256 at 14 / 128 at 28
    assert a.other_elements * 2 == b.other_elements
    assert a.activation_elements * 2 == b.activation_elements
    assert a.forward_flops == b.forward_flops
