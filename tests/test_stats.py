"""The statistics the tuner and the accuracy protocol pick with (runtime/stats.py), on hand-made data."""

import pytest

from p2synth.runtime.stats import (Interval, faster_beyond_noise, median_interval, paired_faster, pick, relative_spread,
                                   sign_test_p, within_noise)


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


def test_interval_overlap():
    default = _iv(10.0, 9.0, 11.0)
    within = _iv(9.5, 8.0, 9.2)  # faster median, but its interval reaches into the default's
    beyond = _iv(8.0, 7.5, 8.9)  # wholly below the default's interval
    assert faster_beyond_noise(beyond, default) and not faster_beyond_noise(within, default)
    assert within_noise(within, default) and not within_noise(beyond, default)


def test_sign_test_p_values_are_the_binomial_tail():
    assert sign_test_p(9, 9) == pytest.approx(1 / 512)
    assert sign_test_p(8, 9) == pytest.approx(10 / 512)
    assert sign_test_p(7, 9) == pytest.approx(46 / 512)
    assert sign_test_p(0, 9) == 1.0
    assert sign_test_p(6, 6) == pytest.approx(1 / 64)


DEFAULT = [10.0, 12.0, 9.0, 11.0, 10.0, 15.0, 10.0, 9.5, 10.5]


def test_paired_faster_needs_8_of_9_rounds_beyond_the_minimum_gain():
    eight = [d * 0.95 for d in DEFAULT[:8]] + [DEFAULT[8] * 1.2]   # 5% faster in 8 rounds, slower in one
    seven = [d * 0.95 for d in DEFAULT[:7]] + [d * 1.2 for d in DEFAULT[7:]]
    assert paired_faster(eight, DEFAULT) and not paired_faster(seven, DEFAULT)
    # 1% faster in every round: below the 2% minimum gain, so not a win (but it is with a 0.5% minimum)
    one_pct = [d * 0.99 for d in DEFAULT]
    assert not paired_faster(one_pct, DEFAULT) and paired_faster(one_pct, DEFAULT, min_gain=0.005)
    # the pairing matters: the same values shuffled against the rounds lose their wins
    shifted = [d * 0.95 for d in DEFAULT[1:] + DEFAULT[:1]]
    assert not paired_faster(shifted, DEFAULT)
    with pytest.raises(ValueError):
        paired_faster([1.0], [1.0, 2.0])


def test_pick_keeps_the_default_unless_paired_faster():
    eight = [d * 0.95 for d in DEFAULT[:8]] + [DEFAULT[8] * 1.2]
    noisy = [d * 0.7 if i % 2 else d * 1.3 for i, d in enumerate(DEFAULT)]  # a smaller median? not in enough rounds
    assert pick([DEFAULT, eight], 0) == 1
    assert pick([DEFAULT, noisy], 0) == 0
    # the fastest median is judged, not any program that would pass: the noisy one is fastest, and it fails
    fast_noisy = [d * 1.3 if i % 2 else d * 0.5 for i, d in enumerate(DEFAULT)]  # 5 rounds halved
    assert pick([DEFAULT, eight, fast_noisy], 0) == 0
    # the default itself measured fastest: kept
    assert pick([DEFAULT, [d * 1.1 for d in DEFAULT]], 0) == 0


def test_paired_verdict_faster_slower_within_and_inconclusive():
    from p2synth.runtime.stats import FASTER, INCONCLUSIVE, SLOWER, WITHIN, paired_verdict

    nine = paired_verdict([d * 0.85 for d in DEFAULT], DEFAULT)
    assert (nine.verdict, nine.wins, nine.losses, nine.rounds) == (FASTER, 9, 0, 9)
    assert nine.p_faster == pytest.approx(1 / 512) and nine.median_ratio == pytest.approx(1 / 0.85)
    assert nine.text() == "faster (9 of 9 rounds, p = 0.002)"
    assert paired_verdict(DEFAULT, [d * 0.85 for d in DEFAULT]).verdict == SLOWER
    # 7 of 9 rounds slower (p = 46/512 = 0.09) and 6% slower at the median: not shown slower, and outside the 5%
    # margin in most rounds, so not shown within noise either
    seven = [d * 1.06 for d in DEFAULT[:7]] + [d * 0.99 for d in DEFAULT[7:]]
    v = paired_verdict(seven, DEFAULT)
    assert (v.verdict, v.losses, v.wins) == (INCONCLUSIVE, 7, 2) and v.p_slower == pytest.approx(46 / 512)
    assert v.text() == "inconclusive (2 faster, 7 slower of 9 rounds)"
    # within 2% either way in every round, 5 rounds faster and 4 slower: within noise
    close = [d * (0.98 if r % 2 == 0 else 1.02) for r, d in enumerate(DEFAULT)]
    assert paired_verdict(close, DEFAULT).verdict == WITHIN
    # the same, but two rounds 10% slower: no longer shown within the margin (7 of 9 below 1.05)
    assert paired_verdict(close[:7] + [d * 1.1 for d in DEFAULT[7:]], DEFAULT).verdict == INCONCLUSIVE
    # the pairing matters: the default's own times, rotated against its rounds, are not within noise
    assert paired_verdict(DEFAULT[1:] + DEFAULT[:1], DEFAULT).verdict == INCONCLUSIVE
    # equal rounds are dropped from the sign tests, and the identity is within noise
    same = paired_verdict(DEFAULT, DEFAULT)
    assert (same.verdict, same.wins, same.losses, same.p_faster) == (WITHIN, 0, 0, 1.0)
    with pytest.raises(ValueError):
        paired_verdict([1.0], [1.0, 2.0])


def test_verdict_text_of_a_missing_hook_is_the_missing_hook():
    from p2synth.runtime.stats import NO_HOOK, verdict_text

    assert verdict_text({"verdict": NO_HOOK}) == NO_HOOK
