"""The DDP hook for real: 8 processes (gloo, CPU) train a DistributedDataParallel model with DDP's
default all-reduce and again with the p2synth hook; the parameters must match after every step.

The plan is solved here for a cpu-2x4-like hierarchy (node 2 x core 4, data axis 8) at two bucket
sizes: 16,896 bytes (the first layer's bucket; RS -> AR -> AG) and 1 MiB (a pipelined four-step
program). The model's other buckets run the nearest planned size's program, padded to its chunks and
pieces. The
job runs as ``python -m tests.test_ddp_torch WORKDIR`` (torch imported once, then 8 ranks forked) and
writes what every rank saw; the tests read it. Skipped without torch (``-m torch`` selects them).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from p2synth.encodings.deadline import Deadline
from p2synth.solver.planner import plan_placement, rank_plans
from p2synth.solver.result import result_json
from p2synth.solver.spec import build_problem, parse_spec
from tests.forked import run_forked, run_worker

WORLD, STEPS, JOB_TIMEOUT_S = 8, 6, 300
SIZES = [16896, 1 << 20]  # the bucket sizes planned
BUCKET_CAP_MB = 0.05  # buckets of about 50 KB (but a parameter is never split)
# DDP's buckets of the model below, in bytes: its first step puts every gradient in one bucket (DDP's first
# bucket holds up to 1 MiB), then DDP rebuilds them: 4112 + 1024 + 131072 bytes, then 16384 + 512 bytes.
BUCKETS = {153104: 1 << 20, 136208: 1 << 20, 16896: 16896}  # the planned size each runs the program of
GUARD_TRIALS = 2  # the guarded run: 136208- and 16896-byte buckets come 5 times, so the guard decides both
SPEC = {
    "hierarchy": {"name": "cpu-2x4", "levels": [
        {"name": "node", "count": 2, "bandwidth_GBps": 1.0, "uplink_GBps": 1.0, "latency_us": 20},
        {"name": "core", "count": 4, "bandwidth_GBps": 8.0, "latency_us": 1}]},
    "axes": [{"name": "data", "size": WORLD}],
    "workload": [{"name": "grad_allreduce", "axes": ["data"], "collective": "all_reduce", "message_bytes": SIZES}],
    "max_steps": 4,
}

pytestmark = pytest.mark.torch


def write_plan(path: Path) -> dict:
    """Solve SPEC and write its plan file to `path`; the plan's JSON."""
    problem = build_problem(parse_spec(json.dumps(SPEC)))
    plans = [plan_placement(problem, m, SPEC["max_steps"], 3, Deadline(None)) for m in problem.matrices]
    plan = result_json(problem, rank_plans(plans, []), SPEC["max_steps"])
    path.write_text(json.dumps(plan))
    return plan


def default_first(plan: dict, name: str) -> dict:
    """`plan` with DDP's all-reduce (the default program) ranked first for request `name`, as the client tuner
    writes a size where no program beat it."""
    plan = json.loads(json.dumps(plan))
    for request in plan["placements"][0]["requests"]:
        if request["name"] == name:
            request["programs"].insert(0, dict(request["default"]))
    return plan


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[dict, Path]:
    """Run the 8-rank training job once; the plan and the job's folder."""
    pytest.importorskip("torch")
    workdir = tmp_path_factory.mktemp("ddp-hook")
    plan = write_plan(workdir / "plan.json")
    (workdir / "plan-default.json").write_text(json.dumps(default_first(plan, "grad_allreduce_16896")))
    everywhere = default_first(default_first(plan, "grad_allreduce_16896"), "grad_allreduce_1048576")
    (workdir / "plan-all-default.json").write_text(json.dumps(everywhere))
    run_worker("tests.test_ddp_torch", [str(workdir)], JOB_TIMEOUT_S)
    return plan, workdir


def rank_report(workdir: Path, rank: int) -> dict:
    """What rank `rank` recorded besides the parameters."""
    return json.loads((workdir / f"rank-{rank}.json").read_text())


def test_plan_has_a_sequential_and_a_pipelined_program_for_the_two_sizes(job):
    plan, _ = job
    requests = plan["placements"][0]["requests"]
    assert [(q["name"], q["message_bytes"]) for q in requests] == [("grad_allreduce_16896", 16896), ("grad_allreduce_1048576", 1 << 20)]
    assert [q["programs"][0]["pipeline"] for q in requests] == [1, 16]
    assert [len(q["programs"][0]["steps"]) for q in requests] == [3, 4]


def test_parameters_match_the_default_hook_after_every_step(job):
    _, workdir = job
    first = np.load(workdir / "params-0.npz")
    for rank in range(WORLD):
        with np.load(workdir / f"params-{rank}.npz") as params:
            default, hook = params["default"], params["hook"]
            assert default.shape == hook.shape == (STEPS + 1, first["default"].shape[1])
            assert np.array_equal(default[0], hook[0])  # the same start
            assert not np.allclose(default[1], default[0])  # training moves the parameters
            for step in range(1, STEPS + 1):
                np.testing.assert_allclose(hook[step], default[step], rtol=1e-5, atol=1e-6, err_msg=f"rank {rank}, step {step}")
            np.testing.assert_array_equal(hook, first["hook"])  # every rank holds the same model


def test_the_guard_keeps_the_faster_on_every_rank_from_the_slowest_ranks_times_and_changes_no_result(job):
    _, workdir = job
    decisions = [rank_report(workdir, rank)["guard"] for rank in range(WORLD)]
    assert all(d == decisions[0] for d in decisions)  # one decision, agreed
    kept = {int(n): d["kept"] for n, d in decisions[0].items()}
    assert kept == {153104: None, 136208: "default", 16896: "plan"} or kept == {153104: None, 136208: "default", 16896: "default"}
    slow = decisions[0]["136208"]
    assert min(slow["plan_s"]) > 0.3 > max(slow["default_s"])  # rank 5's delay is in the agreed (slowest) times
    assert rank_report(workdir, 0)["unguarded"] == {}
    # each size comes 5 times: 4 trials, then the fifth by the decision; where DDP's all-reduce was kept, the fifth
    # ran it on the calling thread
    kept_default = sum(kept[n] == "default" for n in (136208, 16896))
    assert all(rank_report(workdir, rank)["guard_direct"] == kept_default for rank in range(WORLD))
    for rank in range(WORLD):
        with np.load(workdir / f"params-{rank}.npz") as params:
            np.testing.assert_allclose(params["guarded"], params["default"], rtol=1e-5, atol=1e-6, err_msg=f"rank {rank}")


def test_a_size_whose_pick_is_ddps_all_reduce_runs_it_on_the_calling_thread(job):
    """plan-default.json ranks DDP's all-reduce first for 16,896 bytes: those buckets (5, from step 2 on) run it
    directly, without guard trials, on every rank; the 1 MiB size still runs its program, guarded; the parameters
    match the default hook's."""
    _, workdir = job
    for rank in range(WORLD):
        report = rank_report(workdir, rank)
        assert report["direct"] == 5 and report["direct_reduced"] == [1] + [2] * (STEPS - 1)
        assert sorted(int(n) for n in report["direct_guard"]) == [136208, 153104]
        with np.load(workdir / f"params-{rank}.npz") as params:
            np.testing.assert_allclose(params["direct"], params["default"], rtol=1e-5, atol=1e-6, err_msg=f"rank {rank}")


def test_a_plan_that_keeps_ddps_all_reduce_everywhere_attaches_no_hook_and_trains_as_ddp_does(job):
    """plan-all-default.json ranks DDP's all-reduce first for both sizes: register_p2synth_hook attaches nothing, so
    the run is DDP's default, to the bit."""
    _, workdir = job
    for rank in range(WORLD):
        assert rank_report(workdir, rank)["registered"] == ["NoneType"]
        with np.load(workdir / f"params-{rank}.npz") as params:
            np.testing.assert_array_equal(params["builtin"], params["default"], err_msg=f"rank {rank}")


def test_every_bucket_ran_a_planned_program_and_each_unplanned_size_is_logged_once(job):
    _, workdir = job
    for rank in range(WORLD):
        report = rank_report(workdir, rank)
        assert {int(n): planned for n, planned in report["chosen"].items()} == BUCKETS
        assert report["reduced"] == [1] + [2] * (STEPS - 1)  # buckets reduced in each step
        assert sorted(report["warned"]) == [136208] * 3 + [153104] * 3  # once per unplanned size and hook


def test_a_process_group_that_is_not_the_reduction_group_fails_at_attach_time(job):
    _, workdir = job
    for rank in range(WORLD):
        group = list(range(rank // 4 * 4, rank // 4 * 4 + 4))
        assert rank_report(workdir, rank)["subgroup_error"] == (
            f"HookError: request 'grad_allreduce' reduces over data: rank {rank} reduces with ranks "
            f"[0, 1, 2, 3, 4, 5, 6, 7], but DDP's process group holds ranks {group}; "
            "pass DDP's process group, or plan the request over the axes it spans")


# -- the job (python -m tests.test_ddp_torch WORKDIR) --------------------------------


def run_ranks(workdir: Path) -> int:
    """Fork WORLD ranks after importing torch once; 1 if a rank fails or hangs."""
    import torch  # noqa: F401  (imported once, before forking: the ranks share it)

    return run_forked(rank_main, (workdir,), WORLD, JOB_TIMEOUT_S - 30)


class Warnings(logging.Handler):
    """Collects the byte sizes the hook says it has no program for."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.sizes: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.sizes.append(int(record.args[1].replace(",", "")))


def train(rank: int, hook, reduced: list[int], register: Path | None = None) -> np.ndarray:
    """Train the same model from the same start for STEPS steps; the flat parameters before and after each step.

    With a p2synth `hook`, `reduced` gets the number of buckets it reduced in each step. With a plan to `register`,
    ``register_p2synth_hook`` attaches its hook (or none), and `reduced` gets what it returned's type name.
    """
    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.Tanh(), torch.nn.Linear(128, 256), torch.nn.Tanh(),
                                torch.nn.Linear(256, 4))
    ddp = DistributedDataParallel(model, bucket_cap_mb=BUCKET_CAP_MB)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    if register is not None:
        from p2synth.solver.exports.ddp import register_p2synth_hook

        reduced.append(type(register_p2synth_hook(ddp, register, request="grad_allreduce")).__name__)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(1000 + rank)  # every rank its own batches
    flat = [torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()]
    for _ in range(STEPS):
        x, y = torch.randn(16, 32, generator=data), torch.randn(16, 4, generator=data)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        optimizer.step()
        if hook is not None:
            reduced.append(hook.reduced - sum(reduced))
        flat.append(torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone())
    return torch.stack(flat).numpy()


def slowed(function, seconds: float):
    """`function`, taking `seconds` longer."""
    import time

    def slow(*args):
        time.sleep(seconds)
        return function(*args)
    return slow


def rank_main(rank: int, workdir: Path) -> None:
    """One rank: train with the default hook, then with the p2synth hook unguarded, then guarded with rank 5
    slow on 1 MiB programs, then with DDP's all-reduce picked for 16,896 bytes; try a mismatched process group."""
    import torch.distributed as dist

    from p2synth.solver.exports.ddp import p2synth_hook

    dist.init_process_group("gloo", init_method=f"file://{workdir / 'store'}", rank=rank, world_size=WORLD)
    warned = Warnings()
    logging.getLogger("p2synth").addHandler(warned)
    reduced: list[int] = []
    default = train(rank, None, reduced)
    hook = p2synth_hook(workdir / "plan.json", placement=0, request="grad_allreduce", guard=False)
    with_hook = train(rank, hook, reduced)
    hook.close()
    guarded = p2synth_hook(workdir / "plan.json", placement=0, request="grad_allreduce", guard_trials=GUARD_TRIALS)
    # one slow rank: rank 5 runs the 1 MiB program 0.3 s slower
    guarded._functions = {name: slowed(fn, 0.3) if rank == 5 and "1048576" in name else fn
                          for name, fn in guarded._functions.items()}  # the hook's programs, by function name
    with_guard = train(rank, guarded, [])
    guarded.close()
    direct, direct_reduced = p2synth_hook(workdir / "plan-default.json", request="grad_allreduce"), []
    with_direct = train(rank, direct, direct_reduced)
    direct.close()
    registered: list = []
    with_builtin = train(rank, None, registered, register=workdir / "plan-all-default.json")
    subgroup, _ = dist.new_subgroups(4)
    try:
        p2synth_hook(workdir / "plan.json", request="grad_allreduce", process_group=subgroup)
        subgroup_error = None
    except ValueError as e:
        subgroup_error = f"{type(e).__name__}: {e}"
    np.savez(workdir / f"params-{rank}.npz", default=default, hook=with_hook, guarded=with_guard, direct=with_direct,
             builtin=with_builtin)
    chosen = {n: s.message_bytes for n, s in hook.chosen().items()}
    report = {"chosen": chosen, "reduced": reduced, "warned": warned.sizes, "subgroup_error": subgroup_error,
              "guard": guarded.decisions(), "guard_direct": guarded.direct, "unguarded": hook.decisions(),
              "direct": direct.direct,
              "direct_reduced": direct_reduced, "direct_guard": direct.decisions(), "registered": registered}
    (workdir / f"rank-{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(run_ranks(Path(sys.argv[1])))
