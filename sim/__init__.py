"""sgd-lab: a simulation and analysis lab for distributed SGD."""

__version__ = "0.1.0"
