"""A training experiment end to end (`lpemu sweep` on a file with a [train] table): two steps of a
tiny version of experiments/train.toml. Its cost columns equal `lpemu cost --phase train` on each plan
file; its fp32 run equals `lpemu train` on the same initial model; final losses and gaps follow from
the per-step log; the initial models have the shape's tensors and differ by seed."""

import csv
import json
import os

import h5py
import numpy as np
import pytest

from conftest import SOURCE, run_cli

COST = ["--system", "dgx_h100", "--model", "llama3_8b", "--phase", "train", "--devices", "8",
        "--parallel", "tp=8", "--global-batch", "64", "--context", "4096"]


def tiny_experiment(tmp_path):
    """experiments/train.toml cut to 2 steps of 2 x 8 tokens (tokens path made absolute)."""
    with open(os.path.join(SOURCE, "experiments", "train.toml")) as f:
        text = f.read()
    corpus = os.path.join(SOURCE, "data", "corpus", "stories260K_samples.npy")
    text = text.replace('"../data/corpus/stories260K_samples.npy"', json.dumps(corpus))
    for key, value in [("steps", 2), ("batch", 2), ("seq", 8), ("warmup", 0), ("val_fraction", 0.002)]:
        text = text.replace(f"\n{key} = ", f"\n{key} = {value}\n# was: {key} = ", 1)
    path = tmp_path / "train_tiny.toml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train_experiment")
    out = tmp / "out"
    run_cli("sweep", tiny_experiment(tmp), "--out", out)
    with open(out / "train_results.csv") as f:
        rows = list(csv.DictReader(f))
    with open(out / "train_log.csv") as f:
        log = list(csv.DictReader(f))
    return out, rows, log


def test_every_plan_and_seed_ran(sweep):
    out, rows, log = sweep
    assert [(r["label"], r["seed"]) for r in rows] == [
        ("fp32", "0"), ("fp32", "1"), ("fp32", "2"), ("bf16", "0"), ("fp8", "0"), ("mxfp8", "0"),
        ("mxfp6", "0"), ("nvfp4", "0"), ("nvfp4_sr", "0"), ("nvfp4_recipe", "0"), ("mxfp4", "0")]
    assert len(log) == 2 * len(rows)
    for name in ["train_report.md", "train_loss.svg"]:
        assert (out / name).stat().st_size > 0
    assert "<svg" in (out / "train_loss.svg").read_text()


def test_cost_columns_equal_lpemu_cost_phase_train(sweep):
    out, rows, _ = sweep
    for r in rows:
        got = json.loads(run_cli("cost", *COST, "--plan", out / r["plan"], "--json").stdout)
        step = got["cluster"]["train"][0]
        assert float(r["step_s"]) == step["step_s"], r["label"]
        assert float(r["tokens_per_s"]) == step["tokens_per_s"], r["label"]
        assert float(r["mfu"]) == step["mfu"], r["label"]
        assert float(r["memory_bytes"]) == step["memory"]["total"], r["label"]
    # The plans differ in what they cost: fp32 and the 4-bit plans are not priced alike.
    by = {r["label"]: float(r["step_s"]) for r in rows}
    assert by["fp32"] != by["mxfp4"]


def test_final_loss_and_gap_from_the_log(sweep):
    _, rows, log = sweep
    final = {}
    for r in rows:
        losses = [float(s["loss"]) for s in log if (s["label"], s["seed"]) == (r["label"], r["seed"])]
        assert len(losses) == 2 and all(np.isfinite(losses))
        final[(r["label"], r["seed"])] = np.mean(losses[-10:])
        assert float(r["final_loss"]) == pytest.approx(final[(r["label"], r["seed"])], rel=1e-15)
    ref = np.mean([final[("fp32", s)] for s in "012"])
    for r in rows:
        assert float(r["loss_gap"]) == pytest.approx(final[(r["label"], r["seed"])] - ref, abs=1e-12)


def test_fp32_run_equals_lpemu_train_on_the_initial_model(sweep, tmp_path):
    out, _, log = sweep
    corpus = os.path.join(SOURCE, "data", "corpus", "stories260K_samples.npy")
    run_cli("train", "--model", out / "init" / "seed1.h5", "--plan", "fp32", "--tokens", corpus, "--steps", 2,
            "--batch", 2, "--seq", 8, "--optimizer", "adamw", "--lr", 3e-3, "--clip-norm", 1.0, "--seed", 1,
            "--out", tmp_path / "direct")
    with open(tmp_path / "direct" / "log.csv") as f:
        direct = [float(s["loss"]) for s in csv.DictReader(f)]
    assert direct == [float(s["loss"]) for s in log if (s["label"], s["seed"]) == ("fp32", "1")]


def test_initial_models_have_the_shape_and_differ_by_seed(sweep):
    out, _, _ = sweep
    with h5py.File(out / "init" / "seed0.h5") as a, h5py.File(out / "init" / "seed1.h5") as b:
        names = []
        a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        matrices = [n for n in names if a[n].ndim == 2 and n != "output"]
        # tiny1m: 128 wide, 4 blocks of 7 matrices, 512-token embeddings tied to the classifier.
        assert a.attrs["tied_embeddings"] == 1
        np.testing.assert_array_equal(a["output"][()], a["tok_embeddings"][()])
        params = sum(a[n].size for n in matrices)
        assert params == 512 * 128 + 4 * (4 * 128 * 128 + 3 * 128 * 384)
        for n in matrices:
            assert not np.array_equal(a[n][()], b[n][()]), n
            w = a[n][()].astype(np.float64)
            # N(0, 0.02²), the output projections N(0, (0.02/√8)²): the sample spread within 10 %.
            assert 0.02 / np.sqrt(8) * 0.9 < w.std() < 0.02 * 1.1, n


def test_train_table_needs_tokens(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[source]\ntext = "%s"\n[train]\nshape = "tiny1m"\n[[plan]]\nlabel = "fp32"\n'
                   'plan = "fp32"\n' % os.path.join(SOURCE, "data", "models", "stories260K", "paragraph.txt"))
    r = run_cli("sweep", bad, "--out", tmp_path / "o", check=False)
    assert r.returncode == 2
    assert "tokens" in r.stderr


def test_report_has_validation_curves_and_sqnr_heatmap_from_the_logs(sweep):
    """The report's validation-loss figure and gradient-SQNR heat map hold the numbers each run's
    log.h5 holds: the validation loss per step in train_log.csv and the report's table, the SQNR of
    every block at the last measured step in train_sqnr.csv and the report's table."""
    out, rows, log = sweep
    report = (out / "train_report.md").read_text()
    assert "![validation loss](train_val_loss.svg)" in report
    assert "![gradient SQNR](train_sqnr.svg)" in report
    for name in ["train_val_loss.svg", "train_sqnr.svg"]:
        svg = (out / name).read_text()
        assert "<svg" in svg
        for r in rows:
            if r["label"] != "fp32":
                assert r["label"] in svg, (name, r["label"])
    with open(out / "train_sqnr.csv") as f:
        sqnr = list(csv.DictReader(f))
    lines = report.splitlines()
    for r in rows:
        run = out / "runs" / (r["label"] + ("_seed" + r["seed"] if r["label"] == "fp32" else ""))
        with h5py.File(run / "log.h5") as h:
            val = h["val_loss"][()]
            grad_sqnr = h["grad_sqnr"][()]
            steps = h["step"][()]
        mine = [s for s in log if (s["label"], s["seed"]) == (r["label"], r["seed"])]
        np.testing.assert_array_equal([float(s["val_loss"]) for s in mine], val)
        assert np.isfinite(val[0]) and val[0] > 0  # measured at step 0
        measured = [i for i in range(len(steps)) if not np.all(np.isnan(grad_sqnr[i]))]
        assert measured == [0]
        last = grad_sqnr[measured[-1]]
        assert len(last) == 4  # tiny1m's blocks
        # The validation table: this run's last measured validation loss.
        assert any(l.startswith(f"| {r['label']} | {r['seed']} | 0 | {val[0]:.4f} |") for l in lines), r
        if r["label"] == "fp32":
            assert not [s for s in sqnr if s["label"] == "fp32"]
            continue
        got = [float(s["grad_sqnr_db"]) for s in sqnr if s["label"] == r["label"]]
        np.testing.assert_array_equal(got, last)
        assert all(np.isfinite(last)) and all(v < 200 for v in last), r["label"]
        cells = " | ".join(f"{v:.2f}" for v in last)
        assert f"| {r['label']} | {r['seed']} | 0 | {cells} |" in report, r["label"]
