"""Redraw a sweep's figures with matplotlib, for papers: ``python3 -m lpemu.plot RESULTS_DIR``.

Reads ``RESULTS_DIR/results.h5`` (written by ``lpemu sweep``; layout in README "Sweep outputs")
with h5py and writes one PDF and one PNG per figure to ``RESULTS_DIR/matplotlib/`` (or ``--out``).
The figures are the ones of report.html: accuracy loss against bits per weight, MAC area,
tokens/s and J/token with their Pareto fronts, residual-stream SQNR per layer, attribution
heat map and bars, and linear-layer output SQNR on recorded activations; per plan, attribution by
layer × quantisation point (heat map and bars, ``options.layer_attribution``) and the priced
workload's time, DRAM bytes and energy per op coloured by bound (with ``[cost]``).
"""

import argparse
import math
import os
import sys

# Okabe & Ito (2008) colour-blind-safe palette without yellow; same order as lpemu's SVG plotter.
COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "P"]
DASHES = ["-", "--", ":", "-."]


class ResultsError(Exception):
    """A results file that is missing or lacks what a figure needs."""


def style(i):
    """(colour, marker, linestyle) of the i-th series: distinct for i < 42."""
    return COLORS[i % len(COLORS)], MARKERS[i % len(MARKERS)], DASHES[(i // len(COLORS)) % len(DASHES)]


def _text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def load(results_dir):
    """The plans of ``results_dir/results.h5`` as a list of dicts, in plan order."""
    import h5py

    path = os.path.join(results_dir, "results.h5")
    if not os.path.isfile(path):
        raise ResultsError(f"{path}: no such file (expected the results.h5 written by `lpemu sweep`)")
    plans = []
    with h5py.File(path, "r") as f:
        if "plans" not in f:
            raise ResultsError(f"{path}: no /plans group (is this a sweep's results.h5?)")
        for key in sorted(f["plans"].keys()):
            g = f["plans"][key]
            a = g.attrs
            p = {k: (_text(a[k]) if isinstance(a[k], (bytes, str)) else float(a[k])) for k in a.keys()}
            p["residual"] = []
            if "residual" in g:
                names = [_text(n) for n in g["residual/names"][()]]
                p["residual"] = list(zip(names, [float(v) for v in g["residual/sqnr_db"][()]]))
            p["attribution"] = []
            if "attribution" in g:
                roles = [_text(r) for r in g["attribution/role"][()]]
                p["attribution"] = list(zip(roles, [float(v) for v in g["attribution/mean_kl"][()]]))
            p["index"] = int(key)
            p["layer_attribution"] = []
            if "layer_attribution" in g:
                roles = [_text(r) for r in g["layer_attribution/role"][()]]
                layers = [int(v) for v in g["layer_attribution/layer"][()]]
                kl = [float(v) for v in g["layer_attribution/mean_kl"][()]]
                p["layer_attribution"] = list(zip(roles, layers, kl))
            p["cost_ops"] = []
            if "cost_ops" in g:
                c = g["cost_ops"]
                p["cost_ops"] = [
                    {"name": _text(n), "kind": _text(k), "weight_format": _text(w), "count": int(cnt),
                     "compute_bound": bool(b), "time_s": float(t), "bytes": float(by), "energy_j": float(e)}
                    for n, k, w, cnt, b, t, by, e in zip(c["name"][()], c["kind"][()], c["weight_format"][()], c["count"][()],
                                                        c["compute_bound"][()], c["time_s"][()], c["bytes"][()],
                                                        c["energy_j"][()])]
            p["replay"] = []
            if "replay" in g:
                layers = [int(v) for v in g["replay/layer"][()]]
                tensors = [_text(t) for t in g["replay/output_error/names"][()]]
                sq = [float(v) for v in g["replay/output_error/sqnr_db"][()]]
                p["replay"] = list(zip(layers, tensors, sq))
            plans.append(p)
    if not plans:
        raise ResultsError(f"{path}: no plans")
    return plans


def ranked(plans):
    """Plan indices ordered by mean KL, ties in plan order (the report's ranking)."""
    return sorted(range(len(plans)), key=lambda i: (plans[i]["mean_kl"], i))


def pareto_front(x, y, x_lower_better=True):
    """Indices no other point beats on both x and y (lower y is better), sorted by x."""
    idx = [i for i in range(len(x)) if math.isfinite(x[i]) and math.isfinite(y[i])]
    sx = 1 if x_lower_better else -1
    idx.sort(key=lambda i: (sx * x[i], y[i]))
    front, best = [], math.inf
    for i in idx:
        if y[i] < best:
            front.append(i)
            best = y[i]
    return sorted(front, key=lambda i: x[i])


def _kl_scatter(plt, plans, x, x_lower_better, title, xlabel):
    rank = {i: k + 1 for k, i in enumerate(ranked(plans))}
    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    gemms = list(dict.fromkeys(p["gemm"] for p in plans))
    fx, fy = [], []
    left_out = []
    for s, gemm in enumerate(gemms):
        c, m, _ = style(s)
        pts = [i for i, p in enumerate(plans) if p["gemm"] == gemm]
        ok = [i for i in pts if math.isfinite(x[i]) and plans[i]["mean_kl"] > 0]
        left_out += [plans[i]["label"] for i in pts if i not in ok]
        ax.scatter([x[i] for i in ok], [plans[i]["mean_kl"] for i in ok], color=c, marker=m, label=f"GEMM {gemm}", zorder=3)
        for i in ok:
            ax.annotate(str(rank[i]), (x[i], plans[i]["mean_kl"]), textcoords="offset points", xytext=(4, 3), fontsize=8)
            fx.append(x[i])
            fy.append(plans[i]["mean_kl"])
    front = pareto_front(fx, fy, x_lower_better)
    if len(front) > 1:
        c, _, ls = style(len(gemms))
        ax.plot([fx[i] for i in front], [fy[i] for i in front], color=c, linestyle=ls, label="Pareto front", zorder=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean KL(reference ‖ plan) (nats/token)")
    ax.set_title(title)
    ax.grid(True, which="major", color="#e4e4e4")
    ax.legend(fontsize=8)
    if left_out:
        fig.text(0.01, 0.005, "Not drawn (KL 0 or no value): " + ", ".join(left_out), fontsize=7, color="#444")
    return fig


def _per_plan(plt, p):
    """The per-plan figures: attribution by layer (heat map, bars) and the per-op cost breakdown."""
    import numpy as np
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Patch

    out = []
    idx = f"{p['index']:04d}"
    la = p["layer_attribution"]
    if la:
        layers = sorted({l for _, l, _ in la}, key=lambda l: (l < 0, l))
        points = list(dict.fromkeys(r for r, _, _ in la))
        m = np.full((len(layers), len(points)), np.nan)
        for r, l, v in la:
            m[layers.index(l), points.index(r)] = v if v > 0 else np.nan
        names = ["LM head" if l < 0 else f"block {l}" for l in layers]
        fig, ax = plt.subplots(figsize=(1.1 * len(points) + 3, 0.35 * len(layers) + 1.8), constrained_layout=True)
        im = ax.imshow(m, aspect="auto", cmap="viridis", norm=LogNorm())
        ax.set_xticks(range(len(points)))
        ax.set_xticklabels(points, fontsize=8)
        ax.set_yticks(range(len(layers)))
        ax.set_yticklabels(names)
        ax.set_xlabel("quantisation point")
        ax.set_ylabel("layer")
        ax.set_title(f"Attribution by layer: {p['label']}")
        fig.colorbar(im, ax=ax, label="mean KL (nats/token)")
        out.append((f"attribution_layers_{idx}", fig))
        fig, axes = plt.subplots(1, len(points), figsize=(2.6 * len(points) + 1.5, 0.3 * len(layers) + 1.5),
                                 sharey=True, constrained_layout=True, squeeze=False)
        for j, pt in enumerate(points):
            ax = axes[0][j]
            ax.barh(range(len(layers)), np.nan_to_num(m[:, j]), color=COLORS[0])
            ax.set_xlabel(f"KL alone, {pt}\n(nats/token)", fontsize=8)
        axes[0][0].set_yticks(range(len(layers)))
        axes[0][0].set_yticklabels(names)
        axes[0][0].invert_yaxis()
        fig.suptitle(f"Attribution by layer: {p['label']}")
        out.append((f"attribution_layers_bars_{idx}", fig))
    ops = p["cost_ops"]
    if ops:
        dup = {o["name"] for o in ops if sum(q["name"] == o["name"] for q in ops) > 1}
        cats = [(o["name"] + (f" ({o['weight_format']})" if o["name"] in dup else "")
                 + (f" ×{o['count']}" if o["count"] > 1 else "")) for o in ops]
        classes = ["memory only" if o["kind"] == "memory" else "compute-bound" if o["compute_bound"] else "memory-bound"
                   for o in ops]
        legend = list(dict.fromkeys(classes))
        colors = [COLORS[legend.index(c)] for c in classes]
        panels = [("time (µs, all instances)", [o["count"] * o["time_s"] * 1e6 for o in ops]),
                  ("DRAM traffic (MB)", [o["count"] * o["bytes"] / 1e6 for o in ops]),
                  ("energy (mJ)", [o["count"] * o["energy_j"] * 1e3 for o in ops])]
        fig, axes = plt.subplots(1, 3, figsize=(11, 0.28 * len(ops) + 1.6), sharey=True, constrained_layout=True)
        for ax, (xlabel, vals) in zip(axes, panels):
            ax.barh(range(len(ops)), vals, color=colors)
            ax.set_xlabel(xlabel)
            ax.grid(True, axis="x", color="#e4e4e4")
        axes[0].set_yticks(range(len(ops)))
        axes[0].set_yticklabels(cats, fontsize=7)
        axes[0].invert_yaxis()
        axes[2].legend(handles=[Patch(color=COLORS[k], label=c) for k, c in enumerate(legend)], fontsize=7,
                       loc="lower right")
        fig.suptitle(f"Cost per op: {p['label']} ({p.get('cost_target', '')})")
        out.append((f"cost_ops_{idx}", fig))
    return out


def figures(plans, plt):
    """(file stem, matplotlib figure) for every figure the results support."""
    out = []
    target = plans[0].get("cost_target", "")
    out.append(("kl_vs_bits", _kl_scatter(plt, plans, [p["weight_bits"] for p in plans], True,
                                          "Accuracy loss vs bits per weight",
                                          "bits per weight element (block-scale overhead included)")))
    if target:
        out.append(("kl_vs_cost", _kl_scatter(plt, plans, [p["cost_mac_area_rel_bf16"] for p in plans], True,
                                              f"Accuracy loss vs MAC area ({target})", "MAC lane area relative to bf16 (×)")))
        out.append(("kl_vs_tokens_per_s", _kl_scatter(plt, plans, [p["cost_tokens_per_s"] for p in plans], False,
                                                      f"Accuracy loss vs throughput ({target})", "tokens per second (roofline)")))
        out.append(("kl_vs_energy", _kl_scatter(plt, plans, [1e3 * p["cost_joules_per_token"] for p in plans], True,
                                                f"Accuracy loss vs energy per token ({target})", "energy per token (mJ)")))
    order = ranked(plans)
    with_res = [i for i in order if plans[i]["residual"] and any(math.isfinite(v) for _, v in plans[i]["residual"])]
    if with_res:
        fig, ax = plt.subplots(figsize=(9, 4.5), constrained_layout=True)
        for s, i in enumerate(with_res):
            c, m, ls = style(s)
            ys = [v for _, v in plans[i]["residual"]]
            ax.plot(range(len(ys)), ys, color=c, marker=m, linestyle=ls, label=plans[i]["label"], markersize=4)
        names = [n for n, _ in plans[with_res[0]]["residual"]]
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(["final" if n == "final_residual" else "in " + n.split("/")[1] for n in names])
        ax.set_xlabel("residual stream position (input of block l, then the final residual)")
        ax.set_ylabel("SQNR against the reference (dB)")
        ax.set_title("Residual-stream SQNR per layer")
        ax.grid(True, color="#e4e4e4")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        out.append(("residual_sqnr", fig))
    points = list(dict.fromkeys(r for p in plans for r, _ in p["attribution"]))
    rows = [i for i in order if plans[i]["attribution"]]
    if points and rows:
        import numpy as np
        from matplotlib.colors import LogNorm

        m = np.full((len(rows), len(points)), np.nan)
        for a, i in enumerate(rows):
            for r, v in plans[i]["attribution"]:
                m[a, points.index(r)] = v if v > 0 else np.nan
        fig, ax = plt.subplots(figsize=(6, 0.3 * len(rows) + 1.8), constrained_layout=True)
        im = ax.imshow(m, aspect="auto", cmap="viridis", norm=LogNorm())
        ax.set_xticks(range(len(points)))
        ax.set_xticklabels(points)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([plans[i]["label"] for i in rows], fontsize=7)
        ax.set_xlabel("quantisation point (all layers)")
        ax.set_title("Attribution: mean KL with one quantisation point alone")
        fig.colorbar(im, ax=ax, label="mean KL (nats/token)")
        out.append(("attribution_heatmap", fig))
        fig, axes = plt.subplots(1, len(points), figsize=(3 * len(points) + 2, 0.3 * len(rows) + 1.5),
                                 sharey=True, constrained_layout=True, squeeze=False)
        for j, pt in enumerate(points):
            ax = axes[0][j]
            ax.barh(range(len(rows)), np.nan_to_num(m[:, j]), color=COLORS[0])
            ax.set_xlabel(f"KL alone, {pt} (nats/token)")
            ax.invert_yaxis() if j == 0 else None
        axes[0][0].set_yticks(range(len(rows)))
        axes[0][0].set_yticklabels([plans[i]["label"] for i in rows], fontsize=7)
        fig.suptitle("Attribution by quantisation point")
        out.append(("attribution_bars", fig))
    for i in order:
        out += _per_plan(plt, plans[i])
    rep = [i for i in order if plans[i]["replay"]]
    if rep:
        import numpy as np

        keys = list(dict.fromkeys(("head" if l < 0 else f"layer {l}") + " " + t for i in rep for l, t, _ in plans[i]["replay"]))
        m = np.full((len(keys), len(rep)), np.nan)
        for c, i in enumerate(rep):
            for l, t, v in plans[i]["replay"]:
                m[keys.index(("head" if l < 0 else f"layer {l}") + " " + t), c] = v if math.isfinite(v) else np.nan
        fig, ax = plt.subplots(figsize=(0.45 * len(rep) + 3, 0.22 * len(keys) + 1.5), constrained_layout=True)
        im = ax.imshow(m, aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(rep)))
        ax.set_xticklabels([f"#{order.index(i) + 1}" for i in rep], fontsize=7)
        ax.set_yticks(range(len(keys)))
        ax.set_yticklabels(keys, fontsize=6)
        ax.set_xlabel("plan (rank in the table)")
        ax.set_title("Linear-layer output SQNR on recorded activations")
        fig.colorbar(im, ax=ax, label="output SQNR (dB)")
        out.append(("replay_sqnr_heatmap", fig))
    return out


def main(argv=None):
    """Command-line entry: redraw every figure of a results directory; returns the exit status."""
    ap = argparse.ArgumentParser(prog="python3 -m lpemu.plot", description=__doc__.splitlines()[0])
    ap.add_argument("results_dir", help="output directory of `lpemu sweep` (holds results.h5)")
    ap.add_argument("--out", help="where to write the figures (default RESULTS_DIR/matplotlib)")
    ap.add_argument("--format", default="pdf,png", help="comma-separated file formats (default pdf,png)")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        plans = load(args.results_dir)
    except ResultsError as e:
        print(f"lpemu.plot: {e}", file=sys.stderr)
        return 2
    out = args.out or os.path.join(args.results_dir, "matplotlib")
    os.makedirs(out, exist_ok=True)
    for stem, fig in figures(plans, plt):
        for ext in args.format.split(","):
            path = os.path.join(out, f"{stem}.{ext.strip()}")
            fig.savefig(path, dpi=150)
            print(path)
        plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
