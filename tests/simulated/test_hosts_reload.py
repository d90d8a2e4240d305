"""The reload transient (sim.simulated.hosts, sim.calibration.reload_bench) against its closed
form: work after a gap in a rank's CPU activity takes R (1 - exp(-gap / tau)) longer."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import simpy

from sim.calibration.reload_bench import fit_reload, fit_spin_base
from sim.simulated.hosts import Hosts
from sim.training.host_costs import HOSTS, HostProfile

R, TAU = 200e-6, 2e-3


def reload(gap: float) -> float:
    return R * (1 - math.exp(-gap / TAU))


def hosts_for(env: simpy.Environment, ranks: int, cores: int, spin: bool,
              idle_waiters: tuple[int, ...] | list[int] = (), **fields) -> Hosts:
    """Ranks on one host whose profile has the reload transient and ``fields``."""
    return Hosts(env, [0] * ranks, cores,
                 replace(HOSTS["ideal"], reload_s=R, reload_tau_s=TAU, **fields), spin,
                 idle_waiters)


def second_task_s(hosts: Hosts, between, first_s: float = 100e-6,
                  woken: bool = False) -> float:
    """Rank 0 works ``first_s``, does ``between()`` (a generator: a sleep, a wait), then
    works 100 us: how long that second task took (simulated s)."""
    env, took = hosts.env, []

    def rank():
        yield from hosts.run(0, first_s, woken=woken)
        yield from between()
        start = env.now
        yield from hosts.run(0, 100e-6, woken=woken)
        took.append(env.now - start)

    env.process(rank())
    env.run()
    return took[0]


@pytest.mark.parametrize("cores", [1, 2])  # shared (2 ranks on 1 core) and a core each
@pytest.mark.parametrize("gap", [0.5e-3, 2e-3, 10e-3])
def test_work_after_a_sleep_pays_the_reload_of_the_gap(cores, gap):
    """A task, a modelled gradient (a sleep of ``gap``), a task: the second is longer by
    reload(gap); rank 1 never runs (it sleeps), so nothing holds the other cores."""
    hosts = hosts_for(simpy.Environment(), 2, cores, spin=True)
    took = second_task_s(hosts, lambda: hosts.sleep(0, gap))
    assert took == pytest.approx(100e-6 + reload(gap))


@pytest.mark.parametrize("cores", [1, 2])
def test_a_task_returns_the_cpu_it_took_with_its_reload(cores):
    """What a server's span on the trace shows: the task's seconds and its reload."""
    hosts = hosts_for(simpy.Environment(), 2, cores, spin=True)
    took = []

    def rank():
        yield from hosts.run(0, 100e-6)
        yield from hosts.sleep(0, 2e-3)
        took.append((yield from hosts.run(0, 100e-6)))

    hosts.env.process(rank())
    hosts.env.run()
    assert took == [pytest.approx(100e-6 + reload(2e-3))]


def test_a_wait_that_is_not_a_sleep_is_spun_and_costs_nothing():
    """Spinning ranks (spin=True) wait for anything, not only messages, by spinning."""
    env = simpy.Environment()
    hosts = hosts_for(env, 1, 1, spin=True)

    def other_ranks_work():  # e.g. an AllOf of other ranks' work
        yield env.timeout(2e-3)

    assert second_task_s(hosts, other_ranks_work) == pytest.approx(100e-6)


def test_back_to_back_tasks_pay_no_reload():
    env = simpy.Environment()
    hosts = hosts_for(env, 1, 1, spin=True)
    ends = []

    def rank():
        for _ in range(3):
            yield from hosts.run(0, 100e-6)
        ends.append(env.now)

    env.process(rank())
    env.run()
    assert ends == [pytest.approx(300e-6)]


@pytest.mark.parametrize("spin,extra", [
    (True, 0.0),  # spinning keeps the core and its caches: no gap
    (False, reload(2e-3 - 50e-6)),  # napping: the gap starts after the 50 us spin
])
def test_a_wait_is_a_gap_only_while_the_rank_naps(spin, extra):
    env = simpy.Environment()
    hosts = hosts_for(env, 1, 1, spin=spin, poll_spin_s=50e-6, poll_s=1e-6)
    took = second_task_s(hosts, lambda: hosts.wait(0, env.timeout(2e-3)))
    assert took == pytest.approx(100e-6 + extra, abs=1e-6)


@pytest.mark.parametrize("spin,extra", [(True, 0.0), (False, reload(3e-3 - 50e-6))])
def test_an_idle_server_reloads_only_if_it_napped_between_messages(spin, extra):
    """A server handles a message at t = 0 and the next at 3.1 ms (``woken``)."""
    env = simpy.Environment()
    hosts = hosts_for(env, 1, 1, spin=spin, poll_spin_s=50e-6, poll_s=1e-6,
                      idle_waiters=[0])

    def no_message_for_3_ms():
        yield env.timeout(3e-3)

    took = second_task_s(hosts, no_message_for_3_ms, woken=True)
    assert took == pytest.approx(100e-6 + extra, abs=2e-6)  # + at most one 1 us poll


def test_the_fit_recovers_the_curve_it_was_drawn_from():
    gaps = [100e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3]
    fitted = fit_reload(gaps, [reload(g) for g in gaps])
    assert fitted["reload_s"] == pytest.approx(R, rel=0.02)
    assert fitted["reload_tau_s"] == pytest.approx(TAU, rel=0.03)
    assert fitted["max_error"] < 0.02


def test_the_fit_recovers_a_curve_with_a_base():
    gaps = [100e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3]
    fitted = fit_reload(gaps, [60e-6 + reload(g) for g in gaps])
    assert fitted["reload_base_s"] == pytest.approx(60e-6, rel=0.03)
    assert fitted["reload_s"] == pytest.approx(R, rel=0.03)
    assert fitted["reload_tau_s"] == pytest.approx(TAU, rel=0.03)


def test_the_fit_of_a_flat_slowdown_is_all_base():
    fitted = fit_reload([1e-3, 5e-3, 20e-3], [50e-6, 50e-6, 50e-6])
    assert fitted["reload_base_s"] == pytest.approx(50e-6)
    assert fitted["reload_s"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("gap", [0.0, 1e-3])
def test_any_gap_at_all_costs_the_base(gap):
    """A base of 30 us: back to back, nothing; after a sleep, 30 us plus the curve."""
    hosts = hosts_for(simpy.Environment(), 1, 1, spin=True, reload_base_s=30e-6)

    def sleep_if_any():
        if gap:
            yield from hosts.sleep(0, gap)

    took = second_task_s(hosts, sleep_if_any)
    assert took == pytest.approx(100e-6 + (30e-6 + reload(gap) if gap else 0.0))


def test_the_fit_with_nothing_measurable_reloads_nothing():
    fitted = fit_reload([1e-3, 2e-3], [-5e-6, 0.0])
    assert fitted["reload_s"] == fitted["reload_tau_s"] == fitted["reload_base_s"] == 0.0


def test_the_fit_ignores_points_without_a_measurable_slowdown():
    gaps = [100e-6, 1e-3, 5e-3, 20e-3]
    extra = [reload(g) for g in gaps]
    extra[0] = -3e-6  # noise: slower warm than cold
    fitted = fit_reload(gaps, extra)
    assert fitted["errors"][0] is None
    assert fitted["reload_s"] == pytest.approx(R, rel=0.05)
    assert np.isfinite(fitted["max_error"])


@pytest.mark.parametrize("fields,message", [
    ({"reload_s": -1e-6}, "reload_s must be >= 0"),
    ({"reload_s": 1e-4, "reload_tau_s": 0.0}, "reload_tau_s must be > 0"),
    ({"reload_tau_s": math.nan}, "reload_tau_s must be >= 0"),
    ({"reload_base_s": -1e-6}, "reload_base_s must be >= 0"),
    ({"reload_spin_base_s": -1e-6}, "reload_spin_base_s must be >= 0"),
])
def test_a_profile_with_a_bad_reload_is_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        HostProfile("bad", 1e9, 1e9, 1e9, 0.0, 0.0, 3e-3, **fields)


@pytest.mark.parametrize("other", ["sleeps", "spins", "works"])
def test_a_gap_grows_with_the_cores_not_held_by_spinners(other):
    """Two ranks on two cores: rank 0 sleeps 2 ms between two tasks. Whether rank 1 sleeps
    (an idle core serves foreign code) or works (its footprint displaces rank 0's), the gap
    counts 2 ms; if rank 1 spins in a wait, one core of two is held by a loop that displaces
    nothing: the gap counts 1 ms."""
    env = simpy.Environment()
    hosts = hosts_for(env, 2, 2, spin=True)
    ends = []

    def rank0():
        yield from hosts.run(0, 100e-6)
        yield from hosts.sleep(0, 2e-3)
        start = env.now
        yield from hosts.run(0, 100e-6)
        ends.append(env.now - start)

    def rank1():
        yield env.timeout(100e-6)
        if other == "spins":
            yield from hosts.wait(1, env.timeout(2e-3))
        elif other == "works":
            yield from hosts.run(1, 2e-3)

    env.process(rank0())
    env.process(rank1())
    env.run()
    gap = 1e-3 if other == "spins" else 2e-3
    assert ends == [pytest.approx(100e-6 + reload(gap))]


def test_a_spin_after_a_gap_stops_it_growing_but_the_next_task_still_pays_it():
    """Sleep 1 ms, spin-wait 5 ms, work: the caches lost in the sleep are refetched by the
    work (reload of 1 ms), the spin lost nothing more."""
    env = simpy.Environment()
    hosts = hosts_for(env, 1, 1, spin=True)

    def sleep_then_spin():
        yield from hosts.sleep(0, 1e-3)
        yield from hosts.wait(0, env.timeout(5e-3))

    assert second_task_s(hosts, sleep_then_spin) == pytest.approx(100e-6 + reload(1e-3))


SPIN_BASE = 12e-6


@pytest.mark.parametrize("gap", [50e-6, 2e-3, 10e-3])
def test_with_a_measured_spin_base_a_spin_is_a_gap_that_pays_it_and_the_curve(gap):
    """A profile that measured the spin's reload: work after spinning ``gap`` takes
    spin_base + R (1 - exp(-gap / tau)) longer (not the sleep's base)."""
    env = simpy.Environment()
    hosts = hosts_for(env, 1, 1, spin=True, reload_base_s=30e-6,
                      reload_spin_base_s=SPIN_BASE)

    def spin():
        yield from hosts.wait(0, env.timeout(gap))

    assert second_task_s(hosts, spin) == pytest.approx(100e-6 + SPIN_BASE + reload(gap))


def test_with_a_spin_base_a_sleep_then_a_spin_pays_the_sleep_s_base_over_the_whole_gap():
    """Sleep 1 ms, spin 5 ms: the gap is 6 ms, and it had a sleep (the wake-up's base)."""
    env = simpy.Environment()
    hosts = hosts_for(env, 1, 1, spin=True, reload_base_s=30e-6,
                      reload_spin_base_s=SPIN_BASE)

    def sleep_then_spin():
        yield from hosts.sleep(0, 1e-3)
        yield from hosts.wait(0, env.timeout(5e-3))

    assert second_task_s(hosts, sleep_then_spin) == pytest.approx(
        100e-6 + 30e-6 + reload(6e-3))


def test_with_a_spin_base_a_napping_waiter_s_spin_and_nap_both_count():
    """A sleeping waiter spins 50 us, then naps: the whole 2 ms wait is the gap."""
    env = simpy.Environment()
    hosts = hosts_for(env, 1, 1, spin=False, poll_spin_s=50e-6, poll_s=1e-6,
                      reload_spin_base_s=SPIN_BASE)
    took = second_task_s(hosts, lambda: hosts.wait(0, env.timeout(2e-3)))
    assert took == pytest.approx(100e-6 + reload(2e-3), abs=1e-6)


def test_the_spin_base_is_the_median_of_the_spins_extra_less_the_curve():
    gaps = [100e-6, 1e-3, 5e-3]
    fitted = fit_reload(gaps, [reload(g) for g in gaps])
    spun = [SPIN_BASE + reload(g) for g in gaps]
    spun[1] += 40e-6  # one noisy point moves a median of three but little
    base = fit_spin_base(gaps, spun, fitted)
    assert base["reload_spin_base_s"] == pytest.approx(SPIN_BASE, abs=0.5e-6)
    assert base["spin_max_error"] == pytest.approx(40e-6 / spun[1], rel=0.05)
    assert fit_spin_base(gaps, [0.5 * reload(g) for g in gaps], fitted)[
        "reload_spin_base_s"] == 0.0  # less than the curve: no negative base


# ---- the message path's reload after a rank's own other work -----------------------------

MR, MTAU = 50e-6, 5e-3


def message_hosts(cores: int = 2, ranks: int = 1) -> Hosts:
    """Ranks on one host whose profile has the message path's reload only."""
    return Hosts(simpy.Environment(), [0] * ranks, cores,
                 replace(HOSTS["ideal"], message_reload_s=MR, message_reload_tau_s=MTAU),
                 spin=True)


def task_times(hosts: Hosts, tasks: list[tuple[float, bool]]) -> list[float]:
    """Rank 0 runs ``tasks`` ((seconds, message) each) back to back: what each took."""
    took = []

    def rank():
        for seconds, message in tasks:
            start = hosts.env.now
            yield from hosts.run(0, seconds, message=message)
            took.append(hosts.env.now - start)

    hosts.env.process(rank())
    hosts.env.run()
    return took


@pytest.mark.parametrize("cores,ranks", [(2, 1), (1, 2)])  # a core of its own, or shared
@pytest.mark.parametrize("work", [0.1e-3, 2e-3, 20e-3])
def test_a_message_after_other_work_pays_the_message_paths_reload(cores, ranks, work):
    """Work of ``work`` s in two tasks, then a message task, then another: the first message
    task is longer by MR (1 - exp(-work / MTAU)), the second (back to back) by nothing, and
    no work task by anything."""
    took = task_times(message_hosts(cores, ranks), [
        (work / 2, False), (work / 2, False), (10e-6, True), (10e-6, True), (work, False)])
    extra = MR * (1 - math.exp(-work / MTAU))
    assert took == pytest.approx([work / 2, work / 2, 10e-6 + extra, 10e-6, work], abs=1e-12)


def test_without_the_message_reload_measured_messages_cost_what_they_ask():
    hosts = Hosts(simpy.Environment(), [0], 1, HOSTS["ideal"], spin=True)
    assert task_times(hosts, [(2e-3, False), (10e-6, True)]) == pytest.approx([2e-3, 10e-6])


def test_a_message_reload_without_its_tau_is_refused():
    with pytest.raises(ValueError, match="message_reload_tau_s must be > 0"):
        replace(HOSTS["ideal"], message_reload_s=1e-5)


def test_the_message_reload_fit_recovers_the_curve_it_was_drawn_from():
    from sim.calibration.message_reload_bench import fit_message_reload

    works = [0.1e-3, 0.5e-3, 2e-3, 5e-3]
    fitted = fit_message_reload(works, [MR * (1 - math.exp(-w / MTAU)) for w in works])
    assert fitted["message_reload_s"] == pytest.approx(MR, rel=0.02)
    assert fitted["message_reload_tau_s"] == pytest.approx(MTAU, rel=0.02)
    assert max(map(abs, fitted["errors"])) < 0.01
    nothing = fit_message_reload(works, [0.0, -1e-6, 0.0, 0.0])
    assert nothing["message_reload_s"] == nothing["message_reload_tau_s"] == 0.0
