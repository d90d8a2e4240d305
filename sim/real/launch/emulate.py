"""Network emulation on one Linux host: a namespace per rank, veth pairs, a bridge, tbf.

``Emulation(ranks, rate_bps)`` gives every rank its own network namespace whose ``eth0`` is
one end of a veth pair; the other ends join one bridge (the switch of a star topology).
Each link is shaped in both directions by a token bucket (``tc qdisc ... tbf``) at the rate,
on the namespace side (what the rank sends) and on the bridge side (what it receives), as a
full-duplex NIC port would be. Addresses are 10.213.0.0/16, inside the namespaces only.
MPI is forced onto TCP between them (libfabric's tcp provider, no shared memory).

Two settings matter on a small VM (measured with ``sim.calibration.netbench``, 4 ranks,
2 cores): the bucket holds 1 ms at the line rate (with 200 us, a 4 MB ring allreduce at 1
Gbit/s took 2.5x its bandwidth bound: the qdisc timers could not keep the link busy), and
every socket gets 4 MiB buffers (ranks that are not running while others send need the
kernel to hold a whole chunk; without them the same allreduce was 10-20% slower and much
noisier).

Everything is removed on exit, also after errors: the namespaces' processes are killed,
then the namespaces and links deleted. A state file per emulation (under /run) names its
owner, so leftovers of a process that was killed outright are removed by the next one.
Needs root, ``ip`` and ``tc``; :func:`unavailable` says why not, and callers skip cleanly.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType

SOCKET_BUFFER = 4 << 20  # bytes per TCP socket and direction
BURST_S = 1e-3  # token bucket depth, in seconds at the line rate
STATE_DIR = Path("/run/sgd-lab-emulate")
RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(bit|kbit|mbit|gbit|tbit)\s*$", re.IGNORECASE)
UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
TCP_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "eth0",
           "MPIR_CVAR_NOLOCAL": "1"}  # no shared memory between "hosts"


class EmulationError(RuntimeError):
    """Setting up the emulated network failed (the message says which command)."""


def parse_rate(text: str) -> float:
    """``"1gbit"`` -> 1e9 bits/s (units bit, kbit, mbit, gbit, tbit). Raises ValueError."""
    match = RATE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"rate {text!r}: expected a positive number and a unit, e.g. 1gbit, "
                         "10gbit, 100mbit")
    return float(match.group(1)) * UNITS[match.group(2).lower()]


def _run(*cmd: str) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmulationError(f"{' '.join(cmd)}: {exc}") from None
    if done.returncode:
        raise EmulationError(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def unavailable() -> str | None:
    """Why namespaces cannot be used here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return "network emulation needs Linux network namespaces"
    if os.geteuid() != 0:
        return "network emulation needs root (network namespaces, veth, tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"network emulation needs the {tool!r} command (iproute2)"
    probe = f"sgd-probe-{os.getpid()}"
    try:
        _run("ip", "netns", "add", probe)
    except EmulationError as exc:
        return f"network namespaces are not permitted here ({exc})"
    try:
        _run("ip", "netns", "del", probe)
    except EmulationError:
        pass
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(namespaces: list[str], links: list[str]) -> list[str]:
    """Kill the namespaces' processes, delete them and the links; returns what failed."""
    failed = []
    for ns in namespaces:
        try:
            pids = _run("ip", "netns", "pids", ns).split()
        except EmulationError:
            pids = []
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    for link in links:  # before the namespaces: deleting one removes its veth end later
        if Path(f"/sys/class/net/{link}").exists():
            try:
                _run("ip", "link", "del", link)
            except EmulationError as exc:
                if "Cannot find device" not in str(exc):
                    failed.append(str(exc))
    existing = set(_run("ip", "netns", "list").split()) if namespaces else set()
    for ns in namespaces:
        if ns in existing:
            try:
                _run("ip", "netns", "del", ns)
            except EmulationError as exc:
                failed.append(str(exc))
    return failed


def reap_stale() -> None:
    """Remove what emulations of dead processes left behind."""
    if not STATE_DIR.is_dir():
        return
    for state in STATE_DIR.glob("*.json"):
        try:
            data = json.loads(state.read_text())
            if _alive(int(data["owner"])):
                continue
            _remove(data["namespaces"], data["links"])
            state.unlink()
        except (OSError, ValueError, KeyError, EmulationError):
            continue


class Emulation:
    """``ranks`` namespaces on a bridge, every link shaped to ``rate_bps`` each way."""

    def __init__(self, ranks: int, rate_bps: float, latency_s: float = 0.05) -> None:
        self.ranks, self.rate_bps, self.queue_s = ranks, rate_bps, latency_s
        self.tag = secrets.token_hex(3)
        self.bridge = f"sgb{self.tag}"
        self.namespaces = [f"sgd-{self.tag}-{i}" for i in range(ranks)]
        self.veths = [f"sgv{self.tag}{i}" for i in range(ranks)]
        self.state = STATE_DIR / f"{self.tag}.json"
        self.env = dict(TCP_ENV)

    @property
    def burst_bytes(self) -> int:
        """Each token bucket's depth, bytes: BURST_S at the rate, at least 16 KB (below
        that the qdisc's timers cannot keep a link busy)."""
        return max(int(self.rate_bps / 8 * BURST_S), 16384)

    @property
    def shaper(self) -> dict[str, float]:
        """The links' token buckets as the simulator's fabric takes them: the rate (bits/s)
        and the depth in seconds of it (``burst_s``)."""
        return {"rate_bps": self.rate_bps, "burst_s": self.burst_bytes * 8 / self.rate_bps}

    @staticmethod
    def address(rank: int) -> str:
        return f"10.213.{rank // 200}.{rank % 200 + 10}"

    def prefix(self, rank: int) -> list[str]:
        """The command prefix that runs a program as ``rank``, inside its namespace."""
        return ["ip", "netns", "exec", self.namespaces[rank]]

    def __enter__(self) -> Emulation:
        reason = unavailable()
        if reason:
            raise EmulationError(reason)
        reap_stale()
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.state.write_text(json.dumps({"owner": os.getpid(), "namespaces": self.namespaces,
                                          "links": [self.bridge, *self.veths]}))
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _setup(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "link", "set", self.bridge, "up")
        tbf = ["root", "tbf", "rate", f"{int(self.rate_bps)}bit", "burst", str(self.burst_bytes),
               "latency", f"{int(self.queue_s * 1000)}ms"]
        for rank, (ns, veth) in enumerate(zip(self.namespaces, self.veths, strict=True)):
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0",
                 "netns", ns)
            _run("ip", "link", "set", veth, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.address(rank)}/16", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            for key in ("tcp_rmem", "tcp_wmem"):  # deep socket buffers: see the docstring
                _run("ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                     f"net.ipv4.{key}=4096 {SOCKET_BUFFER} {SOCKET_BUFFER}")
            _run("tc", "qdisc", "add", "dev", veth, *tbf)  # into the namespace
            _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", *tbf)  # out

    def close(self) -> None:
        """Remove everything (idempotent); raises EmulationError if something stays."""
        failed = _remove(self.namespaces, [self.bridge, *self.veths])
        if not failed:
            self.state.unlink(missing_ok=True)
        if failed:
            raise EmulationError("could not remove the emulated network: " + "; ".join(failed))

    def leftovers(self) -> list[str]:
        """Namespaces and links of this emulation that still exist (for tests)."""
        existing = set(_run("ip", "netns", "list").split())
        return ([ns for ns in self.namespaces if ns in existing]
                + [link for link in (self.bridge, *self.veths)
                   if Path(f"/sys/class/net/{link}").exists()])
