"""Measuring this machine (kernel rates, network) as profiles the simulator reads."""
