"""Each bench arm's peak resident memory is its own, though the arms share one process."""

from __future__ import annotations

import subprocess
import sys

import pytest

WINDOW = """
from appliance.bench.rss import PeakRss, peak_rss_kilobytes
earlier = b"\\x01" * (400 * 2**20)  # an earlier arm's peak, written so that it is resident
del earlier
assert peak_rss_kilobytes() / 1024 >= 400
with PeakRss() as window:
    block = b"\\x02" * (100 * 2**20)
    del block
print(int(window.own), window.start_mb, window.peak_mb)
"""


def test_a_window_reports_its_own_peak_not_an_earlier_arms() -> None:
    # in a fresh process, as the other test: a worker's freed but resident memory would hide the block
    done = subprocess.run([sys.executable, "-c", WINDOW], capture_output=True, text=True, check=True)
    own, start_mb, peak_mb = (float(word) for word in done.stdout.split())
    if not own:
        pytest.skip("this kernel does not let a process reset its high-water mark (/proc/self/clear_refs)")
    # the 100 MB block is inside the window's peak (less a few pages the start held and let go); the 400 MB
    # one before it is not
    assert start_mb + 95 <= peak_mb < start_mb + 300


SPIKE_THEN_RESET = """
from appliance.bench.rss import peak_rss_kilobytes, reset_peak_rss
spike = b"\\x03" * (200 * 2**20)
del spike
before = peak_rss_kilobytes()
print(before, int(reset_peak_rss()), peak_rss_kilobytes())
"""


def test_resetting_the_mark_brings_it_down_to_the_current_rss() -> None:
    # in a fresh process: a test worker may hold freed memory that a spike reuses without new pages
    done = subprocess.run([sys.executable, "-c", SPIKE_THEN_RESET], capture_output=True, text=True, check=True)
    before, reset, after = (int(word) for word in done.stdout.split())
    if not reset:
        pytest.skip("this kernel does not let a process reset its high-water mark (/proc/self/clear_refs)")
    assert after < before - 150 * 1024  # the 200 MB spike is no longer in the mark
