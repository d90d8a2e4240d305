"""Fabric presets, custom fabrics, calibrated profiles, and byte sizes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.network import fabrics
from sim.network.fabrics import REGISTRY, Fabric, get_fabric, save_profile
from sim.network.message_cost import alpha_s, beta_s
from sim.network.units import format_bytes, format_seconds, parse_bytes


def test_presets_are_sane_and_cite_sources() -> None:
    assert set(REGISTRY) == {"ib-edr", "ib-hdr", "ib-ndr", "eth-10g", "eth-25g", "eth-50g",
                             "eth-100g", "roce-25g", "roce-50g", "roce-100g"}
    for name, fabric in REGISTRY.items():
        assert fabric.name == name and fabric.source
        assert 0.5 < fabric.efficiency <= 1
    gbps = {name: f.line_rate_bps / 1e9 for name, f in REGISTRY.items()}
    assert gbps == {"ib-edr": 100, "ib-hdr": 200, "ib-ndr": 400, "eth-10g": 10, "eth-25g": 25,
                    "eth-50g": 50, "eth-100g": 100, "roce-25g": 25, "roce-50g": 50,
                    "roce-100g": 100}
    # RDMA fabrics: about 1 us end to end; TCP: tens of us, from much larger overheads
    for name in ("ib-edr", "ib-hdr", "ib-ndr", "roce-25g", "roce-50g", "roce-100g"):
        assert 0.5e-6 <= alpha_s(REGISTRY[name]) <= 2e-6
    for name in ("eth-10g", "eth-25g", "eth-50g", "eth-100g"):
        assert 10e-6 <= alpha_s(REGISTRY[name]) <= 50e-6
        assert REGISTRY[name].overhead_s > 10 * REGISTRY["ib-hdr"].overhead_s


def test_every_preset_number_has_a_comment_with_its_source() -> None:
    source = Path(fabrics.__file__).read_text()
    block = source[source.index("REGISTRY: dict"):source.index("_CUSTOM_KEYS")]
    entries = re.findall(r'^    "([a-z0-9-]+)":', block, flags=re.M)
    assert entries == list(REGISTRY)
    for chunk in re.split(r'^    "[a-z0-9-]+":.*$', block, flags=re.M)[:-1]:
        assert "#" in chunk  # the comment block above each entry


def test_alpha_is_two_overheads_plus_hop_latencies() -> None:
    fabric = Fabric("f", 8e9, latency_s=0.2e-6, overhead_s=0.5e-6, efficiency=0.5)
    assert fabric.bandwidth_Bps == 0.5e9
    assert beta_s(fabric) == 2e-9
    assert alpha_s(fabric) == pytest.approx(2 * 0.5e-6 + 2 * 0.2e-6)
    assert alpha_s(fabric, hops=4) == pytest.approx(2 * 0.5e-6 + 4 * 0.2e-6)


def test_overrides_keep_the_one_switch_alpha_and_bandwidth() -> None:
    custom = get_fabric("eth-10g").with_overrides(alpha_s=3e-6, bandwidth_Bps=12.5e9)
    assert alpha_s(custom) == pytest.approx(3e-6)
    assert alpha_s(custom, hops=4) == pytest.approx(3e-6)  # alpha is per message, any path
    assert custom.bandwidth_Bps == 12.5e9


def test_custom_fabric_from_a_mapping() -> None:
    full = get_fabric({"name": "lab", "bandwidth_Bps": 1e9, "latency_s": 1e-6,
                       "overhead_s": 2e-6})
    assert (full.name, full.bandwidth_Bps, alpha_s(full)) == ("lab", 1e9, pytest.approx(6e-6))
    tweaked = get_fabric({"base": "ib-hdr", "latency_s": 1e-6})
    assert tweaked.line_rate_bps == REGISTRY["ib-hdr"].line_rate_bps
    assert tweaked.latency_s == 1e-6
    with pytest.raises(ValueError, match="unknown key"):
        get_fabric({"base": "ib-hdr", "latency": 1})
    with pytest.raises(ValueError, match="missing key"):
        get_fabric({"bandwidth_Bps": 1e9})
    with pytest.raises(ValueError, match="expected a number"):
        get_fabric({"base": "ib-hdr", "latency_s": "fast"})
    with pytest.raises(ValueError, match="efficiency"):
        get_fabric({"base": "ib-hdr", "efficiency": 1.5})


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="ib-edr, ib-hdr"):
        get_fabric("ib-xdr")


def test_calibrated_profile_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    measured = Fabric("cluster", 8 * 11.9e9, latency_s=1.5e-7, overhead_s=3.5e-7)
    save_profile(path, measured, source="osu_bw + osu_latency")
    loaded = get_fabric(f"calibrated:{path}")
    assert loaded.bandwidth_Bps == pytest.approx(11.9e9)
    assert (loaded.latency_s, loaded.overhead_s, loaded.efficiency) == (1.5e-7, 3.5e-7, 1.0)
    assert loaded.source == "osu_bw + osu_latency"


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot read it as JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"bandwidth_Bps": 1e9, "latency_s": 1e-6}', "missing key 'overhead_s'"),
    ('{"bandwidth_Bps": 1e9, "latency_s": 1e-6, "overhead_s": 0, "speed": 1}', "unknown"),
    ('{"format": "v9", "bandwidth_Bps": 1e9, "latency_s": 1e-6, "overhead_s": 0}', "format"),
    ('{"bandwidth_Bps": -1, "latency_s": 1e-6, "overhead_s": 0}', "line_rate_bps"),
])
def test_bad_profiles_name_the_file_and_the_problem(tmp_path: Path, content: str,
                                                    message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as excinfo:
        get_fabric(f"calibrated:{path}")
    assert str(path) in str(excinfo.value)
    assert "\n" not in str(excinfo.value)  # one line for the command line to print


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), ("1e6", 10**6), ("100MB", 10**8), ("100 MB", 10**8), ("1GiB", 2**30),
    ("1.5kB", 1500), ("2KiB", 2048), ("3tb", 3 * 10**12), ("7B", 7), ("0.5MiB", 2**19),
])
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["100XB", "", "MB", "-5", "1.5", "1e400", "10 M B"])
def test_parse_bytes_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="expected"):
        parse_bytes(text)


def test_formatting() -> None:
    assert format_bytes(1e8) == "100 MB"
    assert format_seconds(0.0123) == "12.3 ms"
    assert format_seconds(2.5e-6) == "2.5 us"


def test_roce_on_25_gbe_is_the_ethernet_with_rdma_software() -> None:
    """RoCE at 25 GbE two ways: the roce-25g preset under MPI, and eth-25g's wire under the
    rdma transport. Both pay the verbs' 0.5 us a message and copy nothing; only the wire
    differs (RoCE's framing against TCP's), and both run the 25 Gb/s line rate."""
    from sim.network.message_cost import message_cpu
    from sim.network.transports import get_transport

    roce, eth = REGISTRY["roce-25g"], REGISTRY["eth-25g"]
    on_roce = message_cpu(0.0, float("inf"), roce)
    on_eth = message_cpu(0.0, float("inf"), eth, get_transport("rdma"))
    tcp = message_cpu(0.0, float("inf"), eth)
    n = 1e6
    assert on_roce.message_s(n) == on_eth.message_s(n) == 0.5e-6
    assert tcp.message_s(n) == 8e-6 + n / 5e9  # the socket call and the kernel copy
    assert roce.line_rate_bps == eth.line_rate_bps == 25e9
    assert roce.bandwidth_Bps == 25e9 / 8 * 0.97 and eth.bandwidth_Bps == 25e9 / 8 * 0.94
