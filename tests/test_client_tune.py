"""The tuner on the client's backend (runtime/client_tune.py): its candidates and document without torch, and for
real in forked gloo processes: every candidate checked exactly (a faulty one caught, exit 1), the pick written
first so that the hook runs it, and the pick judged on new rounds."""

import json
import os
import socket
import sys
from pathlib import Path

import pytest

from p2synth.runtime import client_tune
from p2synth.runtime.measure import Measured
from p2synth.runtime.stats import median_interval
from p2synth.runtime.tune import Outcome, Task
from p2synth.solver.exports.buckets import bucket_plan
from p2synth.hierarchies.plan_file import load_plan_file
from tests.forked import run_forked
from tests.runtime_support import assert_run_record, utc_before
from tests.test_ddp_torch import write_plan

WORLD = 8
SIZES = ("grad_allreduce_16896", "grad_allreduce_1048576")


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory) -> Path:
    """tests/test_ddp_torch.py's plan: data 8 on node 2 x core 4, all_reduce at 16,896 bytes and 1 MiB."""
    path = tmp_path_factory.mktemp("client-tune") / "plan.json"
    write_plan(path)
    return path


def args_for(plan_path: Path, *extra: str):
    return client_tune.parse_args([str(plan_path), "--out", str(plan_path.with_name("tuned.json")), *extra])


def test_the_candidates_are_ddps_all_reduce_then_the_plans_best_programs_per_size(plan_path):
    plan, _, tasks, source = client_tune.prepare(args_for(plan_path, "--top", "2"), WORLD)
    assert [t.selection.request_name for t in tasks] == list(SIZES) and [t.nbytes for t in tasks] == [16896, 1 << 20]
    programs = {q.named.name: q.programs for q in plan.placement(0).requests}
    for task in tasks:
        assert task.functions[0] is None and task.selection.candidates[0].is_default
        assert [c.program for c in task.selection.candidates[1:]] == [p.program for p in programs[task.selection.request_name][:2]]
        assert [m for m in task.multiples[1:]] == [8 * c.program.pipeline for c in task.selection.candidates[1:]]
        for name in task.functions[1:]:
            assert f"def {name}(" in source


@pytest.mark.parametrize("extra,world,line", [
    ((), 4, "the plan's placement 0 is for 8 devices but the job has 4 ranks; run 8 ranks"),
    (("--request", "grads"), 8, "no request 'grads' in the plan; its requests: grad_allreduce"),
    (("--placement", "3"), 8, "placement index 3 out of range: the plan has 1 placement(s)"),
])
def test_a_plan_that_does_not_fit_the_job_is_one_line(plan_path, extra, world, line):
    with pytest.raises(ValueError) as info:
        client_tune.prepare(args_for(plan_path, *extra), world)
    assert str(info.value) == line


def test_bad_arguments_exit_2_with_one_line(plan_path, capsys, monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "8")
    assert client_tune.main([str(plan_path), "--out", "/no/such/folder/t.json"]) == 2
    assert capsys.readouterr().err == "error: --out /no/such/folder/t.json: folder /no/such/folder does not exist\n"
    assert client_tune.main([str(plan_path), "--out", "x.json", "--client", "jax"]) == 2
    assert "--client: invalid choice: 'jax'" in capsys.readouterr().err


def fake_outcome(task, medians: list[float], picked: int) -> Outcome:
    measured = tuple(Measured((m,) * 6, median_interval((m,) * 6)) for m in medians)
    return Outcome(Task(task.selection, task.nbytes, 1, 3, 0.02), measured, (0,) * len(medians), picked)


def test_the_pick_goes_first_so_the_hook_runs_it_and_a_picked_default_is_ddps_all_reduce(plan_path):
    plan, _, tasks, _ = client_tune.prepare(args_for(plan_path), WORLD)
    outcomes = [fake_outcome(tasks[0], [1.0, 0.5, 0.9, 0.8], 1), fake_outcome(tasks[1], [1.0, 1.1, 1.2, 1.3], 0)]
    doc = client_tune.tuned_plan(plan, outcomes, [{"pick_over_default": 0.5}, None], {"client": "torch"}, 0)
    tuned = load_plan_file_from(doc, plan_path)
    hook = bucket_plan(tuned, 0, "grad_allreduce")
    assert hook.sizes[0].program == tasks[0].selection.candidates[1].program
    assert hook.sizes[1].program == tasks[1].selection.candidates[0].program  # the default: one all-reduce
    assert hook.sizes[1].program.text(hook.placement) == "AR(data@node,data@core)"
    assert [hook.runs_default(s) for s in hook.sizes] == [False, True]  # the hook runs DDP's all-reduce there
    requests = doc["placements"][0]["requests"]
    assert requests[0]["validation"] == {"pick_over_default": 0.5} and "validation" not in requests[1]
    assert doc["tuned"] == {"client": "torch"} and requests[1]["picked"]["is_default"]


def load_plan_file_from(doc: dict, near: Path):
    path = near.with_name("doc.json")
    path.write_text(json.dumps(doc))
    return load_plan_file(path)


# -- for real: 8 gloo processes ---------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank: int, argv: list[str], port: int, fault: bool) -> None:
    """One rank of `python -m runtime.client_tune ARGV` under torchrun's variables; `fault` breaks every plan
    program's output at one element of one rank (the exact check must see it)."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      GLOO_SOCKET_IFNAME="lo")
    if fault:
        real = client_tune.reduce_bucket

        def misplaced(x, fn, mesh, multiple, divisor):
            out = real(x, fn, mesh, multiple, divisor)
            if rank == 3:
                out[7], out[8] = out[8].clone(), out[7].clone()  # two elements swapped: sums unchanged
            return out
        client_tune.reduce_bucket = misplaced
    sys.exit(client_tune.main(argv))


def run_job(plan_path: Path, out: Path, fault: bool) -> int:
    pytest.importorskip("torch")
    argv = [str(plan_path), "--out", str(out), "--top", "2", "--repeats", "6", "--iters", "1", "--warmup", "1"]
    return run_forked(rank_main, (argv, free_port(), fault), WORLD, 240)


@pytest.mark.torch
def test_a_real_job_tunes_every_size_exactly_and_validates_the_pick(plan_path, tmp_path):
    out = tmp_path / "tuned.json"
    before = utc_before()
    assert run_job(plan_path, out, fault=False) == 0
    doc = json.loads(out.read_text())
    assert doc["tuned"]["client"] == "torch" and doc["tuned"]["backend"] == "gloo" and doc["tuned"]["ranks"] == WORLD
    assert_run_record({k: doc["tuned"][k] for k in ("p2synth", "commit", "dirty", "started_at", "ended_at")}, before)
    for request in doc["placements"][0]["requests"]:
        measured = [request["default"]] + [p for p in request["programs"] if "measured_s" in p]
        assert all(m["wrong"] == 0 and len(m["measured_repeats_s"]) == 6 for m in measured)
        first = request["programs"][0]
        picked = request["picked"]
        assert first["steps"] == picked["steps"] and first["pipeline"] == picked["pipeline"]
        roles = [p["role"] for p in request["validation"]["programs"]]
        assert roles[0] == "default" and len(request["validation"]["programs"][0]["measured_repeats_s"]) == 6
        for p in request["validation"]["programs"]:  # 8 processes on this machine's cores: some CPU, at most all of it
            assert 0 < p["cpu_s"] and 0 < p["cpu_cores"] <= (os.cpu_count() or 1) * 1.5, p
        assert ("pick" in roles) == (not picked["is_default"])


@pytest.mark.torch
def test_a_misplaced_element_of_a_candidate_fails_the_job(plan_path, tmp_path):
    out = tmp_path / "tuned.json"
    assert run_job(plan_path, out, fault=True) == 1
    doc = json.loads(out.read_text())
    for request in doc["placements"][0]["requests"]:
        assert request["default"]["wrong"] == 0
        assert all(p["wrong"] >= 2 for p in request["programs"] if "measured_s" in p and p["steps"] != request["default"]["steps"])


@pytest.mark.parametrize("wins,picked", [(9, 1), (8, 1), (7, 0)])
def test_the_pick_leaves_ddps_all_reduce_only_under_the_paired_sign_test(plan_path, monkeypatch, wins, picked):
    # candidate 1 is 10% faster by its median, but wins only `wins` of the 9 paired rounds; 8 are needed at 5%
    _, _, tasks, _ = client_tune.prepare(args_for(plan_path, "--top", "1"), WORLD)
    default = [1.0] * 9
    faster = [0.9] * wins + [1.1] * (9 - wins)
    rounds = [default, faster]

    def fake_time(task, runners, chosen, config, reverse=False):
        measured = [Measured(tuple(rounds[i]), median_interval(rounds[i])) for i in chosen]
        return measured, [0] * len(chosen), [0.5 + i for i in chosen]
    monkeypatch.setattr(client_tune, "check_exact", lambda task, runners, rank, world: [0, 0])
    monkeypatch.setattr(client_tune, "time_candidates", fake_time)
    outcome = client_tune.tune_size(tasks[0], None, None, 1, 0.02, 0, WORLD)
    assert outcome.picked == picked
    validation = client_tune.validate_size(tasks[0], outcome, None, client_tune.TimingConfig(repeats=9))
    assert [p["role"] for p in validation["programs"]] == (["default", "pick"] if picked else ["default", "runner-up"])
    assert validation["confirmed"] == bool(picked)
    # each validated program's CPU cost, and the cores it keeps busy over its median time
    medians = [1.0, 0.9]  # the candidate's median is 0.9 in every case here (it wins 7 of 9 rounds or more)
    assert [(p["cpu_s"], p["cpu_cores"]) for p in validation["programs"]] == \
           [(0.5, round(0.5 / medians[0], 3)), (1.5, round(1.5 / medians[1], 3))]


def test_the_cpu_clock_counts_the_cpu_a_run_burns_not_its_waits():
    import time

    def busy(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    clock = client_tune.CpuClock()
    assert clock.per_run_s() == 0.0
    clock.run(lambda: busy(0.2))
    clock.run(lambda: time.sleep(0.2))
    assert clock.runs == 2 and 0.15 < clock.seconds < 0.35 and clock.per_run_s() == clock.seconds / 2
    with pytest.raises(ZeroDivisionError):  # a failing run is still counted
        clock.run(lambda: 1 / 0)
    assert clock.runs == 3
