"""scripts.bench_synthesis: bad arguments get one line and exit 2 before any work (the benchmark itself runs for
minutes; its recorded run is docs/measurements/bench_synthesis.txt)."""

import pytest

from scripts import bench_synthesis


@pytest.mark.parametrize("argv,line", [
    (["--repeats", "0"], "error: --repeats, --sample and --placement-repeats must be at least 1, the limits positive"),
    (["--brute-limit", "0"], "error: --repeats, --sample and --placement-repeats must be at least 1, the limits positive"),
    (["--sample", "many"], "error: argument --sample: invalid int value: 'many'"),
])
def test_bad_arguments_get_one_line_and_exit_2(argv, line, capsys):
    assert bench_synthesis.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [line] and captured.out == ""
