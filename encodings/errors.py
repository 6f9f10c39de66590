"""Errors raised by the encodings."""


class SolverTimeout(Exception):
    """A Z3 call ran out of its time budget before answering."""
