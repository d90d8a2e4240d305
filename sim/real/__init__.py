"""Real runs: the same experiment on MPI ranks, and network emulation.

* :mod:`~sim.real.launch` (parent side, plain Python): the runner checks the config once
  (:func:`sim.training.validator.validate_real`), writes a typed spec
  (:class:`~sim.real.executors.rank_spec.RankSpec`: the validated config and the launch's
  fields, which the ranks trust), the
  launcher starts ``mpiexec`` (optionally inside emulated network namespaces) and the
  runner turns what rank 0 hands back into a run directory (:func:`sim.rundir.write_run`).
* :mod:`~sim.real.executors` (rank side, under MPI): every rank builds the run's workload
  (:func:`sim.training.workload.build_workload`) and the strategy's rules
  (:mod:`sim.training.rules`, the same the simulator follows) and runs the strategy's rank
  program (its row in :data:`sim.training.strategies.STRATEGIES`, run by
  :mod:`~sim.real.executors.registry`); rank 0 replays every rank's log through the
  simulator's :class:`~sim.recorder.Recorder`, so both kinds of run write the same files.
Calibrating this machine (:mod:`sim.calibration`) and comparing simulated with real runs
(:mod:`sim.validation`) launch real ranks, so they live above both executors.
"""
