"""The one loader of calibrated:PATH profiles (sim.calibrated): every kind (fabric, device,
host, storage, transport, recovery) round-trips through its writer, and a bad file is a
ValueError naming the file and the key, never another exception."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.calibrated import load_profile, profile_json, read_profile
from sim.calibration.profiles import write_recovery
from sim.calibration.recovery_profile import RECOVERY_FORMAT, RecoveryProfile
from sim.faults.storage import STORAGE, Storage, get_storage, save_storage_profile
from sim.network.fabrics import Fabric, get_fabric, save_profile
from sim.network.transports import REGISTRY as TRANSPORTS
from sim.network.transports import get_transport, save_transport
from sim.training.compute_model import Device, load_device, save_device_profile
from sim.training.host_costs import HOSTS, load_host, save_host_profile

# each kind: its loader of a spec, and a valid profile as its writer writes it
KINDS: dict[str, tuple[Callable[[str], Any], dict[str, Any]]] = {
    "fabric": (get_fabric, {"format": "sgd-lab.fabric-profile/1", "name": "f",
                            "bandwidth_Bps": 1e9, "latency_s": 1e-7, "overhead_s": 2e-7,
                            "source": "test", "measurements": {"raw": [1, 2]}}),
    "device": (load_device, {"format": "sgd-lab.device-profile/1", "name": "d",
                             "flops_per_s": 2e10, "overhead_s": 3e-6, "source": "test",
                             "on_host": True, "points": [], "concurrency": 2}),
    "host": (load_host, {**json.loads(profile_json(HOSTS["epyc-core"],
                                                   "sgd-lab.host-profile/1")),
                         "fits": {}, "quick": True}),
    "storage": (get_storage, {"format": "sgd-lab.storage-profile/1", "write_Bps": 5e8,
                              "read_Bps": 9e8, "latency_s": 4e-3, "source": "test",
                              "write_latency_s": 3e-3, "read_latency_s": 4e-3, "points": []}),
}
REQUIRED = {"fabric": "overhead_s", "device": "flops_per_s", "host": "reload_base_s",
            "storage": "read_Bps"}


def write(tmp_path: Path, data: Any, name: str = "p.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return f"calibrated:{path}"


def test_a_fabric_round_trips(tmp_path):
    fabric = Fabric("measured", 8 * 11.9e9, latency_s=1.5e-7, overhead_s=3.5e-7, source="osu")
    save_profile(tmp_path / "f.json", fabric, measurements={"fit": {}})
    assert get_fabric(f"calibrated:{tmp_path / 'f.json'}") == fabric


def test_a_device_round_trips(tmp_path):
    save_device_profile(tmp_path / "d.json", 2e10, 3e-6, "bench", name="cpu", points=[1])
    assert load_device(f"calibrated:{tmp_path / 'd.json'}") == Device("cpu", 2e10, 3e-6,
                                                                       "bench", on_host=True)
    save_device_profile(tmp_path / "unnamed.json", 2e10, 0.0, "bench")  # named by its file
    assert load_device(f"calibrated:{tmp_path / 'unnamed.json'}").name == "unnamed"


@pytest.mark.parametrize("preset", sorted(HOSTS))
def test_a_host_round_trips(tmp_path, preset):
    save_host_profile(tmp_path / "h.json", HOSTS[preset], fits={"copy": {}}, quick=True)
    assert load_host(f"calibrated:{tmp_path / 'h.json'}") == HOSTS[preset]  # inf included


@pytest.mark.parametrize("preset", sorted(STORAGE))
def test_a_storage_round_trips(tmp_path, preset):
    save_storage_profile(tmp_path / "s.json", STORAGE[preset], points=[])
    assert get_storage(f"calibrated:{tmp_path / 's.json'}") == STORAGE[preset]


def test_profile_json_writes_the_format_every_field_by_name_then_the_measurements():
    data = json.loads(profile_json(STORAGE["nvme"], "fmt/1", points=[1], source="other"))
    assert list(data) == ["format", "name", "write_Bps", "read_Bps", "latency_s",
                          "aggregate_Bps", "source", "points"]
    assert data["format"] == "fmt/1" and data["source"] == "other"  # extra replaces a field


def write_device(path: Path, device: Device) -> None:
    save_device_profile(path, device.flops_per_s, device.overhead_s, device.source,
                        device.memory_Bps, device.lookup_s, device.activation_Bps,
                        name=device.name, points=[{"seconds": 1e-3}], concurrency=2)


def load_recovery(spec: str) -> RecoveryProfile:
    data = read_profile(Path(spec.removeprefix("calibrated:")), RECOVERY_FORMAT, "recovery")
    return RecoveryProfile(**{f.name: data[f.name] for f in fields(RecoveryProfile)})


# each kind: its writer (path, profile), a profile with every field set, and its loader
ROUND_TRIPS: dict[str, tuple[Callable[[Path, Any], Any], Any, Callable[[str], Any]]] = {
    "fabric": (lambda path, f: save_profile(path, f, measurements={"fit": {}}),
               Fabric("measured", 8 * 11.9e9, latency_s=1.5e-7, overhead_s=3.5e-7,
                      source="osu"), get_fabric),
    "device": (write_device, Device("cpu", 2e10, 3e-6, "bench", on_host=True,
                                    memory_Bps=1.1e10, lookup_s=2.7e-7,
                                    activation_Bps=1.5e11), load_device),
    "host": (lambda path, h: save_host_profile(path, h, fits={"copy": {}}, quick=True),
             HOSTS["epyc-core"], load_host),
    "storage": (lambda path, s: save_storage_profile(path, s, points=[]), STORAGE["nvme"],
                get_storage),
    "transport": (lambda path, t: save_transport(path, t, measurements={"samples": [1]}),
                  dataclasses.replace(TRANSPORTS["grpc"], name="here", rpc_s=55e-6),
                  get_transport),
    "recovery": (lambda path, r: write_recovery(path, r, [{"restart_s": r.restart_s}]),
                 RecoveryProfile(0.8, "restarts here"), load_recovery),
}


@pytest.mark.parametrize("kind", sorted(ROUND_TRIPS))
def test_every_kind_loads_what_its_writer_writes(tmp_path, kind):
    """Each kind's writer writes ``format``, its fields and its measurements; its loader
    gives back the profile written, equal field by field (inf included), and a file
    without ``format`` (it is optional) loads the same."""
    writer, profile, loader = ROUND_TRIPS[kind]
    path = tmp_path / f"{kind}.json"
    writer(path, profile)
    assert loader(f"calibrated:{path}") == profile
    data = json.loads(path.read_text())
    assert data["format"].startswith("sgd-lab.") and data["format"].endswith("-profile/1")
    del data["format"]
    assert loader(write(tmp_path, data)) == profile
    if kind in KINDS:  # the hand-made profile of the error tests loads as written
        loader_, valid = KINDS[kind]
        loaded = loader_(write(tmp_path, valid))
        assert all(getattr(loaded, key) == value for key, value in valid.items()
                   if hasattr(loaded, key) and key != "format")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_missing_key_is_named(tmp_path, kind):
    loader, valid = KINDS[kind]
    key = REQUIRED[kind]
    spec = write(tmp_path, {k: v for k, v in valid.items() if k != key})
    with pytest.raises(ValueError, match=f"missing key '{key}'") as excinfo:
        loader(spec)
    assert str(tmp_path / "p.json") in str(excinfo.value)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("value", ["1e9", True, None, [1.0]])
def test_a_wrongly_typed_number_is_named(tmp_path, kind, value):
    loader, valid = KINDS[kind]
    key = REQUIRED[kind]
    with pytest.raises(ValueError, match=f"{key} must be a number") as excinfo:
        loader(write(tmp_path, {**valid, key: value}))
    assert str(tmp_path / "p.json") in str(excinfo.value)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_wrongly_typed_name_and_an_unknown_key_are_named(tmp_path, kind):
    loader, valid = KINDS[kind]
    with pytest.raises(ValueError, match="name must be a string"):
        loader(write(tmp_path, {**valid, "name": 7}))
    with pytest.raises(ValueError, match="unknown key 'speed'"):
        loader(write(tmp_path, {**valid, "speed": 1}))
    with pytest.raises(ValueError, match="format 'v9'"):
        loader(write(tmp_path, {**valid, "format": "v9"}))


@pytest.mark.parametrize("kind, listed", [("fabric", "ib-edr, ib-hdr"), ("device", "cpu-core"),
                                          ("host", "ideal, epyc-core"), ("storage", "nvme")])
def test_an_unknown_preset_lists_the_presets(kind, listed):
    with pytest.raises(ValueError, match=f"unknown {kind}.*{listed}.*calibrated:PATH"):
        KINDS[kind][0]("no-such-preset")


def test_a_value_the_dataclass_refuses_is_named_with_the_file(tmp_path):
    for kind, key in (("fabric", "overhead_s"), ("device", "flops_per_s"),
                      ("host", "copy_Bps"), ("storage", "read_Bps")):
        loader, valid = KINDS[kind]
        with pytest.raises(ValueError, match=key) as excinfo:
            loader(write(tmp_path, {**valid, key: -1.0}))
        assert str(tmp_path / "p.json") in str(excinfo.value)


@dataclass(frozen=True)
class Probe:
    name: str
    rate: float
    on: bool = False


def test_the_loader_builds_any_dataclass_by_field_name(tmp_path):
    spec = write(tmp_path, {"format": "probe/1", "rate": 2, "on": True, "raw": [1]})
    loaded = load_profile(spec, {}, Probe, "probe/1", what="probe", measurements={"raw"},
                          defaults=lambda path: {"name": path.stem})
    assert loaded == Probe("p", 2.0, True) and isinstance(loaded.rate, float)
    assert load_profile("a", {"a": Probe("a", 1.0)}, Probe, "probe/1", what="probe").rate == 1
    with pytest.raises(ValueError, match="missing key 'name'"):
        load_profile(spec, {}, Probe, "probe/1", what="probe", measurements={"raw"})
    with pytest.raises(ValueError, match="on must be true or false"):
        load_profile(write(tmp_path, {"name": "x", "rate": 1, "on": 1}), {}, Probe, "probe/1",
                     what="probe")


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5)
                    | st.floats(allow_nan=True, allow_infinity=True),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
NUMBERS = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**400, 10**400)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(KINDS)), data=st.data())
def test_any_json_object_loads_or_is_a_value_error(tmp_path, kind, data):
    loader, valid = KINDS[kind]
    keys = st.sampled_from(sorted(valid)) | st.text(max_size=8)
    drop = data.draw(st.sets(st.sampled_from(sorted(valid)), max_size=3))
    changes = data.draw(st.dictionaries(keys, JSON | NUMBERS, max_size=4))
    obj = data.draw(st.sampled_from([{**{k: v for k, v in valid.items() if k not in drop},
                                      **changes}, changes]))
    path = tmp_path / "any.json"
    path.write_text(json.dumps(obj))
    try:
        profile = loader(f"calibrated:{path}")
    except ValueError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
    else:
        numbers = [v for v in vars(profile).values() if isinstance(v, float)]
        assert not any(math.isnan(v) for v in numbers)
        assert isinstance(profile, Fabric | Device | Storage | type(HOSTS["ideal"]))
