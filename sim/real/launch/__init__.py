"""Parent side of a real run: the spec and run directory (runner), ``mpiexec`` (launcher),
emulated networks in namespaces (emulate)."""
