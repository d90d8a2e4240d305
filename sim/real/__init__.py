"""Real runs: the same experiment on MPI ranks, network emulation, calibration, comparison.

Parent side (plain Python): :mod:`~sim.real.launch.runner` writes a spec, :mod:`~sim.real.launch.launcher`
starts ``mpiexec`` (optionally inside :mod:`~sim.real.launch.emulate` namespaces) and turns what
rank 0 hands back into a run directory with :func:`sim.record.write_run`.

Rank side (under MPI): :mod:`~sim.real.executors.rank` builds the simulator's own data, model, shards,
workers and compute model (:mod:`~sim.real.executors.parts`) and runs the strategy's real program
(:mod:`~sim.real.executors.registry`); :mod:`~sim.real.executors.assemble` replays what every rank logged
through the simulator's :class:`~sim.record.Recorder`, so both kinds of run write the same
files. :mod:`~sim.real.calibration.calibrate`, :mod:`~sim.real.validation.compare` and :mod:`~sim.real.validation.validate`
measure the machine, compare runs and run the validation matrix.
"""
