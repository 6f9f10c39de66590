"""docs/measurements/ddp.md and its summaries against the committed raw data of issue 31's measurements."""

import json
from pathlib import Path

import pytest

from p2synth.runtime.stats import verdict_text
from scripts import bench_ddp

DOCS = Path(__file__).resolve().parent.parent / "docs" / "measurements"

CASES = ("4x2-1gbit", "2x2x2-1gbit-400mbit", "3x2x2-1gbit-400mbit")  # in the order ddp.md's command names them
# the headline's cases: the three, and the fourth (issue 47, item 3), measured at its own commit and in no earlier run
REGISTER_CASES = (*CASES, "2x2x3-1gbit-400mbit")


# ddp.md's measurements, newest first: raw files, summary, client-tuned plans (their accuracy table)
def _case_files(folder: Path, suffix: str = "", cases: tuple[str, ...] = CASES) -> list[Path]:
    return [folder / f"{case}{suffix}.raw.json" for case in cases]


MEASUREMENTS = {
    # every variant attached by register_p2synth_hook, the guard's fallback on the direct path (ddp.md's headline)
    "register": (_case_files(DOCS / "ddp" / "register", cases=REGISTER_CASES), DOCS / "ddp-summary.json", DOCS / "ddp"),
    # its repeat of 3x2x2, at the commit before
    "register-repeat": ([DOCS / "ddp" / "register" / "3x2x2-1gbit-400mbit.first.raw.json"],
                        DOCS / "ddp" / "register" / "3x2x2-1gbit-400mbit.first-summary.json", None),
    # the exports' reduce_scatter exchange on gloo and the hook's direct path, every variant hooked
    "direct": (_case_files(DOCS / "ddp"), DOCS / "ddp" / "direct-summary.json", DOCS / "ddp"),
    # the exchange without the direct path: the first runs of the same cases
    "first-run": (_case_files(DOCS / "ddp", ".first-run"), DOCS / "ddp" / "first-run-summary.json", None),
    # the control: DDP's built-in all-reduce, the hook, and torch's own Python all-reduce hook (3x2x2 only)
    "control": ([DOCS / "ddp" / "3x2x2-1gbit-400mbit.control.raw.json"], DOCS / "ddp" / "control-summary.json", None),
    # a shape tried after the fourth case (issue 47, item 3): 2 nodes x 4 ranks at 200 Mbit/s, gloo-tuned plan only
    "2x4-200mbit": ([DOCS / "ddp" / "2x4-200mbit" / "2x4-200mbit.raw.json"],
                    DOCS / "ddp" / "2x4-200mbit" / "summary.json", None),
    # issue 31's first measurement, gloo's own reduce_scatter
    "gloo-rs": (_case_files(DOCS / "ddp" / "gloo-rs"), DOCS / "ddp" / "gloo-rs" / "ddp-summary.json",
                DOCS / "ddp" / "gloo-rs"),
}


@pytest.mark.parametrize("name", MEASUREMENTS)
def test_ddp_md_and_its_summary_are_rebuilt_from_the_raw_data(tmp_path, name):
    """docs/measurements/ddp.md's tables and notes, and each measurement's ddp-summary.json, are what --from-raw makes
    of the committed raw files, byte for byte; the model-accuracy tables are what scripts.ddp_model_accuracy makes of
    the client-tuned plans; ddp.md's rebuild commands name the raw files."""
    from scripts import ddp_model_accuracy

    raws, committed, tuned_folder = MEASUREMENTS[name]
    doc = (DOCS / "ddp.md").read_text()
    md, summary = tmp_path / "ddp.md", tmp_path / "summary.json"
    assert bench_ddp.main(["--from-raw", *map(str, raws), "--markdown", str(md), "--summary", str(summary)]) == 0
    assert md.read_text().strip() in doc
    assert summary.read_text() == committed.read_text()
    flat = " ".join(doc.replace("\\\n", " ").split())
    root = DOCS.parent.parent
    assert " ".join(raw.relative_to(root).as_posix() for raw in raws) in flat
    if tuned_folder is not None:
        accuracy = tmp_path / "accuracy.md"
        tuned = [str(tuned_folder / f"{case}.client-tuned.json") for case in CASES]
        assert ddp_model_accuracy.main([*tuned, "--markdown", str(accuracy)]) == 0
        assert accuracy.read_text().strip() in doc
        for case in (raw.name.split(".")[0] for raw in raws if raw.name.split(".")[0] not in CASES):
            # a case of no earlier measurement (2x2x3): its tuner's table of its own ("The fourth case")
            assert ddp_model_accuracy.main([str(tuned_folder / f"{case}.client-tuned.json"), "--markdown",
                                            str(accuracy)]) == 0
            assert accuracy.read_text().strip() in doc


def test_the_committed_measurement_meets_what_ddp_md_says_of_it():
    """The figures ddp.md's verdicts rest on: every run's parameters within the tolerance, a commit and times in
    every raw file, and the count of cases where the hook is slower than the default beyond noise."""
    summary = json.loads((DOCS / "ddp-summary.json").read_text())
    assert summary["params_check"] == "elementwise" and summary["params_match"]
    assert [c["case"] for c in summary["cases"]] == list(REGISTER_CASES)
    # the first three at one commit, the fourth (issue 47, item 3) at a later one; every one a clean checkout
    assert len({case["commit"] for case in summary["cases"][:3]}) == 1
    assert summary["cases"][3]["commit"].startswith("708d20e")
    for case in summary["cases"]:
        assert case["commit"] and not case["dirty"] and case["measured_at"] and case["guard"] == "on"
        assert max(case["params_tol_share"].values()) < 0.1  # every variant's largest difference, in tolerances
    for variant, suffix in (("client", ""), ("mpi", "_mpi_plan")):
        said = [c["hook_vs_default"][variant]["verdict"] for c in summary["cases"]]
        for key, verdict in (("slower", "slower"), ("faster", "faster"), ("no_hook", "no hook attached")):
            assert summary[f"cases_{key}{suffix}"] == said.count(verdict)
    # issue 47: the client plan attaches no hook on 4x2 and 3x2x2, so those two verdicts are no evidence; the Open
    # MPI plan's fallback on 4x2 lost 7 of 9 paired rounds (median ratio 0.94), not shown slower at 5% (p = 0.09)
    # nor within 5% of the default; 2x2x2's gain holds in 9 of 9 rounds (one-sided p = 1/512)
    by_case = {c["case"]: c["hook_vs_default"] for c in summary["cases"]}
    assert [by_case[c]["client"]["verdict"] for c in REGISTER_CASES] == \
        ["no hook attached", "faster", "no hook attached", "no hook attached"]
    # the fourth case, added as a shape where the hook was likely to run: the gloo-tuned plan attaches none either,
    # and the Open MPI plan's guard falls back (6 faster, 3 slower of 9 rounds: inconclusive)
    mpi_2x2x3 = by_case["2x2x3-1gbit-400mbit"]["mpi"]
    assert (mpi_2x2x3["verdict"], mpi_2x2x3["faster_rounds"], mpi_2x2x3["slower_rounds"]) == ("inconclusive", 6, 3)
    assert (summary["cases_faster"], summary["cases_no_hook"], summary["cases_slower"]) == (1, 3, 0)
    mpi_4x2 = by_case["4x2-1gbit"]["mpi"]
    assert (mpi_4x2["verdict"], mpi_4x2["slower_rounds"], mpi_4x2["median_ratio"]) == ("inconclusive", 7, 0.94)
    assert by_case["2x2x2-1gbit-400mbit"]["client"]["faster_rounds"] == 9
    assert by_case["2x2x2-1gbit-400mbit"]["client"]["p_faster"] == round(1 / 512, 4)


def test_the_model_accuracy_tool_refuses_a_plan_the_client_tuner_did_not_write_in_one_line(capsys):
    from scripts import ddp_model_accuracy

    path = DOCS / "ddp" / "4x2-1gbit.tuned.json"  # tuned with Open MPI, not by the client tuner
    assert ddp_model_accuracy.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("not a client-tuned plan (not written by p2synth tune --client torch)\n")


def test_the_two_checks_of_the_cause_are_what_ddp_md_says():
    """ddp.md's "Two checks of that cause": the CPU table is the validation of ddp/cpu's tuned plan, and the piece
    count table is what --from-raw makes of ddp/pieces' raw files (speedups, verdicts, the guards' decisions)."""
    doc = (DOCS / "ddp.md").read_text()
    tuned = json.loads((DOCS / "ddp" / "cpu" / "2x2x2-1gbit-400mbit.client-tuned.json").read_text())
    for request, size in zip(tuned["placements"][0]["requests"], ("16 MiB", "32 MiB")):
        for p in request["validation"]["programs"]:
            name = "DDP's all-reduce (gloo's ring)" if p["role"] == "default" else \
                f"{p['role']}: {p['program'].replace(' pieces', '')}"
            row = f"| {size} | {name} | {p['measured_s'] * 1e3:.1f} | {p['cpu_s']:.3f} | {p['cpu_cores']:.2f} |"
            assert row in doc, row
    folder = DOCS / "ddp" / "pieces"
    spec = DOCS / "ddp" / "2x2x2-1gbit-400mbit.spec.json"
    runs = {name: bench_ddp.from_raw([folder / f"2x2x2-1gbit-400mbit.{name}.raw.json"], [spec])[0]
            for name in ("x16-x4-x1", "x32-x64")}
    pieces = {1: ("x16-x4-x1", "sequential"), 4: ("x16-x4-x1", "mpi"), 16: ("x16-x4-x1", "client"),
              32: ("x32-x64", "client"), 64: ("x32-x64", "mpi")}
    kept_names = {"plan": "program", "default": "DDP's all-reduce"}
    for n, (run, variant) in pieces.items():
        r = runs[run]
        d = r["decisions"][variant]["33570816"]
        speedup = r["default_ms"] / r[f"{variant}_ms"]
        row = (f"| {n} | {run} | {d['plan_median_s'] * 1e3:.1f} / {d['default_median_s'] * 1e3:.1f} | "
               f"{kept_names[d['kept']]} | {speedup:.2f} | {verdict_text(r['hook_vs_default'][variant])} |")
        assert row in doc, row
    plans = {"x16-x4-x1": ("client-tuned.json", "x4.json"), "x32-x64": ("x32.json", "x64.json")}
    for run, (plan, mpi_plan) in plans.items():
        raw = json.loads((folder / f"2x2x2-1gbit-400mbit.{run}.raw.json").read_text())
        for recorded, committed in ((raw["plan"], plan), (raw["mpi_plan"], mpi_plan)):
            if committed != "client-tuned.json":  # the run named the plans by their paths then
                assert recorded == f"/tmp/exp/{committed}"
                path = folder / f"2x2x2-1gbit-400mbit.{committed}"
                changed = json.loads(path.read_text())
                pick = changed["placements"][0]["requests"][1]["programs"][0]
                assert pick["pipeline"] == int(committed[1:-5])
                pick["pipeline"] = 16  # otherwise the committed client-tuned plan, unchanged
                assert changed == json.loads((DOCS / "ddp" / "2x2x2-1gbit-400mbit.client-tuned.json").read_text())


def test_the_guards_fallback_table_is_the_runs_before_and_after():
    """ddp.md's "The guard's fallback": each row's speedup and verdict, before (the piece-count runs) and after (the
    fallback run, at the commit that made it), from the raw files; the guard kept what the row says in both."""
    doc = (DOCS / "ddp.md").read_text()
    folder = DOCS / "ddp" / "pieces"
    spec = DOCS / "ddp" / "2x2x2-1gbit-400mbit.spec.json"
    run = lambda name: bench_ddp.from_raw([folder / f"2x2x2-1gbit-400mbit.{name}.raw.json"], [spec])[0]
    before = {1: (run("x16-x4-x1"), "sequential"), 64: (run("x32-x64"), "mpi"), 16: (run("x16-x4-x1"), "client")}
    after = run("fallback")
    assert after["commit"].startswith("8ea5127") and after["dirty"] is False
    after_variant = {1: "sequential", 64: "mpi", 16: "client"}
    cell = lambda r, v: f"{r['default_ms'] / r[f'{v}_ms']:.2f}, {verdict_text(r['hook_vs_default'][v])}"
    for pieces, (old, variant) in before.items():
        kept = {r["decisions"][v]["33570816"]["kept"] for r, v in ((old, variant), (after, after_variant[pieces]))}
        assert len(kept) == 1
        name = {"plan": "program", "default": "DDP's all-reduce"}[kept.pop()]
        row = f"| {pieces} | {name} | {cell(old, variant)} | {cell(after, after_variant[pieces])} |"
        assert row in doc, row


@pytest.mark.parametrize("name", ["direct", "register"])
def test_the_4x2_repeats_are_rebuilt_from_their_raw_files(tmp_path, name):
    """ddp.md's "Repeats on 4x2": each table and its notes are what --from-raw makes of its raw file; the client
    variant ran on the direct path in the first (every bucket) and attached no hook in the second."""
    raw = DOCS / "ddp" / "repeat" / f"4x2-1gbit.{name}.raw.json"
    md = tmp_path / "repeat.md"
    assert bench_ddp.main(["--from-raw", str(raw), "--markdown", str(md)]) == 0
    assert md.read_text().strip() in (DOCS / "ddp.md").read_text()
    counted = json.loads(raw.read_text())["hook_buckets"]
    assert counted["client"] == ({"reduced": 139, "direct": 139} if name == "direct" else None)


def test_the_table_before_issue_31_is_rebuilt_from_its_raw_files(tmp_path):
    """ddp.md's "Before issue 31": the table and notes --from-raw makes of ddp/before's older raw files, with the paired
    verdicts."""
    raws = [DOCS / "ddp" / "before" / f"{case}.raw.json" for case in ("4x2-1gbit", "2x2x2-1gbit-400mbit")]
    md = tmp_path / "before.md"
    assert bench_ddp.main(["--from-raw", *map(str, raws), "--markdown", str(md)]) == 0
    assert md.read_text().strip() in (DOCS / "ddp.md").read_text()
