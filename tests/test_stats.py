"""The statistics the tuner and the accuracy protocol pick with (runtime/stats.py), on hand-made data."""

import pytest

from p2synth.runtime.stats import Interval, faster_beyond_noise, median_interval, pick, relative_spread, ties, within_noise


def test_median_interval_order_statistics():
    # 9 samples: [x(2), x(8)] covers the median with 1 - 2 * 10/512 = 0.961
    iv = median_interval([9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0])
    assert (iv.median, iv.low, iv.high, iv.repeats) == (5.0, 2.0, 8.0, 9)
    assert iv.coverage == pytest.approx(1 - 20 / 512)
    # 8 samples: [x(2), x(7)] would cover only 0.930, so the full range (0.992)
    iv = median_interval([float(x) for x in range(1, 9)])
    assert (iv.low, iv.high) == (1.0, 8.0) and iv.coverage == pytest.approx(1 - 2 / 256)
    # 5 samples cannot reach 95%: the range, with its true coverage
    assert median_interval([3.0, 1.0, 2.0, 5.0, 4.0]).coverage == pytest.approx(0.9375)
    assert relative_spread([1.0, 2.0, 4.0]) == pytest.approx(1.5)


def _iv(median: float, low: float, high: float) -> Interval:
    return Interval(median, low, high, 0.95, 9)


def test_pick_keeps_the_default_unless_beaten_beyond_noise():
    default = _iv(10.0, 9.0, 11.0)
    within = _iv(9.5, 8.0, 9.2)  # faster median, but its interval reaches into the default's
    beyond = _iv(8.0, 7.5, 8.9)  # wholly below the default's interval
    assert pick([default, within], 0) == 0
    assert pick([default, within, beyond], 0) == 2
    assert faster_beyond_noise(beyond, default) and not faster_beyond_noise(within, default)
    assert within_noise(within, default) and not within_noise(beyond, default)
    # the default itself measured fastest: kept
    assert pick([_iv(5.0, 4.0, 6.0), _iv(7.0, 6.5, 8.0)], 0) == 0


def test_ties_are_the_programs_within_noise_of_the_best():
    ivs = [_iv(10.0, 9.0, 11.0), _iv(9.0, 8.5, 9.5), _iv(12.0, 11.5, 13.0), _iv(9.2, 8.0, 12.0)]
    assert ties(ivs) == [0, 1, 3]
