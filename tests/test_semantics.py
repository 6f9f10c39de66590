"""The two semantics agree, the program counts of docs/semantics.md section 6 hold, and Z3 matches the explicit oracle."""

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from p2synth.encodings.programs import ProgramSketch
from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.program import STEP_OPS, Program, Step
from p2synth.hierarchies import abstract
from p2synth.hierarchies.concrete import ConcreteChecker, InvalidStep, check_program
from p2synth.hierarchies.program import to_program
from tests.strategies import placements, random_programs, requests

AR, RS, AG, R, B, A2A, SR = Collective


@pytest.mark.parametrize("cells,counts", [
    (1, [1, 3, 3]),
    (2, [1, 5, 25, 49]),
    (3, [1, 9, 75, 399, 1239, 1959]),
])
def test_sanity_counts(cells, counts):
    assert [abstract.count_programs(AR, cells, k) for k in range(1, len(counts) + 1)] == counts


def test_sanity_count_four_cells_eight_steps():
    assert abstract.count_programs(AR, 4, 8) == 146_713


@pytest.mark.parametrize("cells,steps", [(1, 3), (2, 4), (3, 4)])
def test_explicit_enumeration_matches_the_count(cells, steps):
    for col in Collective:
        listed = list(abstract.enumerate_programs(col, cells, steps))
        assert len(listed) == len(set(listed)) == abstract.count_programs(col, cells, steps)


def _two_by_four():
    h = Hierarchy(levels=(Level(name="node", count=2), Level(name="gpu", count=4)))
    return Placement(h, (Axis(name="data", size=8),), ((2, 4),))


def test_node2_gpu4_data8_has_exactly_49_programs_all_concretely_correct():
    p = _two_by_four()
    req = Request(frozenset({0}))
    node, gpu = p.cells
    sketch = ProgramSketch(AR, 2, 4)
    programs = {to_program(raw, p, req) for raw in sketch.enumerate()}
    assert len(programs) == 49
    checker = ConcreteChecker(p, req)
    assert all(checker.check(prog).ok for prog in programs)
    assert Program((Step(AR, (node, gpu)),)) in programs
    assert Program((Step(RS, (gpu,)), Step(AR, (node,)), Step(AG, (gpu,)))) in programs
    assert Program((Step(R, (gpu,)), Step(AR, (node,)), Step(B, (gpu,)))) in programs
    # and the explicit enumerator lists the same set
    assert programs == {to_program(raw, p, req) for raw in abstract.enumerate_programs(AR, 2, 4)}


def test_concrete_checker_rejects_double_counting_and_wrong_order():
    p = _two_by_four()
    req = Request(frozenset({0}))
    node, gpu = p.cells
    assert "twice" in check_program(p, req, Program((Step(AR, (gpu,)), Step(AR, (gpu,)), Step(AR, (node,))))).reason
    assert not check_program(p, req, Program((Step(AG, (gpu,)), Step(AR, (node, gpu))))).ok
    assert not check_program(p, req, Program((Step(RS, (gpu,)), Step(AR, (node,))))).ok  # goal not reached
    assert "inactive" in check_program(p, req, Program((Step(R, (gpu,)), Step(AR, (node, gpu))))).reason


def _abstract_trace(p, req, program):
    """Abstract state after each step (None from the first invalid step on)."""
    cells = req.reduced_cells(p)
    state = abstract.start_state(req.collective, len(cells))
    out = []
    for step in program.steps:
        mask = sum(1 << cells.index(c) for c in step.slice)
        state = None if state is None else abstract.apply(state, step.op, mask)
        out.append(state)
    return out


def _concrete_trace(p, req, program):
    """Whether each prefix is valid under the concrete semantics, and the goal outcome."""
    checker = ConcreteChecker(p, req)
    states = checker.start()
    valid = []
    ok = True
    for step in program.steps:
        if ok:
            try:
                checker.apply(states, step)
            except InvalidStep:
                ok = False
        valid.append(ok)
    return valid, ok and not checker.goal_failure(states)


@st.composite
def _case(draw, valid_only):
    p = draw(placements())
    req = draw(requests(p))
    cells = req.reduced_cells(p)
    assume(cells)  # a request over axes of size 1 reduces nothing: no program to check
    if valid_only:
        listed = list(abstract.enumerate_programs(req.collective, len(cells), 3 if len(cells) <= 3 else 2))
        raw = draw(st.sampled_from(listed))
        return p, req, to_program(raw, p, req)
    return p, req, draw(random_programs(p, req))


@given(_case(valid_only=False))
def test_semantics_agree_on_random_programs(case):
    p, req, program = case
    abstract_states = _abstract_trace(p, req, program)
    concrete_valid, concrete_goal = _concrete_trace(p, req, program)
    assert [s is not None for s in abstract_states] == concrete_valid
    final = abstract_states[-1]
    n = len(req.reduced_cells(p))
    assert (final is not None and abstract.is_goal(req.collective, final, n)) == concrete_goal


@st.composite
def _mutated(draw):
    """A valid program with one step's op or slice replaced: near misses of the semantics."""
    p, req, program = draw(_case(valid_only=True))
    cells = req.reduced_cells(p)
    i = draw(st.integers(0, len(program.steps) - 1))
    op = draw(st.sampled_from(list(Collective)))
    sl = tuple(sorted(draw(st.sets(st.sampled_from(cells), min_size=1))))
    steps = list(program.steps)
    steps[i] = Step(op, sl)
    return p, req, Program(tuple(steps))


@given(_mutated())
def test_semantics_agree_on_near_miss_programs(case):
    test_semantics_agree_on_random_programs.hypothesis.inner_test(case)


@given(_case(valid_only=True))
def test_every_abstractly_valid_program_is_concretely_correct(case):
    p, req, program = case
    assert program.steps and check_program(p, req, program).ok


@pytest.mark.parametrize("col", STEP_OPS)
@pytest.mark.parametrize("cells,steps", [(1, 3), (2, 3), (3, 3)])
def test_z3_program_set_equals_explicit_enumeration(col, cells, steps):
    z3_set = set(ProgramSketch(col, cells, steps).enumerate())
    assert z3_set == set(abstract.enumerate_programs(col, cells, steps))


# -- all_to_all ---------------------------------------------------------------



@pytest.mark.parametrize("cells,fubini", [(1, 1), (2, 3), (3, 13), (4, 75)])
def test_all_to_all_programs_are_the_ordered_set_partitions(cells, fubini):
    assert abstract.count_programs(A2A, cells, cells) == fubini
    assert abstract.count_programs(A2A, cells, cells + 2) == fubini  # never more than one step per cell
    listed = list(abstract.enumerate_programs(A2A, cells, cells))
    assert len(listed) == fubini
    for program in listed:  # each one: disjoint non-empty slices covering every cell, all all_to_all
        masks = [S for op, S in program]
        assert all(op is A2A for op, _ in program)
        assert sum(masks) == (1 << cells) - 1 and all(S for S in masks)
        assert all(a & b == 0 for i, a in enumerate(masks) for b in masks[i + 1:])


@pytest.mark.parametrize("cells,counts", [(2, [1, 3]), (3, [1, 7, 13]), (4, [1, 15, 51, 75])])
def test_all_to_all_counts_within_fewer_steps(cells, counts):
    assert [abstract.count_programs(A2A, cells, k) for k in range(1, cells + 1)] == counts


def test_all_to_all_node2_gpu4_has_exactly_the_three_programs():
    p = _two_by_four()
    req = Request(frozenset({0}), A2A)
    node, gpu = p.cells
    want = {
        Program((Step(A2A, (node, gpu)),)),
        Program((Step(A2A, (node,)), Step(A2A, (gpu,)))),
        Program((Step(A2A, (gpu,)), Step(A2A, (node,)))),
    }
    assert {to_program(raw, p, req) for raw in ProgramSketch(A2A, 2, 4).enumerate()} == want
    assert {to_program(raw, p, req) for raw in abstract.enumerate_programs(A2A, 2, 4)} == want
    assert all(check_program(p, req, prog).ok for prog in want)


def test_concrete_all_to_all_rejects_repeats_partial_programs_and_mixing():
    p = _two_by_four()
    req = Request(frozenset({0}), A2A)
    node, gpu = p.cells
    assert "non-empty share" in check_program(p, req, Program((Step(A2A, (gpu,)), Step(A2A, (gpu, node))))).reason
    assert "does not hold" in check_program(p, req, Program((Step(A2A, (gpu,)),))).reason
    assert "only applies" in check_program(p, req, Program((Step(AG, (node, gpu)),))).reason
    assert "only applies" in check_program(p, Request(frozenset({0})), Program((Step(A2A, (node, gpu)),))).reason


def test_concrete_all_to_all_delivers_every_chunk_to_its_destination():
    p = _two_by_four()
    req = Request(frozenset({0}), A2A)
    node, gpu = p.cells
    checker = ConcreteChecker(p, req)
    states = checker.start()
    for step in (Step(A2A, (gpu,)), Step(A2A, (node,))):
        checker.apply(states, step)
    for r, st_ in enumerate(states):  # device r holds chunk (r's coordinate, source's) from each of the 8
        assert st_.chunks == {checker.coord[r] + checker.coord[s]: 1 << s for s in range(8)}


@st.composite
def _a2a_case(draw, near_miss):
    """An all_to_all request and a program of all_to_all steps: random, or a valid one with one slice changed."""
    p = draw(placements())
    axes = draw(st.sets(st.integers(0, len(p.axes) - 1), min_size=1))
    req = Request(frozenset(axes), A2A)
    cells = req.reduced_cells(p)
    assume(cells)
    if not near_miss:
        return p, req, draw(random_programs(p, req, ops=[A2A]))
    listed = list(abstract.enumerate_programs(A2A, len(cells), len(cells)))
    program = to_program(draw(st.sampled_from(listed)), p, req)
    steps = list(program.steps)
    i = draw(st.integers(0, len(steps)))
    sl = tuple(sorted(draw(st.sets(st.sampled_from(cells), min_size=1))))
    how = draw(st.sampled_from(["replace", "insert", "drop"]))
    if how == "replace" and i < len(steps):
        steps[i] = Step(A2A, sl)
    elif how == "drop" and len(steps) > 1 and i < len(steps):
        del steps[i]
    else:
        steps.insert(i, Step(A2A, sl))
    return p, req, Program(tuple(steps))


@given(_a2a_case(near_miss=False))
def test_all_to_all_semantics_agree_on_random_programs(case):
    test_semantics_agree_on_random_programs.hypothesis.inner_test(case)


@given(_a2a_case(near_miss=True))
def test_all_to_all_semantics_agree_on_near_misses(case):
    test_semantics_agree_on_random_programs.hypothesis.inner_test(case)


# -- send_recv ----------------------------------------------------------------


def _pipeline_over_two_levels():
    """An axis `pipe` of 4 over node 2 x gpu 2 (cells pipe@node, pipe@gpu) beside `data` of 2 on the gpus."""
    h = Hierarchy(levels=(Level(name="node", count=2), Level(name="gpu", count=4)))
    return Placement(h, (Axis(name="pipe", size=4), Axis(name="data", size=2)), ((2, 2), (1, 2)))


def test_send_recv_has_one_program_the_shift_over_every_cell_of_its_axis():
    p = _pipeline_over_two_levels()
    req = Request(frozenset({0}), SR)
    node, gpu = req.reduced_cells(p)
    assert [abstract.count_programs(SR, 2, k) for k in (1, 2, 4)] == [1, 1, 1]
    assert list(abstract.enumerate_programs(SR, 2, 4)) == [((SR, 0b11),)]
    checker = ConcreteChecker(p, req)
    assert checker.check(Program((Step(SR, (node, gpu)),))).ok
    # a shift inside one level, or twice, or mixed with another op, is not the request's shift
    assert not checker.check(Program((Step(SR, (gpu,)),))).ok
    assert not checker.check(Program((Step(SR, (gpu,)), Step(SR, (node,))))).ok
    twice = checker.check(Program((Step(SR, (node, gpu)), Step(SR, (node, gpu)))))
    assert not twice.ok and "own input, once" in twice.reason
    assert not checker.check(Program((Step(A2A, (node, gpu)),))).ok
    assert not check_program(p, Request(frozenset({0}), A2A), Program((Step(SR, (node, gpu)),))).ok
    assert abstract.run(A2A, 2, [(SR, 0b11)]) is None and abstract.run(SR, 2, [(A2A, 0b11)]) is None


def test_the_shift_gives_each_member_its_predecessors_buffer_on_the_axis():
    """Device digits (node, gpu; pipe@node, pipe@gpu, data@gpu): the pipe position is 2 pipe@node + pipe@gpu, and
    member i ends with member i - 1's contributions, chunk for chunk."""
    p = _pipeline_over_two_levels()
    req = Request(frozenset({0}), SR)
    node, gpu = req.reduced_cells(p)
    checker = ConcreteChecker(p, req)
    states = checker.start()
    checker.apply(states, Step(SR, (node, gpu)))
    for r in range(p.num_devices):
        members = p.group(r, (node, gpu))
        i = p.position(r, (node, gpu))
        assert set(states[r].chunks.values()) == {1 << members[i - 1]}
    # ranks 0..7 are (node, gpu) = (r // 4, r % 4); gpu digit = 2 pipe@gpu + data: pipe order 0, 2, 4, 6 for data 0
    assert [p.position(r, (node, gpu)) for r in (0, 2, 4, 6)] == [0, 1, 2, 3]
    assert set(states[0].chunks.values()) == {1 << 6} and set(states[4].chunks.values()) == {1 << 2}
