"""Hypothesis strategies shared by the tests: random placements, requests and programs."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.model import CpuVendor, Fabric, GpuArch, NcclProfile, SwitchReduction
from p2synth.hierarchies.program import Program, Step


@st.composite
def placements(draw, max_devices: int = 48, max_axes: int = 3, max_levels: int = 3) -> Placement:
    """A random placement: draw the matrix, derive axis sizes and level counts from it."""
    n_axes = draw(st.integers(1, max_axes))
    n_levels = draw(st.integers(1, max_levels))
    matrix = draw(
        st.lists(st.lists(st.sampled_from([1, 1, 2, 2, 3, 4]), min_size=n_levels, max_size=n_levels),
                 min_size=n_axes, max_size=n_axes).filter(lambda m: math.prod(map(math.prod, m)) <= max_devices)
    )
    levels = tuple(Level(name=f"L{l}", count=math.prod(row[l] for row in matrix)) for l in range(n_levels))
    axes = tuple(Axis(name=f"a{a}", size=math.prod(row)) for a, row in enumerate(matrix))
    return Placement(Hierarchy(name="random", levels=levels), axes, tuple(map(tuple, matrix)))


@st.composite
def requests(draw, placement: Placement, collectives: tuple[Collective, ...] = tuple(Collective)) -> Request:
    """A random request over a non-empty subset of the placement's axes, its collective one of `collectives` (the
    searches' tests take STEP_OPS: a send_recv is never searched)."""
    axes = draw(st.sets(st.integers(0, len(placement.axes) - 1), min_size=1))
    collective = draw(st.sampled_from(list(collectives)))
    if collective is Collective.SEND_RECV:  # a shift runs along exactly one axis
        axes = {draw(st.sampled_from(sorted(axes)))}
    return Request(frozenset(axes), collective)


@st.composite
def random_programs(draw, placement: Placement, request: Request, max_steps: int = 4,
                    ops: list[Collective] | None = None) -> Program:
    """A random (usually invalid) program over the request's reduced cells, its steps' ops from `ops` (default all)."""
    cells = request.reduced_cells(placement)
    steps = draw(st.lists(
        st.tuples(st.sampled_from(ops or list(Collective)), st.sets(st.sampled_from(cells), min_size=1)),
        min_size=1, max_size=max_steps,
    ))
    return Program(tuple(Step(op, tuple(sorted(s))) for op, s in steps))


@st.composite
def nccl_level_figures(draw) -> dict:
    """A level's NCCL figures: its fabric (or none), and a reducing switch (NVLS or SHARP) with its rate and latency,
    or none."""
    switch = draw(st.sampled_from([None, *SwitchReduction]))
    figures = {"fabric": draw(st.sampled_from([None, *Fabric]))}
    if switch is not None:
        figures.update(switch_reduce=switch, switch_reduce_GBps=draw(st.sampled_from([0.4, 3.0, 80.0])),
                       switch_latency_us=draw(st.sampled_from([1.0, 25.0])))
    return figures


def nccl_profiles() -> st.SearchStrategy:
    """NCCL's profile of a system (GPU generation, CPU vendor), or none."""
    return st.one_of(st.none(), st.builds(NcclProfile, arch=st.sampled_from(list(GpuArch)),
                                          cpu=st.sampled_from(list(CpuVendor))))
