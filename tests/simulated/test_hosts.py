"""Hosts and CPU costs against closed forms: sharing cores, a saturated server, the breakdown."""

from __future__ import annotations

import dataclasses
import json

import pytest
import simpy

from sim.cli import main
from sim.network.collectives import get_collective
from sim.network.fabrics import get_fabric
from sim.network.message_cost import alpha_s, beta_s
from sim.recorder import KINDS
from sim.simulated.engine import simulate
from sim.simulated.hosts import Hosts
from sim.training.host_costs import HOSTS, HostProfile, cpu_costs
from sim.training.validator import load_config


def costs(slice_s: float = 3e-3, **fields) -> HostProfile:
    """A host profile that charges nothing but what ``fields`` set, sliced every ``slice_s``."""
    return dataclasses.replace(HOSTS["ideal"], slice_s=slice_s, **fields)


def finish_times(k: int, cores: int, task_s: float, slice_s: float) -> list[float]:
    """k ranks on one host each start one task of ``task_s`` at t = 0."""
    env = simpy.Environment()
    hosts = Hosts(env, [0] * k, cores, costs(slice_s), False)
    ends: list[float] = []

    def task(rank):
        yield from hosts.run(rank, task_s)
        ends.append(env.now)

    for r in range(k):
        env.process(task(r))
    env.run()
    return ends


@pytest.mark.parametrize("k,cores", [(3, 2), (4, 2), (5, 2), (7, 3)])
def test_k_tasks_on_fewer_cores_end_at_k_over_c_under_processor_sharing(k, cores):
    ends = finish_times(k, cores, task_s=1.0, slice_s=1e-4)  # slices << tasks: PS
    assert max(ends) == pytest.approx(k / cores, abs=1e-4)  # to within one slice
    assert min(ends) >= k / cores - cores * 1e-4 * k  # all end together (within a round)


def test_tasks_shorter_than_a_slice_run_to_completion_in_order():
    ends = finish_times(5, 2, task_s=1e-3, slice_s=3e-3)
    assert sorted(ends) == pytest.approx([1e-3, 1e-3, 2e-3, 2e-3, 3e-3])


def test_a_rank_with_a_core_of_its_own_is_never_slowed():
    assert finish_times(2, 2, task_s=0.5, slice_s=1e-3) == [0.5, 0.5]


def test_a_spinning_waiter_leaves_its_core_to_a_computing_rank():
    """MPICH's blocking wait yields between polls: the spinner takes no slices from work."""
    def computing_end(spin: bool) -> float:
        env = simpy.Environment()
        hosts = Hosts(env, [0, 0], 1, costs(1e-3), spin)
        done = env.event()
        end = []

        def waiter():
            yield from hosts.wait(1, done)

        def worker():
            yield from hosts.run(0, 10e-3)
            end.append(env.now)
            done.succeed()

        env.process(waiter())
        env.process(worker())
        env.run()
        return end[0]

    assert computing_end(spin=False) == pytest.approx(10e-3)
    assert computing_end(spin=True) == pytest.approx(10e-3)


@pytest.mark.parametrize("cores,noticed", [(1, 4e-3), (2, 2e-3)])
def test_a_spinner_notices_once_a_core_is_free_of_work(cores, noticed):
    """Rank 0 computes 10 ms in 3 ms slices, rank 2 has a 1 ms task; rank 1 spins on an
    event at 2 ms. On one core it queues for a core like work: behind rank 2's task, which
    runs after rank 0's first slice (3-4 ms); with a second core (free once rank 2's task
    ends at 1 ms) it notices at once."""
    env = simpy.Environment()
    hosts = Hosts(env, [0, 0, 0], cores, costs(), True)
    seen = []

    def waiter():
        yield from hosts.wait(1, env.timeout(2e-3))
        seen.append(env.now)

    env.process(hosts.run(0, 10e-3))
    env.process(waiter())
    env.process(hosts.run(2, 1e-3))
    env.run()
    assert seen == [pytest.approx(noticed)]


@pytest.mark.parametrize("spin", [True, False])
def test_a_waiter_sees_a_condition_event_fire_after_its_first_slice_or_nap(spin):
    """AllOf | timeout would drop the AllOf's own check when the timeout wins (SimPy)."""
    env = simpy.Environment()
    hosts = Hosts(env, [0, 0], 1, costs(1e-3, poll_spin_s=1e-4, poll_s=1e-4), spin)
    seen = []

    def waiter():
        yield from hosts.wait(0, simpy.AllOf(env, [env.timeout(5e-3)]))
        seen.append(env.now)

    env.process(waiter())
    env.run()
    assert seen == [pytest.approx(5e-3)]


@pytest.mark.parametrize("fires,noticed", [(30e-6, 30e-6), (100e-6, 130e-6), (131e-6, 170e-6)])
def test_a_sleeping_waiter_notices_at_the_end_of_its_nap(fires, noticed):
    """Spin 50 us, then naps of 40 us: an event at 100 us is seen at 50 + 2 x 40 = 130 us."""
    env = simpy.Environment()
    hosts = Hosts(env, [0], 1, costs(poll_spin_s=50e-6, poll_s=40e-6), False)
    seen = []

    def waiter():
        yield from hosts.wait(0, env.timeout(fires))
        seen.append(env.now)

    env.process(waiter())
    env.run()
    assert seen == [pytest.approx(noticed)]


ASP = """
[cluster]
workers = {workers}
fabric = "ib-hdr"
[workload]
features = 2000
samples = 4000
batch = 8
[strategy]
kind = "asp"
[compute]
time_s = 1e-6
[run]
iterations = 400
eval_every = 400
"""


def run_asp(tmp_path, workers: int, **extra: str) -> dict:
    path = tmp_path / f"asp{workers}.toml"
    text = ASP.format(workers=workers)
    for key, value in {"cluster.host": '"epyc-core"', **extra}.items():
        text = text.replace(f"[{key.split('.')[0]}]\n",
                            f"[{key.split('.')[0]}]\n{key.split('.')[1]} = {value}\n")
    path.write_text(text)
    return simulate(load_config(path)).summary


def server_cost_per_update(features: int) -> float:
    """h: a shard receives a push (message + update) and serves a pull (request + reply)."""
    costs = cpu_costs(HOSTS["epyc-core"], get_fabric("ib-hdr"))
    nbytes = (features + 1) * 8  # logreg: weights and bias, float64
    message_s = costs.message.message_s
    return (message_s(nbytes) + costs.applied_push_s(nbytes)
            + message_s(64) + costs.host.serve_pull_s + message_s(nbytes))


def test_a_server_with_per_push_cost_h_saturates_at_one_over_h(tmp_path):
    h = server_cost_per_update(2000)
    rates = {n: (lambda s: s["iterations"] / s["sim_time_s"])(run_asp(tmp_path, n))
             for n in (1, 16, 32)}
    assert rates[1] < 0.7 / h  # one worker: the server idles while it computes and sends
    assert rates[16] == pytest.approx(1 / h, rel=0.03)
    assert rates[32] == pytest.approx(1 / h, rel=0.03)  # more workers: no faster


@pytest.mark.parametrize("workers,cores,per_host", [(2, 1, 1), (3, 2, 4)])
def test_the_breakdown_adds_up_to_the_run_time(tmp_path, workers, cores, per_host):
    summary = run_asp(tmp_path, workers, **{"cluster.cores": str(cores),
                                            "cluster.ranks_per_host": str(per_host)})
    for worker in summary["workers"]:
        assert set(worker) == set(KINDS)
        assert sum(worker.values()) == pytest.approx(summary["sim_time_s"], rel=1e-9)
    assert all(summary[f"{k}_s"] > 0 for k in ("data", "overhead", "wire"))
    assert summary["comm_s"] == pytest.approx(summary["overhead_s"] + summary["wire_s"])


def test_ranks_sharing_cores_run_slower_than_ranks_with_their_own(tmp_path):
    """2 workers and their server on one core, against a core each (with 4 workers the
    server's own CPU bounds the run either way: 1 / h, above)."""
    own = run_asp(tmp_path, 2)
    shared = run_asp(tmp_path, 2, **{"cluster.cores": "1", "cluster.ranks_per_host": "3"})
    assert shared["sim_time_s"] > 1.3 * own["sim_time_s"]


def test_the_ideal_host_is_the_model_without_cpu_costs(tmp_path):
    summary = run_asp(tmp_path, 2, **{"cluster.host": '"ideal"'})
    assert summary["data_s"] == summary["update_s"] == summary["overhead_s"] == 0.0


@pytest.mark.parametrize("setting,key", [
    ('cluster.rank_hosts=[0, 0, 1, 1]', "cluster.rank_hosts"),  # 2 workers + 1 server
    ('cluster.host="nonesuch"', "cluster.host"),
    ('cluster.cores=0', "cluster.cores"),
])
def test_bad_host_descriptions_exit_2_naming_the_key(tmp_path, capsys, setting, key):
    path = tmp_path / "c.toml"
    path.write_text(ASP.format(workers=2))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--set",
                 'cluster.host="epyc-core"', "--set", setting]) == 2
    assert key in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_host_profile_missing_a_parameter_exits_2_naming_it(tmp_path, capsys):
    profile = tmp_path / "host.json"
    data = {k: v for k, v in vars(HOSTS["epyc-core"]).items() if k != "step_s"}
    profile.write_text(json.dumps(data))
    path = tmp_path / "c.toml"
    path.write_text(ASP.format(workers=2))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--set",
                 f'cluster.host="calibrated:{profile}"']) == 2
    err = capsys.readouterr().err
    assert "cluster.host" in err and "step_s" in err


SYNC = """
[cluster]
workers = {workers}
fabric = "ib-hdr"
host = "{host}"
[workload]
features = 1999
samples = 4000
batch = 16
[strategy]
kind = "{kind}"
[compute]
{compute}
[run]
iterations = 20
eval_every = 20
"""


def sync(kind: str, host: str, workers: int, compute: str = "time_s = 1e-4") -> str:
    return SYNC.format(workers=workers, kind=kind, host=host, compute=compute)


def step_s(tmp_path, kind: str, host: str, workers: int, compute: str = "time_s = 1e-4",
           **extra: str) -> float:
    path = tmp_path / f"{kind}-{host.replace('/', '_')}-{workers}.toml"
    path.write_text(sync(kind, host, workers, compute))
    summary = simulate(load_config(path, [f"{k}={v}" for k, v in extra.items()])).summary
    return summary["sim_time_s"] / summary["iterations"]


def epyc() -> tuple:
    fabric = get_fabric("ib-hdr")
    return cpu_costs(HOSTS["epyc-core"], fabric), fabric.overhead_s


N_BYTES = 2000 * 8  # logreg, 1,999 features + bias, float64
BATCH_BYTES = 16 * 1999 * 8


@pytest.mark.parametrize("p", [2, 4])
def test_a_bsp_step_pays_the_ring_cpu_of_thakur_et_al_and_every_replica_s_update(tmp_path, p):
    """Ring allreduce: 2 (p - 1) rounds, each sending and receiving n / p bytes (LogGP o and
    the copies at both ends), and p - 1 of them summing n / p (gamma); the wire is the ring's
    closed form with o moved off it. (The flow network's ring is within 5 ns of its closed
    form here.)"""
    costs, _ = epyc()
    chunk = N_BYTES / p
    ring_cpu = 2 * (p - 1) * 2 * costs.message.message_s(chunk) + (p - 1) * costs.reduce_s(chunk)
    wire = dataclasses.replace(get_fabric("ib-hdr"), overhead_s=0.0)
    ring = get_collective("ring").closed_form_s(p, N_BYTES, alpha_s(wire), beta_s(wire))
    expected = (costs.step_s + costs.data_s(BATCH_BYTES, 16) + 1e-4 + ring_cpu + ring
                + costs.reduce_s(N_BYTES) + costs.update_s(N_BYTES))  # the mean, the step
    assert step_s(tmp_path, "bsp", "epyc-core", p) == pytest.approx(expected, abs=1e-8)


def test_a_bsp_ps_step_with_one_worker_pays_every_cpu_activity_once_in_order(tmp_path):
    """Push (worker), receive, keep and sum (server), close the step: the mean and the step
    (server), answer the held pull (server), receive (worker): all on the critical path, one
    message each way, with the server's own code per push, step and pull. The ideal host
    pays 2 o per message on the wire instead."""
    costs, o = epyc()
    n, h = N_BYTES, costs.host
    assert min(h.serve_push_s, h.serve_step_s, h.serve_pull_s) > 0  # all of them charged
    message_s = costs.message.message_s
    expected = (costs.step_s + costs.data_s(BATCH_BYTES, 16) + message_s(n)
                + message_s(n) + h.serve_push_s + costs.reduce_s(n)
                + h.serve_step_s + costs.reduce_s(n) + costs.update_s(n)
                + message_s(64) + h.serve_pull_s + message_s(n) + message_s(n)
                - 2 * 2 * o)
    extra = step_s(tmp_path, "bsp-ps", "epyc-core", 1) - step_s(tmp_path, "bsp-ps", "ideal", 1)
    assert extra == pytest.approx(expected, abs=1e-8)


@pytest.mark.parametrize("kind", ["bsp", "bsp-ps", "local-sgd", "easgd", "backup", "ssp"])
def test_every_strategy_charges_the_host_and_its_breakdown_adds_up(tmp_path, kind):
    path = tmp_path / f"{kind}.toml"
    path.write_text(sync(kind, "epyc-core", 3))
    summary = simulate(load_config(path)).summary
    for worker in summary["workers"]:
        assert sum(worker.values()) == pytest.approx(summary["sim_time_s"], rel=1e-9)
    assert summary["data_s"] > 0 and summary["overhead_s"] > 0
    assert summary["update_s"] > 0 or kind in ("bsp-ps", "backup", "ssp")  # servers update


@pytest.mark.parametrize("kind", ["bsp", "bsp-ps"])
def test_synchronous_ranks_sharing_cores_are_slower(tmp_path, kind):
    """The gradient kernel runs on the host (no modelled time): 4 or 5 ranks on 2 cores.
    Batches of 256 make the workers' gradients, not the server's own code, the step's
    largest CPU cost."""
    on_host = 'device = "cpu-core"'
    own = step_s(tmp_path, kind, "epyc-core", 4, on_host, **{"workload.batch": 256})
    shared = step_s(tmp_path, kind, "epyc-core", 4, on_host,
                    **{"cluster.cores": 2, "cluster.ranks_per_host": 5, "workload.batch": 256})
    assert shared > 1.3 * own


@pytest.mark.parametrize("network", ["flow", "analytical"])
def test_a_bsp_step_on_shared_cores_lies_between_full_cores_and_rounds_in_lockstep(
        tmp_path, network):
    """4 ranks on 2 cores, waiting without polling. Each rank goes through the ring's rounds
    on its own (it posts, waits for what it receives, sums it), so the step is at most the
    rounds in lockstep (every round's 4 equal CPU tasks take two task times, then its wire
    alpha + n / p beta) and more than all ranks' CPU spread over the 2 cores."""
    profile = tmp_path / "host.json"
    data = {k: v for k, v in vars(HOSTS["epyc-core"]).items()}
    profile.write_text(json.dumps({**data, "poll_s": 0.0, "poll_spin_s": 0.0}))
    p, costs = 4, cpu_costs(HOSTS["epyc-core"], get_fabric("ib-hdr"))
    chunk = N_BYTES / p
    wire = dataclasses.replace(get_fabric("ib-hdr"), overhead_s=0.0)
    rounds = 2 * (p - 1)
    ring_cpu = rounds * 2 * costs.message.message_s(chunk) + (p - 1) * costs.reduce_s(chunk)
    rank_cpu = (costs.step_s + costs.data_s(BATCH_BYTES, 16) + ring_cpu
                + costs.reduce_s(N_BYTES) + costs.update_s(N_BYTES))
    lockstep = (2 * (costs.step_s + costs.data_s(BATCH_BYTES, 16)) + 1e-4 + 2 * ring_cpu
                + get_collective("ring").closed_form_s(p, N_BYTES, alpha_s(wire),
                                                       beta_s(wire))
                + 2 * (costs.reduce_s(N_BYTES) + costs.update_s(N_BYTES)))
    got = step_s(tmp_path, "bsp", f"calibrated:{profile}", p,
                 **{"cluster.cores": 2, "cluster.ranks_per_host": 4, "cluster.wait": '"sleep"',
                    "cluster.network": f'"{network}"'})
    assert p * rank_cpu / 2 < got <= lockstep + 1e-12


@pytest.mark.parametrize("ranks,cores,base,noticed", [
    (3, 2, 0.0, 1.1e-3), (5, 2, 0.0, 1.3e-3), (2, 2, 0.0, 1.01e-3), (2, 2, 30e-6, 1.01e-3),
    (4, 2, 30e-6, 1e-3 + 30e-6 + 2 * 100e-6)])
def test_a_napping_rank_on_a_shared_host_notices_notice_s_late_per_rank_beyond_the_cores(
        ranks, cores, base, noticed):
    """notice_base_s (``base``) + notice_s = 100 us per rank beyond the cores; with a core
    each, the nap grid (50 us of spinning, then naps of 40 us: an event at 1 ms is seen at
    1.01 ms)."""
    env = simpy.Environment()
    hosts = Hosts(env, [0] * ranks, cores, costs(poll_spin_s=50e-6, poll_s=40e-6,
                                                 notice_s=100e-6, notice_base_s=base), False)
    seen = []

    def waiter():
        yield from hosts.wait(0, env.timeout(1e-3))
        seen.append(env.now)

    env.process(waiter())
    env.run()
    assert seen == [pytest.approx(noticed)]


def test_a_rendezvous_costs_rendezvous_s_per_rank_beyond_the_cores_where_an_end_naps():
    def hosts(spin: bool, ranks: int) -> Hosts:
        return Hosts(simpy.Environment(), [0] * ranks, 2,
                     costs(poll_spin_s=50e-6, poll_s=40e-6, notice_s=60e-6,
                           rendezvous_bytes=8192, rendezvous_s=100e-6), spin)

    assert hosts(False, 5).handshake_s(0, 4, 24_000) == pytest.approx(300e-6)
    assert hosts(False, 3).handshake_s(0, 2, 24_000) == pytest.approx(100e-6)
    assert hosts(False, 5).handshake_s(0, 4, 8192) == 0.0  # eager: no handshake
    assert hosts(True, 5).handshake_s(0, 4, 24_000) == 0.0  # spinning ends answer at once
    assert hosts(False, 2).handshake_s(0, 1, 24_000) == 0.0  # a core each


def test_a_rendezvous_adds_its_base_once_whatever_the_ranks_beyond_the_cores():
    def hosts(ranks: int, base_s: float) -> Hosts:
        return Hosts(simpy.Environment(), [0] * ranks, 2,
                     costs(poll_spin_s=50e-6, poll_s=40e-6, rendezvous_bytes=8192,
                           rendezvous_s=3e-6, rendezvous_base_s=base_s), False)

    assert hosts(3, 250e-6).handshake_s(0, 2, 24_000) == pytest.approx(253e-6)
    assert hosts(5, 250e-6).handshake_s(0, 4, 24_000) == pytest.approx(259e-6)
    assert hosts(5, 250e-6).handshake_s(0, 4, 8192) == 0.0  # eager: no handshake
    assert hosts(2, 250e-6).handshake_s(0, 1, 24_000) == 0.0  # a core each
    only_base = Hosts(simpy.Environment(), [0] * 3, 2,
                      costs(poll_spin_s=50e-6, poll_s=40e-6, rendezvous_bytes=8192,
                            rendezvous_base_s=1e-4), False)
    assert only_base.handshake_s(0, 2, 24_000) == pytest.approx(1e-4)


def test_a_shard_receiving_beyond_the_eager_limit_is_held_before_its_work():
    """The shard's thread waits the handshake on no core, then works; work queued on the
    same thread waits behind both, while another rank computes meanwhile."""
    env = simpy.Environment()
    hosts = Hosts(env, [0, 0, 0], 1, costs(poll_spin_s=0.0, poll_s=1e-6), False)
    ends = {}

    def task(name, rank, seconds, handshake_s=0.0):
        yield from hosts.run(rank, seconds, handshake_s=handshake_s)
        ends[name] = env.now

    env.process(task("received", 2, 1e-4, handshake_s=5e-4))
    env.process(task("next", 2, 1e-4))
    env.process(task("worker", 0, 4e-4))
    env.run()
    assert ends == pytest.approx({"worker": 4e-4, "received": 6e-4, "next": 7e-4})


@pytest.mark.parametrize("spin,share", [(True, 0.9), (False, 1.3)])
def test_work_beside_k_waiters_per_core_runs_1_plus_k_share_slower(spin, share):
    """One core: 10 ms of work beside one waiting rank takes 10 (1 + share) ms; beside two,
    10 (1 + 2 share) ms. With a second core the first waiter takes the free core."""
    def end(ranks: int, cores: int) -> float:
        env = simpy.Environment()
        hosts = Hosts(env, [0] * ranks, cores,
                      costs(poll_spin_s=0.0, poll_s=0.0 if spin else 1e-6, spin_share=0.9,
                            nap_share=1.3), spin)
        done, ends = env.event(), []

        def worker():
            yield from hosts.run(0, 10e-3)
            ends.append(env.now)
            done.succeed()

        for waiter in range(1, ranks):
            env.process(hosts.wait(waiter, done))
        env.process(worker())
        env.run()
        return ends[0]

    assert end(1, 1) == pytest.approx(10e-3)
    assert end(2, 1) == pytest.approx(10e-3 * (1 + share))
    assert end(3, 1) == pytest.approx(10e-3 * (1 + 2 * share))
    assert end(3, 2) == pytest.approx(10e-3 * (1 + share))  # one waiter per core, shared
    assert end(2, 2) == pytest.approx(10e-3)  # a core each: nobody shares


def test_an_idle_server_rank_waits_for_messages_and_shares_the_core():
    """Rank 1 is a server (an idle waiter): while it has no task it takes nap_share of the
    worker's core; while it works it is a second task on the core instead."""
    env = simpy.Environment()
    hosts = Hosts(env, [0, 0], 1, costs(poll_spin_s=0.0, poll_s=1e-6, nap_share=0.5), False,
                  idle_waiters=[1])
    ends = {}

    def task(name, rank, at, seconds):
        yield env.timeout(at)
        yield from hosts.run(rank, seconds)
        ends[name] = env.now

    env.process(task("worker", 0, 0.0, 2e-3))
    env.process(task("server", 1, 4e-3, 1e-3))
    env.run()
    assert ends == pytest.approx({"worker": 3e-3, "server": 5e-3})


def test_a_rank_keeps_its_core_for_the_spin_after_its_work():
    """One core: rank 0 works 1 ms, then waits (spin 50 us, then naps) for a message at
    1.02 ms; rank 1 queued 1 ms of work at 0.5 ms. Linux runs rank 0 on until it naps, so
    it notices the message while spinning, and its 0.1 ms of work after it runs before
    rank 1's."""
    env = simpy.Environment()
    hosts = Hosts(env, [0, 0, 0], 1, costs(poll_spin_s=50e-6, poll_s=40e-6, notice_s=500e-6),
                  False)
    ends = {}

    def rank0():
        yield from hosts.run(0, 1e-3)
        yield from hosts.wait(0, env.timeout(20e-6))
        ends["noticed"] = env.now
        yield from hosts.run(0, 0.1e-3)
        ends["rank 0"] = env.now

    def rank1():
        yield env.timeout(0.5e-3)
        yield from hosts.run(1, 1e-3)
        ends["rank 1"] = env.now

    env.process(rank0())
    env.process(rank1())
    env.run()
    assert ends == pytest.approx({"noticed": 1.02e-3, "rank 0": 1.12e-3, "rank 1": 2.12e-3})


def test_a_profile_without_table_costs_charges_table_rows_as_batch_rows(tmp_path):
    """Profiles written before the table-row costs load, and charge a table's rows as a
    batch gather (and a sparse step as a sum, an SGD step and a gather); with them, their
    own constant + rows x row + bytes / rate."""
    import dataclasses
    import json

    from sim.network.message_cost import MessageCpu
    from sim.training.host_costs import HOSTS, CpuCosts, load_host, save_host_profile

    path = tmp_path / "old.json"
    save_host_profile(path, HOSTS["epyc-core"])
    data = json.loads(path.read_text())
    for key in ("table_call_s", "table_row_s", "table_Bps", "table_step_call_s",
                "table_step_row_s", "table_step_Bps", "unique_call_s", "unique_id_s"):
        data.pop(key, None)
    path.write_text(json.dumps(data))
    old = CpuCosts(load_host(f"calibrated:{path}"), MessageCpu())
    assert old.table_rows_s(8000, 100) == old.data_s(8000, 100)
    assert old.unique_s(3000) == 0.0  # not measured: not charged
    assert old.table_step_s(8000, 100) == pytest.approx(
        old.reduce_s(8000) + old.update_s(8000) + old.data_s(8000, 100))
    new = CpuCosts(dataclasses.replace(HOSTS["epyc-core"], table_call_s=1e-5,
                                       table_row_s=5e-8, table_Bps=4e9, table_step_call_s=3e-5,
                                       table_step_row_s=4e-7, table_step_Bps=3e9),
                   MessageCpu())
    assert new.table_rows_s(8000, 100) == pytest.approx(1e-5 + 100 * 5e-8 + 8000 / 4e9)
    assert new.table_step_s(8000, 100) == pytest.approx(3e-5 + 100 * 4e-7 + 8000 / 3e9)
