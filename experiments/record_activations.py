#!/usr/bin/env python3
"""Record the inputs and weights of every linear layer of a PyTorch model into the HDF5 schema
lpemu replays ("lpemu-linear-activations", documented in data/README.md).

    import torch
    from record_activations import record
    record(model, [batch1, batch2], "acts.h5", model_name="my-model")

Each torch.nn.Linear module `name` (its dotted module path) becomes a group /linear/<name> with
  input   [tokens, in_features]  float32: every call's input, flattened over leading dimensions
  weight  [out_features, in_features] float32
  bias    [out_features] float32 (only if the layer has one)
and attributes `module` (the dotted name), `layer` (the block index parsed from the name, or -1)
and `kind` ("attention", "mlp", "head" or "other", guessed from the name). The root carries
schema="lpemu-linear-activations", schema_version=1, model_name and recorded_with.

Run `python3 record_activations.py --demo OUT.h5` to record a small random model.
"""

import argparse
import re
import sys

import h5py
import numpy as np
import torch

SCHEMA = "lpemu-linear-activations"
SCHEMA_VERSION = 1


def guess_layer(name):
    """The first integer component of a dotted module path (the block index), or -1."""
    for part in name.split("."):
        if part.isdigit():
            return int(part)
    return -1


def guess_kind(name):
    """attention / mlp / head / other, from common module names."""
    n = name.lower()
    if re.search(r"attn|attention|q_proj|k_proj|v_proj|o_proj|wq|wk|wv|wo|qkv", n):
        return "attention"
    if re.search(r"mlp|ffn|feed_forward|fc|w1|w2|w3|gate|up_proj|down_proj", n):
        return "mlp"
    if re.search(r"lm_head|output|classifier|head", n):
        return "head"
    return "other"


def record(model, batches, path, model_name="model", max_tokens=None):
    """Runs `model` on each input of `batches` (tensors or tuples of tensors) with hooks on every
    nn.Linear, then writes their inputs and weights to `path` (overwritten)."""
    captured = {}
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            def hook(mod, inputs, _output, name=name):
                x = inputs[0].detach().to(torch.float32).reshape(-1, mod.in_features)
                captured.setdefault(name, []).append(x.cpu().numpy())
            hooks.append(module.register_forward_hook(hook))
    if not hooks:
        raise ValueError("the model has no torch.nn.Linear layers to record")
    model.eval()
    try:
        with torch.no_grad():
            for b in batches:
                model(*b) if isinstance(b, (tuple, list)) else model(b)
    finally:
        for h in hooks:
            h.remove()
    modules = dict(model.named_modules())
    with h5py.File(path, "w") as f:
        f.attrs["schema"] = SCHEMA
        f.attrs["schema_version"] = np.int32(SCHEMA_VERSION)
        f.attrs["model_name"] = model_name
        f.attrs["recorded_with"] = "torch " + torch.__version__
        for name in sorted(captured):
            mod = modules[name]
            x = np.concatenate(captured[name], axis=0)
            if max_tokens is not None:
                x = x[:max_tokens]
            g = f.create_group("linear/" + name)
            g.attrs["module"] = name
            g.attrs["layer"] = np.int32(guess_layer(name))
            g.attrs["kind"] = guess_kind(name)
            g.create_dataset("input", data=np.ascontiguousarray(x, dtype=np.float32))
            g.create_dataset("weight", data=mod.weight.detach().to(torch.float32).cpu().numpy())
            if mod.bias is not None:
                g.create_dataset("bias", data=mod.bias.detach().to(torch.float32).cpu().numpy())
    return sorted(captured)


class TinyBlock(torch.nn.Module):
    """A two-layer MLP block, enough to show the schema."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.up = torch.nn.Linear(dim, hidden)
        self.down = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class TinyModel(torch.nn.Module):
    """Blocks of TinyBlock followed by a classifier head."""

    def __init__(self, dim=32, hidden=64, layers=2, vocab=50):
        super().__init__()
        self.blocks = torch.nn.ModuleList([TinyBlock(dim, hidden) for _ in range(layers)])
        self.lm_head = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.lm_head(x)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--demo", metavar="OUT.h5", required=True, help="record a small random model into OUT.h5")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    torch.manual_seed(a.seed)
    model = TinyModel()
    batches = [torch.randn(4, 16, 32) for _ in range(2)]
    names = record(model, batches, a.demo, model_name="tiny-demo")
    print(f"recorded {len(names)} linear layers into {a.demo}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
