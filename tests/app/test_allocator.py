"""The C allocator's thresholds for a serving process (``app.allocator``): a request's large
blocks, freed, are reused from the heap instead of faulted in afresh."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

#: a request's worth of large blocks, allocated (and touched) and freed, again and again; the
#: minor page faults of the rounds after the first
ROUNDS = """
import resource, sys
from app.allocator import tune
tuned = tune() if sys.argv[1] == "tuned" else False
def round_():
    blocks = [bytearray(3 << 20) for _ in range(3)]
    del blocks
round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    round_()
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str, **env: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, check=True,
                         env={**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}, **env}).stdout
    tuned, count = out.split()
    return tuned == "True", int(count)


def test_freed_large_blocks_are_reused_not_faulted_in_again() -> None:
    """With glibc's defaults each round hands its 9 MB back and faults it in again (~2300 faults a
    round); tuned, the rounds after the first reuse the heap."""
    tuned, with_tuning = faults("tuned")
    untuned, without = faults("defaults")
    assert tuned and not untuned
    assert without > 20 * 1000, without  # the premise: the defaults fault every round
    assert with_tuning < without / 10, (with_tuning, without)


def test_the_operators_own_tunables_win() -> None:
    tuned, _ = faults("tuned", MALLOC_TRIM_THRESHOLD_="131072")
    assert not tuned
