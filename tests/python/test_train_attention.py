"""Every shipped inference plan (experiments/plans/*.toml), attention roles and activation roles
included, trains a few steps of the shipped stories260K model under `lpemu train` with finite
losses (nvfp4_b200.toml with its NVFP4 operands on the B200 datapath, block scales included, and with
NVFP4 gradients on that datapath in the backward GEMMs too); a plan setting attention roles trains differently from one without them; an attention
datapath without gradient formats it takes is refused with exit 2, naming the GEMM and role."""

import csv
import glob
import math
import os

import pytest

from conftest import SOURCE, run_cli

PARAGRAPH = os.path.join(SOURCE, "data", "models", "stories260K", "paragraph.txt")
PLANS = sorted(glob.glob(os.path.join(SOURCE, "experiments", "plans", "*.toml")))


def train(plan, out, check=True):
    return run_cli("train", "--plan", plan, "--text", PARAGRAPH, "--steps", 2, "--batch", 2, "--seq", 16,
                   "--optimizer", "adamw", "--lr", 1e-3, "--out", out, check=check)


def losses(out):
    with open(os.path.join(out, "log.csv")) as f:
        return [float(r["loss"]) for r in csv.DictReader(f)]


@pytest.mark.parametrize("plan", PLANS, ids=[os.path.basename(p) for p in PLANS])
def test_every_shipped_plan_trains(plan, tmp_path):
    train(plan, tmp_path / "run")
    got = losses(tmp_path / "run")
    assert len(got) == 2 and all(math.isfinite(x) and x > 0 for x in got)


def test_block_formats_on_every_datapath_gemm(tmp_path):
    # nvfp4_b200.toml runs its forward GEMMs on the datapath; with NVFP4 output gradients its backward
    # GEMMs run there too (the classifier, unquantised, stays on "none").
    shipped = os.path.join(SOURCE, "experiments", "plans", "nvfp4_b200.toml")
    with open(shipped) as f:
        text = f.read()
    text = text.replace('gemm = "b200_nvfp4_fp32"', 'gemm = "b200_nvfp4_fp32"\ngrad_output = "nvfp4"\n'
                        'dgrad_gemm = "b200_nvfp4_fp32"\nwgrad_gemm = "b200_nvfp4_fp32"')
    text = text.replace('gemm = "none"', 'gemm = "none"\ndgrad_gemm = "none"\nwgrad_gemm = "none"')
    (tmp_path / "all.toml").write_text(text)
    train(shipped, tmp_path / "forward")
    train(tmp_path / "all.toml", tmp_path / "all")
    a, b = losses(tmp_path / "forward"), losses(tmp_path / "all")
    assert all(math.isfinite(x) for x in a + b)
    assert a[0] == b[0] and a[1] != b[1]  # same first forward pass; the gradients differ


def test_attention_roles_change_training(tmp_path):
    # mxfp8.toml without its attention roles (q, probs, kv_cache) against the shipped plan.
    with open(os.path.join(SOURCE, "experiments", "plans", "mxfp8.toml")) as f:
        text = f.read()
    linear_only = "\n".join(l for l in text.splitlines() if not l.split("=")[0].strip() in ("q", "probs", "kv_cache"))
    (tmp_path / "linear.toml").write_text(linear_only + "\n")
    train(os.path.join(SOURCE, "experiments", "plans", "mxfp8.toml"), tmp_path / "a")
    train(tmp_path / "linear.toml", tmp_path / "b")
    a, b = losses(tmp_path / "a"), losses(tmp_path / "b")
    assert a != b


def test_attention_datapath_needs_gradient_formats(tmp_path):
    plan = tmp_path / "dp.toml"
    plan.write_text('[roles]\nq = "bf16"\nkv_cache = "bf16"\nprobs = "bf16"\nattention_gemm = "a100_bf16_fp32"\n')
    r = train(plan, tmp_path / "run", check=False)
    assert r.returncode == 2
    assert "attention GEMM 'dp'" in r.stderr and "grad_output" in r.stderr
