"""Configs: defaults, overrides, resolved round trip, and a table of bad configs (exit 2)."""

from __future__ import annotations

import json

import pytest

from sim.cli import main
from sim.config import Config, apply_overrides, dump_config, parse_override
from sim.errors import UserError
from sim.training.validator import load_config, validate

# (what is wrong, config table merged into the tiny config, the key the message must name)
BAD = [
    ("no workers", {"cluster": {"workers": 0}}, "cluster.workers"),
    ("workers as string", {"cluster": {"workers": "4"}}, "cluster.workers"),
    ("fractional workers", {"cluster": {"workers": 2.5}}, "cluster.workers"),
    ("unknown fabric", {"cluster": {"fabric": "ib-xdr"}}, "cluster.fabric"),
    ("negative bandwidth", {"cluster": {"fabric": {"bandwidth_Bps": -1.0, "latency_s": 1e-6,
                                                   "overhead_s": 1e-6}}}, "cluster.fabric"),
    ("unknown topology", {"cluster": {"topology": "torus"}}, "cluster.topology"),
    ("oversubscription on a star", {"cluster": {"oversubscription": 2.0}},
     "cluster.oversubscription"),
    ("oversubscription below 1", {"cluster": {"topology": "leaf-spine",
                                              "oversubscription": 0.5}},
     "cluster.oversubscription"),
    ("unknown placement", {"cluster": {"placement": "random"}}, "cluster.placement"),
    ("unknown cluster key", {"cluster": {"nodes": 4}}, "cluster.nodes"),
    ("unknown model", {"workload": {"model": "resnet"}}, "workload.model"),
    ("unknown dataset", {"workload": {"dataset": "mnist"}}, "workload.dataset"),
    ("unknown timing profile", {"workload": {"profile": "resnet152"}}, "workload.profile"),
    ("batch larger than a shard", {"workload": {"batch": 10_000}}, "workload.batch"),
    ("negative lr", {"workload": {"lr": -0.1}}, "workload.lr"),
    ("nan lr", {"workload": {"lr": float("nan")}}, "workload.lr"),
    ("momentum 1", {"workload": {"momentum": 1.0}}, "workload.momentum"),
    ("binary model, 3 classes", {"workload": {"classes": 3}}, "workload.classes"),
    ("sparse model on dense data", {"workload": {"model": "sparse-logreg"}}, "workload.model"),
    ("zero-width layer", {"workload": {"model": "mlp", "hidden": [0]}}, "workload.hidden"),
    ("unknown strategy", {"strategy": {"kind": "hogwild"}}, "strategy.kind"),
    ("negative staleness", {"strategy": {"kind": "ssp", "staleness": -1}}, "strategy.staleness"),
    ("backup >= workers", {"strategy": {"kind": "backup", "backup": 2}}, "strategy.backup"),
    ("ps is not an allreduce", {"strategy": {"collective": "ps"}}, "strategy.collective"),
    ("unknown compression", {"strategy": {"compression": "zip"}}, "strategy.compression"),
    ("zero top-k ratio", {"strategy": {"topk_ratio": 0.0}}, "strategy.topk_ratio"),
    ("unknown device", {"compute": {"device": "tpu"}}, "compute.device"),
    ("missing device profile", {"compute": {"device": "calibrated:/nonexistent.json"}},
     "compute.device"),
    ("unknown distribution", {"compute": {"distribution": "normal"}}, "compute.distribution"),
    ("straggler fraction > 1", {"compute": {"straggler_fraction": 1.5}},
     "compute.straggler_fraction"),
    ("slowdown of a missing worker", {"compute": {"slowdowns": [{"worker": 9}]}},
     "compute.slowdowns"),
    ("slowdown ending before it starts",
     {"compute": {"slowdowns": [{"worker": 1, "start_s": 2.0, "end_s": 1.0}]}},
     "compute.slowdowns"),
    ("zero iterations", {"run": {"iterations": 0}}, "run.iterations"),
    ("negative target", {"run": {"target_loss": -1.0}}, "run.target_loss"),
    ("unknown section", {"bogus": {"x": 1}}, "bogus"),
]


@pytest.fixture
def tiny(tiny_config_data) -> dict:
    """The shared tiny config with the default batch, 4 updates and an eval every 2."""
    return tiny_config_data({"workload.batch": None, "run.iterations": 4, "run.eval_every": 2})


def merged(tiny: dict, extra: dict) -> dict:
    out = json.loads(json.dumps(tiny))
    for section, table in extra.items():
        out.setdefault(section, {}).update(table)
    return out


@pytest.mark.parametrize("what, extra, key", BAD, ids=[case[0] for case in BAD])
def test_bad_config_exits_2_naming_file_and_key(tmp_path, capsys, tiny, write_toml, what, extra,
                                                key):
    path = write_toml(tmp_path / "exp.toml", merged(tiny, extra))
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, "one line, no traceback"
    assert str(path) in err and key in err
    assert not out.exists(), "no run directory left behind"


def test_every_registered_timing_profile_is_a_valid_workload_profile():
    """The schema takes any name; the validator accepts exactly the registry's."""
    from sim.workloads.timing_profiles import PROFILES

    for name in PROFILES:
        assert validate({"workload": {"profile": name, "numerics": False}}).workload.profile \
            == name


def test_bad_table_has_at_least_20_cases():
    assert len(BAD) >= 20


def test_empty_config_is_valid_and_resolves_every_default():
    config = validate({})
    assert config == Config()
    assert "workers = 4" in dump_config(config)


def test_resolved_config_round_trips(tiny):
    config = validate(merged(tiny, {"strategy": {"kind": "easgd"}}))
    again = validate(__import__("tomllib").loads(dump_config(config)))
    assert again == config
    assert again.strategy.elasticity == pytest.approx(0.45)  # 0.9 / 2 workers, written out


def test_overrides_parse_toml_values_and_nest():
    assert parse_override("cluster.workers=8") == (["cluster", "workers"], 8)
    assert parse_override("cluster.fabric=eth-10g") == (["cluster", "fabric"], "eth-10g")
    assert parse_override('sweep."strategy.kind"=["asp"]')[1] == ["asp"]
    data = apply_overrides({"cluster": {"workers": 2}}, ["cluster.workers=3", "run.seed=7"])
    assert data == {"cluster": {"workers": 3}, "run": {"seed": 7}}


def test_override_is_validated_like_the_file(tmp_path, tiny, write_toml):
    path = write_toml(tmp_path / "exp.toml", tiny)
    with pytest.raises(UserError, match="cluster.workers"):
        load_config(path, ["cluster.workers=-1"])
    with pytest.raises(UserError, match="expected KEY=VALUE"):
        load_config(path, ["cluster.workers"])


@pytest.mark.parametrize("text, message", [("[cluster\nworkers=", "not valid TOML"),
                                           (None, "no such config file")])
def test_unreadable_files_exit_2(tmp_path, capsys, text, message):
    path = tmp_path / "exp.toml"
    if text is not None:
        path.write_text(text)
    assert main(["run", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_readme_config_reference_is_generated_from_the_schema():
    from sim.docs import BEGIN, END, README, config_reference

    text = README.read_text()
    assert f"{BEGIN}\n{config_reference()}{END}" in text, "run `make docs`"


def test_oversubscription_under_one_leaf_is_said_to_have_no_effect(tmp_path, capsys):
    from sim.training.config_warnings import config_warnings

    def warnings(**cluster):
        return config_warnings(validate({"cluster": {"workers": 8, **cluster}}))

    (line,) = warnings(topology="leaf-spine", oversubscription=3.0)
    assert "oversubscription = 3 has no effect" in line and "all 8 hosts" in line
    assert warnings(topology="leaf-spine", oversubscription=3.0, hosts_per_leaf=4) == []
    assert warnings(topology="leaf-spine") == [] and warnings() == []
    config = tmp_path / "c.toml"
    config.write_text('[cluster]\ntopology = "fat-tree"\noversubscription = 2.0\n'
                      '[run]\niterations = 3\n')
    assert main(["run", str(config), "--out", str(tmp_path / "run")]) == 0
    assert "warning: cluster.oversubscription = 2 has no effect" in capsys.readouterr().err


def test_shards_without_parameter_servers_are_said_to_have_no_effect():
    from sim.training.config_warnings import config_warnings

    def warnings(kind):
        return config_warnings(validate({"cluster": {"shard_by": "round-robin"},
                                         "strategy": {"kind": kind}}))

    (line,) = warnings("bsp")
    assert line.startswith("cluster.shard_by = 'round-robin' has no effect") and "'bsp'" in line
    assert warnings("bsp-ps") == [] and warnings("asp") == []
    (line,) = config_warnings(validate({
        "cluster": {"shard_by": "least-loaded", "servers": 2}, "strategy": {"kind": "bsp-ps"},
        "embeddings": {"placement": "ps"}, "workload": {"model": "wide-deep",
                                                        "dataset": "ctr-synthetic"}}))
    assert "'wide-deep' with its tables on the servers" in line


def test_set_none_removes_an_optional_key_and_only_an_optional_one(tmp_path):
    """``--set KEY=none`` gives an optional key (default None) its default back, which TOML
    cannot write; on other keys "none" stays a value (strategy.compression = "none")."""
    data = {"run": {"time_limit_s": 0.003, "iterations": 5}, "strategy": {"compression": "topk"}}
    done = apply_overrides(data, ["run.time_limit_s=none", "strategy.compression=none"])
    assert done == {"run": {"iterations": 5}, "strategy": {"compression": "none"}}
    assert data["run"]["time_limit_s"] == 0.003  # the input is not changed
    assert apply_overrides({}, ["run.samples=none"]) == {"run": {}}
    config = tmp_path / "c.toml"
    config.write_text("[run]\ntime_limit_s = 0.003\n")
    assert main(["run", str(config), "--out", str(tmp_path / "r"), "--set", "run.iterations=4",
                 "--set", "run.time_limit_s=none"]) == 0
    assert "time_limit_s" not in (tmp_path / "r" / "config.toml").read_text()


def test_a_setting_some_sweep_points_use_is_not_warned_about(tmp_path, capsys):
    """The transports experiment sets wide-deep's embedding placement and sweeps the model:
    the placement is used at its wide-deep points, so neither the sweep nor `sim run` of its
    base point (logistic regression) warns; a placement no point uses is warned about
    (issue 47)."""
    from sim.sweep.grid import load_sweep

    config = tmp_path / "c.toml"
    base = ('[embeddings]\nplacement = "ps"\n[run]\niterations = 2\n'
            '[strategy]\nkind = "bsp-ps"\n[workload]\nfields = 2\nvocab = 20\n')
    config.write_text(base + '[sweep]\n"workload.model,workload.dataset" = '
                      '[["logreg", "gaussian"], ["wide-deep", "ctr-synthetic"]]\n')
    assert load_sweep(config).warnings == []
    assert main(["run", str(config), "--out", str(tmp_path / "run")]) == 0
    assert "warning" not in capsys.readouterr().err
    config.write_text(base + '[sweep]\n"cluster.workers" = [2, 4]\n')
    (line,) = load_sweep(config).warnings
    assert line.startswith("embeddings.placement has no effect")


def test_a_transport_that_changes_nothing_is_said_once_in_the_summary(tmp_path):
    """On roce-100g with a calibrated host, MPI's stack costs what RDMA verbs cost, so only
    one-sided pulls could tell the transports apart. bsp (no server) and bsp-ps (a held pull
    request, two-sided by design) give the same figures over either, and their summaries say
    so in `notes`; asp, whose pulls RDMA reads one-sidedly, differs and says nothing
    (issue 47, item 4)."""
    def run(kind, transport):
        out = tmp_path / f"{kind}-{transport}"
        config = tmp_path / "c.toml"
        config.write_text(f'[cluster]\nworkers = 3\nfabric = "roce-100g"\nhost = "epyc-core"\n'
                          f'transport = "{transport}"\n[strategy]\nkind = "{kind}"\n'
                          '[run]\niterations = 6\n')
        assert main(["run", str(config), "--out", str(out)]) == 0
        summary = json.loads((out / "summary.json").read_text())
        return {k: v for k, v in summary.items() if k not in ("wall_s", "transport")}

    for kind, why in [("bsp", "'bsp' pulls from no parameter server"),
                      ("bsp-ps", "'bsp-ps''s pull is a request each shard holds until the "
                                 "step closes and then answers, two-sided by design")]:
        over_mpi, over_rdma = run(kind, "mpi"), run(kind, "rdma")
        assert over_mpi.pop("notes") == [
            "cluster.transport = 'mpi' costs what 'rdma' costs on fabric 'roce-100g' with "
            "host 'epyc-core': this run's results equal a run over 'rdma'"]
        one_sided, equal = over_rdma.pop("notes")
        assert over_mpi == over_rdma
        assert one_sided.startswith(f"cluster.transport = 'rdma': its one-sided pulls have "
                                    f"no effect: {why}")
        assert equal.endswith("this run's results equal a run over 'mpi'")
    asp_mpi, asp_rdma = run("asp", "mpi"), run("asp", "rdma")
    assert "notes" not in asp_mpi and "notes" not in asp_rdma
    assert asp_mpi["sim_time_s"] != asp_rdma["sim_time_s"]  # a shard answers MPI's pulls


def test_a_custom_transport_equal_to_its_base_is_named():
    from sim.training.config_warnings import config_warnings

    same = validate({"cluster": {"transport": {"base": "grpc"}, "host": "epyc-core"}})
    assert config_warnings(same) == ["cluster.transport = 'grpc+custom' costs what 'grpc' "
                                     "costs on fabric 'ib-hdr' with host 'epyc-core': this "
                                     "run's results equal a run over 'grpc'"]
    wider = validate({"cluster": {"transport": {"base": "grpc", "window_bytes": 4194304}}})
    assert config_warnings(wider) == []
