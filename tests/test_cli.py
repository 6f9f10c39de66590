"""The CLI as a user runs it: exit codes, one-line errors, the result JSON."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "solver.run", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def write_spec(tmp_path, spec, name="spec.json"):
    path = tmp_path / name
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    return str(path)


BASE = {
    "hierarchy": {"name": "t", "levels": [{"name": "node", "count": 2, "bandwidth_GBps": 10, "latency_us": 10},
                                          {"name": "gpu", "count": 4, "bandwidth_GBps": 100, "latency_us": 1}]},
    "axes": [{"name": "data", "size": 8}],
    "request": {"axes": ["data"], "collective": "all_reduce"},
    "message_bytes": 1 << 30,
    "max_steps": 4,
}


def test_top_all_lists_exactly_49_verified_programs(tmp_path):
    out = tmp_path / "result.json"
    r = run(write_spec(tmp_path, BASE), "--top", "all", "--out", str(out))
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    (pl,) = result["placements"]
    assert pl["matrix"] == [[2, 4]] and pl["program_count"] == 49 and pl["optimal"] is True
    assert len(pl["programs"]) == 49 and all(p["verified"] for p in pl["programs"])
    steps = [p["steps"] for p in pl["programs"]]
    assert [{"op": "all_reduce", "slice": [["data", "node"], ["data", "gpu"]]}] in steps
    assert [{"op": "reduce_scatter", "slice": [["data", "gpu"]]}, {"op": "all_reduce", "slice": [["data", "node"]]},
            {"op": "all_gather", "slice": [["data", "gpu"]]}] in steps
    assert [{"op": "reduce", "slice": [["data", "gpu"]]}, {"op": "all_reduce", "slice": [["data", "node"]]},
            {"op": "broadcast", "slice": [["data", "gpu"]]}] in steps
    costs = [p["cost_s"] for p in pl["programs"]]
    assert costs == sorted(costs) and pl["default"]["cost_s"] > costs[0]
    assert result["hierarchy"]["levels"][0]["name"] == "node" and result["max_steps"] == 4
    assert "RS(data@gpu) -> AR(data@node) -> AG(data@gpu)" in r.stdout


def test_bundled_example_runs(tmp_path):
    r = run("examples/dgx-a100-dp-tp.json", "--out", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert len(result["placements"]) == 2
    costs = [p["programs"][0]["cost_s"] for p in result["placements"]]
    assert costs == sorted(costs)


@pytest.mark.parametrize("spec,needle", [
    ("{", "spec is not valid JSON"),
    ({**BASE, "axes": [{"name": "data", "size": 4}]}, "axes: sizes multiply to 4 but the hierarchy"),
    ({**BASE, "request": {"axes": ["tensor"]}}, "request.axes: unknown axis 'tensor'; known axes: data"),
    ({**BASE, "axes": [{"name": "data", "size": 0}]}, "axes.0.size: Input should be greater than 0"),
    ({**BASE, "axes": [{"name": "data", "size": -8}]}, "axes.0.size: Input should be greater than 0"),
    ({**BASE, "hierarchy": {"name": "t", "levels": [{"name": "node", "count": 0}]}}, "hierarchy.levels.0.count: Input should be greater than 0"),
    ({**BASE, "hierarchy": "dgx-z100"}, "hierarchy: unknown system 'dgx-z100'; use one of"),
    ({**BASE, "hierarchy": {"system": "dgx-zz", "nodes": 1}}, "hierarchy.system: unknown system 'dgx-zz'"),
    ({**BASE, "colective": "x"}, "colective: unknown field"),
    ({**BASE, "request": {"axes": ["data"], "collective": "all_to_all"}}, "request.collective: Input should be"),
    ({**BASE, "placements": [[[4, 2]]]}, "placements.0: column of level 'node' multiplies to 4"),
    ({**BASE, "max_steps": 0}, "max_steps: Input should be greater than or equal to 1"),
    ({k: v for k, v in BASE.items() if k != "request"}, "give exactly one of 'request' or 'workload'"),
])
def test_bad_specs_exit_2_with_one_clear_line(tmp_path, spec, needle):
    r = run(write_spec(tmp_path, spec), "--out", str(tmp_path / "never.json"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "never.json").exists()


@pytest.mark.parametrize("args,needle", [
    (["--top", "0"], "--top"),
    (["--top", "many"], "--top"),
    (["--max-steps", "99"], "--max-steps"),
    (["--timeout", "-1"], "--timeout"),
])
def test_bad_arguments_exit_2(tmp_path, args, needle):
    r = run(write_spec(tmp_path, BASE), *args)
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_missing_spec_file_exits_2(tmp_path):
    r = run(str(tmp_path / "nope.json"))
    assert r.returncode == 2 and "cannot read spec" in r.stderr


def test_print_schema_is_json_schema():
    r = run("--print-schema")
    schema = json.loads(r.stdout)
    assert r.returncode == 0 and {"hierarchy", "axes", "request", "placements"} <= set(schema["properties"])


def test_too_many_programs_for_top_all_is_refused(tmp_path):
    spec = {**BASE, "hierarchy": {"name": "t", "levels": [{"name": "a", "count": 2}, {"name": "b", "count": 2},
                                                          {"name": "c", "count": 2}, {"name": "d", "count": 2}]},
            "axes": [{"name": "data", "size": 16}], "max_steps": 8}
    r = run(write_spec(tmp_path, spec), "--top", "all")
    assert r.returncode == 2 and "too many to list" in r.stderr


def test_timeout_reports_what_was_proved_and_exits_4(tmp_path):
    spec = {**BASE, "hierarchy": {"name": "t", "levels": [{"name": f"l{i}", "count": 2} for i in range(6)]},
            "axes": [{"name": "data", "size": 64}], "max_steps": 8}
    out = tmp_path / "r.json"
    r = run(write_spec(tmp_path, spec), "--timeout", "0.5", "--out", str(out))
    assert r.returncode == 4 and r.stderr.strip().startswith("timeout:")
    assert json.loads(out.read_text())["complete"] is False
