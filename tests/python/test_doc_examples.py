"""Runs every example of README.md and docs/*.md (ctest docs/doc_examples).

A fenced block runs by its info string (docs/architecture.md, "Examples in the documentation"):
  sh      run by bash -e -o pipefail
  python  run by python3 (skipped where it imports torch and PyTorch is not installed)
  cpp     a whole translation unit, compiled with -fsyntax-only against include/
Any other info string (console, text, toml, cmake, ...) is shown, never run.
Each block runs alone in a fresh temporary directory holding links to the source tree's data/,
experiments/ and formats/, with the built `lpemu` first on PATH; a failure names FILE:LINE."""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

SOURCE = os.path.abspath(os.environ.get("LPEMU_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")))
BINARY = os.environ.get("LPEMU_BINARY", shutil.which("lpemu") or "lpemu")
RUN = {"sh", "python", "cpp"}
TIMEOUT_S = 120


def doc_files():
    return [os.path.join(SOURCE, "README.md")] + sorted(glob.glob(os.path.join(SOURCE, "docs", "*.md")))


def fenced_blocks(path):
    """Yields (info string, first line number of the body, body) of each fenced block."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if fence is None:
                m = re.match(r"^(```+)\s*(\S*)", line)
                if m:
                    fence, info, start, body = m.group(1), m.group(2), n + 1, []
            elif line.rstrip() == fence:
                yield info, start, "".join(body)
                fence = None
            else:
                body.append(line)
    assert fence is None, f"{path}: fenced block opened at line {start - 1} is never closed"


def cases():
    out = []
    for path in doc_files():
        for info, line, body in fenced_blocks(path):
            if info in RUN:
                out.append(pytest.param(info, path, line, body, id=f"{os.path.relpath(path, SOURCE)}:{line}"))
    return out


def test_examples_exist():
    """Every guide has something that runs, and README has its tour."""
    found = {c.values[1] for c in cases()}
    for path in doc_files():
        if os.path.basename(path) in ("index.md", "architecture.md", "tensor-core-model.md"):
            continue
        assert path in found, f"{os.path.relpath(path, SOURCE)}: no runnable example (```sh, ```python or ```cpp)"


@pytest.mark.parametrize("info,path,line,body", cases())
def test_example(info, path, line, body):
    where = f"{os.path.relpath(path, SOURCE)}:{line}"
    if info == "python" and re.search(r"^\s*(import|from)\s+(torch|lpemu\.torch)\b", body, re.M):
        pytest.importorskip("torch", reason=f"{where}: needs PyTorch")
    with tempfile.TemporaryDirectory(prefix="lpemu_doc_") as tmp:
        for d in ("data", "experiments", "formats"):
            os.symlink(os.path.join(SOURCE, d), os.path.join(tmp, d))
        # `lpemu` is the built command, `python3` the interpreter running this test (with NumPy).
        bin_dir = os.path.join(tmp, ".bin")
        os.mkdir(bin_dir)
        os.symlink(os.path.abspath(BINARY), os.path.join(bin_dir, "lpemu"))
        os.symlink(sys.executable, os.path.join(bin_dir, "python3"))
        env = dict(os.environ)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env["TMPDIR"] = tmp
        if info == "sh":
            cmd = ["bash", "-e", "-o", "pipefail", "-c", body]
        elif info == "python":
            cmd = [sys.executable, "-c", body]
        else:
            src = os.path.join(tmp, "example.cpp")
            with open(src, "w", encoding="utf-8") as f:
                f.write(body)
            cmd = [os.environ.get("CXX", "c++"), "-std=c++20", "-fsyntax-only", "-I", os.path.join(SOURCE, "include"),
                   "-I", "/usr/include/eigen3", src]
        r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert r.returncode == 0, f"{where}: ```{info} block exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
