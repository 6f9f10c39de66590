"""The committed accuracy files are what the code computes from the committed raw measurements, byte for byte.

The campaigns: the one the simulator's terms were built on (docs/accuracy/), and the three frozen-model campaigns
(docs/accuracy/frozen/; docs/accuracy/exchange/ for the runtime's reduce_scatter exchange; docs/accuracy/frozen-3x2x2/
after coll/han's binomial broadcast), whose summaries must also show that the code at hand predicts exactly what the
frozen model predicted before the measurement.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ["docs/accuracy", "docs/accuracy/frozen", "docs/accuracy/exchange", "docs/accuracy/frozen-3x2x2", "docs/accuracy/frozen-6x2"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_summary_and_report_are_rebuilt_from_the_raw_file_exactly(folder, tmp_path):
    report, summary = tmp_path / "report.json", tmp_path / "summary.json"
    done = subprocess.run([sys.executable, "-m", "scripts.accuracy", "--from-raw", f"{folder}/raw.json", "--out", str(report),
                           "--summary", str(summary)], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert summary.read_bytes() == (ROOT / folder / "summary.json").read_bytes()
    assert report.read_bytes() == (ROOT / folder / "report.json").read_bytes()


def test_the_frozen_campaign_judges_the_model_it_froze():
    doc = json.loads((ROOT / "docs/accuracy/frozen/summary.json").read_text())
    raw = json.loads((ROOT / "docs/accuracy/frozen/raw.json").read_text())
    assert doc["model"]["commit"] == raw["model"]["commit"] and doc["frozen_check"]["identical"] is True
    assert doc["frozen_check"]["programs"] == sum(len(c["results"]) for tb in raw["testbeds"] for c in tb["combos"])
    # the model's commit precedes the measurement
    from datetime import datetime
    assert datetime.fromisoformat(doc["model"]["commit_time"]) <= datetime.fromisoformat(raw["started"].replace("Z", "+00:00"))
    # a shape and collectives the simulator's terms were not built on
    built_on = json.loads((ROOT / "docs/accuracy/raw.json").read_text())
    assert {tb["testbed"]["name"] for tb in raw["testbeds"]}.isdisjoint({tb["testbed"]["name"] for tb in built_on["testbeds"]})
    assert set(raw["suite"]["collectives"]).isdisjoint(built_on["suite"]["collectives"])


def test_the_exchange_campaign_judges_the_model_it_froze_on_the_runtimes_exchange():
    """docs/accuracy/exchange/: the main campaign's reduce_scatter combos on its 1 Gbit/s testbeds, measured after the
    runtime began running reduce_scatter steps as an exchange, with the model frozen first."""
    doc = json.loads((ROOT / "docs/accuracy/exchange/summary.json").read_text())
    raw = json.loads((ROOT / "docs/accuracy/exchange/raw.json").read_text())
    assert doc["model"]["commit"] == raw["model"]["commit"] and doc["frozen_check"]["identical"] is True
    assert doc["frozen_check"]["programs"] == sum(len(c["results"]) for tb in raw["testbeds"] for c in tb["combos"])
    from datetime import datetime
    assert datetime.fromisoformat(doc["model"]["commit_time"]) <= datetime.fromisoformat(raw["started"].replace("Z", "+00:00"))
    assert raw["suite"]["collectives"] == ["reduce_scatter"]
    # the runs recorded the exchange; the main campaign's are read as the library's (scripts/accuracy/cases.as_measured)
    assert all(tb["hierarchy"]["reduce_scatter"] == "exchange" for tb in raw["testbeds"])
    assert all(r["wrong"] == 0 for tb in raw["testbeds"] for c in tb["combos"] for r in c["results"])


def test_the_second_frozen_campaign_judges_the_binomial_broadcast_on_a_shape_no_campaign_measured():
    """docs/accuracy/frozen-3x2x2/: the model frozen at a commit that prices coll/han's broadcast as libnbc's binomial
    tree (its calibrated hierarchy says so), before the first timed run; a testbed shape none of the earlier campaigns
    measured; every prediction recomputed identically; every output checked."""
    folder = ROOT / "docs/accuracy/frozen-3x2x2"
    doc = json.loads((folder / "summary.json").read_text())
    raw = json.loads((folder / "raw.json").read_text())
    assert doc["model"]["commit"] == raw["model"]["commit"] and doc["frozen_check"]["identical"] is True
    assert doc["frozen_check"]["programs"] == sum(len(c["results"]) for tb in raw["testbeds"] for c in tb["combos"])
    from datetime import datetime
    assert datetime.fromisoformat(doc["model"]["commit_time"]) <= datetime.fromisoformat(raw["started"].replace("Z", "+00:00"))
    assert all(tb["hierarchy"]["han_broadcast"] == "binomial" for tb in raw["testbeds"])
    earlier = set()
    for other in ("docs/accuracy", "docs/accuracy/frozen", "docs/accuracy/exchange", "docs/accuracy/pipelined"):
        earlier |= {tb["testbed"]["name"] for tb in json.loads((ROOT / other / "raw.json").read_text())["testbeds"]}
    shapes = lambda names: {n.split("-")[0] for n in names}
    assert shapes(tb["testbed"]["name"] for tb in raw["testbeds"]).isdisjoint(shapes(earlier))
    assert all(r["wrong"] == 0 for tb in raw["testbeds"] for c in tb["combos"] for r in c["results"])


def test_the_third_frozen_campaign_judges_coll_tuneds_rules_on_a_shape_and_collectives_no_campaign_measured():
    """docs/accuracy/frozen-6x2/: the model frozen at a commit that prices coll/tuned's all_reduce by Open MPI's fixed
    rules (its calibrated hierarchy says so), before the first timed run; a testbed shape and a collective set none
    of the earlier campaigns measured; every prediction recomputed identically; every output checked; the tuner
    judged on at least 40 re-measured cases."""
    folder = ROOT / "docs/accuracy/frozen-6x2"
    doc = json.loads((folder / "summary.json").read_text())
    raw = json.loads((folder / "raw.json").read_text())
    assert doc["model"]["commit"] == raw["model"]["commit"] and doc["frozen_check"]["identical"] is True
    assert doc["frozen_check"]["programs"] == sum(len(c["results"]) for tb in raw["testbeds"] for c in tb["combos"])
    from datetime import datetime
    assert datetime.fromisoformat(doc["model"]["commit_time"]) <= datetime.fromisoformat(raw["started"].replace("Z", "+00:00"))
    assert all(tb["hierarchy"]["tuned_all_reduce"] == "rules" for tb in raw["testbeds"])
    earlier, sets = set(), []
    for other in ("docs/accuracy", "docs/accuracy/frozen", "docs/accuracy/exchange", "docs/accuracy/pipelined",
                  "docs/accuracy/frozen-3x2x2"):
        before = json.loads((ROOT / other / "raw.json").read_text())
        earlier |= {tb["testbed"]["name"] for tb in before["testbeds"]}
        sets.append(set(before["suite"]["collectives"]))
    shapes = lambda names: {n.split("-")[0] for n in names}
    assert shapes(tb["testbed"]["name"] for tb in raw["testbeds"]).isdisjoint(shapes(earlier))
    assert set(raw["suite"]["collectives"]) not in sets
    assert doc["tuner_oos_cases"] >= 40
    assert all(r["wrong"] == 0 for tb in raw["testbeds"] for c in tb["combos"] for r in c["results"])


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
    ("README.md", ["docs/accuracy/frozen/summary.json", "docs/accuracy/summary.json"]),
    ("docs/accuracy/frozen/README.md", ["docs/accuracy/frozen/summary.json"]),
    ("docs/accuracy/README.md", ["docs/accuracy/summary.json"]),
    ("docs/accuracy/pipelined/README.md", ["docs/accuracy/pipelined/summary.json"]),
    ("docs/accuracy/exchange/README.md", ["docs/accuracy/exchange/summary.json"]),
    ("docs/accuracy/frozen-3x2x2/README.md", ["docs/accuracy/frozen-3x2x2/summary.json", "docs/accuracy/frozen/summary.json"]),
    ("docs/accuracy/frozen-6x2/README.md", ["docs/accuracy/frozen-6x2/summary.json"]),
])
def test_the_docs_show_the_summaries_figures(doc, summaries):
    """Every accuracy table in the docs is the table scripts.accuracy.table makes from the committed summary."""
    text = (ROOT / doc).read_text()
    for summary in summaries:
        assert _table(summary) in text, f"{doc}: the table of {summary} is not the one the summary gives"


def test_the_breakdowns_in_the_docs_are_the_reports():
    text = (ROOT / "docs/accuracy/README.md").read_text()
    assert _table("--breakdowns", "docs/accuracy/report.json") in text
