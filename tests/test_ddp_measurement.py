"""docs/measurements/ddp.md and ddp-summary.json against the committed raw data of issue 31's measurement."""

import json
from pathlib import Path

from scripts import bench_ddp

DOCS = Path(__file__).resolve().parent.parent / "docs" / "measurements"

CASES = ("4x2-1gbit", "2x2x2-1gbit-400mbit", "3x2x2-1gbit-400mbit")  # in the order ddp.md's command names them


def test_ddp_md_and_its_summary_are_rebuilt_from_the_raw_data(tmp_path):
    """docs/measurements/ddp.md's table and notes, and ddp-summary.json, are what --from-raw makes of the committed
    raw files, byte for byte; the model-accuracy table is what scripts.ddp_model_accuracy makes of the client-tuned
    plans."""
    from scripts import ddp_model_accuracy

    doc = (DOCS / "ddp.md").read_text()
    md, summary = tmp_path / "ddp.md", tmp_path / "summary.json"
    raws = [str(DOCS / "ddp" / "gloo-rs" / f"{case}.raw.json") for case in CASES]
    assert bench_ddp.main(["--from-raw", *raws, "--markdown", str(md), "--summary", str(summary)]) == 0
    assert md.read_text().strip() in doc
    assert summary.read_text() == (DOCS / "ddp-summary.json").read_text()
    accuracy = tmp_path / "accuracy.md"
    tuned = [str(DOCS / "ddp" / "gloo-rs" / f"{case}.client-tuned.json") for case in CASES]
    assert ddp_model_accuracy.main([*tuned, "--markdown", str(accuracy)]) == 0
    assert accuracy.read_text().strip() in doc
    flat = " ".join(doc.replace("\\\n", " ").split())
    assert " ".join(f"docs/measurements/ddp/gloo-rs/{case}.raw.json" for case in CASES) in flat


def test_the_committed_measurement_meets_what_ddp_md_says_of_it():
    """The figures ddp.md's verdicts rest on: every run's parameters within the tolerance, a commit and times in
    every raw file, and the count of cases where the hook is slower than the default beyond noise."""
    summary = json.loads((DOCS / "ddp-summary.json").read_text())
    assert summary["params_check"] == "elementwise" and summary["params_match"]
    assert [c["case"] for c in summary["cases"]] == list(CASES)
    for case in summary["cases"]:
        assert case["commit"] and case["measured_at"] and case["guard"] == "on"
        assert max(case["params_tol_share"].values()) < 0.1  # every variant's largest difference, in tolerances
    slower = sum(c["hook_vs_default"]["client"] == "slower beyond noise" for c in summary["cases"])
    assert summary["cases_slower_beyond_noise"] == slower


def test_the_model_accuracy_tool_refuses_a_plan_the_client_tuner_did_not_write_in_one_line(capsys):
    from scripts import ddp_model_accuracy

    path = DOCS / "ddp" / "4x2-1gbit.tuned.json"  # tuned with Open MPI, not by the client tuner
    assert ddp_model_accuracy.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("not a client-tuned plan (not written by p2synth tune --client torch)\n")
