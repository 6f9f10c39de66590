"""The committed accuracy files are what the code computes from the committed raw measurements, byte for byte.

The campaigns: the one the simulator's terms were built on (docs/accuracy/), and the frozen-model campaigns
(docs/accuracy/frozen/; docs/accuracy/exchange/ for the runtime's reduce_scatter exchange; docs/accuracy/frozen-3x2x2/
after coll/han's binomial broadcast; docs/accuracy/frozen-6x2/ after coll/tuned's all_reduce rules;
docs/accuracy/frozen-4x3/ after the two-way probe in rounds; docs/accuracy/frozen-2x2x3/ after coll/han's
all_gather), whose summaries must also show that the code at hand
predicts exactly what the frozen model predicted before the measurement.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ["docs/accuracy", "docs/accuracy/frozen", "docs/accuracy/exchange", "docs/accuracy/frozen-3x2x2", "docs/accuracy/frozen-6x2",
           "docs/accuracy/frozen-4x3", "docs/accuracy/frozen-2x2x3", "docs/accuracy/frozen-4x2x2", "docs/accuracy/frozen-2x4x2"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_summary_and_report_are_rebuilt_from_the_raw_file_exactly(folder, tmp_path):
    report, summary = tmp_path / "report.json", tmp_path / "summary.json"
    done = subprocess.run([sys.executable, "-m", "scripts.accuracy", "--from-raw", f"{folder}/raw.json", "--out", str(report),
                           "--summary", str(summary)], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert summary.read_bytes() == (ROOT / folder / "summary.json").read_bytes()
    assert report.read_bytes() == (ROOT / folder / "report.json").read_bytes()


def test_the_frozen_campaign_judges_the_model_it_froze():
    """docs/accuracy/frozen/: a shape, and collectives, that the simulator's terms were not built on."""
    _, raw = frozen_campaign("docs/accuracy/frozen")
    built_on = json.loads((ROOT / "docs/accuracy/raw.json").read_text())
    assert set(raw["suite"]["collectives"]).isdisjoint(built_on["suite"]["collectives"])


def test_the_fifth_frozen_campaign_judges_coll_hans_all_gather_and_the_tuner_on_40_cases():
    """docs/accuracy/frozen-2x2x3/: the model frozen at a commit that prices coll/han's all_gather as HAN runs it
    (its calibrated hierarchy says so); the tuner judged on at least 40 re-measured cases."""
    doc, raw = frozen_campaign("docs/accuracy/frozen-2x2x3")
    assert all(tb["hierarchy"]["han_all_gather"] == "hierarchical" for tb in raw["testbeds"])
    assert doc["tuner_oos_cases"] >= 40


def test_the_sixth_frozen_campaign_judges_the_model_unchanged_since_the_fifth_and_the_tuner_on_40_cases():
    """docs/accuracy/frozen-4x2x2/: 16 ranks in 4 racks, all_reduce and broadcast at 4 MiB; the model frozen at a commit
    whose code predicts every earlier frozen campaign's programs as their frozen models did (their summaries' frozen
    checks, rebuilt above with the code at hand); the tuner judged on at least 40 re-measured cases."""
    doc, raw = frozen_campaign("docs/accuracy/frozen-4x2x2")
    assert [tb["testbed"]["name"] for tb in raw["testbeds"]] == ["4x2x2-1gbit-400mbit"]
    assert all(tb["hierarchy"]["han_broadcast"] == "binomial" and tb["hierarchy"]["tuned_all_reduce"] == "rules"
               for tb in raw["testbeds"])
    assert doc["tuner_oos_cases"] >= 40


def test_the_seventh_frozen_campaign_judges_coll_tuneds_trees_and_round_order_on_two_new_shapes():
    """docs/accuracy/frozen-2x4x2/ (issue 47, item 2): the model frozen at a commit that prices coll/tuned's broadcast
    and reduce by Open MPI 5's fixed decision and Rabenseifner's rounds in rank order (the calibrated hierarchies
    say so), on 2 racks x 4 nodes x 2 ranks, all_reduce, broadcast and reduce; it meets issue 47's three targets on
    the predictions recorded before timing. The suite's second testbed (2 nodes x 4 ranks) was not measured."""
    doc, raw = frozen_campaign("docs/accuracy/frozen-2x4x2")
    assert [tb["testbed"]["name"] for tb in raw["testbeds"]] == ["2x4x2-1gbit-400mbit"]
    assert [tb["name"] for tb in raw["suite"]["testbeds"]] == ["2x4x2-1gbit-400mbit", "2x4-1gbit"]
    recorded = doc["recorded_before_timing"]
    assert recorded["cases"] == 21 and round(recorded["pick_loss_5pct"] * 21) == 1
    assert recorded["top1_strict"] - doc["top1_strict_always_default"] >= 0.25 and recorded["median_rel_error"] <= 0.15
    assert all(tb["hierarchy"]["tuned_trees"] == "rules" and tb["hierarchy"]["tuned_all_reduce"] == "distance-doubling"
               for tb in raw["testbeds"])
    assert raw["suite"]["collectives"] == ["all_reduce", "broadcast", "reduce"]


def test_the_exchange_campaign_judges_the_model_it_froze_on_the_runtimes_exchange():
    """docs/accuracy/exchange/: the main campaign's reduce_scatter combos on its 1 Gbit/s testbeds, measured after the
    runtime began running reduce_scatter steps as an exchange, with the model frozen first."""
    _, raw = frozen_record("docs/accuracy/exchange")
    assert raw["suite"]["collectives"] == ["reduce_scatter"]
    # the runs recorded the exchange; the main campaign's are read as the library's (scripts/accuracy/cases.as_measured)
    assert all(tb["hierarchy"]["reduce_scatter"] == "exchange" for tb in raw["testbeds"])


CAMPAIGNS = ("docs/accuracy", "docs/accuracy/frozen", "docs/accuracy/exchange", "docs/accuracy/pipelined",
             "docs/accuracy/frozen-3x2x2", "docs/accuracy/frozen-6x2", "docs/accuracy/frozen-4x3",
             "docs/accuracy/frozen-2x2x3", "docs/accuracy/frozen-4x2x2", "docs/accuracy/frozen-2x4x2")  # in order


def frozen_record(folder: str) -> tuple[dict, dict]:
    """The summary and raw file of the frozen campaign in `folder`, after what every frozen campaign must show: the
    model frozen at a commit made before the first timed run, every prediction recomputed identically, every output
    checked exact."""
    doc = json.loads((ROOT / folder / "summary.json").read_text())
    raw = json.loads((ROOT / folder / "raw.json").read_text())
    assert doc["model"]["commit"] == raw["model"]["commit"] and doc["frozen_check"]["identical"] is True
    assert doc["frozen_check"]["programs"] == sum(len(c["results"]) for tb in raw["testbeds"] for c in tb["combos"])
    from datetime import datetime
    assert datetime.fromisoformat(doc["model"]["commit_time"]) <= datetime.fromisoformat(raw["started"].replace("Z", "+00:00"))
    assert all(r["wrong"] == 0 for tb in raw["testbeds"] for c in tb["combos"] for r in c["results"])
    return doc, raw


def frozen_campaign(folder: str, new_collectives: bool = True) -> tuple[dict, dict]:
    """:func:`frozen_record`, on a testbed shape that no earlier campaign measured and (`new_collectives`) a collective
    set none measured together."""
    doc, raw = frozen_record(folder)
    earlier, sets = set(), []
    for other in CAMPAIGNS[:CAMPAIGNS.index(folder)]:
        before = json.loads((ROOT / other / "raw.json").read_text())
        earlier |= {tb["testbed"]["name"] for tb in before["testbeds"]}
        sets.append(set(before["suite"]["collectives"]))
    shapes = lambda names: {n.split("-")[0] for n in names}
    assert shapes(tb["testbed"]["name"] for tb in raw["testbeds"]).isdisjoint(shapes(earlier))
    assert not new_collectives or set(raw["suite"]["collectives"]) not in sets
    return doc, raw


def test_the_second_frozen_campaign_judges_the_binomial_broadcast_on_a_shape_no_campaign_measured():
    """docs/accuracy/frozen-3x2x2/: the model frozen at a commit that prices coll/han's broadcast as libnbc's binomial
    tree (its calibrated hierarchy says so); all_reduce and reduce_scatter, as the main campaign measured, on a new
    shape."""
    _, raw = frozen_campaign("docs/accuracy/frozen-3x2x2", new_collectives=False)
    assert all(tb["hierarchy"]["han_broadcast"] == "binomial" for tb in raw["testbeds"])


def test_the_third_frozen_campaign_judges_coll_tuneds_rules_and_the_tuner_on_40_cases():
    """docs/accuracy/frozen-6x2/: the model frozen at a commit that prices coll/tuned's all_reduce by Open MPI's fixed
    rules (its calibrated hierarchy says so); the tuner judged on at least 40 re-measured cases."""
    doc, raw = frozen_campaign("docs/accuracy/frozen-6x2")
    assert all(tb["hierarchy"]["tuned_all_reduce"] == "rules" for tb in raw["testbeds"])
    assert doc["tuner_oos_cases"] >= 40


def test_the_fourth_frozen_campaign_judges_the_two_way_probe_in_rounds():
    """docs/accuracy/frozen-4x3/: calibrated with the two-way probe in 512 KiB rounds (its record says so)."""
    _, raw = frozen_campaign("docs/accuracy/frozen-4x3")
    duplex = [lv["duplex"] for tb in raw["testbeds"] for lv in tb["calibration"]["levels"] if "duplex" in lv]
    assert duplex and all(d["two_way_round_bytes"] == 512 << 10 for d in duplex)


def test_the_exchange_readme_shows_the_comparison_with_the_main_campaign():
    done = subprocess.run([sys.executable, "-m", "scripts.compare_campaigns", "docs/accuracy/raw.json",
                           "docs/accuracy/exchange/raw.json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in (ROOT / "docs/accuracy/exchange/README.md").read_text()


def _table(*args):
    done = subprocess.run([sys.executable, "-m", "scripts.accuracy.table", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("doc,summaries", [
    ("docs/accuracy/campaigns.md", ["docs/accuracy/frozen/summary.json", "docs/accuracy/summary.json"]),
    ("docs/accuracy/frozen/README.md", ["docs/accuracy/frozen/summary.json"]),
    ("docs/accuracy/README.md", ["docs/accuracy/summary.json"]),
    ("docs/accuracy/pipelined/README.md", ["docs/accuracy/pipelined/summary.json"]),
    ("docs/accuracy/exchange/README.md", ["docs/accuracy/exchange/summary.json"]),
    ("docs/accuracy/frozen-3x2x2/README.md", ["docs/accuracy/frozen-3x2x2/summary.json", "docs/accuracy/frozen/summary.json"]),
    ("docs/accuracy/frozen-6x2/README.md", ["docs/accuracy/frozen-6x2/summary.json"]),
    ("docs/accuracy/frozen-4x3/README.md", ["docs/accuracy/frozen-4x3/summary.json"]),
    ("docs/accuracy/frozen-2x2x3/README.md", ["docs/accuracy/frozen-2x2x3/summary.json"]),
    ("docs/accuracy/frozen-4x2x2/README.md", ["docs/accuracy/frozen-4x2x2/summary.json"]),
    ("docs/accuracy/frozen-2x4x2/README.md", ["docs/accuracy/frozen-2x4x2/summary.json"]),
])
def test_the_docs_show_the_summaries_figures(doc, summaries):
    """Every accuracy table in the docs is the table scripts.accuracy.table makes from the committed summary."""
    text = (ROOT / doc).read_text()
    for summary in summaries:
        assert _table(summary) in text, f"{doc}: the table of {summary} is not the one the summary gives"


def test_the_readmes_headline_figures_are_the_frozen_campaigns():
    """The README's one paragraph of accuracy figures says what docs/accuracy/frozen/summary.json says."""
    s = json.loads((ROOT / "docs/accuracy/frozen/summary.json").read_text())
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"measured-fastest program in {s['top1_strict']:.2f} of {s['cases']} held-out cases (always keeping the "
            f"default: {s['top1_strict_always_default']:.2f})") in readme
    left, cases = s["tuner_oos_left_default"], s["tuner_oos_cases"]
    assert s["tuner_oos_loss_5pct"] == 0 and (f"none of the {left} picks of `runtime.tune` that left the default "
                                               f"({cases - left} of {cases} kept it)") in readme
    assert "[docs/accuracy/campaigns.md](docs/accuracy/campaigns.md)" in readme


def test_the_breakdowns_in_the_docs_are_the_reports():
    text = (ROOT / "docs/accuracy/README.md").read_text()
    assert _table("--breakdowns", "docs/accuracy/report.json") in text


def test_the_sixth_campaigns_readme_shows_the_losing_picks_and_the_programs_by_kind():
    done = subprocess.run([sys.executable, "-m", "scripts.accuracy.by_kind", "docs/accuracy/frozen-4x2x2/raw.json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in (ROOT / "docs/accuracy/frozen-4x2x2/README.md").read_text()


def test_the_frozen_campaigns_headline_is_the_predictions_recorded_before_timing():
    """Issue 47: a frozen campaign's headline figures come from the predictions recorded before timing; the figures
    after the post-hoc fit stand beside them, named so. The sixth campaign's: strict top-1 23 of 39, error 0.154
    (the target missed), 7 of 39 picks more than 5% slower than the default, where the post-hoc fit gives 20 of 39,
    0.108 and 8 of 39."""
    doc = json.loads((ROOT / "docs/accuracy/frozen-4x2x2/summary.json").read_text())
    recorded = doc["recorded_before_timing"]
    assert doc["headline"].startswith("recorded_before_timing")
    assert recorded["cases"] == doc["cases"] == 39
    assert round(recorded["top1_strict"] * 39) == 23 and round(doc["top1_strict"] * 39) == 20
    assert round(recorded["median_rel_error"], 3) == 0.154 and round(doc["median_rel_error"], 3) == 0.108
    assert round(recorded["pick_loss_5pct"] * 39) == 7 and round(doc["pick_loss_5pct"] * 39) == 8
    table = _table("docs/accuracy/frozen-4x2x2/summary.json")
    assert table.startswith("|  | simulator, recorded before timing (headline) | simulator, post-hoc fit |")
    assert "| median relative error | 15% | 11% |" in table
    for folder in ("frozen", "frozen-3x2x2", "frozen-6x2", "frozen-4x3", "frozen-2x2x3", "exchange"):
        assert json.loads((ROOT / f"docs/accuracy/{folder}/summary.json").read_text())["recorded_before_timing"]
    main = json.loads((ROOT / "docs/accuracy/summary.json").read_text())  # measured before predictions were recorded
    assert main["recorded_before_timing"] is None and main["headline"].startswith("post hoc")


def test_the_reprice_table_in_the_simulator_doc_is_what_the_script_prints():
    """docs/simulator.md's issue-47 table: every recorded campaign scored under the coll/tuned prices before and now
    (``python -m scripts.accuracy.reprice``), rebuilt from the raw files."""
    from scripts.accuracy import reprice

    names = ["", "frozen", "frozen-3x2x2", "frozen-6x2", "frozen-4x3", "frozen-2x2x3", "frozen-4x2x2", "exchange"]
    raws = [ROOT / "docs/accuracy" / name / "raw.json" for name in names]  # the campaigns recorded before the change
    doc = (ROOT / "docs/simulator.md").read_text()
    shown = doc.split("<!-- reprice -->\n")[1].split("<!-- /reprice -->")[0].strip()
    assert reprice.table(raws).strip() == shown
