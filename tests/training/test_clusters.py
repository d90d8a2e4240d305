"""Cluster presets (cluster.preset): what each names exists, the keys it fills where the
config sets none, the resolved config showing them, and the list that prints them."""

from __future__ import annotations

import tomllib

import pytest

from sim.cli import main
from sim.config import dump_config
from sim.errors import UserError
from sim.network.fabrics import REGISTRY as FABRICS
from sim.network.host_links import REGISTRY as HOST_LINKS
from sim.simulated.engine import build_simulation
from sim.training.clusters import CLUSTERS, with_preset
from sim.training.compute_model import DEVICES
from sim.training.validator import validate


@pytest.mark.parametrize("name", list(CLUSTERS))
def test_a_preset_names_a_device_a_host_link_and_a_fabric_that_exist(name: str) -> None:
    preset = CLUSTERS[name]
    assert preset.name == name and preset.source
    assert preset.device in DEVICES and preset.host_link in HOST_LINKS
    assert preset.fabric in FABRICS
    assert 1 <= preset.nics_per_host <= preset.ranks_per_host


def test_the_papers_clusters_have_their_published_shapes() -> None:
    shapes = {name: (c.ranks_per_host, c.device, c.fabric, c.nics_per_host)
              for name, c in CLUSTERS.items()}
    assert shapes == {
        "dgx-1": (8, "v100", "ib-edr", 4),
        "dgx-2h": (16, "v100-sxm3", "ib-edr", 8),
        "dgx-a100": (8, "a100", "ib-hdr", 8),
        "horovod-pascal-25gbe": (4, "p100-pcie", "eth-25g", 1),
        "big-basin-50gbe": (8, "p100-sxm2", "eth-50g", 1),
    }


def test_a_preset_fills_the_keys_the_config_leaves_unset() -> None:
    c = validate({"cluster": {"preset": "dgx-2h", "workers": 32, "fabric": "ib-hdr"}})
    assert (c.cluster.ranks_per_host, c.cluster.host_link, c.cluster.nics_per_host) == \
        (16, "nvlink2-v100", 8)
    assert c.compute.device == "v100-sxm3"
    assert c.cluster.fabric == "ib-hdr"  # set by the config: it wins


def test_the_resolved_config_shows_the_filled_keys_and_reruns_the_same() -> None:
    c = validate({"cluster": {"preset": "big-basin-50gbe", "workers": 16}})
    text = dump_config(c)
    data = tomllib.loads(text)
    assert data["cluster"]["fabric"] == "eth-50g" and data["cluster"]["nics_per_host"] == 1
    assert data["compute"]["device"] == "p100-sxm2"
    assert validate(data) == c


def test_without_a_preset_the_config_is_untouched() -> None:
    data = {"cluster": {"workers": 2}}
    assert with_preset(data) == data and with_preset(data) is not data
    assert validate({}).cluster.nics_per_host is None


def test_an_unknown_preset_names_the_key_and_the_closest_one() -> None:
    with pytest.raises(UserError, match="cluster.preset: unknown cluster preset 'dgx-2' "
                       r"\(did you mean"):
        validate({"cluster": {"preset": "dgx-2"}})


def test_the_cli_refuses_an_unknown_preset_with_status_2(tmp_path, capsys) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[cluster]\npreset = "dgx-9"\n')
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "cluster.preset" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_dgx1_pairs_its_gpus_on_four_nics() -> None:
    c = validate({"cluster": {"preset": "dgx-1", "workers": 16},
                  "workload": {"profile": "resnet50", "numerics": False}})
    ports = build_simulation(c).ctx.network.topology.ports.tolist()
    assert ports == [0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14]


def test_sim_list_clusters_prints_every_preset_with_its_source(capsys) -> None:
    assert main(["list", "clusters"]) == 0
    out = capsys.readouterr().out
    for name, preset in CLUSTERS.items():
        assert name in out and preset.source in out
