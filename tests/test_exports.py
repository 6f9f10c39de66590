"""Tests of the PyTorch and JAX exports (solver/exports/).

Framework-free tests check the generated source (mesh order against
Placement.digits, imports, names, rejected programs) and simulate every
exported step plan with numpy. The `torch` and `jax` tests run the generated
modules for real and compare each device's result with the plain collective
over its whole reduction group, exactly (integer data):

* torch: one job of 8 processes (``python -m tests.test_exports torch ...``),
  gloo backend on CPU, file rendezvous in a temporary folder;
* jax: one process (``python -m tests.test_exports jax ...``) with 8 host CPU
  devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``).

Each job runs every case once and writes every device's output to .npz files
that the parametrized tests read; both skip when their framework is missing.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Program, Request, Step
from p2synth.hierarchies.abstract import enumerate_programs
from p2synth.hierarchies.program import to_program
from p2synth.solver.exports.planning import RepackPlan, RequestPlan, identifiers, plan_module
from p2synth.solver.exports.formats import EXPORTERS
from p2synth.solver.exports.choice import ExportFormat
from p2synth.solver.exports.planning import ExportRequest, NotExportable
from p2synth.solver.exports.to_jax import export_jax
from p2synth.solver.exports.to_torch import export_torch
from tests.forked import run_forked, run_worker

WORLD = 8
JOB_TIMEOUT_S = 300
POISON = -(10**6)  # what a non-root holds after a reduce in the numpy simulation


# -- cases -------------------------------------------------------------------


def make_placement(levels: dict[str, int], axes: dict[str, int], matrix: tuple[tuple[int, ...], ...]) -> Placement:
    """A placement from level counts, axis sizes (both in order) and the matrix."""
    hierarchy = Hierarchy(name="test", levels=tuple(Level(name=n, count=c) for n, c in levels.items()))
    return Placement(hierarchy, tuple(Axis(name=n, size=s) for n, s in axes.items()), matrix)


def sample_programs(placement: Placement, request: Request, per_length: int | None) -> list[Program]:
    """Valid programs of 1..3 steps, at most `per_length` of each length (evenly spaced), None for all."""
    by_length: dict[int, list] = {}
    for masks in enumerate_programs(request.collective, len(request.reduced_cells(placement)), 3):
        by_length.setdefault(len(masks), []).append(masks)
    picked = []
    for group in by_length.values():
        stride = 1 if per_length is None else max(1, math.ceil(len(group) / per_length))
        picked += group[::stride]
    return [to_program(masks, placement, request) for masks in picked]


@dataclass(frozen=True)
class Case:
    """One generated module: a placement and the requests exported for it."""

    id: str
    placement: Placement
    items: tuple[ExportRequest, ...]


def make_case(case_id: str, placement: Placement, wanted: list[tuple[tuple[str, ...], Collective, int | None]]) -> Case:
    """A case exporting, for each (axis names, collective, per_length), a sample of programs."""
    names = [a.name for a in placement.axes]
    items = []
    for axes, collective, per_length in wanted:
        request = Request(frozenset(names.index(a) for a in axes), collective)
        sampled = sample_programs(placement, request, per_length)
        pipelined = [Program(p.steps, 2 + i % 2) for i, p in enumerate(p for p in sampled if len(p.steps) > 1) if i % 3 == 0]
        for i, program in enumerate(sampled + pipelined):  # some on 2 or 3 pieces too
            items.append(ExportRequest(f"{'+'.join(axes)}-{collective.value}-{i}", request, program, 1 << 20))
    return Case(case_id, placement, tuple(items))


def all_collectives(axes: tuple[str, ...], per_length: int | None, reduce_per_length: int | None):
    """`wanted` entries for every collective over `axes` (reduce has the most programs: its own limit)."""
    return [(axes, c, reduce_per_length if c is Collective.REDUCE else per_length) for c in Collective
            if c is not Collective.SEND_RECV or len(axes) == 1]  # a shift runs along one axis


CASES = [
    # one axis over two levels: flat, RS -> AR -> AG, R -> AR -> B, multi-cell slices...
    make_case(
        "node2-gpu4.data8",
        make_placement({"node": 2, "gpu": 4}, {"data": 8}, ((2, 4),)),
        all_collectives(("data",), None, 8),
    ),
    # two axes whose cell order (data@gpu, model@node) differs from the mesh order (model@node, data@gpu)
    make_case(
        "node2-gpu4.data4-model2",
        make_placement({"node": 2, "gpu": 4}, {"data": 4, "model": 2}, ((1, 4), (2, 1))),
        [(("model",), Collective.ALL_REDUCE, None)] + all_collectives(("data", "model"), 4, 4),
    ),
    # three levels; data's cells are not adjacent in the mesh (data@node, model@socket, data@gpu)
    make_case(
        "node2-socket2-gpu2.data4-model2",
        make_placement({"node": 2, "socket": 2, "gpu": 2}, {"data": 4, "model": 2}, ((2, 1, 2), (1, 2, 1))),
        [(("data",), Collective.ALL_REDUCE, 4)] + all_collectives(("data", "model"), 3, 3),
    ),
]

ENTRIES = [(case, item) for case in CASES for item in case.items]


def entry_id(case: Case, item: ExportRequest) -> str:
    """Test id: case, axes, collective and program text."""
    axes = "+".join(case.placement.axes[a].name for a in sorted(item.request.axes))
    return f"{case.id}/{axes}/{item.request.collective.value}/{item.program.text(case.placement).replace(' ', '')}"


ENTRY_IDS = [entry_id(c, it) for c, it in ENTRIES]


def entry_key(case: Case, name: str) -> str:
    """Key of one request function's data in the .npz files."""
    return f"{case.id}/{name}"


def framework_items(case: Case, framework: str) -> list[ExportRequest]:
    """The case's requests whose program `framework` can express (JAX: none with a reduce or broadcast step)."""
    return [it for it in case.items if ExportFormat(framework).can_run(it.program)]


def function_names(case: Case, framework: str = "torch") -> list[str]:
    """The identifiers the exported module gives the case's request functions, in the order of framework_items."""
    return identifiers([it.name for it in framework_items(case, framework)])


def test_cases_cover_the_classic_hierarchical_programs() -> None:
    wanted = [
        "node2-gpu4.data8/data/all_reduce/AR(data@node,data@gpu)",
        "node2-gpu4.data8/data/all_reduce/RS(data@gpu)->AR(data@node)->AG(data@gpu)",
        "node2-gpu4.data8/data/all_reduce/R(data@gpu)->AR(data@node)->B(data@gpu)",
        "node2-gpu4.data8/data/all_to_all/A2A(data@node,data@gpu)",
        "node2-gpu4.data8/data/all_to_all/A2A(data@node)->A2A(data@gpu)",
        "node2-gpu4.data8/data/all_to_all/A2A(data@gpu)->A2A(data@node)",
    ]
    assert set(wanted) <= set(ENTRY_IDS)


def test_all_to_all_exports_call_the_frameworks_all_to_all_over_each_step_group() -> None:
    placement = PLACEMENTS[0]
    node, gpu = placement.cells
    request = Request(frozenset({0}), Collective.ALL_TO_ALL)
    program = Program((Step(Collective.ALL_TO_ALL, (node,)), Step(Collective.ALL_TO_ALL, (gpu,))))
    torch_src = export_torch(placement, [("token_dispatch", request, program, 1 << 20)])
    assert "dist.all_to_all_single(out.view(-1), send.view(-1), group=group, async_op=async_op)" in torch_src
    body = torch_src[torch_src.index("def token_dispatch"):].split('    """\n')[1]
    assert body.split("\n")[:9] == [
        "    x = _chunked(tensor, (2, 4))  # buffer [data@node, data@gpu, *]",
        "    # 1. A2A(data@node): exchanged over the slice, buffer [data@node, data@gpu, *]",
        '    x = _all_to_all(x, mesh.get_group("data@node"))',
        "    # repack: buffer -> [data@gpu, data@node, *]",
        "    x = x.permute(1, 0, 2).contiguous()",
        "    # 2. A2A(data@gpu): exchanged over the slice, buffer [data@gpu, data@node, *]",
        '    x = _all_to_all(x, mesh.get_group("data@gpu"))',
        "    # repack: buffer -> [data@node, data@gpu, *]",
        "    x = x.permute(1, 0, 2).contiguous()",
    ]
    assert torch_src.rstrip().endswith('"token_dispatch": token_dispatch,\n}')
    jax_src = export_jax(placement, [("token_dispatch", request, program, 1 << 20)])
    assert "out = lax.all_to_all(x.reshape(-1), axes, 0, 0, tiled=True)" in jax_src
    assert 'x = _all_to_all(x, ("data@node",))' in jax_src and 'x = _all_to_all(x, ("data@gpu",))' in jax_src
    assert jax_src.count("x = jnp.transpose(x, (1, 0, 2))") == 2
    assert "import jax.numpy as jnp" in jax_src
    flat = Program((Step(Collective.ALL_TO_ALL, (node, gpu)),))
    torch_flat = export_torch(placement, [("a2a", request, flat, 1 << 20)])
    assert 'x = _all_to_all(x, _FLAT_GROUPS[("data@node", "data@gpu")])' in torch_flat
    assert ".permute(" not in torch_flat  # the one step's slice leads the canonical order
    for source in (torch_src, jax_src, torch_flat):
        compile(source, "plan.py", "exec")


# -- expected results (the plain collective over the whole reduction group) ---


def group_coordinates(placement: Placement, request: Request) -> tuple[list[tuple], list[int]]:
    """Per rank: the key of its reduction group (digits off the reduced cells) and its coordinate in it."""
    cells = request.reduced_cells(placement)
    keys, coords = [], []
    for r in range(placement.num_devices):
        d = placement.digits(r)
        keys.append(tuple(v for c, v in sorted(d.items()) if c not in cells))
        k = 0
        for c in cells:  # cell order: axis-major, so this is the coordinate over the reduced axes
            k = k * placement.factor(c) + d[c]
        coords.append(k)
    return keys, coords


def input_shape(request: Request, group_size: int) -> tuple[int, int]:
    """Shape of each device's input: two rows per chunk (one chunk for all_gather), three columns."""
    return (2, 3) if request.collective is Collective.ALL_GATHER else (2 * group_size, 3)


def make_inputs(case_index: int, item_index: int, request: Request, group_size: int) -> np.ndarray:
    """Distinct small integers per device, stacked: shape (WORLD, *input_shape)."""
    rng = np.random.default_rng([case_index, item_index])
    return rng.integers(-50, 50, size=(WORLD, *input_shape(request, group_size)), dtype=np.int32)


def expected(placement: Placement, request: Request, inputs: np.ndarray) -> dict[int, np.ndarray]:
    """What each rank must hold after the plain collective; reduce checks only the roots."""
    keys, coords = group_coordinates(placement, request)
    out = {}
    for r in range(placement.num_devices):
        members = sorted((m for m in range(placement.num_devices) if keys[m] == keys[r]), key=lambda m: coords[m])
        total = sum(inputs[m].astype(np.int64) for m in members).astype(np.int32)
        col = request.collective
        if col is Collective.ALL_REDUCE or (col is Collective.REDUCE and coords[r] == 0):
            out[r] = total
        elif col is Collective.REDUCE_SCATTER:
            out[r] = total.reshape(len(members), -1, total.shape[-1])[coords[r]]
        elif col is Collective.ALL_GATHER:
            out[r] = np.concatenate([inputs[m] for m in members])
        elif col is Collective.BROADCAST:
            out[r] = inputs[members[0]]
        elif col is Collective.ALL_TO_ALL:  # chunk k: member k's chunk addressed to r
            out[r] = np.concatenate([inputs[m].reshape(len(members), -1, inputs.shape[-1])[coords[r]] for m in members])
        elif col is Collective.SEND_RECV:  # the predecessor's input (member coords[r] - 1 on the axis)
            out[r] = inputs[members[(coords[r] - 1) % len(members)]]
    return out


def assert_matches(placement: Placement, request: Request, inputs: np.ndarray, outputs: dict[int, np.ndarray]) -> None:
    """Every checked rank's output equals the plain collective's, exactly."""
    for r, want in expected(placement, request, inputs).items():
        got = outputs[r]
        assert got.shape == want.shape, f"rank {r}: shape {got.shape}, expected {want.shape}"
        assert np.array_equal(got, want), f"rank {r}: got\n{got}\nexpected\n{want}"


# -- framework-free tests -------------------------------------------------------

PLACEMENTS = [
    make_placement({"node": 2, "gpu": 4}, {"data": 8}, ((2, 4),)),
    make_placement({"node": 2, "gpu": 4}, {"data": 4, "model": 2}, ((1, 4), (2, 1))),
    make_placement({"node": 2, "gpu": 4}, {"data": 4, "model": 2}, ((2, 2), (1, 2))),
    make_placement(
        {"pod": 2, "node": 3, "gpu": 4}, {"data": 6, "tensor": 2, "pipe": 2}, ((2, 3, 1), (1, 1, 2), (1, 1, 2))
    ),
    make_placement({"node": 2, "socket": 2, "gpu": 2}, {"data": 4, "model": 2}, ((2, 1, 2), (1, 2, 1))),
]


def module_constants(source: str) -> dict[str, object]:
    """The literal top-level constants (MESH_SHAPE, ...) of a generated module, without running it."""
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def default_items(placement: Placement) -> list[ExportRequest]:
    """One all_reduce per axis, with the default (single-step) program."""
    items = []
    for a, axis in enumerate(placement.axes):
        request = Request(frozenset({a}))
        program = Program((Step(Collective.ALL_REDUCE, request.reduced_cells(placement)),))
        items.append(ExportRequest(axis.name, request, program, 1024))
    return items


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: p.describe())
@pytest.mark.parametrize("framework", sorted(EXPORTERS))
def test_mesh_position_of_every_rank_is_its_digits(placement: Placement, framework: str) -> None:
    source = EXPORTERS[framework](placement, default_items(placement))
    consts = module_constants(source)
    shape, names = consts["MESH_SHAPE"], consts["MESH_DIM_NAMES" if framework == "torch" else "MESH_AXIS_NAMES"]
    cells = [placement.cell_from_names(*name.split("@")) for name in names]
    assert sorted(cells) == sorted(placement.cells)
    assert list(shape) == [placement.factor(c) for c in cells]
    mesh = np.arange(placement.num_devices).reshape(shape)  # init_device_mesh / build_mesh: row-major ranks
    for r in range(placement.num_devices):
        position = tuple(int(i) for i in np.argwhere(mesh == r)[0])
        assert position == tuple(placement.digits(r)[c] for c in cells)


@pytest.mark.parametrize("framework", sorted(EXPORTERS))
def test_generated_module_is_self_contained_python(framework: str) -> None:
    case = CASES[1]
    source = EXPORTERS[framework](case.placement, framework_items(case, framework))
    tree = ast.parse(source)
    roots = {alias.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert roots <= {"math", "numpy", "torch", "jax"}
    assert roots & {"torch", "jax"} == {framework}
    defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"build_mesh", *function_names(case, framework)} <= defs
    assert source.startswith("# Generated by p2synth")
    assert case.placement.describe() in source
    assert "REQUESTS = {" in source


def test_helpers_appear_only_when_used() -> None:
    placement = PLACEMENTS[0]
    source = export_torch(placement, default_items(placement))
    assert "_reduce_scatter" not in source and "_all_gather" not in source
    assert "def _flat_group" in source  # the one-step program's slice spans both mesh dims
    source = export_jax(placement, default_items(placement))
    assert "_reduce(" not in source and "_broadcast(" not in source


@pytest.mark.parametrize(
    ("names", "want"),
    [
        (["grad-sync", "grad sync", "grad_sync"], ["grad_sync", "grad_sync_2", "grad_sync_3"]),
        (["3d", "", "---"], ["request_3d", "request", "request_2"]),
        (["class", "build_mesh", "_chunked"], ["class_request", "build_mesh_request", "chunked"]),
        (["lambda!", "REQUESTS", "range"], ["lambda_request", "REQUESTS_request", "range_request"]),
        (["données"], ["donn_es"]),
    ],
)
def test_request_names_become_distinct_identifiers(names: list[str], want: list[str]) -> None:
    assert identifiers(names) == want


def test_exported_names_are_sanitised_in_the_module() -> None:
    placement = PLACEMENTS[0]
    item = default_items(placement)[0]
    source = export_torch(placement, [item._replace(name="grad-sync"), item._replace(name="import")])
    body = ast.parse(source).body
    assert {"grad_sync", "import_request"} <= {n.name for n in body if isinstance(n, ast.FunctionDef)}
    table = next(n.value for n in body if isinstance(n, ast.Assign) and n.targets[0].id == "REQUESTS")
    assert {k.value: v.id for k, v in zip(table.keys, table.values, strict=True)} == {
        "grad-sync": "grad_sync",
        "import": "import_request",
    }


def test_invalid_programs_are_rejected() -> None:
    placement = PLACEMENTS[1]  # cells data@gpu, model@node
    data_gpu, model_node = placement.cells
    data = Request(frozenset({0}))
    bad = {
        "gathers first": Program((Step(Collective.ALL_GATHER, (data_gpu,)),)),
        "cell of another axis": Program((Step(Collective.ALL_REDUCE, (data_gpu, model_node)),)),
        "nothing to do": Program(()),
        "scattered at the end": Program((Step(Collective.REDUCE_SCATTER, (data_gpu,)),)),
    }
    for why, program in bad.items():
        with pytest.raises(ValueError):
            export_torch(placement, [(why, data, program, 1)])
        with pytest.raises(ValueError):
            export_jax(placement, [(why, data, program, 1)])


def test_single_device_placement_is_rejected() -> None:
    placement = make_placement({"node": 1}, {"data": 1}, ((1,),))
    with pytest.raises(ValueError, match="no cells"):
        export_torch(placement, [])


def simulate(placement: Placement, plan: RequestPlan, inputs: np.ndarray) -> dict[int, np.ndarray]:
    """Run a request plan on every device with numpy, numbering a group's members in rank order.

    This is what the frameworks do: torch numbers a group's ranks in rank order, and JAX numbers
    the members over a tuple of mesh axes row-major in that tuple's (mesh) order, which is the same.
    """
    n = placement.num_devices
    if not plan.steps:
        return {r: inputs[r] for r in range(n)}
    xs = {r: inputs[r].reshape(*plan.layout_sizes, -1) for r in range(n)}
    for action in plan.actions:
        if isinstance(action, RepackPlan):
            xs = {r: np.transpose(x, action.axes) for r, x in xs.items()}
            continue
        cells = {placement.cell_from_names(*name.split("@")) for name in action.dims}
        groups: dict[tuple, list[int]] = {}
        for r in range(n):
            groups.setdefault(tuple(v for c, v in sorted(placement.digits(r).items()) if c not in cells), []).append(r)
        for members in groups.values():
            simulate_group(action, members, xs)
        assert all(x.ndim == len(action.layout) + 1 for x in xs.values())
    g = plan.group_size
    final = {
        Collective.REDUCE_SCATTER: lambda x: x.reshape(inputs.shape[1] // g, *inputs.shape[2:]),
        Collective.ALL_GATHER: lambda x: x.reshape(inputs.shape[1] * g, *inputs.shape[2:]),
    }.get(plan.collective, lambda x: x.reshape(inputs.shape[1:]))
    return {r: final(x) for r, x in xs.items()}


def simulate_group(step, members: list[int], xs: dict[int, np.ndarray]) -> None:
    """Apply one step to one group (members in rank order), in place on `xs`; the slice's dims lead where they must."""
    k = len(members)
    if step.op is Collective.ALL_REDUCE:
        total = sum(xs[m] for m in members)
        for m in members:
            xs[m] = total.copy()
    elif step.op is Collective.REDUCE:
        xs[members[0]] = sum(xs[m] for m in members)
        for m in members[1:]:
            xs[m] = np.full_like(xs[m], POISON)
    elif step.op is Collective.BROADCAST:
        for m in members[1:]:
            xs[m] = xs[members[0]].copy()
    elif step.op is Collective.REDUCE_SCATTER:
        total = sum(xs[m] for m in members)
        assert total.shape[: len(step.dims)] == step.sizes
        rest = total.shape[len(step.dims):]
        for i, m in enumerate(members):
            xs[m] = total.reshape(k, -1)[i].reshape(rest)
    elif step.op is Collective.SEND_RECV:  # member i's buffer to member i + 1
        sent = [xs[m] for m in members]
        for i, m in enumerate(members):
            xs[m] = sent[i - 1].copy()
    elif step.op is Collective.ALL_TO_ALL:  # block i of member j's send goes to member i, at place j
        sends = [xs[m] for m in members]
        assert sends[0].shape[: len(step.dims)] == step.sizes
        for i, m in enumerate(members):
            xs[m] = np.stack([s.reshape(k, -1)[i] for s in sends]).reshape(sends[i].shape)
    else:  # all_gather
        gathered = np.concatenate([xs[m].reshape(-1) for m in members]).reshape(*step.sizes, *xs[members[0]].shape)
        for m in members:
            xs[m] = gathered.copy()


@pytest.mark.parametrize(("case", "item"), ENTRIES, ids=ENTRY_IDS)
def test_step_plan_simulated_with_numpy_equals_plain_collective(case: Case, item: ExportRequest) -> None:
    plan = plan_module(case.placement, [item]).requests[0]
    inputs = make_inputs(CASES.index(case), case.items.index(item), item.request, plan.group_size)
    assert_matches(case.placement, item.request, inputs, simulate(case.placement, plan, inputs))


# -- running the generated modules ------------------------------------------------


def write_job(workdir: Path, framework: str) -> None:
    """Generate every case's module for `framework`, its inputs and the manifest the workers follow."""
    inputs, manifest = {}, []
    for ci, case in enumerate(CASES):
        path = workdir / f"plan_{framework}_{ci}.py"
        items = framework_items(case, framework)
        path.write_text(EXPORTERS[framework](case.placement, items))
        plans = plan_module(case.placement, items, framework).requests
        entries = []
        for item, plan in zip(items, plans, strict=True):
            key = entry_key(case, plan.name)
            inputs[key] = make_inputs(ci, case.items.index(item), item.request, plan.group_size)
            entries.append([plan.name, key])
        manifest.append([str(path), entries])
    np.savez(workdir / "inputs.npz", **inputs)
    (workdir / "manifest.json").write_text(json.dumps(manifest))


def read_outputs(workdir: Path, framework: str) -> dict[str, dict[int, np.ndarray]]:
    """Outputs by entry key, then rank, from the workers' .npz files."""
    outputs: dict[str, dict[int, np.ndarray]] = {}
    if framework == "jax":  # one file, each entry stacked over the ranks
        with np.load(workdir / "jax.npz") as data:
            for key in data.files:
                outputs[key] = dict(enumerate(data[key]))
        return outputs
    for r in range(WORLD):  # one file per rank
        with np.load(workdir / f"torch-{r}.npz") as data:
            for key in data.files:
                outputs.setdefault(key, {})[r] = data[key]
    return outputs


def read_errors(workdir: Path) -> dict[str, str]:
    """Exceptions the workers caught, by entry key."""
    errors = {}
    for path in workdir.glob("errors-*.json"):
        errors.update(json.loads(path.read_text()))
    return errors


@pytest.fixture(scope="module")
def torch_results(tmp_path_factory) -> tuple[dict, dict]:
    """Run every case's PyTorch module once: 8 processes, gloo on CPU."""
    pytest.importorskip("torch")
    workdir = tmp_path_factory.mktemp("torch-export")
    write_job(workdir, "torch")
    run_worker("tests.test_exports", ["torch", str(workdir)], JOB_TIMEOUT_S)
    return read_outputs(workdir, "torch"), read_errors(workdir)


@pytest.fixture(scope="module")
def jax_results(tmp_path_factory) -> tuple[dict, dict]:
    """Run every case's JAX module once: one process with 8 host CPU devices."""
    pytest.importorskip("jax")
    workdir = tmp_path_factory.mktemp("jax-export")
    write_job(workdir, "jax")
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={WORLD}", JAX_PLATFORMS="cpu")
    run_worker("tests.test_exports", ["jax", str(workdir)], JOB_TIMEOUT_S, env)
    return read_outputs(workdir, "jax"), read_errors(workdir)


def check_run(results: tuple[dict, dict], case: Case, item: ExportRequest, framework: str) -> None:
    """Compare one request function's outputs on every rank with the plain collective (or JAX's refusal)."""
    if not ExportFormat(framework).can_run(item.program):
        with pytest.raises(NotExportable, match="JAX has no rooted reduce or broadcast step"):
            EXPORTERS[framework](case.placement, [item])
        return
    outputs, errors = results
    name = function_names(case, framework)[framework_items(case, framework).index(item)]
    key = entry_key(case, name)
    assert key not in errors, errors.get(key)
    plan = plan_module(case.placement, [item]).requests[0]
    inputs = make_inputs(CASES.index(case), case.items.index(item), item.request, plan.group_size)
    assert_matches(case.placement, item.request, inputs, outputs[key])


@pytest.mark.torch
@pytest.mark.parametrize(("case", "item"), ENTRIES, ids=ENTRY_IDS)
def test_torch_export_equals_plain_collective(torch_results, case: Case, item: ExportRequest) -> None:
    check_run(torch_results, case, item, "torch")


@pytest.mark.jax
@pytest.mark.parametrize(("case", "item"), ENTRIES, ids=ENTRY_IDS)
def test_jax_export_equals_plain_collective(jax_results, case: Case, item: ExportRequest) -> None:
    check_run(jax_results, case, item, "jax")


# -- workers (run as python -m tests.test_exports ...) ------------------------------


def load_module(path: str):
    """Import a generated module from its file."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_job(workdir: Path) -> int:
    """The PyTorch job: fork WORLD ranks after importing torch once; 1 if a rank fails or hangs.

    A rank that fails leaves the others waiting in a collective, so they are stopped then.
    """
    import torch  # noqa: F401  (imported once, before forking: the ranks share it)

    return run_forked(torch_worker, (workdir,), WORLD, JOB_TIMEOUT_S - 30)


def torch_worker(rank: int, workdir: Path) -> None:
    """One rank of the PyTorch job: every module's mesh, then every request function, in manifest order."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{workdir / 'store'}", rank=rank, world_size=WORLD)
    inputs = np.load(workdir / "inputs.npz")
    outputs, errors = {}, {}
    for path, entries in json.loads((workdir / "manifest.json").read_text()):
        module = load_module(path)
        mesh = module.build_mesh("cpu")
        for name, key in entries:
            try:
                outputs[key] = getattr(module, name)(torch.from_numpy(inputs[key][rank].copy()), mesh).numpy()
            except Exception as e:  # raised alike on every rank: recorded for this entry's test
                errors[key] = repr(e)
    np.savez(workdir / f"torch-{rank}.npz", **outputs)
    (workdir / f"errors-{rank}.json").write_text(json.dumps(errors))
    dist.destroy_process_group()


def jax_worker(workdir: Path) -> None:
    """The JAX job: every module's mesh, then every request function on the stacked inputs."""
    inputs = np.load(workdir / "inputs.npz")
    outputs, errors = {}, {}
    for path, entries in json.loads((workdir / "manifest.json").read_text()):
        module = load_module(path)
        mesh = module.build_mesh()
        for name, key in entries:
            x = inputs[key]
            try:
                out = module.on_mesh(getattr(module, name), mesh)(x.reshape(-1, *x.shape[2:]))
                outputs[key] = np.asarray(out).reshape(WORLD, -1, *x.shape[2:])
            except Exception as e:  # recorded for the test of this entry
                errors[key] = repr(e)
    np.savez(workdir / "jax.npz", **outputs)
    (workdir / "errors-jax.json").write_text(json.dumps(errors))


if __name__ == "__main__":
    if sys.argv[1] == "torch":
        sys.exit(torch_job(Path(sys.argv[2])))
    jax_worker(Path(sys.argv[2]))
