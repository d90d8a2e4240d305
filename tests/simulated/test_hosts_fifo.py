"""The fifo host discipline (cluster.sched = "fifo") against hand-computed closed forms."""

from __future__ import annotations

import dataclasses
import json

import pytest
import simpy

from sim.cli import main
from sim.simulated.hosts import Hosts
from sim.training.host_costs import HOSTS, HostProfile
from sim.training.validator import load_config


def costs(**fields) -> HostProfile:
    """No CPU costs, 1 ms time slices (which fifo ignores), and ``fields``."""
    return dataclasses.replace(HOSTS["ideal"], slice_s=1e-3, **fields)


def ends_of(tasks: dict[int, list[tuple[float, float]]], cores: int, sched: str,
            profile: HostProfile | None = None) -> dict[int, list[float]]:
    """Ranks 0..k-1 on one host; ``tasks[r]``: (start, seconds) run back to back, each
    started at ``start`` or when the rank's previous one ended. When each ended."""
    env = simpy.Environment()
    k = max(tasks) + 1
    hosts = Hosts(env, [0] * k, cores, profile or costs(), False, sched=sched)
    ends: dict[int, list[float]] = {r: [] for r in tasks}

    def rank(r):
        for start, seconds in tasks[r]:
            if start > env.now:
                yield env.timeout(start - env.now)
            yield from hosts.run(r, seconds)
            ends[r].append(env.now)

    for r in tasks:
        env.process(rank(r))
    env.run()
    return ends


def test_a_fifo_rank_holds_its_pinned_core_until_it_waits():
    """3 ranks on 2 cores: ranks 0 and 2 share core 0, rank 1 has core 1. Rank 0's 3 s
    task runs to its end, rank 2 queued behind it: 3 then 3 + 1 = 4; rank 1 ends at 2
    and core 1 stays idle (rank 2 is pinned). Time slices would end rank 2 far sooner."""
    tasks = {0: [(0.0, 3.0)], 1: [(0.0, 2.0)], 2: [(0.0, 1.0)]}
    assert ends_of(tasks, 2, "fifo") == {0: [3.0], 1: [2.0], 2: [4.0]}
    assert ends_of(tasks, 2, "default")[2][0] < 3.0


def test_a_woken_fifo_rank_queues_first_in_first_out_for_its_own_core():
    """Rank 0 computes 1 s, waits 1 s (a gap), then computes 1 s more; rank 2 (same core)
    asks at 0.5 for 3 s: it gets the core when rank 0 waits, at 1, and holds it to 4; rank 0
    back at 2 queues behind it and ends at 4 + 1 = 5. Rank 1, on core 1, is untouched."""
    tasks = {0: [(0.0, 1.0), (2.0, 1.0)], 1: [(0.0, 2.0)], 2: [(0.5, 3.0)]}
    assert ends_of(tasks, 2, "fifo") == {0: [1.0, 5.0], 1: [2.0], 2: [4.0]}


def test_fifo_waits_notice_at_the_end_of_a_nap_without_holding_the_core():
    """A waiter naps from poll_spin_s on and notices at the end of the nap (every poll_s);
    a rank queued for its core meanwhile runs at once (the real waiter yields it)."""
    profile = costs(poll_spin_s=0.1, poll_s=0.25)
    env = simpy.Environment()
    hosts = Hosts(env, [0, 0, 0], 2, profile, False, sched="fifo")
    fired, seen = env.event(), {}

    def waiter():
        yield from hosts.run(0, 1.0)
        yield from hosts.wait(0, fired)
        seen[0] = env.now

    def beside():  # rank 2, pinned to rank 0's core
        yield env.timeout(0.5)
        yield from hosts.run(2, 1.0)
        seen[2] = env.now

    def firer():
        yield env.timeout(1.6)
        fired.succeed()

    for proc in (waiter(), beside(), firer()):
        env.process(proc)
    env.run()
    # rank 2 starts at 1.0 (rank 0 waits: its core is free) and ends at 2.0; rank 0 naps
    # from 1.1 and notices at 1.1 + 2 x 0.25 = 1.6
    assert seen == pytest.approx({2: 2.0, 0: 1.6})


def simulated(path, sched: str, wait: str, workers: int) -> bytes:
    out = path / f"{sched}-{wait}-{workers}"
    main(["run", "experiments/quickstart.toml", "--out", str(out), "--set",
          f"cluster.workers={workers}", "--set", 'cluster.host="epyc-core"', "--set",
          "cluster.cores=4", "--set", f"cluster.ranks_per_host={workers + 1}", "--set",
          'strategy.kind="asp"', "--set", f'cluster.sched="{sched}"', "--set",
          f'cluster.wait="{wait}"', "--set", "run.iterations=30"])
    summary = json.loads((out / "summary.json").read_text())
    summary.pop("wall_s")
    return json.dumps(summary, sort_keys=True).encode()


def test_fifo_equals_the_default_model_where_every_rank_has_a_core(tmp_path):
    """3 ranks on 4 cores: pinned or not, no rank waits for a core; fifo's waits nap, as
    the default model's sleeping waits."""
    assert simulated(tmp_path, "fifo", "auto", 2) == simulated(tmp_path, "default", "sleep", 2)


def test_fifo_with_spinning_waits_is_refused():
    with pytest.raises(Exception, match="cluster.wait"):
        load_config("experiments/quickstart.toml",
                    ['cluster.sched="fifo"', 'cluster.wait="spin"'])


def test_hosts_refuse_an_unknown_discipline():
    with pytest.raises(ValueError, match="discipline"):
        Hosts(simpy.Environment(), [0], 1, costs(), False, sched="rr")


def test_a_fifo_rendezvous_leg_waits_for_its_ends_core_holder():
    """Rank 2 holds core 0 (which rank 0 shares) from 0 to 1 s; at 0.25 s a message beyond
    the eager limit to napping rank 0 waits the 0.75 s left before rank 0 can answer it;
    one within the limit, or from the holder itself to rank 1 (its core free), nothing."""
    profile = costs(poll_spin_s=1e-4, poll_s=1e-4, rendezvous_bytes=1000.0)
    env = simpy.Environment()
    hosts = Hosts(env, [0, 0, 0], 2, profile, False, sched="fifo")
    legs = {}

    def holder():
        yield from hosts.run(2, 1.0)

    def probe():
        yield env.timeout(0.25)
        legs.update(big=hosts.handshake_s(1, 0, 2000.0), small=hosts.handshake_s(1, 0, 500.0),
                    free=hosts.handshake_s(2, 1, 2000.0))

    env.process(holder())
    env.process(probe())
    env.run()
    assert legs == pytest.approx({"big": 0.75, "small": 0.0, "free": 0.0})
