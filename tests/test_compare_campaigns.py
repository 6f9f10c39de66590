"""scripts/compare_campaigns.py: the cases both campaigns measured, matched and compared exactly."""

from scripts.compare_campaigns import compare, table

MiB = 1 << 20


def _raw(results_by_size: dict, testbed: str = "4x2-1gbit", axes=(("data", 8),), collective: str = "reduce_scatter") -> dict:
    combo = {"axes": [list(a) for a in axes], "matrix": [[4, 2]], "request": {"axes": ["data"], "collective": collective},
             "results": [{"nbytes": n, "default": i == 0, "time_s": t} for n, times in results_by_size.items()
                         for i, t in enumerate(times)]}
    return {"testbeds": [{"testbed": {"name": testbed}, "combos": [combo]}]}


def test_matching_cases_give_the_default_and_best_ratios():
    before = _raw({MiB: [4.0, 2.0, 3.0], 4 * MiB: [8.0, 9.0]})
    after = _raw({MiB: [1.0, 1.5, 0.5], 16 * MiB: [1.0]})  # 16M only after, 4M only before: not compared
    rows = compare(before, after)
    assert [(r["key"][-1], r["before"], r["after"]) for r in rows] == [
        (MiB, {"default_s": 4.0, "best_s": 2.0, "programs": 3}, {"default_s": 1.0, "best_s": 0.5, "programs": 3})]
    text = table(rows)
    assert "| 4x2-1gbit | reduce_scatter(data) | [[4, 2]] | 1M | 4000.0 | 1000.0 | 4.00x | 2000.0 | 500.0 | 4.00x |" in text
    assert text.rstrip().endswith("1 cases; median before / after: default 4.00x, best 4.00x")


def test_other_testbeds_axes_and_collectives_are_other_cases():
    before = _raw({MiB: [1.0]})
    for other in (_raw({MiB: [1.0]}, testbed="2x2x2"), _raw({MiB: [1.0]}, axes=(("data", 4), ("model", 2))),
                  _raw({MiB: [1.0]}, collective="all_reduce")):
        assert compare(before, other) == []
