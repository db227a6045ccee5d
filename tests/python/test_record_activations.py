#!/usr/bin/env python3
"""Tests experiments/record_activations.py on a tiny PyTorch model built here, then replays the
recorded file with `lpemu replay` (usage: test_record_activations.py LPEMU_BINARY SOURCE_DIR)."""

import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

LPEMU, SRC = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SRC, "experiments"))
import record_activations as ra  # noqa: E402

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAILED:", what)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.ModuleDict({"attn_qkv": torch.nn.Linear(8, 24, bias=False),
                                                                "mlp_fc": torch.nn.Linear(24, 8)})])
        self.lm_head = torch.nn.Linear(8, 5, bias=False)

    def forward(self, x):
        h = self.layers[0]["attn_qkv"](x)
        h = self.layers[0]["mlp_fc"](torch.relu(h))
        return self.lm_head(h)


torch.manual_seed(3)
net = Net()
xs = [torch.randn(2, 3, 8), torch.randn(1, 4, 8)]
with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "acts.h5")
    names = ra.record(net, xs, out, model_name="unit")
    check(names == ["layers.0.attn_qkv", "layers.0.mlp_fc", "lm_head"], f"names {names}")
    with h5py.File(out, "r") as f:
        check(f.attrs["schema"] == "lpemu-linear-activations", "schema attribute")
        check(int(f.attrs["schema_version"]) == 1, "schema version")
        g = f["linear/layers.0.attn_qkv"]
        check(g["input"].shape == (10, 8), f"qkv input shape {g['input'].shape}")
        expect = np.concatenate([x.reshape(-1, 8).numpy() for x in xs])
        check(np.array_equal(g["input"][...], expect), "qkv input equals the model input")
        check(np.array_equal(g["weight"][...], net.layers[0]["attn_qkv"].weight.detach().numpy()), "qkv weight")
        check(int(g.attrs["layer"]) == 0 and g.attrs["kind"] == "attention", "qkv layer and kind")
        m = f["linear/layers.0.mlp_fc"]
        with torch.no_grad():
            hid = torch.relu(net.layers[0]["attn_qkv"](torch.cat([x.reshape(-1, 8) for x in xs])))
        check(np.allclose(m["input"][...], hid.numpy(), rtol=0, atol=0), "mlp input equals the hidden activation")
        check("bias" in m and "bias" not in g, "bias recorded only where present")
        check(f["linear/lm_head"].attrs["kind"] == "head" and int(f["linear/lm_head"].attrs["layer"]) == -1,
              "head kind")
    # The C++ side replays the file: fp32 is exact, fp8_e4m3 loses accuracy but stays finite.
    r = subprocess.run([LPEMU, "replay", "--activations", out, "--plan", "fp32"], capture_output=True, text=True)
    check(r.returncode == 0, f"lpemu replay fp32 exit {r.returncode}: {r.stderr}")
    check("layers.0.mlp_fc" in r.stdout and "lm_head" in r.stdout, "replay lists every layer")
    r8 = subprocess.run([LPEMU, "replay", "--activations", out, "--plan", "fp8_e4m3", "--json"],
                        capture_output=True, text=True)
    check(r8.returncode == 0, f"lpemu replay fp8 exit {r8.returncode}: {r8.stderr}")
    rows = json.loads(r8.stdout)["rows"] if r8.returncode == 0 else []
    check(bool(rows) and all("sqnr_db" in r["output_error"] for r in rows), "replay --json has output SQNR")
    bad = os.path.join(d, "bad.h5")
    with h5py.File(bad, "w") as f:
        f.create_dataset("linear/x/input", data=np.zeros((3, 4), np.float32))
        f.create_dataset("linear/x/weight", data=np.zeros((2, 5), np.float32))
    rb = subprocess.run([LPEMU, "replay", "--activations", bad, "--plan", "fp32"], capture_output=True, text=True)
    check(rb.returncode != 0 and "linear/x" in rb.stderr, f"shape mismatch is reported: {rb.stderr}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
