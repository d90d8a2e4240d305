"""The paper-file loader: a good file loads; each mistake is one line naming the file and
the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import UserError
from sim.papers.paper_file import load_paper

TINY = Path(__file__).parent / "data" / "tiny-2024.toml"
PAPERS = Path(__file__).resolve().parents[2] / "experiments" / "papers"


def test_the_tiny_file_loads():
    paper = load_paper(TINY)
    assert paper.name == "tiny-2024"
    assert [f.id for f in paper.figures] == ["one-gpu", "two-gpus", "two-vs-one",
                                             "four-gpus-efficiency"]
    assert paper.calibration.parameter == "compute.time_s"
    assert paper.calibration.bracket == (0.001, 1.0)
    assert paper.figure("four-gpus-efficiency").relative_to == "one-gpu"
    assert paper.figure("one-gpu").overrides == {"cluster.workers": 1}


@pytest.mark.parametrize("path", sorted(PAPERS.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_paper_file_loads(path):
    paper = load_paper(path)
    assert paper.figures
    assert paper.base["workload"]["numerics"] is False


def _broken(tmp_path: Path, old: str, new: str) -> Path:
    text = TINY.read_text()
    assert old in text
    path = tmp_path / "broken-2024.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("old, new, message", [
    ('year = 2024', 'year = "2024"', "paper.year: expected an integer"),
    ('title = "A tiny test paper"\n', '', "paper.title: missing"),
    ('quantity = "step_s"', 'quantity = "stepp_s"', "figure[0].quantity: unknown 'stepp_s'"),
    ('published = 0.05', 'published = -1', "figure[0].published: expected a positive"),
    ('relative_to = "one-gpu"', 'relative_to = "nine-gpus"', "figure[2].relative_to: no row"),
    ('relative_to = "one-gpu"\n', '', "figure[2].relative_to: step_ratio is a ratio"),
    ('id = "two-gpus"', 'id = "one-gpu"', "figure[1].id: 'one-gpu' repeats figure[0]"),
    ('row = "one-gpu"', 'row = "none"', "calibration.row: no row 'none'"),
    ('row = "one-gpu"', 'row = "four-gpus-efficiency"', "calibration.row: "),
    ('bracket = [0.001, 1.0]', 'bracket = [1.0, 0.001]', "calibration.bracket: expected"),
    ('source = "Table 0"', 'sorce = "Table 0"', "figure[0].sorce: unknown key"),
    ('[base.cluster]', '[bass.cluster]', "a paper file.bass: unknown key"),
    ('numerics = false', 'numerics = true', "base.workload.numerics: must be false"),
    ('set = { "cluster.workers" = 1 }', 'set = { "workload.numerics" = true }',
     "figure[0].set: rows are timing only"),
])
def test_each_mistake_names_the_file_and_the_key(tmp_path, old, new, message):
    with pytest.raises(UserError) as caught:
        load_paper(_broken(tmp_path, old, new))
    text = str(caught.value)
    assert text.startswith("broken-2024.toml: ")
    assert message in text
    assert "\n" not in text


def test_a_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such config file"):
        load_paper(tmp_path / "nope.toml")


def test_a_row_without_published_is_a_reference_row(tmp_path):
    paper = load_paper(_broken(tmp_path, "published = 0.06\n", ""))
    assert paper.figure("two-gpus").published is None


def test_the_calibration_row_must_have_a_published_value(tmp_path):
    with pytest.raises(UserError, match="calibration.row: 'one-gpu' has no published value"):
        load_paper(_broken(tmp_path, "published = 0.05\n", ""))
