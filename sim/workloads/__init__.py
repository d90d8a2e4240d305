"""Workloads: data sets (generated or shipped by a package) and models."""
