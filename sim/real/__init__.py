"""Real runs: the same experiment on MPI ranks, network emulation, calibration, comparison.

Parent side (plain Python): :mod:`~sim.real.runner` writes a spec, :mod:`~sim.real.launcher`
starts ``mpiexec`` (optionally inside :mod:`~sim.real.emulate` namespaces) and turns what
rank 0 hands back into a run directory with :func:`sim.record.write_run`.

Rank side (under MPI): :mod:`~sim.real.rank` builds the simulator's own data, model, shards,
workers and compute model (:mod:`~sim.real.parts`) and runs the strategy's real program
(:mod:`~sim.real.strategies`); :mod:`~sim.real.assemble` replays what every rank logged
through the simulator's :class:`~sim.record.Recorder`, so both kinds of run write the same
files. :mod:`~sim.real.calibrate`, :mod:`~sim.real.compare` and :mod:`~sim.real.validate`
measure the machine, compare runs and run the validation matrix.
"""
