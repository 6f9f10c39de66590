"""The order programs are listed in (docs/model.md, "Top N, proved"): costs within a relative 1e-9 tie, fewer steps
first, then program order; anything further apart by cost."""

from p2synth.hierarchies import Cell, Collective, Program, Step
from p2synth.solver.topn import TIE_MARGIN, tie_order

A, B = Cell(0, 0), Cell(0, 1)
FLAT = Program((Step(Collective.ALL_REDUCE, (A, B)),))                                              # 1 step
TWO = Program((Step(Collective.ALL_REDUCE, (B,)), Step(Collective.ALL_REDUCE, (A,))))              # 2 steps
THREE = Program((Step(Collective.REDUCE_SCATTER, (B,)), Step(Collective.ALL_REDUCE, (A,)),
                 Step(Collective.ALL_GATHER, (B,))))                                               # 3 steps


def names(ordered):
    return [{FLAT: "flat", TWO: "two", THREE: "three"}[p] for p, _ in ordered]


def test_the_margin_is_the_documented_one():
    assert TIE_MARGIN == 1e-9


def test_a_longer_program_cheaper_by_less_than_the_margin_comes_after_the_shorter():
    assert names(tie_order([(THREE, 1.0), (FLAT, 1.0 + 5e-10)])) == ["flat", "three"]


def test_costs_further_apart_than_the_margin_keep_cost_order():
    assert names(tie_order([(THREE, 1.0), (FLAT, 1.0 + 2e-9)])) == ["three", "flat"]


def test_a_tie_across_a_rounding_boundary_is_still_a_tie():
    """Rounding to 12 significant digits (the old rule) split these two: 0.123456789013 against 0.123456789012."""
    cheap, dear = 0.1234567890124999, 0.1234567890125001
    assert f"{cheap:.12g}" != f"{dear:.12g}"
    assert names(tie_order([(THREE, cheap), (FLAT, dear)])) == ["flat", "three"]


def test_a_tie_is_measured_from_the_cheapest_program_not_yet_listed():
    """1, 1 + 0.8e-9 and 1 + 1.6e-9: the first two tie; the third is more than the margin above the first."""
    ordered = tie_order([(FLAT, 1.0 + 1.6e-9), (THREE, 1.0), (TWO, 1.0 + 0.8e-9)])
    assert names(ordered) == ["two", "three", "flat"]


def test_equal_costs_and_lengths_follow_program_order():
    other = Program((Step(Collective.ALL_REDUCE, (A,)), Step(Collective.ALL_REDUCE, (B,))))
    assert [p for p, _ in tie_order([(TWO, 2.0), (other, 2.0)])] == sorted([TWO, other])
