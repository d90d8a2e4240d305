"""Token-bucket links (tc tbf) in the flow model, against closed forms of a fluid bucket.

A link of rate r with a full bucket of D bytes sends at its peak P until the bucket is dry,
which takes D / (P - r) (it refills at r while it drains), so the first k D bytes go at P
(k = P / (P - r)) and the rest at r; an idle link refills at r. Every time here is that
arithmetic, written out, not the simulator's.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.calibration.fit_fabric import fit_network, peak_after_pause, pingpong_on_buckets_s
from sim.calibration.measure_fabric import PAUSE_BURSTS, paused_sizes
from sim.calibration.netbench import WARMUP, repetitions
from sim.errors import UserError
from sim.network.fabrics import Fabric, FabricProfile, get_fabric
from sim.network.network_builder import build_network
from sim.simulated.engine import simulate
from sim.training.validator import validate

R, P, BURST, OVH = 125e6, 1e9, 1e-3, 2e-6  # bytes/s, bytes/s, s, s
D, K = R * BURST, P / (P - R)
SHAPED = Fabric("tbf", 8 * R, latency_s=0.0, overhead_s=OVH, burst_s=BURST, peak_Bps=P)


def _on_full_bucket(n: float) -> float:
    return n / P if n <= K * D else D / (P - R) + (n - K * D) / R


def _times(sends: list[tuple[float, int, int, float]], hosts: int = 3) -> list[float]:
    """Each (start s, src, dst, bytes)'s delivery time on SHAPED links."""
    env = simpy.Environment()
    net = build_network(env, SHAPED, hosts)
    done: list[float] = [0.0] * len(sends)

    def one(i: int, start: float, src: int, dst: int, n: float):
        yield env.timeout(start)
        done[i] = (yield net.send(src, dst, n))

    for i, send in enumerate(sends):
        env.process(one(i, *send))
    env.run()
    return done


@pytest.mark.parametrize("n", [1e4, 1e5, K * D, 2e5, 1e6])
def test_a_message_on_full_buckets_goes_at_the_peak_then_at_the_rate(n):
    (arrived,) = _times([(0.0, 0, 1, n)])
    assert arrived == pytest.approx(2 * OVH + _on_full_bucket(n), rel=1e-9)


@pytest.mark.parametrize("gap", [1e-5, 3e-4, 5e-3])
def test_an_idle_bucket_refills_at_the_rate(gap):
    """A second 1 MB message ``gap`` after the first was delivered finds r x gap of tokens
    (up to D): its first r gap P / (P - r) bytes go at the peak."""
    n = 1e6
    first = 2 * OVH + _on_full_bucket(n)
    _, second = _times([(0.0, 0, 1, n), (first + gap, 0, 1, n)])
    tokens = min(D, R * (gap + 2 * OVH))  # idle from its last byte: the receive overhead too
    sent = tokens / (P - R) + (n - K * tokens) / R
    assert second - first - gap == pytest.approx(2 * OVH + sent, rel=1e-9)


def test_two_senders_into_one_host_dry_its_bucket_first():
    """Incast: the receiver's link carries P (both flows at P / 2, so the senders' links
    drain slower), its bucket is dry after D / (P - R), and the rest of 2 n goes at r."""
    n = 4e5
    a, b = _times([(0.0, 0, 2, n), (0.0, 1, 2, n)])
    assert a == b == pytest.approx(2 * OVH + D / (P - R) + (2 * n - K * D) / R, rel=1e-9)


def _simulated_pingpongs(sizes: list[int], reps: int, idle_s: float) -> list[float]:
    """netbench's ping-pong on SHAPED links, simulated: sizes in order, warm-up and
    repetitions each, the links idle ``idle_s`` before each round trip; each size's median
    half round trip (s)."""
    env = simpy.Environment()
    net = build_network(env, SHAPED, 2)
    medians: list[float] = []

    def benchmark():
        for n in sizes:
            halves = []
            for i in range(WARMUP + repetitions(n, reps)):
                yield env.timeout(idle_s)
                started = env.now
                yield net.send(0, 1, n)
                yield net.send(1, 0, n)
                if i >= WARMUP:
                    halves.append((env.now - started) / 2)
            medians.append(float(np.median(halves)))

    env.run(env.process(benchmark()))
    return medians


def test_the_pingpong_recurrence_is_the_simulated_benchmark():
    """netbench's ping-pong (sizes in order, warm-up and repetitions each, a gap between
    round trips) simulated on shaped links gives the medians the rep-by-rep recurrence of
    :func:`pingpong_on_buckets_s` gives, in every regime: 512 B never drains the bucket, 4 KB
    drains it without drying it, 32 KB settles at a cycle of n / r, 1 MB is beyond it."""
    sizes, reps, gap = [512, 4096, 32768, 262144, 1 << 20], 100, 8e-6
    medians = _simulated_pingpongs(sizes, reps, gap)
    expected = pingpong_on_buckets_s(sizes, reps, 2 * OVH, P, R, D, gap)
    assert medians == pytest.approx(expected.tolist(), rel=1e-9)
    assert expected[0] == pytest.approx(2 * OVH + 512 / P)  # a full bucket
    assert expected[2] == pytest.approx((32768 / R - gap) / 2)  # the cycle is n / r


def test_the_shaped_fit_recovers_its_links_from_pingpongs():
    sizes = [8, 512, 4096, 32768, 262144, 1 << 20, 4 << 20]
    alpha, rate, peak, gap = 6e-6, 1.2e8, 6e8, 8e-6
    times = pingpong_on_buckets_s(sizes, 100, alpha, peak, rate, rate * BURST, gap).tolist()
    measured = {"algorithm": "ring", "reps": 100, "stream": {"seconds": [3e-6]},
                "shaper": {"rate_bps": 1e9, "burst_s": BURST},
                "pingpong": {"sizes": sizes, "seconds": times},
                "allreduce": [{"ranks": 2, "sizes": [1 << 20], "seconds": [9e-3]}]}
    fit = fit_network(measured)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=1e-6)
    assert fit["bandwidth_Bps"] == pytest.approx(rate, rel=1e-6)
    assert fit["peak_Bps"] == pytest.approx(peak, rel=1e-6)
    # the gap shows only where a bucket cycles, which these links' 32 KB barely does
    assert fit["gap_s"] == pytest.approx(gap, rel=0.25)
    assert fit["burst_s"] == BURST and fit["overhead_s"] == pytest.approx(3e-6, rel=1e-6)
    assert max(abs(p["error"]) for p in fit["points"] if "pingpong" in p["what"]) < 1e-6
    (allreduce,) = [p for p in fit["points"] if "allreduce" in p["what"]]
    assert "simulated, not fitted" in allreduce["what"] and np.isfinite(allreduce["error"])


def test_a_pause_of_two_refills_sends_every_repetition_on_a_full_bucket():
    """netbench's paused ping-pong (``PAUSE_BURSTS`` bucket refills of idle link before each
    repetition), simulated on shaped links, takes 2 o + n / P for every size within the
    bucket, the line :func:`peak_after_pause` reads the peak from; the recurrence with the
    pause in its gap agrees."""
    sizes = paused_sizes(int(D))
    pause, reps, gap = PAUSE_BURSTS * BURST, 20, 8e-6
    medians = _simulated_pingpongs(sizes, reps, pause + gap)
    assert sizes == [int(D) // 8, int(D) // 4, int(D) // 2, 3 * int(D) // 4]
    assert medians == pytest.approx([2 * OVH + n / P for n in sizes], rel=1e-9)
    recurrence = pingpong_on_buckets_s(sizes, reps, 2 * OVH, P, R, D, gap + pause)
    assert recurrence.tolist() == pytest.approx(medians, rel=1e-9)


LINKS = (12e-6, 1.2e8, 4.5e9, 8e-6)  # alpha (s), rate and peak (bytes/s), gap (s)


def _paused_measurements(shaper_bps: float, woken: float,
                         inline_quicker: float) -> dict:
    """netbench's measurements on LINKS' buckets, as :func:`fit_network` takes them: the
    back-to-back ping-pongs (the 8 B one ``inline_quicker`` s quicker) and the paused ones
    (intercept ``woken``), on a shaper of ``shaper_bps``."""
    alpha, rate, peak, gap = LINKS
    sizes = [8, 512, 4096, 32768, 262144, 1 << 20, 4 << 20]
    times = pingpong_on_buckets_s(sizes, 100, alpha, peak, rate, rate * BURST, gap)
    times[0] -= inline_quicker
    paused = paused_sizes(int(rate * BURST))
    return {"algorithm": "ring", "reps": 100, "stream": {"seconds": [3e-6]},
            "shaper": {"rate_bps": shaper_bps, "burst_s": BURST}, "allreduce": [],
            "pingpong": {"sizes": sizes, "seconds": times.tolist()},
            "pingpong_paused": {"sizes": paused, "pause_s": 2e-3,
                                "seconds": [woken + n / peak for n in paused]}}


def test_the_peak_comes_from_the_paused_pingpongs_and_inline_sizes_are_not_fitted():
    """With paused ping-pongs the peak is their line's slope, exactly, whatever their
    intercept (a message after idle time pays the host's reload, here 5 us more); alpha,
    rate and gap come from the back-to-back ones, whose 8 B point (inline in MPICH, 7 us
    quicker here) is reported and left out."""
    measured = _paused_measurements(shaper_bps=1e9, woken=17e-6, inline_quicker=7e-6)
    times = measured["pingpong"]["seconds"]
    fit = fit_network(measured)
    alpha, rate, peak, gap, woken = *LINKS, 17e-6
    assert fit["peak_Bps"] == pytest.approx(peak, rel=1e-9)
    assert fit["alpha_after_idle_s"] == pytest.approx(woken, rel=1e-6)
    assert (fit["alpha_s"], fit["bandwidth_Bps"], fit["gap_s"]) == pytest.approx(
        (alpha, rate, gap), rel=1e-6)
    inline, *rest = fit["points"]
    assert inline["what"] == "pingpong 8 B (inline: not fitted)"
    assert inline["error"] == pytest.approx(7e-6 / times[0], rel=1e-6)
    assert max(abs(p["error"]) for p in rest) < 1e-6
    assert sum("after 2 ms idle" in p["what"] for p in rest) == 4


def test_the_fitted_rate_never_passes_the_shapers():
    """The bucket's rate counts whole frames, so no payload rate passes it: ping-pongs that
    would fit 120 MB/s on a shaper of 880 Mbit/s (110 MB/s) fit 110 MB/s at most."""
    measured = _paused_measurements(shaper_bps=8.8e8, woken=LINKS[0], inline_quicker=0.0)
    assert fit_network(measured)["bandwidth_Bps"] <= 1.1e8


def test_paused_pingpongs_that_do_not_rise_are_refused():
    with pytest.raises(ValueError, match="do not rise with size"):
        peak_after_pause({"sizes": [1000, 2000], "seconds": [2e-5, 1e-5]})


def test_the_shaped_fit_needs_four_sizes_above_the_inline_ones():
    measured = {"algorithm": "ring", "stream": {"seconds": [3e-6]},
                "shaper": {"rate_bps": 1e9, "burst_s": BURST}, "allreduce": [],
                "pingpong": {"sizes": [8, 4096, 32768, 1 << 20],
                             "seconds": [6e-6, 1e-5, 3e-4, 8e-3]}}
    with pytest.raises(ValueError, match="at least 4 sizes above 128 B, got 3"):
        fit_network(measured)


def test_an_unshaped_fabric_and_bad_buckets():
    assert not get_fabric("eth-10g").shaped and SHAPED.shaped
    with pytest.raises(ValueError, match="burst_s must be >= 0"):
        Fabric("x", 8e9, 0.0, 0.0, burst_s=-1.0, peak_Bps=2e9)
    with pytest.raises(ValueError, match="peak_Bps above its bandwidth"):
        Fabric("x", 8e9, 0.0, 0.0, burst_s=1e-3)  # no peak
    with pytest.raises(ValueError, match="peak_Bps above its bandwidth"):
        get_fabric({"base": "eth-10g", "burst_s": 1e-3, "peak_Bps": 1e8})
    assert FabricProfile.of(SHAPED).fabric() == SHAPED
    assert FabricProfile.of(get_fabric("eth-10g")).peak_Bps is None


def test_a_shaped_fabric_needs_the_flow_model_and_the_event_engine():
    fabric = {"bandwidth_Bps": R, "latency_s": 0.0, "overhead_s": OVH, "burst_s": BURST,
              "peak_Bps": P}
    base = {"cluster": {"fabric": fabric, "workers": 2}}
    result = simulate(validate(base))  # the flow model follows the buckets
    assert result.summary["iterations"] > 0
    with pytest.raises(UserError, match="cluster.network: 'analytical'.*token-bucket"):
        validate({"cluster": {**base["cluster"], "network": "analytical"}})
    plan = {"cluster": {"fabric": fabric, "workers": 2, "ranks_per_host": 2,
                        "host_link": "nvlink3-a100"},
            "workload": {"model": "mlp", "dataset": "gaussian", "features": 64,
                         "classes": 4, "hidden": [64] * 3, "batch": 16, "numerics": False},
            "parallel": {"pipeline": 2, "microbatches": 2},
            "run": {"engine": "steady"}}
    with pytest.raises(UserError, match="run.engine: 'steady' prices a link at one rate"):
        validate(plan)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 3e-3), st.integers(0, 3), st.integers(0, 3),
                          st.floats(1.0, 4e5)), min_size=1, max_size=12))
def test_every_link_keeps_to_its_bucket(sends):
    """Random messages on four hosts: every one arrives, and by any delivery time t each
    link has carried at most what a token bucket lets through, min(P t, D + r t) (the
    envelope of tc-tbf(8) with a peak: Le Boudec and Thiran 2001, Sec. 1.2)."""
    sends = [(start, src, dst, n) for start, src, dst, n in sends if src != dst]
    if not sends:
        return
    arrived = _times(sends, hosts=4)
    assert all(t >= start + 2 * OVH for t, (start, *_) in zip(arrived, sends, strict=True))
    for link_end in ("src", "dst"):
        for host in range(4):
            mine = [(t - OVH, n) for t, (_, src, dst, n) in zip(arrived, sends, strict=True)
                    if (src if link_end == "src" else dst) == host]
            for t, _ in mine:
                through = sum(n for done, n in mine if done <= t + 1e-12)
                assert through <= min(P * t, D + R * t) * (1 + 1e-9) + 1e-6
