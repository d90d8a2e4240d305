"""A 2-rank program for tests/real/test_real_sched.py: both ranks SCHED_FIFO on one core.

Rank 0 computes ``COMPUTE_S`` of CPU, then sleeps ``SLEEP_S`` off the CPU, then sends;
rank 1 waits for the message with the fifo waiter meanwhile. Rank 1 writes JSON to argv[1]:
rank 0's compute wall time, rank 1's wait (wall and its own CPU), and the CPU a default-
policy neighbour on the same core (pid argv[2]) got during the wait.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from mpi4py import MPI

from sim.real.executors.rank_clock import Waiter
from sim.real.executors.rank_sched import enter, leave

COMPUTE_S, SLEEP_S = 0.2, 0.4


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (from /proc/PID/stat)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def main() -> None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    enter("fifo", rank)  # the job's affinity is one core: both ranks pinned to it
    waiter = Waiter("sleep", yields=True)
    waiter.one(comm.Ibarrier())
    note = np.zeros(1)
    if rank == 0:
        began, cpu = time.perf_counter(), time.process_time()
        while time.process_time() - cpu < COMPUTE_S and \
                time.perf_counter() - began < 30 * COMPUTE_S:  # ends, starved or not
            pass
        note[0] = time.perf_counter() - began
        time.sleep(SLEEP_S)
        comm.Send(note, dest=1)
    else:
        neighbour = int(sys.argv[2])
        cpu0, other0, wall0 = time.process_time(), cpu_s(neighbour), time.perf_counter()
        waiter.one(comm.Irecv(note, source=0))
        found = {"compute_wall_s": float(note[0]), "wait_s": time.perf_counter() - wall0,
                 "wait_cpu_s": time.process_time() - cpu0,
                 "neighbour_cpu_s": cpu_s(neighbour) - other0}
        with open(sys.argv[1], "w") as out:
            json.dump(found, out)
    leave("fifo")
    comm.Barrier()


if __name__ == "__main__":
    main()
