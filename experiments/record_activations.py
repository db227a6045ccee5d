#!/usr/bin/env python3
"""Record the inputs and weights of every linear map of a PyTorch model into the HDF5 schema
lpemu replays ("lpemu-linear-activations", documented in data/README.md).

    import torch
    from record_activations import record      # the same function as lpemu.torch.record
    record(model, [batch1, batch2], "acts.h5", model_name="my-model")

Every torch.nn.Linear and the q, k, v and output projections inside torch.nn.MultiheadAttention
(module path + ".q"/".k"/".v"/".out_proj") become a group /linear/<name> with
  input   [tokens, in_features]  float32: every call's input, flattened over leading dimensions
  weight  [out_features, in_features] float32
  bias    [out_features] float32 (only if the layer has one)
and attributes `module` (the name), `layer` (the first integer in the module path, or -1), `role`
(attention.q|k|v|qkv|out, mlp.gate|up|down, mlp, attention, head, or other: labelled from the
module tree by lpemu.torch.linear_maps, never guessed) and `kind` (attention, mlp, head, other).
The root carries schema="lpemu-linear-activations", schema_version=1, model_name and recorded_with.

Run `python3 record_activations.py --demo OUT.h5` to record a small random model. Needs the lpemu
Python package (PYTHONPATH=build/release/python, or an installed prefix).
"""

import argparse
import sys

import torch

from lpemu.torch import record  # noqa: F401  (re-exported for `from record_activations import record`)


class TinyMlpBlock(torch.nn.Module):
    """A two-layer MLP block, enough to show the schema."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.up = torch.nn.Linear(dim, hidden)
        self.down = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class TinyModel(torch.nn.Module):
    """Blocks of TinyMlpBlock followed by a classifier head."""

    def __init__(self, dim=32, hidden=64, layers=2, vocab=50):
        super().__init__()
        self.blocks = torch.nn.ModuleList([TinyMlpBlock(dim, hidden) for _ in range(layers)])
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
