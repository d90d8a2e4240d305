"""The simulated executor: SimPy processes that decide *when* things happen.

Hosts and their cores, parameter-server processes, the layer-wise pipeline engine, each
strategy's worker processes and simulated failure recovery. What a strategy does is its
rules' (:mod:`sim.training.rules`); this package only schedules it.
"""
