"""Workload planner: the best placement for a whole training step.

A workload is several named requests, each with its own size and count per
step. For every placement the planner proves the cheapest program of every
request; the step's predicted communication time is the sum over requests of
``count * best time``. Without a ``step`` section placements are ranked by
that total; with one, by the step-time model's time of a whole training step
(``solver/steptime.py``: compute, the critical-path communication, the
pipeline's sends and bubble, the exposed part of the gradient reduction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from p2synth.encodings.deadline import Deadline
from p2synth.hierarchies.placement import Matrix, Placement
from p2synth.solver.search import Memo, Proof, Solution, solve
from p2synth.hierarchies.program import NamedRequest
from p2synth.solver.spec import Problem
from p2synth.solver.steptime import Chosen, StepTime, occurrences_of, step_time


@dataclass(frozen=True)
class RequestResult:
    """One request of the workload on one placement."""

    named: NamedRequest
    solution: Solution

    @property
    def best_s(self) -> float:
        """Predicted time of one occurrence with the best program."""
        best = self.solution.best
        return best.cost_s if best else math.inf

    @property
    def step_s(self) -> float:
        """Predicted time per training step (count x best)."""
        return self.named.count * self.best_s

    @property
    def step_bound_s(self) -> float:
        """The lower bound per training step (count x bound)."""
        return self.named.count * self.solution.bound_s

    @property
    def default_step_s(self) -> float:
        """Predicted time per training step with the default collective."""
        return self.named.count * self.solution.default.cost_s


@dataclass(frozen=True)
class PlacementResult:
    """Every request's proved-best program on one placement, and the step total."""

    placement: Placement
    requests: tuple[RequestResult, ...]
    step: StepTime | None = None  # the step-time model's figures, when the spec has a step section

    @property
    def rank_s(self) -> float:
        """What placements are ranked by: the modelled step time with a step section, else the summed total."""
        return self.step.step_s if self.step is not None else self.total_s

    @property
    def total_s(self) -> float:
        """Predicted communication time of one training step with the best programs."""
        return math.fsum(r.step_s for r in self.requests)

    @property
    def bound_total_s(self) -> float:
        """The lower bound of one training step: the sum over requests of count x bound."""
        return math.fsum(r.step_bound_s for r in self.requests)

    @property
    def default_total_s(self) -> float:
        """The same with every request run as its default collective."""
        return math.fsum(r.default_step_s for r in self.requests)

    @property
    def optimal(self) -> bool:
        """True when every request's best program is proved cheapest."""
        return all(r.solution.optimal and not r.solution.timed_out for r in self.requests)


@dataclass(frozen=True)
class SweepResult:
    """Placements ranked by step total (best first), and those the budget did not reach."""

    placements: tuple[PlacementResult, ...]
    unsolved: tuple[Matrix, ...]

    @property
    def complete(self) -> bool:
        """True when every placement was solved with every best program proved."""
        return not self.unsolved and all(p.optimal for p in self.placements)


def plan_placement(problem: Problem, matrix: Matrix, max_steps: int, top: int | None, deadline: Deadline,
                   proof: Proof = Proof.CERTIFICATE, memo: Memo | None = None) -> PlacementResult:
    """Solve every request of the workload on the placement `matrix` (`memo`: work shared with other placements)."""
    placement = problem.placement(matrix)
    requests = tuple(
        RequestResult(named, solve(placement, named.request, named.message_bytes, max_steps, top, deadline,
                                   problem.spec.cost_model, proof, memo, tuple(problem.spec.pipeline)))
        for named in problem.requests
    )
    step = problem.spec.step
    return PlacementResult(placement, requests,
                           None if step is None else step_time(step, placement, occurrences_of(step, placement,
                                                                                           chosen_of(requests),
                                                                                           problem.spec.cost_model)))


def chosen_of(requests: tuple[RequestResult, ...]) -> list[Chosen]:
    """Each request with the program the step runs: its proved-best, or without one the default at the best's price
    (inf)."""
    runs = lambda s: s.best if s.best is not None else s.default
    return [Chosen(r.named, runs(r.solution).program, r.best_s) for r in requests]


def rank_plans(plans: list[PlacementResult], unsolved: list[Matrix]) -> SweepResult:
    """Order placement plans by predicted step time, modelled or summed (``rank_s``; ties: by matrix)."""
    return SweepResult(tuple(sorted(plans, key=lambda p: (p.rank_s, p.placement.matrix))), tuple(unsolved))
