"""A long run and its user: progress reports, and stopping early on Ctrl-C or SIGTERM.

A run ends at ``run.iterations`` updates, ``run.time_limit_s`` simulated seconds or
``run.samples`` training samples, whichever comes first, so its progress is the largest of
those fractions; the estimate of
the time left extrapolates the wall time spent so far. On a terminal one line is rewritten
in place; in a log (not a terminal) a line is printed every ``every_s`` seconds.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO


class Stopped(KeyboardInterrupt):
    """The run was asked to stop (SIGINT or SIGTERM); ``signal_name`` says which."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name

    @property
    def exit_status(self) -> int:
        """The shell's convention: 128 + the signal's number."""
        return 128 + int(getattr(signal, self.signal_name))


@contextlib.contextmanager
def handled(signals: tuple[int, ...], handler: Any) -> Iterator[None]:
    """Within the block ``signals`` call ``handler``; as before after it. Does nothing
    outside the main thread (signals can only be caught there)."""
    try:
        previous = {s: signal.signal(s, handler) for s in signals}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


STOPPING = (signal.SIGINT, signal.SIGTERM)


def stop_on_signals(progress: Progress) -> contextlib.AbstractContextManager[None]:
    """Within the block, SIGINT or SIGTERM asks ``progress`` to stop: its next call (after
    an update is fully recorded) raises :class:`Stopped`, so the caller keeps a consistent
    state of what was computed; a second signal raises at once. Outside the block, and
    while the caller writes results, the signals are as before."""
    def stop(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if progress.stop_requested is not None:
            raise Stopped(name)
        progress.stop_requested = name

    return handled(STOPPING, stop)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Within the block SIGINT and SIGTERM wait (e.g. while a run directory is written);
    a signal that came meanwhile is delivered when it ends."""
    pending: list[int] = []
    with handled(STOPPING, lambda signum, frame: pending.append(signum)):
        yield
    for signum in pending[:1]:
        signal.raise_signal(signum)


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Progress:
    """Call with (updates done, simulated time now, samples used) as often as you like;
    reports are throttled by wall time. ``close()`` ends the terminal line."""

    def __init__(self, iterations: int, time_limit_s: float | None,
                 stream: TextIO | None = None, every_s: float | None = None,
                 samples: int | None = None) -> None:
        self.iterations, self.time_limit_s, self.samples = iterations, time_limit_s, samples
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every_s = every_s if every_s is not None else (0.2 if self.tty else 5.0)
        self.started = time.perf_counter()
        self.last = self.started
        self.shown = False
        self.stop_requested: str | None = None  # a signal's name (stop_on_signals)

    def fraction(self, updates: int, sim_time_s: float, samples: int = 0) -> float:
        """How far the run is, 0..1: the largest of its limits' fractions."""
        done = updates / self.iterations if self.iterations else 0.0
        if self.time_limit_s:
            done = max(done, sim_time_s / self.time_limit_s)
        if self.samples:
            done = max(done, samples / self.samples)
        return min(1.0, done)

    def line(self, updates: int, sim_time_s: float, now: float, samples: int = 0) -> str:
        """The report, counted in the unit of the limit that ends the run first: updates of
        run.iterations, simulated seconds of run.time_limit_s, or samples of run.samples
        (the others in parentheses)."""
        fraction = self.fraction(updates, sim_time_s, samples)
        elapsed = now - self.started
        left = (f", about {_duration(elapsed * (1 - fraction) / fraction)} left"
                if fraction > 0 else "")
        by_updates = updates / self.iterations if self.iterations else 0.0
        by_time = sim_time_s / self.time_limit_s if self.time_limit_s else -1.0
        by_samples = samples / self.samples if self.samples else -1.0
        if by_time >= max(by_updates, by_samples):
            count = (f"simulated {sim_time_s:.4g} of {self.time_limit_s:.4g} s "
                     f"({updates} updates)")
        elif by_samples >= by_updates:
            count = f"{samples}/{self.samples} samples ({updates} updates)"
        else:
            count = f"{updates}/{self.iterations} updates, simulated {sim_time_s:.4g} s"
        return (f"progress: {fraction:6.1%}  {count}, {_duration(elapsed)} elapsed{left}")

    def __call__(self, updates: int, sim_time_s: float, samples: int = 0) -> None:
        """Report (throttled); raises Stopped when a signal asked the run to stop."""
        if self.stop_requested is not None:
            raise Stopped(self.stop_requested)
        now = time.perf_counter()
        if now - self.last < self.every_s:
            return
        self.last = now
        text = self.line(updates, sim_time_s, now, samples)
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.tty and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
