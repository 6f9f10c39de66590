"""One training step run for real (python -m runtime.step) under real mpiexec.

The plans are built here in the solver's workload format with a ``step``
section (ms-scale compute), so the tests need neither Z3 nor the solver. From
``--trace``: every stage ran its ``stage_ops`` order, a pass waited for its
neighbour's, buckets started no earlier than they were ready and ran one after
the other; the measured step is no shorter than the schedule's compute and
bubble (worked out by hand below).
"""

import json
import shlex

import pytest

from p2synth.hierarchies import Collective, Program, Step, default_program
from p2synth.hierarchies.step import Pass, Schedule, stage_ops
from scripts.layer_waits import groups, layer_waits, split_step
from tests.runtime_support import assert_run_record, placement_of, request_of, run_mpi, utc_before

pytestmark = [pytest.mark.mpi]  # no skip without mpiexec: run_mpi fails, naming the fix

FORWARD_MS = 10.0  # one layer, one microbatch, the whole layer on one device; backward 2x
MICROBATCHES = 2
LAYERS = 2
QUICK = ["--rounds", "2", "--warmup", "1"]

# 4 ranks: data 2 (inside a node) x pipeline 2 (across nodes)
DP_PP = placement_of([("node", 2), ("core", 2)], [("data", 2), ("pipe", 2)], [[1, 2], [2, 1]])
# 8 ranks: data 2 x pipeline 2 x tensor 2, one level each
DP_PP_TP = placement_of([("node", 2), ("socket", 2), ("core", 2)], [("data", 2), ("pipe", 2), ("tensor", 2)],
                        [[2, 1, 1], [1, 2, 1], [1, 1, 2]])


def _request_body(placement, name, axes, collective, nbytes, count):
    """A workload entry and its placement body: the default, and (but for send_recv) RS -> AG as the best."""
    request = request_of(placement, axes, collective)
    default = default_program(placement, request)
    programs = []
    if collective is not Collective.SEND_RECV:
        cells = tuple(request.reduced_cells(placement))
        programs = [Program((Step(Collective.REDUCE_SCATTER, cells), Step(Collective.ALL_GATHER, cells))), default]
    item = {"name": name, "axes": axes, "collective": collective.value, "message_bytes": nbytes, "count": count}
    body = {**item, "request": {"axes": axes, "collective": collective.value},
            "default": {**default.to_json(placement), "cost_s": 1e-4},
            "programs": [{**p.to_json(placement), "cost_s": 1e-4, "verified": True} for p in programs]}
    return item, body


def step_plan(placement, requests, roles, predicted=None, step=True):
    """A one-placement workload plan with a step section (1F1B, ms-scale compute) and, if given, predicted figures."""
    pairs = [_request_body(placement, *r) for r in requests]
    entry = {"matrix": [list(r) for r in placement.matrix], "description": placement.describe(), "requests": [b for _, b in pairs]}
    if predicted:
        entry["step"] = predicted
    doc = {"hierarchy": placement.hierarchy.model_dump(), "axes": [a.model_dump() for a in placement.axes],
           "workload": [w for w, _ in pairs], "placements": [entry]}
    if step:
        doc["step"] = {"roles": roles, "schedule": "1f1b", "microbatches": MICROBATCHES, "layers": LAYERS,
                       "compute": {"forward_ms": FORWARD_MS}}
    return doc


def _write(path, doc):
    path.write_text(json.dumps(doc))
    return path


def _dp_pp_plan(tmp_path, predicted=None):
    requests = [("grad", ["data"], Collective.ALL_REDUCE, 64 << 10, 3),
                ("act", ["pipe"], Collective.SEND_RECV, 16 << 10, 2 * MICROBATCHES)]
    return _write(tmp_path / "plan.json", step_plan(DP_PP, requests, {"data": "data", "pipeline": "pipe"}, predicted))


def floor_s(stages, tensor):
    """The step's compute and bubble on a 2-stage 1F1B with 2 microbatches, by hand.

    Per stage a forward pass takes f = layers/stages x forward / tensor, a backward b = 2f. Stage 0 runs
    F0 F1 B0 B1, stage 1 F0 B0 F1 B1: F0 on 0 [0, f], F0 on 1 [f, 2f], B0 on 1 [2f, 2f+b], B0 on 0 [2f+b, 2f+2b]
    (its F1 ran in [f, 2f]), F1 on 1 [2f+b, 3f+b], B1 on 1 [3f+b, 3f+2b], B1 on 0 [3f+2b, 3f+3b]: 3 (f + b),
    i.e. (microbatches + stages - 1) (f + b)."""
    assert stages == 2 and MICROBATCHES == 2
    f = forward_s(stages, tensor)
    return 3 * (f + 2 * f)


def forward_s(stages, tensor):
    """A stage's forward pass of one microbatch: its layers' share, divided by the tensor axis."""
    return LAYERS / stages * FORWARD_MS / 1e3 / tensor


def check_trace(trace, backward_s, microbatches=MICROBATCHES):
    """Every stage ran stage_ops; a pass began after its neighbour's pass it depends on ended; buckets in order."""
    pipe = trace["pipeline_axis"]
    ranks = trace["ranks"]
    stages = 1 + max(r["stage"] for r in ranks)
    by_coords = {tuple(r["coords"]): r for r in ranks}
    steps = {len(r["steps"]) for r in ranks}
    assert len(steps) == 1
    for rank in ranks:
        ops = stage_ops(Schedule.ONE_F_ONE_B, rank["stage"], stages, microbatches)
        for k, step in enumerate(rank["steps"]):
            passes = [e for e in step["events"] if e["kind"] in ("F", "B")]
            assert [(Pass(e["kind"]), e["microbatch"]) for e in passes] == list(ops)
            assert all(step["start"] <= e["start"] <= e["end"] <= step["end"] for e in passes)
            assert all(a["end"] <= b["start"] for a, b in zip(passes, passes[1:]))
            for e in passes:  # F(s, j) after F(s-1, j) ended; B(s, j) after B(s+1, j) ended
                before = rank["stage"] - 1 if e["kind"] == "F" else rank["stage"] + 1
                if 0 <= before < stages:
                    coords = list(rank["coords"])
                    coords[pipe] = before
                    other = by_coords[tuple(coords)]["steps"][k]
                    theirs = next(x for x in other["events"] if x["kind"] == e["kind"] and x["microbatch"] == e["microbatch"])
                    assert e["start"] >= theirs["end"]
            buckets = sorted((e for e in step["events"] if e["kind"] == "bucket"), key=lambda e: e["index"])
            last_backward = passes[-1]
            assert buckets and [b["index"] for b in buckets] == list(range(len(buckets)))
            for b, nxt in zip(buckets, buckets[1:] + [None]):
                # equal buckets: bucket i is ready once (i + 1) / n of the pass's compute has been slept
                assert b["ready"] - last_backward["start"] >= (b["index"] + 1) / len(buckets) * backward_s
                assert b["ready"] <= b["start"] <= b["end"]
                if nxt is not None:
                    assert b["end"] <= nxt["start"]


def _run(tmp_path, ranks, plan, *extra, timeout=120):
    out, trace = tmp_path / "step.json", tmp_path / "trace.json"
    job = run_mpi(ranks, ["-m", "runtime.step", str(plan), "--out", str(out), "--trace", str(trace), *extra], timeout=timeout)
    return job, out, trace


def test_a_data_and_pipeline_step_runs_the_schedule_exactly(tmp_path):
    predicted = {"step_s": 0.09, "compute_s": 0.06, "layer_comm_s": 0.0, "pipeline_comm_s": 0.001, "bubble_s": 0.03,
                 "gradient_exposed_s": 0.002, "after_s": 0.0}
    before = utc_before()
    job, out, trace = _run(tmp_path, 4, _dp_pp_plan(tmp_path, predicted), *QUICK)
    assert job.returncode == 0, job.stderr
    doc = json.loads(out.read_text())
    assert doc["wrong"] == {"check": 0, "activations": 0, "outputs": 0} and "# Out of bounds values : 0 OK" in job.stdout
    assert_run_record(doc["run"], before)
    assert (doc["placement"], doc["ranks"], doc["stages"], doc["tensor"]) == (0, 4, 2, 1)
    assert doc["matrix"] == [[1, 2], [2, 1]] and doc["activation_bytes"] == 16 << 10
    assert doc["mpi_thread_level"] == "multiple" and doc["gradient_overlap"] is True
    assert doc["predicted"] == predicted and "predicted" in job.stdout
    assert [r["part"] for r in doc["requests"]] == ["gradient", "pipeline"]
    assert doc["requests"][0]["best"] == "RS(data@core) -> AG(data@core)" and doc["requests"][0]["default"] == "AR(data@core)"
    floor = floor_s(2, TENSOR := 1)
    for name in ("best", "default"):
        v = doc["variants"][name]
        assert len(v["rounds"]) == 2 and v["step_ci_s"][0] <= v["step_s"] <= v["step_ci_s"][1]
        assert all(r["step_s"] >= floor for r in v["rounds"])
        assert v["compute_s"] >= 2 * (0.01 + 0.02)  # a stage's own compute: two forwards, two backwards
    check_trace(json.loads(trace.read_text()), 2 * forward_s(2, TENSOR))


def test_pipeline_waits_asleep_run_the_same_schedule_exactly(tmp_path):
    """--poll-sleep-us: the pipeline's receives and sends are tested, asleep in between; the step is as exact, keeps
    its schedule and says how it waited."""
    job, out, trace = _run(tmp_path, 4, _dp_pp_plan(tmp_path), *QUICK, "--poll-sleep-us", "200")
    assert job.returncode == 0, job.stderr
    doc = json.loads(out.read_text())
    assert doc["wrong"] == {"check": 0, "activations": 0, "outputs": 0} and doc["timing"]["poll_sleep_us"] == 200
    assert "# pipeline waits: tested every 200 us, asleep in between" in job.stdout
    assert all(r["step_s"] >= floor_s(2, 1) for v in doc["variants"].values() for r in v["rounds"])
    traced = json.loads(trace.read_text())
    assert traced["poll_sleep_us"] == 200
    check_trace(traced, 2 * forward_s(2, 1))


def test_a_three_dimensional_step_on_eight_ranks(tmp_path):
    requests = [("grad", ["data"], Collective.ALL_REDUCE, 64 << 10, 2),
                ("act", ["pipe"], Collective.SEND_RECV, 16 << 10, 2 * MICROBATCHES),
                ("tp", ["tensor"], Collective.ALL_REDUCE, 16 << 10, 4 * MICROBATCHES)]
    plan = _write(tmp_path / "plan.json", step_plan(DP_PP_TP, requests, {"data": "data", "pipeline": "pipe", "tensor": "tensor"}))
    job, out, trace = _run(tmp_path, 8, plan, *QUICK)
    assert job.returncode == 0, job.stderr
    doc = json.loads(out.read_text())
    assert doc["wrong"] == {"check": 0, "activations": 0, "outputs": 0}
    assert (doc["stages"], doc["tensor"], doc["predicted"]) == (2, 2, None)
    assert [r["part"] for r in doc["requests"]] == ["gradient", "pipeline", "layer"]
    floor = floor_s(2, TENSOR := 2)
    for v in doc["variants"].values():
        assert all(r["step_s"] >= floor and r["layer_comm_s"] > 0 for r in v["rounds"])
    traced = json.loads(trace.read_text())
    check_trace(traced, 2 * forward_s(2, TENSOR))
    check_layer_split(traced, count=4 * MICROBATCHES)


def check_layer_split(trace, count):
    """Every rank ran `count` layer runs a step; each run splits at its group's arrival into parts that add up to its
    time, and in every run one member, the last to enter, waited for no one (scripts.layer_waits on a real trace)."""
    (layer,) = trace["layers"]
    assert len({r["clock"] for r in trace["ranks"]}) == 1
    group = groups([r["coords"] for r in trace["ranks"]], layer["axes"])
    assert {len(g) for g in group} == {2}
    for k in range(len(trace["ranks"][0]["steps"])):
        steps = [r["steps"][k] for r in trace["ranks"]]
        split = split_step(steps, group, layer["request"])
        for rank, s in enumerate(split):
            runs = [e for e in steps[rank]["events"] if e["kind"] == "layer"]
            assert s.runs == count and min(s.waiting_each_s) >= 0 and min(s.after_arrival_each_s) > 0
            assert all(1 <= n <= len(steps) for n in s.in_mpi_each)  # itself at least
            assert s.in_call_s == pytest.approx(sum(e["end"] - e["start"] for e in runs), abs=1e-9)
            assert all(min(split[m].waiting_each_s[run] for m in group[rank]) == 0 for run in range(count))
    rows = layer_waits(trace)
    assert {(r.variant, r.runs_per_rank) for r in rows} == {("best", count), ("default", count)}


def test_bad_inputs_are_one_line_and_exit_2(tmp_path):
    good = _dp_pp_plan(tmp_path)
    requests = [("grad", ["data"], Collective.ALL_REDUCE, 64 << 10, 1)]
    no_step = _write(tmp_path / "no-step.json", step_plan(DP_PP, requests, {}, step=False))
    argvs = [[str(no_step)], [str(good), "--placement", "3"], [str(good)], [str(good), "--rounds", "0"]]
    code = ("import json, shlex, sys; from p2synth.runtime.step import main; "
            "print(json.dumps([main(shlex.split(a)) for a in sys.argv[1:]]))")
    job = run_mpi(1, ["-c", code, *(shlex.join(a) for a in argvs)], timeout=60)
    assert job.returncode == 0, job.stderr
    assert json.loads(job.stdout) == [2, 2, 2, 2]
    assert job.stderr.splitlines() == [
        f"error: {no_step}: the plan has no step section: plan a spec with a \"step\" section (docs/workloads.md) to run its step",
        "error: placement index 3 out of range: the plan has 1 placement(s)",
        "error: placement 0 has 4 devices but the job has 1 ranks; run with -n 4",
        "error: argument --rounds: expected an integer >= 1, got '0'",
    ]


def test_a_corrupted_activation_is_counted_and_exits_1(tmp_path):
    job, out, _ = _run(tmp_path, 4, _dp_pp_plan(tmp_path), "--rounds", "1", "--warmup", "0", "--corrupt", "1")
    assert job.returncode == 1, job.stderr
    doc = json.loads(out.read_text())
    # rank 1 (stage 0) sends two forward activations a step, one element off in each; two steps ran
    assert doc["wrong"] == {"check": 0, "activations": 4, "outputs": 0}
    assert "FAILED" in job.stdout
