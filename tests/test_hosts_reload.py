"""The reload transient (sim.training.hosts, sim.real.calibration.reload) against its closed
form: work after a gap in a rank's CPU activity takes R (1 - exp(-gap / tau)) longer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from sim.real.calibration.reload import fit_reload
from sim.training.cpu import HostProfile
from sim.training.hosts import Hosts

R, TAU = 200e-6, 2e-3


def reload(gap: float) -> float:
    return R * (1 - math.exp(-gap / TAU))


def hosts_for(env: simpy.Environment, ranks: int, cores: int, **kw) -> Hosts:
    return Hosts(env, [0] * ranks, cores, 3e-3, reload_s=R, reload_tau_s=TAU, **kw)


@pytest.mark.parametrize("cores", [1, 2])  # shared (2 ranks on 1 core) and a core each
@pytest.mark.parametrize("gap", [0.5e-3, 2e-3, 10e-3])
def test_work_after_a_sleep_pays_the_reload_of_the_gap(cores, gap):
    """A task, a modelled gradient (a sleep of ``gap``), a task: the second is longer by
    reload(gap); rank 1 never works, so nothing shares the core."""
    env = simpy.Environment()
    hosts = hosts_for(env, 2, cores, spin=True)
    ends = []

    def rank():
        yield from hosts.run(0, 100e-6)
        yield env.timeout(gap)
        yield from hosts.run(0, 100e-6)
        ends.append(env.now)

    env.process(rank())
    env.run()
    assert ends == [pytest.approx(200e-6 + gap + reload(gap))]


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
    ends = []

    def rank():
        yield from hosts.run(0, 100e-6)
        yield from hosts.wait(0, env.timeout(2e-3))
        start = env.now
        yield from hosts.run(0, 100e-6)
        ends.append(env.now - start)

    env.process(rank())
    env.run()
    assert ends == [pytest.approx(100e-6 + extra, abs=1e-6)]


@pytest.mark.parametrize("spin,extra", [(True, 0.0), (False, reload(3e-3 - 50e-6))])
def test_an_idle_server_reloads_only_if_it_napped_between_messages(spin, extra):
    """A server handles a message at t = 0 and the next at 3.1 ms (``woken``)."""
    env = simpy.Environment()
    hosts = hosts_for(env, 1, 1, spin=spin, poll_spin_s=50e-6, poll_s=1e-6,
                      idle_waiters=[0])
    ends = []

    def server():
        yield from hosts.run(0, 100e-6, woken=True)
        yield env.timeout(3e-3)
        start = env.now
        yield from hosts.run(0, 100e-6, woken=True)
        ends.append(env.now - start)

    env.process(server())
    env.run()
    assert ends == [pytest.approx(100e-6 + extra, abs=2e-6)]  # + at most one 1 us poll


def test_the_fit_recovers_the_curve_it_was_drawn_from():
    gaps = [100e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3]
    fitted = fit_reload(gaps, [reload(g) for g in gaps])
    assert fitted["reload_s"] == pytest.approx(R, rel=0.02)
    assert fitted["reload_tau_s"] == pytest.approx(TAU, rel=0.03)
    assert fitted["max_error"] < 0.02


def test_the_fit_with_nothing_measurable_reloads_nothing():
    fitted = fit_reload([1e-3, 2e-3], [-5e-6, 0.0])
    assert fitted["reload_s"] == 0.0 and fitted["reload_tau_s"] == 0.0


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
])
def test_a_profile_with_a_bad_reload_is_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        HostProfile("bad", 1e9, 1e9, 1e9, 0.0, 0.0, 3e-3, **fields)
