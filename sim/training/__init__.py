"""The method both executors share: the strategy table and rules, the parameter store,
messages, compression, compute-time and host-cost models, building a workload, and the
config's cross-key checks. Pure Python, numpy and the kernels: no SimPy, no MPI."""
