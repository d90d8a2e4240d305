"""Training under simulated time: workers, parameter servers, strategies, compute times."""
