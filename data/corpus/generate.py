#!/usr/bin/env python3
"""Regenerates stories260K_samples.npy: stories sampled from the shipped stories260K model.

Each story is `lpemu run` of stories260K under the fp32 plan from BOS alone at temperature 1
with seed s (s = 0, 1, ..., N-1), 256 positions (fewer where the model samples BOS); the corpus is the stories' token ids one after
another (each story starts with BOS), stored as little-endian uint16. Deterministic: the same
lpemu build gives the same file byte for byte (the test `python/corpus` regenerates the first
stories and compares). Usage: generate.py [--stories N] [--out FILE]
"""
import argparse
import pathlib
import sys

import numpy as np

import lpemu

HERE = pathlib.Path(__file__).resolve().parent


def story(seed):
    """The token ids of story `seed` (BOS first)."""
    return lpemu.call("run", model="stories260K", plan="fp32", temperature=1.0, seed=seed, steps=256)["tokens"]


def corpus(n_stories, progress=False):
    """The first `n_stories` stories' token ids, one after another, as uint16."""
    out = []
    for s in range(n_stories):
        out.extend(story(s))
        if progress and (s + 1) % 64 == 0:
            print(f"generate.py: {s + 1}/{n_stories} stories", file=sys.stderr)
    return np.asarray(out, dtype="<u2")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stories", type=int, default=1024)
    ap.add_argument("--out", default=str(HERE / "stories260K_samples.npy"))
    a = ap.parse_args()
    tokens = corpus(a.stories, progress=True)
    np.save(a.out, tokens)
    print(f"generate.py: {tokens.size} tokens written to {a.out}")


if __name__ == "__main__":
    main()
