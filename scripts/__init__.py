"""Tools around the solver and the runtime: the emulated cluster testbed, calibration, reports."""
