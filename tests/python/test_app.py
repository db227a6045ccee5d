"""Every application command gives the same result through the CLI (`lpemu CMD ... --json`) and
through Python (`lpemu.call(CMD, ...)`), field by field: both front ends only parse, call the one
library function and print its one serialised result."""

import json
import math
import os

import pytest

import lpemu
from conftest import SOURCE, run_cli

MODEL_DIR = os.path.join(SOURCE, "data", "models", "stories260K")
PARAGRAPH = os.path.join(MODEL_DIR, "paragraph.txt")
ACTIVATIONS = os.path.join(MODEL_DIR, "activations.h5")


def cases(tmp):
    """(command, CLI arguments, Python request fields) triples, several per command."""
    half = os.path.join(tmp, "half.txt")
    with open(PARAGRAPH, encoding="utf-8") as f, open(half, "w", encoding="utf-8") as g:
        g.write(f.read()[:300])
    exp = os.path.join(tmp, "e.toml")
    with open(exp, "w", encoding="utf-8") as f:
        f.write(f'name = "parity"\n[source]\nmodel = "stories260K"\ntext = "{PARAGRAPH}"\nmax_tokens = 24\n'
                '[cost]\ntarget = "h100_sxm"\nshape = "llama3_8b"\n'
                '[grid]\nformats = ["fp32", "fp8_e4m3"]\n')
    out = os.path.join(tmp, "sweep")
    return [
        ("cost", ["--target", "h100_sxm", "--model", "llama3_8b", "--plan", "bf16", "--phase", "decode",
                  "--batch", "8", "--context", "4096"],
         dict(target="h100_sxm", model="llama3_8b", plan="bf16", phase="decode", batch=8, context=4096)),
        ("cost", ["--target", "h100_sxm", "--model", "llama3_8b", "--plan", "bf16", "--weights", "fp8_e4m3",
                  "--activations", "fp8_e4m3", "--kv-cache", "fp8_e4m3", "--datapath", "h100_e4m3_fp32"],
         dict(target="h100_sxm", model="llama3_8b", plan="bf16", weights="fp8_e4m3", activations="fp8_e4m3",
              kv_cache="fp8_e4m3", datapath="h100_e4m3_fp32")),
        ("cost", ["--system", "dgx_h100", "--model", "llama3_70b", "--phase", "train", "--devices", "1024",
                  "--parallel", "tp=8,pp=4,sp=1,zero=1", "--context", "8192", "--global-batch", "512",
                  "--comm", "fp8_e4m3"],
         dict(system="dgx_h100", model="llama3_70b", phase="train", devices=1024,
              parallel="tp=8,pp=4,sp=1,zero=1", context=8192, global_batch=512, comm="fp8_e4m3")),
        ("cost", ["--system", "dgx_h100", "--model", "llama3_8b", "--phase", "train", "--devices", "64",
                  "--search", "--top", "3"],
         dict(system="dgx_h100", model="llama3_8b", phase="train", devices=64, search=True, top=3)),
        ("cost", ["--system", "dgx_h100", "--model", "llama3_70b", "--parallel", "tp=8", "--batches", "1,16"],
         dict(system="dgx_h100", model="llama3_70b", parallel="tp=8", batches=[1, 16])),
        ("eval", ["--plan", "fp8_e4m3", "--text", half],
         dict(plan="fp8_e4m3", texts=[half])),
        ("eval", ["--plan", "mxfp4", "--text", half, PARAGRAPH, "--context", "64"],
         dict(plan="mxfp4", texts=[half, PARAGRAPH], context=64)),
        ("replay", ["--plan", "fp8_e4m3", "--activations", ACTIVATIONS],
         dict(plan="fp8_e4m3", activations=ACTIVATIONS)),
        # The CLI runs first; Python resumes its plan files, so timings agree too.
        ("sweep", [exp, "--out", out], dict(experiment=exp, out=out)),
    ]


def same(a, b, path="result"):
    """Asserts CLI JSON `a` equals Python value `b` field by field (NaN and ±Inf print as null)."""
    if isinstance(b, float) and not math.isfinite(b):
        assert a is None, f"{path}: CLI {a!r}, Python {b!r}"
    elif isinstance(b, dict):
        assert isinstance(a, dict) and list(a) == list(b), f"{path}: fields {list(a)} vs {list(b)}"
        for k in b:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    else:
        assert type(a) is type(b) and a == b, f"{path}: CLI {a!r}, Python {b!r}"


def test_every_command_has_a_parity_case(tmp_path):
    covered = {c for c, _, _ in cases(str(tmp_path))}
    assert covered == set(lpemu.commands())


@pytest.mark.parametrize("i", range(9))
def test_cli_and_python_agree(tmp_path, i):
    command, args, request = cases(str(tmp_path))[i]
    cli = json.loads(run_cli(command, *args, "--json").stdout)
    py = lpemu.call(command, **request)
    same(cli, py)


def test_unknown_fields_and_commands_are_named():
    with pytest.raises(lpemu.SpecError, match="unknown field.*bacth"):
        lpemu.call("cost", target="h100_sxm", model="llama3_8b", bacth=8)
    with pytest.raises(lpemu.SpecError, match="batch = \"8\": expected an integer"):
        lpemu.call("cost", target="h100_sxm", model="llama3_8b", batch="8")
    with pytest.raises(lpemu.UnknownNameError, match="unknown command 'cots'"):
        lpemu.call("cots")
