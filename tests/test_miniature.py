"""The shrinking lemma (docs/semantics.md section 5): a program's concrete verdict is its miniature's verdict."""

from hypothesis import assume, given
from hypothesis import strategies as st

from p2synth.hierarchies import abstract
from p2synth.hierarchies.concrete import check_program
from p2synth.hierarchies.program import to_program
from p2synth.hierarchies.verify import miniature
from tests.strategies import placements, random_programs, requests


def verdict(placement, request, program) -> str:
    """Where the concrete run ends: "ok", "step i" (the first invalid step) or "goal" (valid, goal not reached)."""
    result = check_program(placement, request, program)
    if result.ok:
        return "ok"
    return result.reason.split(" ")[0] + " " + result.reason.split(" ")[1] if result.reason.startswith("step") else "goal"


@st.composite
def cases(draw):
    """A random placement and request, and a program that is random or (half the time) valid."""
    p = draw(placements())
    req = draw(requests(p))
    cells = req.reduced_cells(p)
    assume(cells)
    if draw(st.booleans()):
        listed = list(abstract.enumerate_programs(req.collective, len(cells), 3 if len(cells) <= 3 else 2))
        return p, req, to_program(draw(st.sampled_from(listed)), p, req)
    return p, req, draw(random_programs(p, req))


@given(cases())
def test_a_program_ends_the_same_way_on_its_placement_and_on_the_miniature(case):
    p, req, program = case
    mini = miniature(p, req)
    assert mini.cells_of(req.axes) == p.cells_of(req.axes)  # same reduced cells, each of factor 2
    assert all(mini.factor(c) == 2 for c in mini.cells)
    assert verdict(mini, req, program) == verdict(p, req, program)
