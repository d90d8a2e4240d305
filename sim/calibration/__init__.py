"""Calibration: this machine measured, fitted and written as the profiles the simulator reads
(``calibrated:PATH``), and profiles fitted to real runs.

* :mod:`~sim.calibration.sequence`: one :func:`~sim.calibration.sequence.calibrate` of a
  :class:`~sim.calibration.sequence.Plan`, for ``sim calibrate``, ``sim validate`` and
  ``sim real --twin``.
* Measuring, by what is measured: :mod:`~sim.calibration.measure_device` (gradients),
  :mod:`~sim.calibration.measure_fabric` (the network; its ranks run
  :mod:`~sim.calibration.netbench`), :mod:`~sim.calibration.measure_host` (the host's CPU
  costs, with :mod:`~sim.calibration.reload_bench` and :mod:`~sim.calibration.serve_bench`),
  :mod:`~sim.calibration.transport_bench` (gRPC), :mod:`~sim.calibration.measure_storage`
  (checkpoint files) and :mod:`~sim.calibration.measure_recovery` (restarts).
* Fitting, all through :mod:`~sim.calibration.least_squares`: from microbenchmarks
  (:mod:`~sim.calibration.fit_device`, :mod:`~sim.calibration.fit_fabric`,
  :mod:`~sim.calibration.fit_host`, :mod:`~sim.calibration.fit_recovery`) and from real runs
  (:mod:`~sim.calibration.from_runs`: the device; :mod:`~sim.calibration.fit_serving`: the
  server's code; :mod:`~sim.calibration.fit_rendezvous`: the rendezvous).
* Writing: :mod:`~sim.calibration.profiles`, one writer per kind, each through
  :mod:`sim.calibrated` (the recovery profile's kind: :mod:`~sim.calibration.recovery_profile`).
* Reporting: :mod:`~sim.calibration.report` and :mod:`~sim.calibration.host_report`.

It launches real ranks to measure, so it sits above the executors (:mod:`sim.real`), and
below :mod:`sim.validation`, which calibrates before it compares.
"""
