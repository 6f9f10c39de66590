"""The dense state space is the abstract semantics: same states, same valid steps, same goal, same counts."""

import pytest

from p2synth.hierarchies import abstract
from p2synth.hierarchies.program import STEP_OPS, Collective
from p2synth.hierarchies.statespace import state_space


def _reachable(collective, cells):
    """Every abstract state reachable from the start (by the object semantics of hierarchies/abstract.py)."""
    start = abstract.start_state(collective, cells)
    seen, todo = {start}, [start]
    while todo:
        s = todo.pop()
        for _, _, nxt in abstract.successors(s, cells):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("collective", STEP_OPS)
@pytest.mark.parametrize("cells", [1, 2, 3])
def test_every_state_has_the_same_steps_and_goal_as_the_abstract_semantics(collective, cells):
    space = state_space(collective, cells)
    reachable = _reachable(collective, cells)
    assert space.state(space.start) == abstract.start_state(collective, cells)
    # every reachable state has an index that maps back to it; unreachable indices do not exist for these collectives
    assert {space.state(i) for i in range(space.size)} == reachable and len(reachable) == space.size
    steps_from = {}
    for step in space.steps:
        for src, dst in zip(step.sources.tolist(), step.targets.tolist()):
            steps_from.setdefault(src, set()).add((step.op, step.mask, dst))
    for s in reachable:
        i = space.index(s)
        assert space.state(i) == s
        expected = {(op, S, space.index(nxt)) for op, S, nxt in abstract.successors(s, cells)}
        assert steps_from.get(i, set()) == expected
        assert bool(space.goal[i]) == abstract.is_goal(collective, s, cells)
        assert space.scattered[i] == s.Y and space.rooted[i] == s.Z


@pytest.mark.parametrize("collective,cells,steps,count", [
    (Collective.ALL_REDUCE, 2, 4, 49), (Collective.ALL_REDUCE, 3, 6, 1959), (Collective.ALL_REDUCE, 4, 8, 146_713),
    (Collective.ALL_TO_ALL, 4, 4, 75),
])
def test_paths_through_the_space_are_the_sanity_counts(collective, cells, steps, count):
    """Counting paths from the start to a goal with at most `steps` steps gives the program counts of docs/semantics.md section 6."""
    import numpy as np

    space = state_space(collective, cells)
    ways = np.zeros(space.size, dtype=object)
    ways[space.start] = 1
    total = 0
    for _ in range(steps):
        nxt = np.zeros(space.size, dtype=object)
        for step in space.steps:
            np.add.at(nxt, step.targets, ways[step.sources])
        ways = nxt
        total += int(ways[space.goal].sum())
    assert total == count == abstract.count_programs(collective, cells, steps)
