"""The simulated executor: SimPy processes that decide *when* things happen.

Hosts and their cores, parameter-server processes, the overlap of gradient communication
with backprop (layer-wise pipelining, :mod:`~sim.simulated.backprop_overlap`), each
strategy's worker processes and simulated failure recovery. What a strategy does is its
rules' (:mod:`sim.training.rules`); this package only schedules it.
"""
