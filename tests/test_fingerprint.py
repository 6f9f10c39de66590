"""The fingerprint checker (hierarchies/fingerprint.py, FingerprintChecker) against the exact one: the same verdict on
random programs, valid ones (walks of the abstract state space) and their mutants, and every misplaced, dropped or
doubled contribution seen; the verifier picking it only where the exact matrix is too large, and refusing beyond."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.concrete import ConcreteChecker
from p2synth.hierarchies.fingerprint import FingerprintChecker
from p2synth.hierarchies.program import Program, Step
from p2synth.hierarchies.statespace import state_space
from p2synth.hierarchies.verify import CheckTooLarge, Verifier, check_bytes

from .strategies import placements, random_programs, requests

SUMMED = [c for c in Collective if c not in (Collective.ALL_TO_ALL, Collective.SEND_RECV)]


@st.composite
def valid_programs(draw, placement: Placement, request: Request) -> Program:
    """A random walk of the abstract state space, as a program over the request's cells: valid steps (by the abstract
    semantics, which the concrete one agrees with), often ending at the goal."""
    cells = request.reduced_cells(placement)
    space = state_space(request.collective, len(cells))
    state, steps = space.start, []
    for _ in range(6):
        if steps and space.goal[state] and draw(st.booleans()):
            break
        valid = [s for s in space.steps if state in set(s.sources.tolist())]
        if not valid:  # a dead end (a reduce_scatter with a rooted cell): the program stays as it is
            break
        step = draw(st.sampled_from(valid))
        steps.append(Step(step.op, tuple(c for i, c in enumerate(cells) if step.mask >> i & 1)))
        state = int(step.targets[np.searchsorted(step.sources, state)])
    return Program(tuple(steps))


def _mutants(program: Program):
    """Programs one change away: a step dropped, doubled, or with another op."""
    steps = program.steps
    for i in range(len(steps)):
        yield Program(steps[:i] + steps[i + 1:])
        yield Program(steps[:i + 1] + steps[i:])
        for op in SUMMED:
            if op is not steps[i].op:
                yield Program(steps[:i] + (Step(op, steps[i].slice),) + steps[i + 1:])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_fingerprints_give_the_exact_checkers_verdict(data):
    placement = data.draw(placements(max_devices=24))
    request = data.draw(requests(placement, tuple(SUMMED)))
    if not request.reduced_cells(placement):
        return
    exact, prints = ConcreteChecker(placement, request), FingerprintChecker(placement, request)
    programs = [data.draw(random_programs(placement, request, ops=SUMMED))]
    if len(request.reduced_cells(placement)) <= 4:
        valid = data.draw(valid_programs(placement, request))
        programs += [valid, *_mutants(valid)]
    for program in programs:
        assert exact.check(program).ok == prints.check(program).ok, program


def _two_level():
    h = Hierarchy(levels=(Level(name="node", count=4), Level(name="gpu", count=4)))
    return Placement(h, (Axis(name="dp", size=4), Axis(name="tp", size=4)), ((2, 2), (2, 2)))


def test_a_contribution_counted_twice_fails_at_the_goal():
    p = _two_level()
    req = Request(frozenset({0}))
    node, gpu = req.reduced_cells(p)
    twice = Program((Step(Collective.ALL_REDUCE, (gpu,)), Step(Collective.ALL_REDUCE, (gpu,)),
                     Step(Collective.ALL_REDUCE, (node,))))
    assert "twice" in ConcreteChecker(p, req).check(twice).reason
    assert "does not hold" in FingerprintChecker(p, req).check(twice).reason


@pytest.mark.parametrize("fault", ["moved", "dropped", "doubled"])
def test_every_wrong_element_of_the_result_is_seen(fault):
    """After a valid all_reduce, one chunk of one device changed as a fault would change it: the goal check fails."""
    p = _two_level()
    req = Request(frozenset({0, 1}))
    checker = FingerprintChecker(p, req)
    states = checker.start()
    checker.apply(states, Step(Collective.ALL_REDUCE, req.reduced_cells(p)))
    assert checker.goal_failure(states) == ""
    other = checker.encode(1 << 3)
    if fault == "moved":  # device 5's chunk 2 holds chunk 3's value: the same set, so equal; take another device's
        states.held[5, 2] = checker.encode(checker.group_of[5] ^ (1 << 3))
    elif fault == "dropped":
        states.held[5, 2] = 0
    else:
        states.held[5, 2] = (states.held[5, 2].astype(np.uint64) + other) % ((1 << 31) - 1)
    assert "device 5" in checker.goal_failure(states)


def test_the_verifier_uses_fingerprints_only_beyond_the_exact_limit_and_refuses_beyond_its_own():
    def spread(cells):  # dp over `cells` levels of factor 2 each
        h = Hierarchy(levels=tuple(Level(name=f"L{i}", count=2) for i in range(cells)))
        return Placement(h, (Axis(name="dp", size=2 ** cells),), ((2,) * cells,))
    req = Request(frozenset({0}))
    assert check_bytes(spread(10), req) == (1024 * 1024 * 32 * 8, False)
    assert check_bytes(spread(12), req) == (4096 * 4096 * 2 * 4, True)
    assert Verifier(spread(12), req).fingerprints and not Verifier(spread(10), req).fingerprints
    with pytest.raises(CheckTooLarge, match="14 reduced cells"):
        Verifier(spread(14), req)
    with pytest.raises(CheckTooLarge, match="all_to_all"):
        Verifier(spread(10), Request(frozenset({0}), Collective.ALL_TO_ALL))
