"""Ranking one cost signature: the cheapest programs of a request's program space, with their proof.

What :func:`rank_signature` establishes depends only on the
:class:`~solver.models.CostSignature` (hierarchy, reduced cells' levels and
factors, size, cost model), so ``solver/search.py`` computes it once per
signature and shares it across placements. Up to EXPLICIT_MAX_STATES abstract
states the explicit search runs (``solver/topn.py``, over the step costs of
``solver/stepcosts.py``), finds the cheapest programs and the cost-to-go table
(``solver/costtogo.py``) that ``solver/certificate.py`` checks as the proof
that nothing else is cheaper, then the pipelined branch and bound over every
piece count (``solver/pipelined.py``, checked by
``solver/pipelined_certificate.py``). Beyond, it searches the orbits of
interchangeable cells where the cost model allows it
(``hierarchies/orbitspace.py``, ``solver/folding.py``), else Z3 alone.
``Proof.Z3`` also has Z3 prove the list on its own; ``--top all`` lists every
program with Z3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from p2synth.hierarchies.abstract import count_programs
from p2synth.hierarchies.program import RawProgram, Request
from p2synth.hierarchies.orbitspace import orbit_space
from p2synth.hierarchies.statespace import state_space, statuses
from p2synth.encodings.deadline import Deadline
from p2synth.encodings.errors import SolverTimeout
from p2synth.encodings.programs import PieceCosts, ProgramSketch
from p2synth.encodings.stepsemantics import SemanticsMismatch, prove_step_semantics
from p2synth.solver import certificate, pipelined_certificate
from p2synth.solver.cost import raw_program_cost
from p2synth.solver.pipeline_time import pipelined_seconds
from p2synth.solver.costtogo import cost_to_go, rows_layout, successors_by_state
from p2synth.solver.pipelined import OverBudget, bracketed_tables, cheapest_pipelined_all, pipeline_tables, whole_traffic
from p2synth.solver.stepcosts import case_bits, edge_costs, split_costs, step_cases
from p2synth.solver.folding import cell_classes, check_invariance, folds, lifted
from p2synth.solver.symmetry import Pair, class_pairs
from p2synth.solver.topn import Candidates, cheapest_programs

# `--top all` refuses to list more programs than this per placement.
LIST_ALL_LIMIT = 20_000
# Building and checking the joint tables and the cell swaps takes time in proportion to the state space's rows. Up
# to HARD_FIRST_ROWS rows (7 cells of an all_reduce: 308,705) that is little, and the pipelined branch and bound
# has both from the start; above, it first runs without them, and once it has expanded more partial programs than
# one per EASY_SEARCH_ROWS rows it starts again with both (docs/model.md).
HARD_FIRST_ROWS = 1_000_000
EASY_SEARCH_ROWS = 1000
# The explicit search holds every abstract state as arrays; beyond this many (radix ** cells) Z3 searches alone.
EXPLICIT_MAX_STATES = 4 ** 9


class VerificationError(Exception):
    """An independent check disagreed (concrete checker, certificate, explicit search vs Z3): a bug, never a result."""


class TooManyPrograms(Exception):
    """`--top all` on a space too large to list."""


class Proof(str, Enum):
    """What backs ``optimal``: the checked certificate (default), or also Z3's own unsat over the whole sketch."""

    CERTIFICATE = "certificate"
    Z3 = "z3"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Ranking:
    """What one cost signature establishes: the candidate programs with their piece counts and costs, cheapest first.

    For a top-N search the candidates are every program costing at most the
    N-th cheapest (ties included, so each placement picks its top N by the
    same order a fresh search would); for ``--top all``, every program. Each
    program appears once, at its cheapest piece count.
    """

    candidates: tuple[tuple[RawProgram, int, float], ...]
    count: int
    optimal: bool
    timed_out: bool


def rank_signature(request: Request, n_cells: int, max_steps: int, top: int | None, models, pieces: tuple[int, ...],
             proof: Proof, deadline: Deadline, cells: tuple[tuple[int, int], ...] = ()) -> Ranking:
    """Search one cost signature (`models(P)`: the cost model of any placement that has it, at 1/P of the message;
    `cells`: the signature's (level, factor) of each cell, whose equal ones may be interchangeable).

    Up to EXPLICIT_MAX_STATES abstract states the explicit search runs over
    them; beyond, over the orbits of interchangeable cells
    (``hierarchies/orbitspace.py``) where the cost model is checked to allow
    it (``solver/folding.py``), the orbit programs found lifted back to every
    concrete program above them; else Z3 searches alone.
    """
    collective = request.collective
    count = count_programs(collective, n_cells, max_steps)
    try:
        prove_step_semantics(collective, n_cells)
    except SemanticsMismatch as e:
        raise VerificationError(str(e)) from None
    if top is None:
        return _listed(collective, n_cells, max_steps, count, models, pieces, deadline)
    classes, fits = cell_classes(cells), state_space_fits(collective, n_cells)
    try:
        folded = not fits and _can_fold(collective, classes, models, deadline)
    except SolverTimeout:
        return Ranking((), count, False, True)
    if not (fits or folded):
        return _z3_alone(collective, n_cells, max_steps, top, count, models, pieces, deadline)
    space = orbit_space(collective, classes) if folded else state_space(collective, n_cells)
    try:
        costs_of, loads = _step_costs(space, models, deadline)
        found, sequential = _sequential_top(costs_of(1), max_steps, top, deadline)
        candidates = Candidates(top)
        for cost, raw in found:
            candidates.offer(raw, 1, cost)
        _pipelined_top(space, models, costs_of, loads, max_steps, [p for p in pieces if p > 1 and max_steps >= 2],
                       candidates, deadline, sequential, () if folded else class_pairs(cells))
        kept = tuple(lifted(candidates.kept(), space, top) if folded else candidates.kept())
    except SolverTimeout:
        return Ranking((), count, False, True)
    finally:
        if folded:
            _forget_tables()
    proved = True
    if proof is Proof.Z3:
        proved = _z3_agrees(collective, n_cells, max_steps, models, pieces, kept, deadline)
    return Ranking(kept, count, proved and bool(kept), not proved)


def _step_costs(space, models, deadline: Deadline):
    """``costs_of(P)``: the step costs on one of ``P`` pieces (``EdgeCosts``, built once per P); and the whole
    message's per-case traffic where the model splits (``solver.stepcosts.SplitCosts``: one evaluation serves every
    piece count), else None."""
    split = split_costs(space, models(1), deadline)
    built = {}

    def costs_of(pieces: int):
        if pieces not in built:
            same = split is not None and models(pieces) == models(1).with_pieces(pieces)
            built[pieces] = split.on_pieces(pieces) if same else edge_costs(space, models(pieces), deadline)
        return built[pieces]

    return costs_of, None if split is None else split.traffic


def _sequential_top(costs, max_steps: int, top: int, deadline: Deadline):
    """The cheapest programs run sequentially on step costs `costs`, with their certificate checked; and the search's
    (costs, h), whose Bellman inequalities that certificate checked."""
    rows = successors_by_state(costs)
    h = cost_to_go(costs, max_steps, deadline, rows)
    found = cheapest_programs(costs, h, top, deadline, rows)
    try:
        certificate.check(costs, h, [p for _, p in found], top, rows)
    except certificate.CertificateError as e:
        raise VerificationError(f"the explicit search's certificate does not hold: {e}") from None
    return found, (costs, h)


def _pipelined_top(space, models, costs_of, loads, max_steps: int, pieces: list[int], candidates: Candidates,
                   deadline: Deadline, sequential, pairs: tuple[Pair, ...] = ()) -> None:
    """Offer `candidates` every program run on any of `pieces` pieces that could be among them (one branch and bound
    over all piece counts), with the certificate checked against the final bound.

    Step costs from `costs_of` (:func:`_step_costs`; the whole message's
    traffic `loads` with them, or None to evaluate it). Over a state space of
    more than HARD_FIRST_ROWS rows, a search that expands more partial
    programs than one per EASY_SEARCH_ROWS rows starts again with what pays
    off only on hard ones (smaller spaces have it from the start): the joint
    table of every piece count
    (``PipelineTables.with_joint``), and, of the cell `pairs` that may be
    interchangeable, those whose swap keeps every step cost and traffic
    searched one program per orbit (``solver.symmetry``). Exact tables at one
    piece (`sequential`: the sequential search's costs and cost-to-go,
    reused) and at the most pieces; the piece counts between get bracketed
    tables (``solver.pipelined.bracketed_tables``) where the cost model
    allows, exact ones otherwise.
    """
    if not pieces:
        return
    whole = whole_traffic(space, models(1), max_steps, deadline, loads)
    costs_1, h_1 = sequential
    one = pipeline_tables(costs_1, 1, max_steps, deadline, whole, h=h_1)
    top = pipeline_tables(costs_of(pieces[-1]), pieces[-1], max_steps, deadline, whole)
    tables = []
    for p in pieces[:-1]:
        costs = costs_of(p)
        tables.append(bracketed_tables(costs, p, one, top, whole) or pipeline_tables(costs, p, max_steps, deadline, whole))
    tables.append(top)
    rows = top.rows.weight.size
    searched = None
    if rows > HARD_FIRST_ROWS:
        try:
            searched = cheapest_pipelined_all(tables, candidates, deadline, budget=rows // EASY_SEARCH_ROWS)
            pairs = ()
        except OverBudget:
            pass
    if searched is None:  # a hard one (or a small space): the joint bound and one program per orbit, from the start
        tables = [tab.with_joint(deadline) for tab in tables]
        pairs = tuple(p for p in pairs if _swaps_costs(space, tables, whole, p))
        searched = cheapest_pipelined_all(tables, candidates, deadline, pairs)
    try:
        pipelined_certificate.check_pipelined_all(whole, one, tables, searched, candidates.nth(), checked=sequential,
                                                  pairs=pairs)
    except certificate.CertificateError as e:
        raise VerificationError(f"the pipelined search's certificate does not hold: {e}") from None


def _swaps_costs(space, tables, whole, pair: Pair) -> bool:
    """Whether swapping the cells of `pair` keeps every step's cost on every piece count of `tables` and its traffic
    (the certificate's own check decides, ``pipelined_certificate.check_symmetry``)."""
    try:
        pipelined_certificate.check_symmetry(space, [tab.rows for tab in tables], whole.rows, pair)
    except certificate.CertificateError:
        return False
    return True


def _forget_tables() -> None:
    """Drop the cached layouts and step cases of every state space, and the orbit spaces: after a search over orbits
    (10 cells or more), whose arrays run to gigabytes and which the next signature of a sweep seldom shares, so that
    a sweep holds one such space at a time (the next search rebuilds what it needs)."""
    for cached in (rows_layout, step_cases, case_bits, orbit_space, certificate.step_index):
        cached.cache_clear()


def _can_fold(collective, classes, models, deadline: Deadline) -> bool:
    """Whether the search may run over the orbits of `classes`: some class has two or more cells, the cost model splits
    (one evaluation serves every piece count) and its split is the same on every step of an orbit
    (``solver.folding.check_invariance``; a model that is not is searched by Z3 alone)."""
    split = getattr(models(1), "split", None)
    if not folds(classes) or split is None or models(1).pieces != 1:
        return False
    try:
        check_invariance(split, collective, classes, deadline)
    except certificate.CertificateError:
        return False
    return True


def state_space_fits(collective, n_cells: int) -> bool:
    """Whether the explicit search can hold this request's abstract state space."""
    return len(statuses(collective)) ** n_cells <= EXPLICIT_MAX_STATES


def _sketch(collective, n_cells: int, max_steps: int, models, pieces: tuple[int, ...]) -> ProgramSketch:
    """The Z3 sketch with the cost of every piece count in `pieces`."""
    pipelines = [PieceCosts(p, models(p).step_time, models(p).traffic, pipelined_seconds) for p in pieces if p > 1 and max_steps > 1]
    return ProgramSketch(collective, n_cells, max_steps, models(1).step_time, pipelines)


def _z3_agrees(collective, n_cells: int, max_steps: int, models, pieces: tuple[int, ...], kept, deadline: Deadline) -> bool:
    """Z3's own proof of the same list (True), or False when the deadline ran out first; VerificationError on a disagreement."""
    sketch = _sketch(collective, n_cells, max_steps, models, pieces)
    try:
        ranked, proved = sketch.prove_top([(raw, p) for raw, p, _ in kept], deadline)
    except ValueError as e:
        raise VerificationError(f"the explicit search and Z3 disagree: {e}") from None
    for r, (_, _, cost) in zip(ranked, kept):
        if not math.isclose(r.cost, cost, rel_tol=1e-6, abs_tol=1e-15):
            raise VerificationError(f"cost mismatch: Z3 {r.cost} vs search {cost}")
    return proved


def _z3_alone(collective, n_cells: int, max_steps: int, top: int, count: int, models, pieces: tuple[int, ...],
              deadline: Deadline) -> Ranking:
    """Too many states for the explicit search: Z3 finds and proves the top programs by iterative tightening."""
    sketch = _sketch(collective, n_cells, max_steps, models, pieces)
    try:
        found = sketch.top(top, deadline)
    except SolverTimeout:
        return Ranking((), count, False, True)
    proved = bool(found) and all(r.proved for r in found)
    timed_out = len(found) < min(top, count) or not proved
    return Ranking(tuple((r.program, r.pieces, r.cost) for r in found), count, proved, timed_out)


def _listed(collective, n_cells: int, max_steps: int, count: int, models, pieces: tuple[int, ...],
            deadline: Deadline) -> Ranking:
    """`--top all`: every program, listed by Z3 (blocking clauses), each at its cheapest piece count."""
    if count > LIST_ALL_LIMIT:
        raise TooManyPrograms(f"{count} programs within {max_steps} steps")
    sketch = ProgramSketch(collective, n_cells, max_steps)
    raws: list = []
    timed_out = False
    try:
        for raw in sketch.enumerate(deadline):
            raws.append(raw)
    except SolverTimeout:
        timed_out = True
    if len(raws) > count or (not timed_out and len(raws) < count):
        raise VerificationError(f"Z3 listed {len(raws)} programs, the abstract count is {count}")
    out = []
    for raw in raws:
        options = [(raw_program_cost(models, collective, n_cells, raw, p)[0], p) for p in pieces if p == 1 or len(raw) > 1]
        cost, p = min(options)
        out.append((raw, p, cost))
    return Ranking(tuple(out), count, not timed_out, timed_out)
