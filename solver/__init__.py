"""Spec, cost models, search strategies (bounds, top-N, proofs), result format, CLI and exports.

The Z3 layer below it lives in the top-level folder ``encodings/``, installed
as the package ``p2synth.encodings`` (``encodings`` is also a standard-library
package; see docs/model.md).
"""
