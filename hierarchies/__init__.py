"""The system model: hierarchies, axes, placements, cells and programs. Imports no other package of ours."""

from p2synth.hierarchies.library import UnknownSystemError, load_system, system_names
from p2synth.hierarchies.model import Hierarchy, Level, Link
from p2synth.hierarchies.placement import Axis, Cell, Placement, PlacementError, enumerate_matrices
from p2synth.hierarchies.program import Collective, Program, Request, Step, default_program

__all__ = [
    "Axis", "Cell", "Collective", "Hierarchy", "Level", "Link", "Placement", "PlacementError", "Program",
    "Request", "Step", "UnknownSystemError", "default_program", "enumerate_matrices", "load_system", "system_names",
]
