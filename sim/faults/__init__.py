"""Failures, checkpoints and recovery: storage presets, the failure processes, the
checkpoint-restart timeline of synchronous strategies, elastic recovery of parameter-server
strategies, and the closed forms they are checked against (Young 1974, Daly 2006)."""
