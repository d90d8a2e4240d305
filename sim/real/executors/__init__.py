"""Rank side of a real run (under MPI): the rank program, the strategies' rank programs
(which follow :mod:`sim.training.rules`, as the simulator does), point-to-point collectives,
timing, and the logs rank 0 turns into the run's files."""
