"""Each bench arm's peak resident memory is its own, though the arms share one process."""

from __future__ import annotations

import pytest

from appliance.bench.rss import PeakRss, peak_rss_kilobytes, reset_peak_rss, rss_kilobytes

MB = 2**20


def test_a_window_reports_its_own_peak_not_an_earlier_arms() -> None:
    earlier = b"\x01" * (400 * MB)  # an earlier arm's peak, written so that it is resident
    del earlier
    assert peak_rss_kilobytes() / 1024 >= 400
    with PeakRss() as window:
        block = b"\x02" * (100 * MB)
        del block
    if not window.own:
        pytest.skip("this kernel does not let a process reset its high-water mark (/proc/self/clear_refs)")
    # the 100 MB block is inside the window's peak (less a few pages the start held and let go); the 400 MB
    # one before it is not
    assert window.start_mb + 95 <= window.peak_mb < window.start_mb + 300


def test_resetting_the_mark_brings_it_down_to_the_current_rss() -> None:
    # reset first: the worker may hold (or have held) more than the spike from earlier tests
    if not reset_peak_rss():
        pytest.skip("this kernel does not let a process reset its high-water mark (/proc/self/clear_refs)")
    spike = b"\x03" * (200 * MB)
    del spike
    before = peak_rss_kilobytes()
    assert before >= rss_kilobytes() + 150 * 1024  # the spike is in the mark, above what is resident now
    assert reset_peak_rss()
    assert peak_rss_kilobytes() < before - 150 * 1024  # the 200 MB spike is no longer in the mark
