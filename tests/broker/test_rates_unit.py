"""Moving-window rates: exact on a steady counter, two samples for an idle one, and a
burst after a long idle measured over the window, not over the idle time."""

from __future__ import annotations

from magnetar.broker.rates import MovingRate


def test_a_steady_counter_gives_its_rate_over_the_window() -> None:
    rate = MovingRate(window=10.0)
    for second in range(30):
        rate.add(float(second), second * 5)
    assert rate.rate() == 5.0
    assert len(rate._samples) <= 12


def test_an_idle_counter_keeps_two_samples_and_a_zero_rate() -> None:
    rate = MovingRate(window=10.0)
    for second in range(1000):
        rate.add(float(second), 42)
    assert rate.rate() == 0.0
    assert len(rate._samples) == 2


def test_a_burst_after_a_long_idle_is_measured_over_the_window() -> None:
    rate = MovingRate(window=10.0)
    for second in range(100):
        rate.add(float(second), 7)
    rate.add(100.0, 7 + 50)  # 50 in the last second
    assert 50 / 11 <= rate.rate() <= 50 / 10  # over the window, not 50 / 100


def test_a_counter_that_went_back_says_nothing() -> None:
    rate = MovingRate(window=10.0)
    rate.add(0.0, 100)
    rate.add(1.0, 3)  # the topic was reloaded
    assert rate.rate() == 0.0
