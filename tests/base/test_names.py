"""Names a user types: experiment names wherever a config path goes, and "did you mean"
for misspelled config keys (in files and --set), registry names and experiment names:
each exits 2 with one line that names the intended spelling."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from sim.cli import main
from sim.commands.list import description
from sim.config import Config
from sim.errors import UserError
from sim.names import close_match, config_path, experiments, unknown

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = {name: field.annotation for name, field in Config.model_fields.items()
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)}
# every key of every section, long enough that a one-letter slip has one closest key
KEYS = sorted((section, key) for section, model in SECTIONS.items()
              for key in model.model_fields if len(key) >= 3)


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The stderr of ``python -m sim ARGV``, asserting exit status 2 and a single line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_unknown_suggests_the_closest_name_and_lists_them_all():
    known = ["bsp", "bsp-ps", "asp", "ssp"]
    assert unknown("strategy", "sspp", known) == (
        "unknown strategy 'sspp' (did you mean 'ssp'?); expected one of bsp, bsp-ps, asp, ssp")
    assert unknown("strategy", "hogwild", known) == (
        "unknown strategy 'hogwild'; expected one of bsp, bsp-ps, asp, ssp")
    assert close_match("ib-hd", ["eth-10g", "ib-hdr", "ib-ndr"]) == "ib-hdr"


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(KEYS), st.data())
def test_a_misspelled_set_key_names_the_key_meant(capsys, section_key, data):
    section, key = section_key
    i = data.draw(st.integers(0, len(key) - 1), label="position")
    dropped, doubled = key[:i] + key[i + 1:], key[:i] + key[i] + key[i:]
    typo = data.draw(st.sampled_from([dropped, doubled]), label="typo")
    if typo in SECTIONS[section].model_fields:  # seeds -> seed: a real key
        return
    err = one_line_error(capsys, ["run", "quickstart", "--set", f"{section}.{typo}=1"])
    assert f"--set '{section}.{typo}=1'" in err
    assert f"did you mean {section}.{key}?" in err


# (config table, the message's part naming the mistake and the suggestion)
MISSPELLED_IN_FILE = [
    ({"strategy": {"stalenes": 3}}, "strategy.stalenes: unknown key (did you mean "
                                    "strategy.staleness?)"),
    ({"strategyy": {"kind": "ssp"}}, "strategyy: unknown key (did you mean strategy?)"),
    ({"compute": {"slowdowns": [{"worker": 1, "facter": 2.0}]}},
     "compute.slowdowns.0.facter: unknown key (did you mean compute.slowdowns.0.factor?)"),
    ({"strategy": {"bogus_thing": 1}}, "strategy.bogus_thing: unknown key; strategy has kind, "
                                       "staleness,"),
    ({"strategy": {"kind": "sspp"}}, "unknown kind 'sspp' (did you mean 'ssp'?)"),
    ({"strategy": {"collective": "rng"}}, "unknown collective 'rng' (did you mean 'ring'?)"),
    ({"strategy": {"compression": "topK"}}, "got 'topK' (did you mean 'topk'?)"),
    ({"cluster": {"fabric": "ib-hd"}}, "unknown fabric 'ib-hd' (did you mean 'ib-hdr'?)"),
    ({"cluster": {"topology": "leafspine"}},
     "unknown topology 'leafspine' (did you mean 'leaf-spine'?)"),
    ({"cluster": {"host": "epyc-cor"}}, "unknown host profile 'epyc-cor' (did you mean "
                                        "'epyc-core'?)"),
    ({"cluster": {"network": "flwo"}}, "got 'flwo' (did you mean 'flow'?)"),
    ({"workload": {"model": "mpl"}}, "unknown model 'mpl' (did you mean 'mlp'?)"),
    ({"workload": {"profile": "inception"}}, "workload.profile: unknown profile 'inception' "
                                             "(did you mean 'inception-v3'?); expected one of "),
    ({"workload": {"dataset": "gausian"}}, "unknown dataset 'gausian' (did you mean "
                                           "'gaussian'?)"),
    ({"compute": {"device": "h10"}}, "unknown device 'h10' (did you mean 'h100'?)"),
]


@pytest.mark.parametrize("table, message", MISSPELLED_IN_FILE,
                         ids=[m.split(":")[0][:30] for _, m in MISSPELLED_IN_FILE])
def test_a_misspelled_key_or_name_in_a_file_exits_2_with_a_suggestion(tmp_path, capsys, table,
                                                                     message):
    path = tmp_path / "exp.toml"
    path.write_text(tomli_w.dumps(table))
    err = one_line_error(capsys, ["run", str(path), "--out", str(tmp_path / "run")])
    assert err.startswith(f"error: {path}: ") and message in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, message", [
    (["run", "quickstrat"], "quickstrat: neither a config file nor an experiment (did you "
                            "mean 'quickstart'?); experiments: compression, "),
    (["sweep", "sync-async-sp"], "(did you mean 'sync-async-ssp'?)"),
    (["real", "stragglrs"], "(did you mean 'stragglers'?)"),
    (["list", "experimnts"], "unknown list 'experimnts' (did you mean 'experiments'?)"),
    (["calibrate", "--out", "unused", "--collective", "rign"],
     "--collective: unknown allreduce 'rign' (did you mean 'ring'?)"),
    (["calibrate", "--out", "unused", "--host-repeats", "0"],
     "--host-repeats must be at least 1, got 0"),
    (["run", "quickstart", "--set", "cluster.fabric=eth-10"],
     "unknown fabric 'eth-10' (did you mean 'eth-10g'?)"),
])
def test_misspelled_names_on_the_command_line_exit_2_with_a_suggestion(capsys, argv, message):
    assert message in one_line_error(capsys, argv)


def test_an_experiment_name_resolves_to_its_config_as_sim_list_prints_it(tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./experiments: the checkout's are found
    quickstart = ROOT / "experiments" / "quickstart.toml"
    assert config_path("quickstart") == quickstart
    assert config_path("quickstart.toml") == quickstart
    assert config_path("validation/base") == ROOT / "experiments" / "validation" / "base.toml"
    # the top level's and the subfolders' run configs; not the matrix, not the papers' files
    assert set(experiments()) == {p.stem for p in (ROOT / "experiments").glob("*.toml")} | {
        "validation/base", "scale/3072-gpus"}
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "mine.toml").write_text("[cluster]\nworkers = 2\n")
    (tmp_path / "quickstart.toml").write_text("")  # a file given by its path comes first
    assert config_path("mine") == Path("experiments") / "mine.toml"
    assert config_path("quickstart.toml") == Path("quickstart.toml")
    assert config_path(str(tmp_path / "none.toml")) == tmp_path / "none.toml"  # read fails
    with pytest.raises(UserError, match="did you mean 'mine'"):
        config_path("mien")


def test_run_and_sweep_accept_a_name_that_sim_list_prints(tmp_path, capsys):
    assert main(["list", "experiments"]) == 0
    assert "\n  quickstart\n" in capsys.readouterr().out
    out = tmp_path / "run"
    assert main(["run", "quickstart", "--out", str(out), "--set", "run.iterations=2",
                 "--set", "run.eval_every=1"]) == 0
    assert (out / "summary.json").is_file()
    assert "workers = 8" in (out / "config.toml").read_text()  # quickstart's, not a default


def test_list_experiments_prints_each_whole_description(capsys):
    assert main(["list", "experiments"]) == 0
    printed = capsys.readouterr().out
    flat = " ".join(printed.split())
    for name, path in experiments().items():
        text = description(path)
        assert text.count(" ") > 5 and " ".join(text.split()) in flat, name
    # the last sentence of a five-line description, which a one-liner cut off
    assert "where asp pulls every time." in flat
    assert max(map(len, printed.splitlines())) <= 96


def test_a_misspelled_sweep_key_names_the_key_meant(tmp_path):
    from sim.sweep.grid import load_sweep

    path = tmp_path / "sweep.toml"
    path.write_text('[sweep]\n"strategy.stalenes" = [1, 2]\n')
    with pytest.raises(UserError, match=r"sweep\.strategy\.stalenes: unknown key \(did you "
                                        r"mean strategy\.staleness\?\)"):
        load_sweep(path)
