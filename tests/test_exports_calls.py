"""The exported modules make exactly the plan's calls: steps, groups, order, pieces and the runtime's wavefront.

Every program of up to 3 steps of every collective on small placements (1 to 3
reduced cells), run whole and pipelined on 2 and 3 pieces, is exported and run
on simulated ranks without any framework: the PyTorch module against
tests/fake_torch.py, the JAX module against numpy for ``jax.numpy`` and a
recording ``lax`` (below) on the same simulated ranks. Each rank's recorded
calls -- op, group ranks in member order, asynchronous or not, the pieces its
input holds, and the waits -- must equal what the plan's program says, in the
runtime's wavefront order (runtime/executor.py's ``wavefront``), and the
result must equal the plain collective's. Faulty exporters (pipelining
dropped, two steps swapped, a piece-major schedule) fail the same check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from p2synth.hierarchies import Collective, Placement, Program, Request
from p2synth.hierarchies.abstract import enumerate_programs
from p2synth.hierarchies.plan_file import load_plan_file
from p2synth.hierarchies.program import to_program
from p2synth.runtime.executor import wavefront
from p2synth.solver.exports import planning, rendering
from p2synth.solver.exports.choice import ExportFormat
from p2synth.solver.exports.formats import EXPORTERS, export_placement
from p2synth.solver.exports.planning import ExportRequest, NotExportable
from tests import fake_torch
from tests.fake_torch import Launch, Wait, World
from tests.test_exports import expected, make_placement

ROOT = Path(__file__).resolve().parent.parent

# Small placements: 1, 2 (two level sizes) and 3 reduced cells for a request over every axis.
PLACEMENTS = {
    "node2-core2.data2-model2": make_placement({"node": 2, "core": 2}, {"data": 2, "model": 2}, ((2, 1), (1, 2))),
    "node2-core2.data4": make_placement({"node": 2, "core": 2}, {"data": 4}, ((2, 2),)),
    "node2-core3.data6": make_placement({"node": 2, "core": 3}, {"data": 6}, ((2, 3),)),
    "node2-core4.data4-model2": make_placement({"node": 2, "core": 4}, {"data": 4, "model": 2}, ((2, 2), (1, 2))),
}
# The request's axes on each: data alone on the first (1 cell), every axis elsewhere.
REQUEST_AXES = {"node2-core2.data2-model2": frozenset({0})}


# The 3-cell case has 75 all_reduce and 232 reduce programs: CI checks an evenly spaced sample of at most this many
# (every program of the other cases).
MOST_PER_FAMILY = 48


def programs(placement: Placement, request: Request) -> list[Program]:
    """Every valid program of 1 to 3 steps (at most MOST_PER_FAMILY, evenly spaced), whole, and those of 2 steps or
    more also on 2 and 3 pieces."""
    out = []
    every = list(enumerate_programs(request.collective, len(request.reduced_cells(placement)), 3))
    for masks in every[:: -(-len(every) // MOST_PER_FAMILY)]:
        program = to_program(masks, placement, request)
        out += [program] + [Program(program.steps, p) for p in (2, 3) if len(program.steps) > 1]
    return out


# -- what the plan says ----------------------------------------------------------------


def group_ranks(placement: Placement, cells, rank: int) -> tuple[int, ...]:
    """The ranks of `rank`'s group over `cells`, in rank order (the frameworks' member order)."""
    mine = placement.digits(rank)
    return tuple(r for r in range(placement.num_devices)
                 if all(v == mine[c] for c, v in placement.digits(r).items() if c not in cells))


def expected_calls(placement: Placement, program: Program, rank: int, fmt: ExportFormat, backend: str = "nccl") -> list:
    """The calls `rank` must make for `program`: the steps per piece in the runtime's wavefront order.

    PyTorch: a pipelined program's steps start asynchronously, and a piece waits for its step
    before its next stage; JAX has no waits. Whole programs: blocking calls on piece 0, except
    that a shift (one batch_isend_irecv) and, on gloo, a reduce_scatter (an all_to_all whose
    blocks are then summed) start asynchronously and are waited for at once.
    """
    steps, pieces = program.steps, program.pipeline
    groups = [group_ranks(placement, step.slice, rank) for step in steps]
    exchange = fmt is ExportFormat.TORCH and backend == "gloo"
    ops = ["all_to_all" if exchange and s.op is Collective.REDUCE_SCATTER else s.op.value for s in steps]
    if pieces == 1:
        calls = []
        for i, (step, op, group) in enumerate(zip(steps, ops, groups)):
            waited = fmt is ExportFormat.TORCH and (step.op is Collective.SEND_RECV or op != step.op.value)
            calls += [Launch(op, group, waited, frozenset({0}))] + ([Wait(i)] if waited else [])
        return calls
    is_async = fmt is ExportFormat.TORCH
    calls, launched = [], {}
    for piece, stage in wavefront(pieces, len(steps)):
        if stage > 0 and is_async:
            calls.append(Wait(launched[piece, stage - 1]))
        if stage < len(steps):
            launched[piece, stage] = len(launched)
            calls.append(Launch(ops[stage], groups[stage], is_async, frozenset({piece})))
    return calls


# -- inputs: values, and each element's piece as the runtime cuts the buffer --------------


def input_shape(request: Request, group_size: int, pieces: int) -> tuple[int, int]:
    """Each device's input: 6 elements per piece of a chunk (one chunk for all_gather), in rows of 3."""
    rows = 2 * pieces
    return (rows, 3) if request.collective is Collective.ALL_GATHER else (rows * group_size, 3)


def values(placement: Placement, request: Request, pieces: int, seed: int) -> np.ndarray:
    """Distinct small integers per device: shape (devices, *input_shape)."""
    g = len(group_ranks(placement, request.reduced_cells(placement), 0))
    rng = np.random.default_rng(seed)
    return rng.integers(-50, 50, size=(placement.num_devices, *input_shape(request, g, pieces)), dtype=np.int64)


def piece_labels(request: Request, shape: tuple[int, ...], pieces: int, group_size: int) -> np.ndarray:
    """Each element's piece: the p-th of `pieces` equal slices of every chunk (all_gather's input is one chunk)."""
    chunks = 1 if request.collective is Collective.ALL_GATHER else group_size
    flat = np.arange(int(np.prod(shape)))
    chunk = flat.size // chunks
    return ((flat % chunk) // (chunk // pieces)).reshape(shape)


# -- running a generated module on simulated ranks ---------------------------------------------


def load(source: str, modules: dict[str, types.ModuleType]) -> types.ModuleType:
    """Execute a generated module's source with `modules` standing in for the framework."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        module = types.ModuleType("plan")
        exec(compile(source, "plan.py", "exec"), module.__dict__)
        return module
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def fake_jax(world: World, shape: tuple[int, ...], names: tuple[str, ...]) -> dict[str, types.ModuleType]:
    """jax with numpy as jax.numpy and a lax whose collectives run on `world`, over a mesh of `shape` and `names`."""
    mesh = np.arange(int(np.prod(shape))).reshape(shape)

    def members(axes: tuple[str, ...]) -> tuple[int, ...]:
        """The ranks of this rank's group over mesh axes `axes`, ordered row-major over `axes` as JAX indexes them."""
        dims = [names.index(a) for a in axes]
        others = [d for d in range(len(shape)) if d not in dims]
        coords = np.argwhere(mesh == world.rank)[0]
        line = np.transpose(mesh, others + dims)[tuple(coords[others])]
        return tuple(line.reshape(-1).tolist())

    def run(op: str, x: np.ndarray, axes: tuple[str, ...], *call) -> np.ndarray:
        group = members(axes)
        return world.collective(op, group, group.index(world.rank), x, (x.shape, *call), False)

    def psum(x, axes):
        return run("all_reduce", x, axes).reshape(x.shape)

    def psum_scatter(x, axes, scatter_dimension, tiled):
        assert (x.ndim, scatter_dimension, tiled) == (1, 0, True)
        return run("reduce_scatter", x, axes)

    def all_gather(x, axes, axis, tiled):
        assert (x.ndim, axis, tiled) == (1, 0, True)
        return run("all_gather", x, axes)

    def all_to_all(x, axes, split_axis, concat_axis, tiled):
        assert (x.ndim, split_axis, concat_axis, tiled) == (1, 0, 0, True)
        return run("all_to_all", x, axes)

    def ppermute(x, axes, perm):
        step = (perm[0][1] - perm[0][0]) % len(perm)
        assert sorted(perm) == [(i, (i + step) % len(perm)) for i in range(len(perm))], "a shift"
        return run("send_recv", x, axes, step).reshape(x.shape)

    lax = types.SimpleNamespace(psum=psum, psum_scatter=psum_scatter, all_gather=all_gather, all_to_all=all_to_all,
                                ppermute=ppermute)
    jax = types.ModuleType("jax")
    jax.numpy, jax.lax = np, lax
    sharding = types.SimpleNamespace(Mesh=None, PartitionSpec=None)
    return {"jax": jax, "jax.numpy": np, "jax.lax": lax, "jax.sharding": sharding}


def run_module(source: str, fmt: ExportFormat, placement: Placement, inputs: np.ndarray, labels: bool,
               backend: str = "nccl"):
    """Run the module's only request function on every rank: (outputs by rank, calls by rank).

    Each rank imports its own copy of the module, as each process does (the module keeps its groups).
    """
    world = World(placement.num_devices, labels, backend)
    if fmt is ExportFormat.TORCH:
        modules = [load(source, fake_torch.install(world)) for _ in range(world.size)]

        def rank_main(rank: int) -> np.ndarray:
            module = modules[rank]
            mesh = module.build_mesh("cpu")
            return next(iter(module.REQUESTS.values()))(fake_torch.Tensor(inputs[rank].copy()), mesh).numpy()
    else:
        probe = load(source, fake_jax(world, (1,), ("",)))  # only for its mesh constants
        modules = [load(source, fake_jax(world, probe.MESH_SHAPE, probe.MESH_AXIS_NAMES)) for _ in range(world.size)]

        def rank_main(rank: int) -> np.ndarray:
            return np.asarray(next(iter(modules[rank].REQUESTS.values()))(inputs[rank].copy()))
    outputs = world.run(rank_main)
    return dict(enumerate(outputs)), world.records


def check_calls(source: str, fmt: ExportFormat, placement: Placement, request: Request, program: Program,
                seed: int = 0, backend: str = "nccl") -> None:
    """Run `source` (the export of `program`) twice -- on values, then on piece labels -- and compare with the plan."""
    inputs = values(placement, request, program.pipeline, seed)
    outputs, calls = run_module(source, fmt, placement, inputs, labels=False, backend=backend)
    g = len(group_ranks(placement, request.reduced_cells(placement), 0))
    labels = np.stack([piece_labels(request, inputs.shape[1:], program.pipeline, g)] * placement.num_devices)
    _, labelled = run_module(source, fmt, placement, labels, labels=True, backend=backend)
    for rank in range(placement.num_devices):
        want = expected_calls(placement, program, rank, fmt, backend)
        assert [_without_pieces(c) for c in calls[rank]] == [_without_pieces(c) for c in want], f"rank {rank}"
        assert labelled[rank] == want, f"rank {rank}: the calls' pieces"
    for rank, value in expected(placement, request, inputs).items():
        assert np.array_equal(outputs[rank], value), f"rank {rank}: got {outputs[rank]}, expected {value}"


def _without_pieces(call: Launch | Wait) -> Launch | Wait:
    """A call as recorded on values (which say nothing of pieces)."""
    return replace(call, pieces=None) if isinstance(call, Launch) else call


# -- every program of the small cases ----------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """The programs of one collective on one placement."""

    placement_id: str
    collective: Collective

    @property
    def placement(self) -> Placement:
        return PLACEMENTS[self.placement_id]

    @property
    def request(self) -> Request:
        axes = REQUEST_AXES.get(self.placement_id, frozenset(range(len(self.placement.axes))))
        return Request(axes, self.collective)


FAMILIES = [f for f in (Family(p, c) for p in PLACEMENTS for c in Collective)
            if f.collective is not Collective.SEND_RECV or len(f.request.axes) == 1]  # a shift: one axis


@pytest.mark.parametrize("fmt", list(ExportFormat), ids=str)
@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f"{f.placement_id}/{f.collective.value}")
def test_every_program_exports_as_the_plans_calls(family: Family, fmt: ExportFormat) -> None:
    placement, request = family.placement, family.request
    checked = 0
    for i, program in enumerate(programs(placement, request)):
        item = ExportRequest("r", request, program, 1 << 20)
        if not fmt.can_run(program):  # JAX: no rooted steps; the export says so instead of rewriting them
            with pytest.raises(NotExportable, match="JAX has no rooted reduce or broadcast step"):
                EXPORTERS[fmt](placement, [item])
            continue
        text = program.text(placement)
        try:
            check_calls(EXPORTERS[fmt](placement, [item]), fmt, placement, request, program, seed=i)
        except AssertionError as e:
            raise AssertionError(f"{text}: {e}") from None
        checked += 1
    assert checked or (fmt is ExportFormat.JAX and family.collective in (Collective.REDUCE, Collective.BROADCAST))


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.collective in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER)],
                         ids=lambda f: f"{f.placement_id}/{f.collective.value}")
def test_on_gloo_every_reduce_scatter_step_is_an_exchange_and_a_sum(family: Family) -> None:
    """On gloo the PyTorch module runs each reduce_scatter step as all_to_all_single and a sum of the blocks received
    (started asynchronously and waited for at once in a whole program): the same results, the pieces where the plan
    puts them, and no reduce_scatter call left."""
    placement, request = family.placement, family.request
    exchanged = 0
    for i, program in enumerate(programs(placement, request)):
        source = EXPORTERS[ExportFormat.TORCH](placement, [ExportRequest("r", request, program, 1 << 20)])
        try:
            check_calls(source, ExportFormat.TORCH, placement, request, program, seed=i, backend="gloo")
        except AssertionError as e:
            raise AssertionError(f"{program.text(placement)}: {e}") from None
        exchanged += any(s.op is Collective.REDUCE_SCATTER for s in program.steps)
    assert exchanged


def test_the_sample_keeps_every_program_of_the_two_cell_cases() -> None:
    family = Family("node2-core3.data6", Collective.REDUCE)  # 46 programs, 44 of them of 2 or 3 steps
    assert len(programs(family.placement, family.request)) == 46 + 2 * 44


# -- the runtime's schedule, and faulty exporters --------------------------------------------------------


def test_the_modules_wavefront_is_the_runtimes() -> None:
    namespace: dict = {}
    exec(rendering.WAVEFRONT, namespace)
    for pieces in range(1, 18):
        for steps in range(1, 5):
            assert list(namespace["_wavefront"](pieces, steps)) == list(wavefront(pieces, steps))


@pytest.fixture(scope="module")
def cpu_plan(tmp_path_factory) -> Path:
    """The plan of examples/cpu-2x4.json (its best program is pipelined on 16 pieces)."""
    path = tmp_path_factory.mktemp("cpu-2x4") / "plan.json"
    done = subprocess.run([sys.executable, "-m", "solver.run", "examples/cpu-2x4.json", "--quiet", "--out", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return path


def cpu_best(cpu_plan: Path) -> tuple[Placement, Request, Program]:
    """Placement 0 of the cpu-2x4 plan, its request and its best program."""
    planned = load_plan_file(cpu_plan).placement(0)
    (request,) = planned.requests
    return planned.placement, request.named.request, request.programs[0].program


@pytest.mark.parametrize("fmt", list(ExportFormat), ids=str)
def test_cpu_2x4_best_program_runs_pipelined(cpu_plan: Path, fmt: ExportFormat) -> None:
    placement, request, best = cpu_best(cpu_plan)
    assert best.pipeline == 16 and len(best.steps) == 4
    source = export_placement(load_plan_file(cpu_plan), 0, fmt)
    assert "runs #1 of the plan's 5 programs, predicted 17.02 ms:" in source
    assert "x16 pieces" in source and "pipelined: 16 pieces" in source
    check_calls(source, fmt, placement, request, best)  # 64 launches per rank, in the wavefront's order


# Faulty exporters: each must fail the call-sequence check on the cpu-2x4 plan's best program.
def _drop_pipelining(monkeypatch) -> None:
    monkeypatch.setattr(planning.RequestPlan, "pipelined", property(lambda self: False))


def _swap_two_steps(monkeypatch) -> None:
    plan_actions = planning.plan_actions

    def swapped(placement, plan):
        actions = list(plan_actions(placement, plan))
        actions[0], actions[1] = actions[1], actions[0]
        return tuple(actions)

    monkeypatch.setattr(planning, "plan_actions", swapped)


def _piece_major_schedule(monkeypatch) -> None:
    monkeypatch.setattr(rendering, "WAVEFRONT", rendering.WAVEFRONT.replace(
        "    for slot in range(pieces + steps):\n        for stage in range(max(0, slot - pieces + 1), min(slot, steps) + 1):\n"
        "            yield slot - stage, stage",
        "    for piece in range(pieces):\n        for stage in range(steps + 1):\n            yield piece, stage"))
    for module in ("to_torch", "to_jax"):
        monkeypatch.setattr(f"p2synth.solver.exports.{module}.WAVEFRONT", rendering.WAVEFRONT)


@pytest.mark.parametrize("fault", [_drop_pipelining, _swap_two_steps, _piece_major_schedule], ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("fmt", list(ExportFormat), ids=str)
def test_a_faulty_exporter_fails_the_check(cpu_plan: Path, fmt: ExportFormat, fault, monkeypatch) -> None:
    placement, request, best = cpu_best(cpu_plan)
    fault(monkeypatch)
    source = export_placement(load_plan_file(cpu_plan), 0, fmt)
    with pytest.raises((AssertionError, ValueError)):  # wrong calls, or (two steps swapped) a run that breaks
        check_calls(source, fmt, placement, request, best)


# -- JAX: the best program it can express, at its own predicted time ----------------------------------


def test_jax_runs_the_best_program_without_rooted_steps_at_its_own_time(cpu_plan: Path, tmp_path: Path) -> None:
    document = json.loads(cpu_plan.read_text())
    ranked = document["placements"][0]["programs"]
    ranked[0], ranked[1] = ranked[1], ranked[0]  # now R(data@core) -> ... -> B(data@core) x16 pieces is #1
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    plan = load_plan_file(path)
    placement, request = plan.placement(0).placement, plan.placement(0).requests[0]
    rooted, best = (p.program for p in request.programs[:2])
    torch_source = export_placement(plan, 0, ExportFormat.TORCH)
    assert f"runs #1 of the plan's 5 programs, predicted {request.programs[0].cost_s * 1e3:.4g} ms:" in torch_source
    check_calls(torch_source, ExportFormat.TORCH, placement, request.named.request, rooted)
    jax_source = export_placement(plan, 0, ExportFormat.JAX)
    want = f"runs #2 of the plan's 5 programs (the best program JAX can express), predicted {request.programs[1].cost_s * 1e3:.4g} ms:"
    assert want in jax_source and "_reduce(" not in jax_source and "psum(x, " not in jax_source
    check_calls(jax_source, ExportFormat.JAX, placement, request.named.request, best)


def test_a_program_given_alone_says_its_rank_and_time_are_unknown() -> None:
    placement = PLACEMENTS["node2-core2.data4"]
    request = Request(frozenset({0}))
    program = next(p for p in programs(placement, request) if p.pipeline == 2)
    for fmt in ExportFormat:
        source = EXPORTERS[fmt](placement, [("grad", request, program, 1024)])
        assert "runs a program given alone (no ranked list), predicted time unknown:" in source


def test_a_broadcast_request_is_not_exported_for_jax_from_either_command(tmp_path: Path) -> None:
    spec = json.loads((ROOT / "examples" / "cpu-2x4.json").read_text())
    spec["request"]["collective"] = "broadcast"
    spec_path, plan_path = tmp_path / "spec.json", tmp_path / "plan.json"
    spec_path.write_text(json.dumps(spec))
    reason = ("placement 0, request request: JAX has no rooted reduce or broadcast step, and every program the plan "
              "lists for it uses one (the best: ")
    run = [sys.executable, "-m", "solver.run", str(spec_path), "--export", "jax", "--out", str(plan_path)]
    direct = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=300)
    saved = subprocess.run([sys.executable, "-m", "solver.exports", str(plan_path), "--format", "jax"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    for done, prefix in ((direct, "error: --export: "), (saved, "error: ")):
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith(prefix + reason) and line.endswith("; export it for PyTorch (--format torch)")
    torch = subprocess.run([sys.executable, "-m", "solver.exports", str(plan_path), "--format", "torch"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert torch.returncode == 0 and "dist.broadcast(" in torch.stdout


@pytest.mark.parametrize("backend,op", [("gloo", "all_to_all"), ("nccl", "reduce_scatter")])
def test_the_reduce_scatter_step_tools_time_is_the_modules_own(monkeypatch, backend, op) -> None:
    """`to_torch.reduce_scatter_step()` (what scripts.gloo_probe times) compiles the modules' own step: on a 4-rank
    fake world each rank gets the sum of its block of every rank's input, by one exchange and a sum on gloo and by
    the library's reduce_scatter elsewhere."""
    from p2synth.solver.exports.to_torch import reduce_scatter_step

    world = World(4, False, backend)
    for name, module in fake_torch.install(world).items():
        monkeypatch.setitem(sys.modules, name, module)
    step = reduce_scatter_step()
    group = fake_torch.Group((0, 1, 2, 3))
    inputs = np.arange(4 * 4 * 3, dtype=np.float64).reshape(4, 4, 3) ** 2  # rank, block, element
    outputs = world.run(lambda rank: step(fake_torch.Tensor(inputs[rank].copy()), group, 1).numpy())
    for rank, out in enumerate(outputs):
        assert np.array_equal(out, inputs[:, rank].sum(axis=0))
        assert [c.op for c in world.records[rank] if isinstance(c, Launch)] == [op]
