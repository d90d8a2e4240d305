"""Simulated against real: comparing runs, the validation matrix and its report."""
