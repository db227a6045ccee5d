"""The tidy test's record of clean results (cmake/lpemu_tidy.py) on a one-file project.

A recorded key spares clang-tidy only while every input is unchanged: an edited header is checked
again and its problem reported, and a clone at another path finds the same keys.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

SOURCE = os.environ.get("LPEMU_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SOURCE, "cmake", "lpemu_tidy.py")
TIDY = shutil.which("clang-tidy-14")
pytestmark = pytest.mark.skipif(TIDY is None or shutil.which("clang++-14") is None,
                                reason="clang-tidy-14 and clang++-14 are needed")

CLEAN_HEADER = "#pragma once\ninline int* nothing() { return nullptr; }\n"
BAD_HEADER = "#pragma once\ninline int* nothing() { return 0; }\n"  # modernize-use-nullptr
DEMO_SOURCE = os.path.join("src", "demo", "a.cpp")  # the project's one source, relative to its root


def make_project(root, header):
    """A source tree with one layer `demo` (a.cpp including a.hpp) and its compile_commands.json."""
    os.makedirs(os.path.join(root, "src", "demo"))
    os.makedirs(os.path.join(root, "build"))
    shutil.copy(os.path.join(SOURCE, ".clang-tidy"), os.path.join(root, ".clang-tidy"))
    with open(os.path.join(root, "src", "demo", "a.hpp"), "w", encoding="utf-8") as f:
        f.write(header)
    with open(os.path.join(root, "src", "demo", "a.cpp"), "w", encoding="utf-8") as f:
        f.write('#include "demo/a.hpp"\nint use() { return nothing() == nullptr ? 1 : 0; }\n')
    write_commands(root)


def write_commands(root):
    """compile_commands.json naming the clone's own absolute paths, as CMake writes it."""
    source = os.path.join(root, "src", "demo", "a.cpp")
    entry = {"directory": os.path.join(root, "build"), "file": source,
             "command": f"/usr/bin/c++ -I{root}/src -std=c++20 -o a.o -c {source}"}
    with open(os.path.join(root, "build", "compile_commands.json"), "w", encoding="utf-8") as f:
        json.dump([entry], f)


def run(root, *extra):
    """Runs the tidy script on layer demo of the project at root."""
    return subprocess.run([sys.executable, SCRIPT, f"--clang-tidy={TIDY}", "--build-dir", os.path.join(root, "build"),
                           "--source-dir", root, "--layer", "demo", *extra],
                          capture_output=True, text=True, check=False)


def test_a_recorded_key_spares_only_an_unchanged_input(tmp_path):
    root = str(tmp_path / "one")
    make_project(root, CLEAN_HEADER)
    first = run(root)
    assert first.returncode == 0, first.stdout
    assert "1 checked now" in first.stdout
    again = run(root)
    assert again.returncode == 0 and "0 checked now, 1 by a recorded" in again.stdout

    # An edit to an included header changes the key: clang-tidy runs and reports the problem.
    with open(os.path.join(root, "src", "demo", "a.hpp"), "w", encoding="utf-8") as f:
        f.write(BAD_HEADER)
    bad = run(root)
    assert bad.returncode == 1
    assert "modernize-use-nullptr" in bad.stdout and DEMO_SOURCE in bad.stdout

    # Back to the recorded input: recorded again, no parse.
    with open(os.path.join(root, "src", "demo", "a.hpp"), "w", encoding="utf-8") as f:
        f.write(CLEAN_HEADER)
    back = run(root)
    assert back.returncode == 0 and "0 checked now" in back.stdout


def test_a_checked_in_record_serves_a_clone_at_another_path(tmp_path):
    root = str(tmp_path / "one")
    make_project(root, CLEAN_HEADER)
    written = run(root, "--update-record")
    assert written.returncode == 0, written.stdout
    with open(os.path.join(root, "tests", "tidy", "clean.txt"), encoding="utf-8") as f:
        lines = [line for line in f if not line.startswith("#")]
    assert len(lines) == 1 and lines[0].split()[1] == DEMO_SOURCE

    clone = str(tmp_path / "elsewhere" / "clone")
    shutil.copytree(root, clone)
    shutil.rmtree(os.path.join(clone, "build", "tidy"))
    write_commands(clone)
    served = run(clone)
    assert served.returncode == 0 and "0 checked now, 1 by a recorded" in served.stdout

    # A different .clang-tidy is a different input.
    with open(os.path.join(clone, ".clang-tidy"), "a", encoding="utf-8") as f:
        f.write("\n# changed\n")
    rechecked = run(clone)
    assert rechecked.returncode == 0 and "1 checked now" in rechecked.stdout
