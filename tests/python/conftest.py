"""Shared fixtures of the Python tests: the `lpemu` binary, the source tree and a CLI runner.

ctest sets LPEMU_BINARY, LPEMU_SOURCE_DIR and PYTHONPATH (the build tree's python/ folder)."""

import os
import subprocess

import numpy as np
import pytest

BINARY = os.environ.get("LPEMU_BINARY", "lpemu")
SOURCE = os.environ.get("LPEMU_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def run_cli(*args, check=True):
    """Runs `lpemu ARGS...`; returns the completed process (asserting exit 0 when check)."""
    r = subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True)
    if check:
        assert r.returncode == 0, f"lpemu {' '.join(map(str, args))}: exit {r.returncode}: {r.stderr}"
    return r


def bits(a):
    """The raw bits of a float array (so NaN payloads and -0 compare exactly)."""
    a = np.ascontiguousarray(a)
    return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def source_dir():
    return SOURCE
