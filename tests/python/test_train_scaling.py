"""Loss scaling and range counts in `lpemu train`: FP16 gradients (IEEE overflow to Inf) that a too
large static loss scale drives to Inf train under dynamic scaling, which skips those steps; the
logged scales follow torch's GradScaler update rule (transcribed below: torch 1.13's CPU build has
no GradScaler, torch.cuda.amp.GradScaler disables itself without CUDA) given the logged Inf/NaN
steps, with GradScaler's defaults; the overflow/underflow columns of log.csv and log.h5 agree, and
scaling lowers the underflow of the gradient roles. `--model SHAPE --seed N` initialises the
shape as a training experiment does, from the CLI and from Python alike."""

import csv
import inspect
import math
import os

import h5py
import numpy as np
import pytest
import torch

import lpemu
from conftest import SOURCE, run_cli

TEXT = os.path.join(SOURCE, "data", "models", "stories260K", "paragraph.txt")
CORPUS = os.path.join(SOURCE, "data", "corpus", "stories260K_samples.npy")
FP16_GRADS = '[roles]\ngrad_output = "fp16"\ngrad_activation = "fp16"\ngrad_weights = "fp16"\n'


def train(tmp_path, name, plan_text, steps=8, *extra):
    plan = tmp_path / f"{name}.toml"
    plan.write_text(plan_text)
    out = tmp_path / name
    run_cli("train", "--plan", plan, "--text", TEXT, "--steps", steps, "--batch", 2, "--seq", 16,
            "--optimizer", "adamw", "--lr", 1e-3, "--schedule", "constant", "--out", out, *extra)
    with open(out / "log.csv") as f:
        return out, list(csv.DictReader(f))


def grad_scaler_update(scale, tracker, found_inf, growth, backoff, interval):
    """torch.cuda.amp.GradScaler.update's rule (torch/cuda/amp/grad_scaler.py, kernel
    _amp_update_scale_cuda_kernel in aten/src/ATen/native/cuda/AmpKernels.cu): the FP32 scale times
    backoff on Inf/NaN (tracker reset), else the tracker counts up and at growth_interval the scale is
    multiplied by growth when that stays finite (tracker reset)."""
    if found_inf:
        return float(np.float32(scale * backoff)), 0
    if tracker + 1 == interval:
        grown = np.float32(scale * growth)
        return (float(grown) if np.isfinite(grown) else scale), 0
    return scale, tracker + 1


def test_defaults_are_grad_scalers(tmp_path):
    sig = inspect.signature(torch.cuda.amp.GradScaler.__init__).parameters
    # A plan's [loss_scale] without parameters, as `lpemu train` saves it back in state: torch's values.
    _, log = train(tmp_path, "defaults", FP16_GRADS + '[loss_scale]\nkind = "dynamic"\n', 1)
    assert float(log[0]["loss_scale"]) == sig["init_scale"].default
    got = {"init_scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
    for k, v in got.items():
        assert sig[k].default == v, k


def test_static_overflow_diverges_and_dynamic_scaling_trains(tmp_path):
    # A scale of 2^40 turns the loss gradient (about 1/32 per prediction) into values far above
    # FP16's 65504: Inf gradients.
    _, static = train(tmp_path, "static", FP16_GRADS + '[loss_scale]\nkind = "static"\ninit_scale = 1099511627776.0\n')
    assert all(s["skipped"] == "0" for s in static)
    assert int(static[0]["overflow_grad_output"]) > 0
    assert not math.isfinite(float(static[0]["grad_norm"]))
    assert all(math.isnan(float(s["loss"])) for s in static[1:])  # the Inf update ruined the weights
    # Dynamic scaling from the same scale backs off by 2^-8 per overflowing step, skipping it; one
    # batch of 2 x 17 tokens every step, so a skipped step leaves the loss as it was.
    one_batch = tmp_path / "one_batch.npy"
    np.save(one_batch, np.load(CORPUS)[:34].astype(np.int32))
    plan = tmp_path / "dynamic.toml"
    plan.write_text(FP16_GRADS + '[loss_scale]\nkind = "dynamic"\ninit_scale = 1099511627776.0\n'
                    'backoff_factor = 0.00390625\ngrowth_interval = 2\ngrowth_factor = 2.0\n')
    out = tmp_path / "dynamic"
    run_cli("train", "--model", "tiny1m", "--plan", plan, "--tokens", one_batch, "--steps", 12, "--batch", 2,
            "--seq", 16, "--optimizer", "adamw", "--lr", 3e-3, "--schedule", "constant", "--out", out)
    with open(out / "log.csv") as f:
        dyn = list(csv.DictReader(f))
    skipped = [s["skipped"] == "1" for s in dyn]
    assert skipped[0] and not all(skipped)
    assert all(math.isfinite(float(s["loss"])) for s in dyn)
    for s in dyn:  # a step is skipped exactly when its unscaled gradients are not finite
        assert (s["skipped"] == "1") == (not math.isfinite(float(s["grad_norm"])))
    losses = [float(s["loss"]) for s in dyn]
    for i in range(1, len(dyn)):  # the weights do not change in a skipped step
        assert (losses[i] == losses[i - 1]) == skipped[i - 1], i
    assert losses[-1] < losses[0] - 0.5  # and they learn the batch in the others
    # The scales follow GradScaler's rule given the steps that found Inf/NaN.
    scale, tracker = 2.0 ** 40, 0
    for s, k in zip(dyn, skipped):
        assert float(s["loss_scale"]) == scale
        scale, tracker = grad_scaler_update(scale, tracker, k, 2.0, 2.0 ** -8, 2)
    assert len({float(s["loss_scale"]) for s in dyn}) >= 3
    # log.h5 holds the same columns.
    with h5py.File(out / "log.h5") as f:
        np.testing.assert_array_equal(f["loss_scale"][()], [float(s["loss_scale"]) for s in dyn])
        np.testing.assert_array_equal(f["skipped"][()], [int(s["skipped"]) for s in dyn])
        for role in ("grad_output", "grad_activation", "grad_weights"):
            np.testing.assert_array_equal(f["overflow/" + role][()], [int(s["overflow_" + role]) for s in dyn])
            np.testing.assert_array_equal(f["underflow/" + role][()], [int(s["underflow_" + role]) for s in dyn])


def test_scaling_lowers_fp16_gradient_underflow(tmp_path):
    _, plain = train(tmp_path, "plain", FP16_GRADS, 2)
    _, scaled = train(tmp_path, "scaled", FP16_GRADS + '[loss_scale]\nkind = "dynamic"\n', 2)
    assert [float(s["loss_scale"]) for s in plain] == [1.0, 1.0]
    assert [float(s["loss_scale"]) for s in scaled] == [65536.0, 65536.0]
    # dY, the role loss scaling is for: fewer of its elements flush to zero at 65536 times the scale
    # (softmax probabilities below 2^-41 still do).
    assert int(plain[0]["underflow_grad_output"]) > int(scaled[0]["underflow_grad_output"])
    assert int(scaled[0]["overflow_grad_output"]) == 0
    assert float(plain[0]["loss"]) == float(scaled[0]["loss"])  # the same weights before the first update


def test_resume_keeps_the_scaler(tmp_path):
    text = FP16_GRADS + '[loss_scale]\nkind = "dynamic"\ninit_scale = 1099511627776.0\n' \
        'backoff_factor = 0.00390625\ngrowth_interval = 2\n'
    _, whole = train(tmp_path, "whole", text, 8)
    plan = tmp_path / "resumed.toml"
    plan.write_text(text)
    common = ["--plan", plan, "--text", TEXT, "--batch", 2, "--seq", 16, "--optimizer", "adamw", "--lr", 1e-3,
              "--schedule", "constant", "--out", tmp_path / "resumed"]
    run_cli("train", "--steps", 3, *common)
    run_cli("train", "--steps", 8, "--resume", *common)
    with open(tmp_path / "resumed" / "log.csv") as f:
        resumed = list(csv.DictReader(f))
    assert resumed == whole


def test_model_shape_and_seed_initialise_as_the_experiment_does(tmp_path):
    args = ["--tokens", CORPUS, "--steps", 2, "--batch", 2, "--seq", 8, "--optimizer", "adamw", "--lr", 3e-3]
    # The training experiment's initial model of tiny1m for seed 1, written by `lpemu sweep`.
    exp = tmp_path / "exp.toml"
    exp.write_text('name = "init"\n[source]\ntokens = "%s"\n[train]\nshape = "tiny1m"\nsteps = 1\nbatch = 2\n'
                   'seq = 8\nseeds = [1]\n[[plan]]\nlabel = "fp32"\nplan = "fp32"\n' % CORPUS)
    run_cli("sweep", exp, "--out", tmp_path / "sweep")
    run_cli("train", "--model", tmp_path / "sweep" / "init" / "seed1.h5", "--seed", 1, *args,
            "--out", tmp_path / "from_file")
    run_cli("train", "--model", "tiny1m", "--seed", 1, *args, "--out", tmp_path / "from_shape")
    shape_file = os.path.join(SOURCE, "data", "shapes", "tiny1m.toml")
    run_cli("train", "--model", shape_file, "--seed", 2, *args, "--out", tmp_path / "seed2")
    r = lpemu.call("train", model="tiny1m", seed=1, tokens=CORPUS, steps=2, batch=2, seq=8, optimizer="adamw",
                   lr=3e-3, out=str(tmp_path / "python"))
    assert r["model"] == "tiny1m"

    def weights(d):
        with h5py.File(d / "model.h5") as f:
            out = {}
            f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
            return out

    a, b, c, p = (weights(tmp_path / d) for d in ("from_file", "from_shape", "seed2", "python"))
    assert a.keys() == b.keys() == p.keys()
    for n in a:
        np.testing.assert_array_equal(a[n], b[n], err_msg=n)
        np.testing.assert_array_equal(a[n], p[n], err_msg=n)
    assert any(not np.array_equal(a[n], c[n]) for n in a if a[n].ndim == 2)
    with open(tmp_path / "from_file" / "log.csv") as f1, open(tmp_path / "from_shape" / "log.csv") as f2:
        assert f1.read() == f2.read()


def test_unknown_model_names_shapes(tmp_path):
    r = run_cli("train", "--model", "tiny2m", "--text", TEXT, "--steps", 1, "--out", tmp_path / "o", check=False)
    assert r.returncode == 2
    assert "tiny2m" in r.stderr and "tiny1m" in r.stderr
