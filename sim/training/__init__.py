"""The method both executors share: the strategy table and rules, the parameter store,
messages, compression, compute-time and host-cost models, building a workload, and the one
config validator (:mod:`~sim.training.validator`, with what real runs support in
:mod:`~sim.training.real_checks`). Pure Python, numpy and the kernels: no SimPy, no MPI."""
