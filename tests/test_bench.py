"""tests/bench.py runs and prints every row (timings are never asserted: they depend on the machine)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).with_name("bench.py")


@pytest.mark.slow
def test_quick_bench_prints_every_row():
    out = subprocess.run([sys.executable, str(BENCH), "--quick", "--repeats", "1", "--process-rounds", "1", "--images", "2"],
                         capture_output=True, text=True, check=True).stdout
    for row in ("whole processes", "creation's lead (creation images/s", "by round (round r runs --seed r)", "in process", "tests/plain.py make_image",
                "issue 14, default / --original-shapes", "start-up", "python creation.py --help",
                "per stage", "encode", "hash", "sampling by loop count", "slowest sample", "KB/image", "with 2:", "peak RSS of one worker"):
        assert row in out, f"no {row!r} row in:\n{out}"
