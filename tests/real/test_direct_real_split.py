"""A replica split over real ranks, driven directly on ranks that are threads of this process
(tests/fake_mpi.py): the stage links (sim/real/executors/stage_links.py) deliver each
microbatch's activation and gradient exactly once, the tensor group (tensor_group.py) answers
each yield with the shards' sum, the split program (bsp_split.py) steps as the one-process
reference of the split replica (sim.training.stage_numerics.replica_loss_grad) bit for bit,
and its log (split_log.py) is put together by closed forms: the bubble, the receives cut at
their posting, the arrows, the model of record."""

from __future__ import annotations

import numpy as np
import pytest
from fake_mpi import run_ranks
from real_rank_cases import real_config, run_program, sgd_reference

from sim.kernels import NonFiniteError
from sim.real.executors import split_log
from sim.real.executors.assemble import RankLog
from sim.real.executors.rank_clock import Waiter
from sim.real.executors.split_log import SplitStep
from sim.real.executors.stage_links import StageLinks, activation_tag, gradient_tag, pass_of
from sim.real.executors.tensor_group import TensorGroup
from sim.training.parallel_plan import build_plan
from sim.training.stage_numerics import ShardRunner, replica_loss_grad
from sim.training.workload import build_workload

SPLIT = {"cluster": {"workers": 1},
         "workload": {"model": "mlp", "dataset": "gaussian", "features": 12, "classes": 4,
                      "samples": 400, "hidden": [8, 8, 6], "batch": 16, "lr": 0.2},
         "strategy": {"kind": "bsp"},
         "run": {"iterations": 3, "eval_every": 1, "seed": 5}}


def split(workers: int = 1, **parallel) -> dict:
    return {**SPLIT, "cluster": {"workers": workers}, "parallel": parallel}


ORDER = (2, 0, 3, 1)  # the order stage 1 asks for microbatches' activations


class Clock:
    """A clock that ticks one second a reading: every logged instant is distinct."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


# ---- stage links --------------------------------------------------------------------------

def test_stage_links_deliver_each_microbatch_once_to_the_pass_that_asks_for_it():
    config = real_config(split(pipeline=2, microbatches=4))
    plan = build_plan(config)
    rows, m, width = plan.microbatch_rows, plan.microbatches, 5

    def activation(step: int, k: int) -> np.ndarray:
        return np.full((rows, width), 100.0 * step + k)

    def program(comm):
        links = StageLinks(comm, plan, comm.Get_rank(), width, width, Waiter("spin"),
                           Clock())
        got, logged = [], []
        for step in range(2):  # the buffers are reused: step 1's never mix with step 0's
            links.post()
            if comm.Get_rank() == 0:  # stage 0: every F, then the B's in reverse
                for k in range(m):
                    links.send_activation(k, activation(step, k))
                for k in reversed(range(m)):
                    got.append(links.gradient(k).copy())
            else:  # stage 1 takes the activations out of order: each pass waits for its own
                for k in ORDER:
                    x = links.activation(k).copy()
                    got.append(x)
                    links.send_gradient(k, -x)
            links.finish()
            logged.append(links.take())
        return got, logged, links.messages

    ran = run_ranks(2, program)
    (got0, logged0, sent0), (got1, logged1, sent1) = ran.results
    for step in range(2):
        assert [x[0, 0] for x in got1[m * step:m * (step + 1)]] == [100.0 * step + k
                                                                    for k in ORDER]
        assert [x[0, 0] for x in got0[m * step:m * (step + 1)]] == [
            -(100.0 * step + k) for k in reversed(range(m))]
    # exactly one message per microbatch and direction, each on its own tag
    tags = sorted((src, dst, tag) for _, src, dst, tag, _ in ran.world.taken)
    assert tags == sorted([(0, 1, activation_tag(k)) for k in range(m)] * 2
                          + [(1, 0, gradient_tag(k)) for k in range(m)] * 2)
    assert sent0 == sent1 == 2 * m
    parts, sent, received = logged1[0]
    assert [(dest, tag) for dest, tag, _ in sent] == [(0, gradient_tag(k)) for k in ORDER]
    assert [(src, tag) for src, tag, _, _ in received] == [(0, activation_tag(k))
                                                           for k in ORDER]
    assert all(start < end for _, _, start, end in received)
    assert [kind for kind, _, _ in parts] == ["overhead"] * (1 + m) + ["wire"]  # post, sends


def test_a_receive_posted_and_never_taken_fails_the_step():
    config = real_config(split(pipeline=2))
    plan = build_plan(config)

    def program(comm):
        links = StageLinks(comm, plan, comm.Get_rank(), 3, 3, Waiter("spin"), Clock())
        links.post()
        if comm.Get_rank() == 1:
            with pytest.raises(RuntimeError, match=r"tags \[0\]"):
                links.finish()
        return True

    run_ranks(2, program)


def test_a_messages_tag_names_the_pass_that_sent_and_takes_it():
    assert [pass_of(activation_tag(k)) for k in range(3)] == ["F0", "F1", "F2"]
    assert [pass_of(gradient_tag(k)) for k in range(3)] == ["B0", "B1", "B2"]


# ---- tensor group -------------------------------------------------------------------------

@pytest.mark.parametrize("impl", ["schedule", "mpi"])
def test_a_tensor_group_answers_each_yield_with_the_shards_sum(impl):
    config = real_config(split(tensor=2))
    stage = build_plan(config).stages[0]
    points = [p for p in stage.tensor_allreduces if p.phase == "forward"]
    sizes = [p.nbytes // 8 for p in points]
    rng = np.random.default_rng(0)
    partials = [[rng.standard_normal((2, n // 2)) for n in sizes] for _ in range(2)]

    def a_pass(rank: int, seen: list):
        for partial in partials[rank]:
            seen.append((yield partial.copy()))
        return "done"

    def program(comm):
        group = TensorGroup(comm, stage, 8, impl, config.strategy.collective, Waiter("spin"))
        seen: list = []
        result = group.run(a_pass(comm.Get_rank(), seen), "forward", lambda: "lost")
        return result, seen, group.messages, group.take(0.0)

    for result, seen, messages, spans in run_ranks(2, program).results:
        assert result == ("done", True)
        for got, a, b in zip(seen, partials[0], partials[1], strict=True):
            assert got.shape == a.shape and got.tobytes() == (a + b).tobytes()
        assert messages > 0 and {kind for kind, _, _ in spans} <= {"overhead", "wire"}


def test_a_pass_that_hits_a_nan_still_joins_its_groups_sums_with_nan():
    config = real_config(split(tensor=2))
    stage = build_plan(config).stages[0]
    sizes = [p.nbytes // 8 for p in stage.tensor_allreduces if p.phase == "forward"]
    assert len(sizes) >= 2

    def healthy(seen: list):
        for n in sizes:
            seen.append((yield np.ones(n)))
        return "done"

    def broken(seen: list):
        seen.append((yield np.ones(sizes[0])))
        raise NonFiniteError("a NaN in the kernel")

    def program(comm):
        group = TensorGroup(comm, stage, 8, "schedule", config.strategy.collective,
                            Waiter("spin"))
        seen: list = []
        result = group.run((broken if comm.Get_rank() == 0 else healthy)(seen), "forward",
                           lambda: "nan output")
        return result, seen

    (lost, seen0), (done, seen1) = run_ranks(2, program).results
    assert lost == ("nan output", False) and done == ("done", True)
    assert np.array_equal(seen0[0], np.full(sizes[0], 2.0))
    assert np.array_equal(seen1[0], np.full(sizes[0], 2.0))
    assert all(np.isnan(s).all() for s in seen1[1:])  # the peer's later sums: NaN


# ---- the split program --------------------------------------------------------------------

def reference(config) -> list[np.ndarray]:
    """The split replicas' parameters after each update, in one process: each replica's
    gradient by stage_numerics' reference (its tensor sums in shard order), the replicas'
    summed in order, their mean stepped."""
    plan = build_plan(config)

    def split_gradient(model, params, X, y) -> np.ndarray:
        grad = np.zeros_like(params)
        replica_loss_grad(model, plan, params, X, y, out=grad)
        return grad

    return sgd_reference(config, split_gradient)


@pytest.mark.parametrize("workers,parallel,impl", [
    (1, {"pipeline": 2, "tensor": 2, "microbatches": 2}, "schedule"),
    (2, {"pipeline": 2, "microbatches": 2, "schedule": "gpipe"}, "mpi"),
    (2, {"tensor": 2}, "schedule"),
])
def test_a_split_replica_steps_as_the_one_process_reference_bit_for_bit(tmp_path, workers,
                                                                        parallel, impl):
    config = real_config(split(workers, **parallel))
    logs, _ = run_program(config, tmp_path, impl)
    expected = reference(config)
    assert sorted(logs[0].snapshots) == list(range(len(expected)))
    for k, params in enumerate(expected):
        assert logs[0].snapshots[k].tobytes() == params.tobytes(), k
    plan = build_plan(config)
    extra = logs[0].extra
    assert extra["activation_bytes_per_step"] == plan.activation_bytes_per_step
    assert extra["stage_layers"] == [s.last - s.first + 1 for s in plan.stages]
    assert 0.0 <= extra["bubble_fraction"] < 1.0
    # one update record per step, and a trace arrow per stage message of each step
    assert len(logs[0].updates) == config.run.iterations
    per_step = 2 * plan.microbatches * (plan.pipeline - 1) * plan.tensor * plan.replicas
    assert len(logs[0].handoffs) == per_step * config.run.iterations


def test_a_nan_stops_every_rank_of_a_split_replica_after_the_same_update(tmp_path):
    data = split(2, pipeline=2, microbatches=2)
    data["workload"] = {**data["workload"], "lr": 1e150}  # the first step overflows
    logs, _ = run_program(real_config(data), tmp_path)
    assert [(log.diverged, len(log.steps)) for log in logs] == [(True, 1)] * 4
    assert sorted(logs[0].snapshots) == [0, 1]  # no snapshot of NaN parameters


# ---- the split run's log ------------------------------------------------------------------

def test_the_bubble_is_the_idle_share_of_each_pipelines_window():
    plan = build_plan(real_config(split(pipeline=2)))
    # stage 0: F0 0-1, B0 3-4; stage 1: F0 1-2, B0 2-3. 4 s busy in a 4 s window x 2 ranks
    steps = [[SplitStep(1, passes=[("F0", 0.0, 1.0), ("B0", 3.0, 4.0)])],
             [SplitStep(1, passes=[("F0", 1.0, 2.0), ("B0", 2.0, 3.0)])]]
    assert split_log.bubble_fraction(plan, steps) == 0.5
    assert split_log.bubble_fraction(plan, [[], []]) is None


def test_a_receive_is_wait_until_its_message_was_posted_then_wire():
    rec = SplitStep(1, parts=[(split_log.PASS, "compute", 0.0, 1.0, "F0"),
                              (split_log.DATA_PARALLEL, "wire", 5.0, 8.0, "")],
                    received=[(0, 0, 1.0, 4.0), (0, 2, 4.0, 4.5)])
    posted = {(0, 1, 1, 0): 3.0, (0, 1, 1, 2): 2.0}  # (source, dest, update, tag): posted at
    assert split_log.step_parts(rec, 1, posted, 6.0) == [
        (split_log.PASS, "compute", 0.0, 1.0, "F0"),
        (split_log.LINKS, "wait", 1.0, 3.0, ""), (split_log.LINKS, "wire", 3.0, 4.0, ""),
        # posted before the receive began: no wait (the empty span is dropped)
        (split_log.LINKS, "wire", 4.0, 4.5, ""),
        (split_log.DATA_PARALLEL, "wait", 5.0, 6.0, ""),
        (split_log.DATA_PARALLEL, "wire", 6.0, 8.0, "")]


def test_an_arrow_joins_the_sending_pass_to_the_pass_that_took_it_up():
    log = RankLog(0)
    log.spans_of(0, [("compute", 0.0, 1.0, "F0"), ("wire", 1.0, 2.0, ""),
                     ("compute", 2.0, 3.0, "F0"), ("compute", 3.0, 4.0, "B0")])
    passes0 = split_log.pass_spans(log, 0)
    assert passes0 == {"F0": (0, 2), "B0": (3, 3)}  # first and last compute span
    passes1 = {"F0": (5, 6), "B0": (7, 7)}
    recs = [SplitStep(1, received=[(1, 1, 0.0, 0.0)]),  # rank 0 took B0's gradient
            SplitStep(1, received=[(0, 0, 0.0, 0.0)])]  # rank 1 took F0's activation
    assert split_log.handoffs(recs, [passes0, passes1]) == [(1, 7, 0, 3), (0, 2, 1, 5)]


def test_the_replicas_loss_is_the_mean_of_their_last_stages_shard_0():
    plan = build_plan(real_config(split(2, pipeline=2, tensor=2)))
    recs = [SplitStep(1, loss=float(r)) for r in range(len(plan.ranks))]
    last = [plan.rank_of(d, 1, 0) for d in range(2)]
    assert split_log.replica_loss(plan, recs) == (last[0] + last[1]) / 2


def test_the_model_of_record_is_put_together_from_replica_0s_shards():
    config = real_config(split(2, tensor=2))
    workload, plan = build_workload(config), build_plan(config)
    whole = np.arange(float(workload.model.size))
    logs = [RankLog(r) for r in range(len(plan.ranks))]
    for r in (plan.rank_of(0, 0, 0), plan.rank_of(0, 0, 1)):
        held = ShardRunner(workload.model, plan, 0, r % plan.tensor).held()
        logs[r].snapshots = {0: whole[held], 1: whole[held] + 1}
    logs[plan.rank_of(0, 0, 1)].snapshots.pop(1)  # only update 0 is held by both
    split_log.gather_model(logs, workload, plan)
    assert list(logs[0].snapshots) == [0] and np.array_equal(logs[0].snapshots[0], whole)
    assert all(not log.snapshots for log in logs[1:])
    # two shards' copies of an entry both hold (a bias) that disagree fail the run
    for r in (plan.rank_of(0, 0, 0), plan.rank_of(0, 0, 1)):
        held = ShardRunner(workload.model, plan, 0, r % plan.tensor).held()
        logs[r].snapshots = {0: whole[held] + r}
    with pytest.raises(RuntimeError, match="differ"):
        split_log.gather_model(logs, workload, plan)
