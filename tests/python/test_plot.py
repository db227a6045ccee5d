#!/usr/bin/env python3
"""Tests `python3 -m lpemu.plot` on the results of a small `lpemu sweep` run here: every figure is
written, the scatter plots hold one point per plan with a KL the log axis can show, and the
Pareto front drawn is the one a brute-force search finds (usage: test_plot.py LPEMU_BINARY SOURCE_DIR)."""

import csv
import os
import subprocess
import sys
import tempfile

LPEMU, SRC = sys.argv[1], sys.argv[2]
# lpemu (with lpemu.plot) comes from PYTHONPATH: the build tree's python/ folder, as ctest sets it.
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lpemu import plot  # noqa: E402  (namespace package: no __init__.py needed)

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAILED:", what)


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(SRC, "data", "models", "stories260K")
    exp = os.path.join(tmp, "small.toml")
    with open(exp, "w") as f:
        f.write(f'name = "small"\n[source]\nmodel = "stories260K"\ntext = "{data}/paragraph.txt"\n'
                f'activations = "{data}/activations.h5"\nmax_tokens = 24\n[options]\nattribution = true\n'
                'layer_attribution = ["mxfp4+b200_mxfp4_fp32"]\n'
                '[cost]\ntarget = "h100_sxm"\nshape = "llama3_8b"\nbatch = 8\ncontext = 4096\n'
                '[[plan]]\nlabel = "fp32"\nplan = "fp32"\n'
                '[grid]\nformats = ["mxfp8_e4m3", "mxfp4"]\nroles = ["weights", "linear_input"]\n'
                '[grid.native]\nmxfp8_e4m3 = "b200_mxfp8_fp32"\nmxfp4 = "b200_mxfp4_fp32"\n')
    out = os.path.join(tmp, "out")
    subprocess.run([LPEMU, "sweep", exp, "--out", out], check=True, capture_output=True)

    r = subprocess.run([sys.executable, "-m", "lpemu.plot", out, "--format", "png"], capture_output=True, text=True,
                       env=dict(os.environ))
    check(r.returncode == 0, f"lpemu.plot exit status {r.returncode}: {r.stderr}")
    for stem in ["kl_vs_bits", "kl_vs_cost", "kl_vs_tokens_per_s", "kl_vs_energy", "residual_sqnr",
                 "attribution_heatmap", "attribution_bars", "replay_sqnr_heatmap"]:
        png = os.path.join(out, "matplotlib", stem + ".png")
        ok = os.path.isfile(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
        check(ok, f"{png} written as PNG")

    # Per plan: the layer attribution of the one plan that asked for it, and a cost breakdown per priced plan.
    stems = set(os.path.splitext(n)[0] for n in os.listdir(os.path.join(out, "matplotlib")))
    check(sum(s.startswith("attribution_layers_bars_") for s in stems) == 1, f"one layer-attribution bar chart: {stems}")
    check(sum(s.startswith("cost_ops_") for s in stems) == 5, f"one cost_ops figure per plan: {stems}")

    # Independent reading of the plans: results.csv, not results.h5.
    rows = {}
    with open(os.path.join(out, "results.csv")) as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["plan"], {})[row["metric"]] = float(row["value"])
    plans = plot.load(out)
    check(len(plans) == len(rows) == 5, f"5 plans, got {len(plans)} from h5 and {len(rows)} from csv")
    for p in plans:
        check(abs(p["mean_kl"] - rows[p["label"]]["mean_kl"]) <= 1e-8 * max(1e-30, rows[p["label"]]["mean_kl"]),
              f"{p['label']}: mean_kl agrees with results.csv")
    figs = dict(plot.figures(plans, plt))
    ax = figs["kl_vs_cost"].axes[0]
    drawn = sum(len(c.get_offsets()) for c in ax.collections)
    want = [lab for lab, m in rows.items() if m["mean_kl"] > 0 and m["cost_mac_area_rel_bf16"] == m["cost_mac_area_rel_bf16"]]
    check(drawn == len(want), f"kl_vs_cost draws {drawn} points, want {len(want)}")
    # Brute-force front: points no other point beats on both area and KL.
    pts = [(rows[l]["cost_mac_area_rel_bf16"], rows[l]["mean_kl"]) for l in want]
    front = sorted(p for p in pts
                   if not any((q[0] <= p[0] and q[1] <= p[1]) and (q[0] < p[0] or q[1] < p[1]) for q in pts))
    lines = [ln for ln in ax.get_lines() if ln.get_label() == "Pareto front"]
    if len(front) > 1:
        got = sorted(zip(lines[0].get_xdata(), lines[0].get_ydata())) if lines else []
        close = len(got) == len(front) and all(
            abs(g[0] - w[0]) <= 1e-8 * abs(w[0]) and abs(g[1] - w[1]) <= 1e-8 * abs(w[1]) for g, w in zip(got, front))
        check(close, f"Pareto front {got} == {front} (results.csv keeps 9 digits)")
    # The layer x point heat map holds exactly results.csv's layer_attribution_mean_kl rows.
    la = [p for p in plans if p["layer_attribution"]]
    check(len(la) == 1 and la[0]["label"] == "mxfp4+b200_mxfp4_fp32", "layer attribution for the plan named only")
    if la:
        csv_cells = {k.split("/", 1)[1]: v for k, v in rows[la[0]["label"]].items() if k.startswith("layer_attribution_mean_kl/")}
        h5_cells = {f"{r}/{'head' if l < 0 else l}": v for r, l, v in la[0]["layer_attribution"]}
        check(csv_cells.keys() == h5_cells.keys() and len(csv_cells) >= 5 * 2,
              f"layer attribution cells: csv {sorted(csv_cells)} h5 {sorted(h5_cells)}")
        check(all(abs(csv_cells[k] - h5_cells[k]) <= 1e-8 * abs(h5_cells[k]) for k in csv_cells), "cells agree with csv")
        img = figs[f"attribution_layers_{la[0]['index']:04d}"].axes[0].images[0].get_array()
        import numpy as np

        finite = int(np.isfinite(np.ma.filled(img, np.nan)).sum())
        check(finite == sum(1 for v in h5_cells.values() if v > 0), f"heat map cells drawn: {finite}")
    for f in figs.values():
        plt.close(f)

    bad = subprocess.run([sys.executable, "-m", "lpemu.plot", tmp], capture_output=True, text=True,
                         env=dict(os.environ))
    check(bad.returncode == 2 and "results.h5: no such file" in bad.stderr, f"missing results.h5: {bad.stderr}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
