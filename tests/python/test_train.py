"""`lpemu train` against PyTorch: an independent PyTorch model of stories260K (built here from
model.h5), trained with torch.optim on the same batches, ends with the weights lpemu writes
(3 SGD-with-momentum steps, 3 AdamW steps with weight decay, fp32 plan: relative 1e-5 in each
tensor's norm, and elementwise for SGD); each step's loss equals PyTorch's (relative 1e-5)."""

import math
import os

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import run_cli, SOURCE

MODEL = os.path.join(SOURCE, "data", "models", "stories260K", "model.h5")
BATCH, SEQ, STEPS = 2, 16, 3


def rope(x, cos, sin):
    """Interleaved pairs (2j, 2j+1) rotated by p·θ^(−2j/d) (data/README.md); x [b, t, h, d]."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * cos[None, :, None, :] - x1 * sin[None, :, None, :]
    out[..., 1::2] = x0 * sin[None, :, None, :] + x1 * cos[None, :, None, :]
    return out


class Llama(torch.nn.Module):
    """stories260K in PyTorch (tied embeddings, GQA, RMSNorm, SwiGLU), parameters named as lpemu names them."""

    def __init__(self, path):
        super().__init__()
        with h5py.File(path, "r") as f:
            self.cfg = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
            P = lambda a: torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(a[...], dtype=np.float32)))
            self.params = torch.nn.ParameterDict()
            self.params["tok_embeddings"] = P(f["tok_embeddings"])
            for i in range(self.cfg["n_layers"]):
                g = f[f"layers/{i}"]
                for n in ("attention_norm", "ffn_norm"):
                    self.params[f"layers_{i}_{n}"] = P(g[n])
                for n in ("wq", "wk", "wv", "wo"):
                    self.params[f"layers_{i}_{n}"] = P(g["attention"][n])
                for n in ("w1", "w2", "w3"):
                    self.params[f"layers_{i}_{n}"] = P(g["feed_forward"][n])
            self.params["norm"] = P(f["norm"])

    def norm(self, x, w):
        return w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.cfg["norm_eps"]))

    def forward(self, tokens):
        c, p = self.cfg, self.params
        b, t = tokens.shape
        h, kvh, d = c["n_heads"], c["n_kv_heads"], c["head_dim"]
        pos = np.arange(t, dtype=np.float64)[:, None]
        angle = pos * np.power(c["rope_theta"], -2.0 * np.arange(d // 2) / d)
        cos = torch.from_numpy(np.cos(angle).astype(np.float32))
        sin = torch.from_numpy(np.sin(angle).astype(np.float32))
        x = p["tok_embeddings"][tokens]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        for i in range(c["n_layers"]):
            L = lambda n: p[f"layers_{i}_{n}"]
            xn = self.norm(x, L("attention_norm"))
            q = rope((xn @ L("wq").T).view(b, t, h, d), cos, sin)
            k = rope((xn @ L("wk").T).view(b, t, kvh, d), cos, sin).repeat_interleave(h // kvh, dim=2)
            v = (xn @ L("wv").T).view(b, t, kvh, d).repeat_interleave(h // kvh, dim=2)
            s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(d)
            a = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
            o = torch.einsum("bhts,bshd->bthd", a, v).reshape(b, t, h * d)
            x = x + o @ L("wo").T
            xn = self.norm(x, L("ffn_norm"))
            x = x + (F.silu(xn @ L("w1").T) * (xn @ L("w3").T)) @ L("w2").T
        return self.norm(x, p["norm"]) @ p["tok_embeddings"].T


def lpemu_weights(path):
    """Every weight of an lpemu model file, named as Llama.params names them."""
    out = {}
    with h5py.File(path, "r") as f:
        out["tok_embeddings"] = f["tok_embeddings"][...]
        out["norm"] = f["norm"][...]
        for i in range(f.attrs["n_layers"]):
            g = f[f"layers/{i}"]
            for n in ("attention_norm", "ffn_norm"):
                out[f"layers_{i}_{n}"] = g[n][...]
            for n in ("wq", "wk", "wv", "wo"):
                out[f"layers_{i}_{n}"] = g["attention"][n][...]
            for n in ("w1", "w2", "w3"):
                out[f"layers_{i}_{n}"] = g["feed_forward"][n][...]
    return out


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_trained_weights_equal_torch_optim(tmp_path, optimizer):
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 512, size=BATCH * (SEQ + 1) * STEPS + 5).astype(np.int32)
    np.save(tmp_path / "t.npy", tokens)
    lr = 0.05 if optimizer == "sgd" else 1e-3
    out = tmp_path / "run"
    args = ["train", "--tokens", tmp_path / "t.npy", "--steps", STEPS, "--batch", BATCH, "--seq", SEQ,
            "--optimizer", optimizer, "--lr", lr, "--schedule", "constant", "--out", out]
    if optimizer == "adamw":
        args += ["--weight-decay", "0.1"]
    run_cli(*args)

    model = Llama(MODEL)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    w = SEQ + 1
    losses = []
    for s in range(STEPS):
        # Row b of step s is window s·batch + b of the token stream (docs/training.md).
        batch = np.stack([tokens[(s * BATCH + b) * w:(s * BATCH + b + 1) * w] for b in range(BATCH)])
        batch = torch.from_numpy(batch.astype(np.int64))
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())

    log = np.genfromtxt(out / "log.csv", delimiter=",", names=True)
    np.testing.assert_allclose(log["loss"], losses, rtol=1e-5)
    got = lpemu_weights(out / "model.h5")
    start = lpemu_weights(MODEL)
    for name, p in model.params.items():
        want = p.detach().numpy()
        assert not np.array_equal(want, start[name]), f"{name} did not change"
        # Relative 1e-5 in each tensor's L2 norm (as the finite-difference test of the gradients):
        # elementwise, AdamW's m/√v amplifies float rounding of gradients near 0 (≈ eps).
        err = np.linalg.norm((got[name] - want).astype(np.float64))
        assert err <= 1e-5 * np.linalg.norm(want.astype(np.float64)), f"{name}: |lpemu - torch| = {err}"
        if optimizer == "sgd":
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_same_result_for_a_seed_whatever_the_thread_count(tmp_path):
    """An MXFP8 plan with stochastically rounded gradients: one thread and all threads write the same
    log and weights for a seed; another seed draws other roundings."""
    plan = tmp_path / "sr.toml"
    plan.write_text('[roles]\nweights = "mxfp8_e4m3"\nlinear_input = "mxfp8_e4m3"\n'
                    'grad_output = { format = "fp8_e5m2", rounding = "stochastic" }\n')
    text = os.path.join(SOURCE, "data", "models", "stories260K", "paragraph.txt")
    common = ["train", "--plan", plan, "--text", text, "--steps", 3, "--batch", 2, "--seq", 16, "--lr", 1e-3]
    run_cli("--threads", 1, *common, "--seed", 4, "--out", tmp_path / "one")
    run_cli(*common, "--seed", 4, "--out", tmp_path / "all")
    run_cli(*common, "--seed", 5, "--out", tmp_path / "other")
    assert (tmp_path / "one" / "log.csv").read_text() == (tmp_path / "all" / "log.csv").read_text()
    one, all_, other = (lpemu_weights(tmp_path / d / "model.h5") for d in ("one", "all", "other"))
    assert all(np.array_equal(one[k], all_[k]) for k in one)
    assert not all(np.array_equal(one[k], other[k]) for k in one)


def torch_loss(model, windows):
    """Mean next-token cross-entropy of the PyTorch model over rows of `windows` [n, seq + 1]."""
    batch = torch.from_numpy(np.asarray(windows).astype(np.int64))
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def test_validation_loss_and_hdf5_log_equal_pytorch(tmp_path):
    """--val-fraction holds the last windows out: training rows cycle over the others, and the
    validation loss at steps 0, N, 2N, ... (--eval-every N) is PyTorch's on the held-out windows
    before that step's update; OUT/log.h5 holds the CSV's columns; stderr shows progress with an ETA."""
    rng = np.random.default_rng(5)
    w = SEQ + 1
    tokens = rng.integers(0, 512, size=6 * w + 3).astype(np.int32)  # 6 windows: 4 train, 2 validation
    np.save(tmp_path / "t.npy", tokens)
    out = tmp_path / "run"
    steps, lr = 4, 0.05
    r = run_cli("train", "--tokens", tmp_path / "t.npy", "--steps", steps, "--batch", BATCH, "--seq", SEQ,
                "--optimizer", "sgd", "--lr", lr, "--schedule", "constant", "--val-fraction", 0.34,
                "--eval-every", 2, "--out", out)
    assert "step 4/4" in r.stderr and "s left" in r.stderr

    windows = tokens[:6 * w].reshape(6, w)
    model = Llama(MODEL)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses, val = [], []
    for s in range(steps):
        with torch.no_grad():
            val.append(torch_loss(model, windows[4:]).item() if s % 2 == 0 else math.nan)
        loss = torch_loss(model, windows[[(s * BATCH + b) % 4 for b in range(BATCH)]])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())

    log = np.genfromtxt(out / "log.csv", delimiter=",", names=True)
    np.testing.assert_allclose(log["loss"], losses, rtol=1e-5)
    np.testing.assert_allclose(log["val_loss"], val, rtol=1e-5)  # NaN where not measured
    assert np.isnan(log["val_loss"][1]) and not np.isnan(log["val_loss"][2])
    with h5py.File(out / "log.h5", "r") as f:
        np.testing.assert_array_equal(f["step"][...], np.arange(steps))
        for col in ("loss", "val_loss", "grad_norm", "lr"):
            assert np.array_equal(f[col][...], log[col], equal_nan=True), col

    import lpemu

    j = lpemu.call("train", tokens=str(tmp_path / "t.npy"), steps=steps, batch=BATCH, seq=SEQ, optimizer="sgd",
                   lr=lr, schedule="constant", val_fraction=0.34, eval_every=2, out=str(tmp_path / "py"))
    assert j["val_windows"] == 2 and j["log_h5"].endswith("log.h5")
    got = np.array([math.nan if s["val_loss"] is None else s["val_loss"] for s in j["log"]], dtype=float)
    assert np.array_equal(got, log["val_loss"], equal_nan=True)


def test_gradient_sqnr_against_pytorch(tmp_path):
    """--sqnr-every: per block, the SQNR of the plan's gradient against the unquantised one. With
    grad_weights = bf16 the plan's block gradient is the unquantised one with its linear weights'
    gradients rounded to bf16, so the SQNR is computable from PyTorch's gradient; fp32: +inf."""
    rng = np.random.default_rng(7)
    w = SEQ + 1
    tokens = rng.integers(0, 512, size=BATCH * w).astype(np.int32)
    np.save(tmp_path / "t.npy", tokens)
    plan = tmp_path / "gw.toml"
    plan.write_text('[roles]\ngrad_weights = "bf16"\n')
    common = ["train", "--tokens", tmp_path / "t.npy", "--steps", 3, "--batch", BATCH, "--seq", SEQ,
              "--optimizer", "sgd", "--lr", 0.01, "--sqnr-every", 2]
    run_cli(*common, "--plan", plan, "--out", tmp_path / "bf16")
    run_cli(*common, "--out", tmp_path / "fp32")

    model = Llama(MODEL)
    torch_loss(model, tokens.reshape(BATCH, w)).backward()
    want = []
    for i in range(model.cfg["n_layers"]):
        signal = noise = 0.0
        for n in ("attention_norm", "ffn_norm", "wq", "wk", "wv", "wo", "w1", "w2", "w3"):
            g = model.params[f"layers_{i}_{n}"].grad.to(torch.float64)
            q = g.to(torch.float32).to(torch.bfloat16).to(torch.float64) if n[0] == "w" else g
            signal += (g * g).sum().item()
            noise += ((q - g) ** 2).sum().item()
        want.append(10 * math.log10(signal / noise))

    cols = [f"grad_sqnr_{i}" for i in range(len(want))]
    log = np.genfromtxt(tmp_path / "bf16" / "log.csv", delimiter=",", names=True)
    np.testing.assert_allclose([log[c][0] for c in cols], want, rtol=1e-3)
    assert all(np.isnan(log[c][1]) and np.isfinite(log[c][2]) for c in cols)
    with h5py.File(tmp_path / "bf16" / "log.h5", "r") as f:
        sq = f["grad_sqnr"][...]
    assert sq.shape == (3, len(want))
    np.testing.assert_array_equal(sq[0], [log[c][0] for c in cols])
    ref = np.genfromtxt(tmp_path / "fp32" / "log.csv", delimiter=",", names=True)
    assert all(ref[c][0] == np.inf and ref[c][2] == np.inf for c in cols)


def test_resume_equals_one_run(tmp_path):
    """2 AdamW steps, then --resume to 5, equal 5 steps in one run bit for bit (weights, optimizer
    state, log), under stochastically rounded gradients, with validation and SQNR on."""
    plan = tmp_path / "sr.toml"
    plan.write_text('[roles]\nweights = "mxfp8_e4m3"\nlinear_input = "mxfp8_e4m3"\n'
                    'grad_output = { format = "fp8_e5m2", rounding = "stochastic" }\n')
    text = os.path.join(SOURCE, "data", "models", "stories260K", "paragraph.txt")
    common = ["train", "--plan", plan, "--text", text, "--batch", 2, "--seq", 16, "--lr", 1e-3, "--seed", 3,
              "--schedule", "constant", "--warmup", 1, "--weight-decay", 0.1, "--val-fraction", 0.2,
              "--eval-every", 2, "--sqnr-every", 3]
    run_cli(*common, "--steps", 5, "--out", tmp_path / "one")
    run_cli(*common, "--steps", 2, "--out", tmp_path / "two")
    r = run_cli(*common, "--steps", 5, "--resume", "--out", tmp_path / "two")
    assert "resumed at step 2" in r.stderr
    assert (tmp_path / "one" / "log.csv").read_text() == (tmp_path / "two" / "log.csv").read_text()
    one, two = (lpemu_weights(tmp_path / d / "model.h5") for d in ("one", "two"))
    assert all(np.array_equal(one[k], two[k]) for k in one)
    with h5py.File(tmp_path / "one" / "state.h5", "r") as a, h5py.File(tmp_path / "two" / "state.h5", "r") as b:
        names = []
        a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) else None)
        assert any(n.startswith("exp_avg_sq/") for n in names) and a.attrs["step"] == 5
        assert all(np.array_equal(a[n][...], b[n][...]) for n in names)
    with h5py.File(tmp_path / "one" / "log.h5", "r") as a, h5py.File(tmp_path / "two" / "log.h5", "r") as b:
        logged = []  # every dataset, the overflow/ and underflow/ groups' included
        a.visit(lambda n: logged.append(n) if isinstance(a[n], h5py.Dataset) else None)
        assert "overflow/grad_output" in logged
        assert all(np.array_equal(a[n][...], b[n][...], equal_nan=True) for n in logged)

    done = run_cli(*common, "--steps", 5, "--resume", "--out", tmp_path / "two", check=False)
    assert done.returncode == 2 and "has 5 steps already" in done.stderr
    none = run_cli(*common, "--steps", 5, "--resume", "--out", tmp_path / "new", check=False)
    assert none.returncode == 2 and "no training state to resume from" in none.stderr
    sgd = run_cli(*common, "--steps", 6, "--resume", "--optimizer", "sgd", "--out", tmp_path / "two", check=False)
    assert sgd.returncode == 2 and "same optimizer" in sgd.stderr
