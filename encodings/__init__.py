"""Everything that speaks Z3: placement enumeration and bounded program sketches (installed as ``p2synth.encodings``).

Imports the system model (``hierarchies``) and nothing above it; the cost model
arrives as an argument, written against the small algebra in ``z3algebra``.
"""
