"""The validation report's error budget per activity and its ratios between cases, on
hand-made rows whose answers are worked out by hand."""

from __future__ import annotations

import pytest

from sim.validation import bias, ratios

KINDS = ["compute", "wire"]


def row(case: str, levels: dict, sim: float, real: float,
        activities: dict[str, tuple[float, float]] | None = None) -> dict:
    """A completed case: times per update (s), and per activity (sim, real) per update."""
    activities = activities or {k: (0.0, 0.0) for k in KINDS}
    breakdown = {"kinds": list(activities)}
    for kind, (s, r) in activities.items():
        breakdown[f"{kind}_s"] = {"per_update": {"sim": s, "real": r}}
    return {"case": case, "levels": levels,
            "report": {"iteration_s": {"sim": sim, "real": {"mean": real},
                                       "error": sim / real - 1},
                       "breakdown": breakdown}}


def test_contributions_split_a_case_error_by_activity_and_rest():
    # real 10 ms: compute 6 -> 5, wire 4 -> 2; simulated 8 ms: error -20% = -10% - 20% + 10%
    r = row("a", {}, 8e-3, 10e-3, {"compute": (5e-3, 6e-3), "wire": (2e-3, 4e-3)})
    parts = bias.contributions(r)
    assert parts["compute"] == pytest.approx(-0.1)
    assert parts["wire"] == pytest.approx(-0.2)
    assert parts["rest"] == pytest.approx(0.1)
    assert sum(parts.values()) == pytest.approx(-0.2)


def test_budget_means_add_up_to_the_mean_signed_error_and_count_signs():
    rows = [row("a", {}, 8e-3, 10e-3, {"compute": (5e-3, 6e-3), "wire": (2e-3, 4e-3)}),
            row("b", {}, 6e-3, 5e-3, {"compute": (3e-3, 2e-3), "wire": (3e-3, 3e-3)}),
            {"case": "failed", "error": "boom"}]
    b = bias.budget(rows)
    assert b["cases"] == 2 and b["below"] == 1
    assert b["mean_error"] == pytest.approx((-0.2 + 0.2) / 2)
    acts = b["activities"]
    assert acts["compute"]["mean"] == pytest.approx((-0.1 + 0.2) / 2)
    assert acts["wire"]["mean"] == pytest.approx(-0.1) and acts["wire"]["negative"] == 1
    assert acts["compute"]["mean_abs"] == pytest.approx(0.15)
    assert sum(a["mean"] for a in acts.values()) == pytest.approx(b["mean_error"])
    text = "\n".join(bias.lines(rows))
    assert "**+0.0%** (1/2 simulated faster" in text and "| wire | -10.0% | 1/2 |" in text


def test_budget_of_no_completed_case_writes_nothing():
    assert bias.lines([{"case": "x", "error": "boom"}]) == []


def test_pairs_differ_in_exactly_one_axis_and_compare_ratios():
    lv = lambda s, n: {"strategy": s, "network": n}  # noqa: E731
    rows = [row("asp-shm", lv("asp", "shm"), 1.0, 1.0),
            row("bsp-shm", lv("bsp", "shm"), 1.5, 2.0),   # real 2x, sim 1.5x: -25%
            row("asp-eth", lv("asp", "eth"), 2.0, 1.05),  # real +5%: not decisive
            row("bsp-eth", lv("bsp", "eth"), 1.0, 3.0)]   # vs bsp-shm: real 1.5, sim 0.667
    found = {(p["first"], p["second"]): p for p in ratios.pairs(rows)}
    # four one-axis pairs; asp-shm/bsp-eth and asp-eth/bsp-shm differ in two axes
    assert set(found) == {("asp-shm", "bsp-shm"), ("asp-eth", "bsp-eth"),
                          ("asp-eth", "asp-shm"), ("bsp-eth", "bsp-shm")}
    p = found[("asp-shm", "bsp-shm")]
    assert p["axis"] == "strategy" and p["levels"] == ("asp", "bsp")
    assert p["sim"] == 1.5 and p["real"] == 2.0 and p["error"] == pytest.approx(-0.25)
    assert p["decisive"] and p["same_order"]
    flipped = found[("bsp-eth", "bsp-shm")]
    assert flipped["real"] == pytest.approx(2 / 3) and flipped["sim"] == 1.5
    assert flipped["decisive"] and not flipped["same_order"]
    close = found[("asp-eth", "asp-shm")]
    assert not close["decisive"]  # 1.05 apart: the real runs do not rank it reliably
    s = ratios.summary(list(found.values()))
    assert s["pairs"] == 4 and s["decisive"] == 3 and s["ranked"] == 1  # asp-eth/bsp-eth flips too
    text = "\n".join(ratios.lines(rows))
    assert "bsp-eth vs bsp-shm (network eth -> shm)" in text


def test_ratio_error_is_the_same_size_either_way_round():
    a, b = row("a", {"x": 1}, 1.0, 1.0), row("b", {"x": 2}, 3.0, 2.0)
    (p,) = ratios.pairs([a, b])
    assert p["error"] == pytest.approx(0.5)
    assert 1 / (1 + p["error"]) - 1 == pytest.approx(-1 / 3)  # b over a
