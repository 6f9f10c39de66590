"""Accuracy report: does the simulator pick the programs worth running? (measure, split, metrics, report)."""
