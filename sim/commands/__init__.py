"""Subcommands of ``python -m sim`` that are not owned by a library package."""
