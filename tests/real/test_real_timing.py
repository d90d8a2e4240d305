"""sim.real.executors.rank_clock.sleep_until on a clock whose sleeps end late, as they do here."""

from __future__ import annotations

import pytest

from sim.real.executors import rank_clock as timing


class LateClock:
    """A clock whose sleeps last ``late`` (a share) longer than asked, plus ``wake_s``;
    reading it takes ``read_s`` (so a spin advances)."""

    def __init__(self, late: float, wake_s: float = 5e-6, read_s: float = 1e-6) -> None:
        self.now, self.late, self.wake_s, self.read_s = 0.0, late, wake_s, read_s
        self.sleeps: list[float] = []

    def perf_counter(self) -> float:
        self.now += self.read_s
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds * (1 + self.late) + self.wake_s


@pytest.mark.parametrize("pad_s", [0.2e-3, 2e-3, 6e-3, 50e-3])
@pytest.mark.parametrize("late", [0.0, 0.015, 0.04])
def test_a_pad_ends_at_its_deadline_although_sleeps_end_late(monkeypatch, pad_s, late):
    clock = LateClock(late)
    monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(timing.time, "sleep", clock.sleep)
    assert timing.sleep_until(pad_s) is False
    assert pad_s <= clock.now <= pad_s + 2e-6  # the spin's last clock reads
    assert len(clock.sleeps) <= 4  # a few naps, not a busy loop of tiny ones


def test_a_check_that_fires_cuts_the_pad_short(monkeypatch):
    clock = LateClock(0.015)
    monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(timing.time, "sleep", clock.sleep)
    assert timing.sleep_until(10e-3, check=lambda: clock.now > 1e-3) is True
    assert clock.now < 1.5e-3  # within a slice of the check firing
