"""scripts.fault_audit: its summary of a tally (the audit itself runs every case under mpiexec twice, minutes; the
old pattern it compares is exercised in tests/test_runtime_faults.py); bad arguments get one line and exit 2."""

from collections import Counter

from p2synth.runtime.faults import FaultKind
from scripts import fault_audit


def test_the_summary_counts_struck_runs_from_the_tagged_data_and_totals_every_column():
    tally = {p: {str(k): Counter() for k in FaultKind} for p in fault_audit.PATTERNS}
    tally["tagged"]["swap-chunks"].update({"detected": 5, "not applicable": 1})
    tally["old"]["swap-chunks"].update({"detected": 2, "missed": 3, "not applicable": 1})
    tally["tagged"]["skip-repack"].update({"detected": 1, "missed": 1, "not applicable": 4})
    tally["old"]["skip-repack"].update({"missed": 2, "not applicable": 4})
    rows = {row[0]: row[1:] for row in fault_audit.summary(tally)}
    assert rows["swap-chunks"] == (5, 5, 2, 3, 1) and rows["skip-repack"] == (2, 1, 0, 2, 4)
    assert rows["total"] == (7, 6, 2, 5, 5) and len(rows) == len(FaultKind) + 1


def test_bad_arguments_get_one_line_and_exit_2(capsys):
    assert fault_audit.main(["--bogus"]) == 2
    assert capsys.readouterr().err == "error: unrecognized arguments: --bogus\n"
