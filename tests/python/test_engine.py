"""lpemu's Python module runs models, sweeps and the cost model as the `lpemu` command does."""

import json
import os

import numpy as np
import pytest

import lpemu
from conftest import run_cli, SOURCE

PARAGRAPH = os.path.join(SOURCE, "data", "models", "stories260K", "paragraph.txt")


@pytest.mark.parametrize("plan", ["fp8_e4m3", "mxfp4", "h100_e4m3"])
def test_evaluate_equals_lpemu_eval(plan):
    cli = json.loads(run_cli("eval", "--model", "stories260K", "--plan", plan, "--text", PARAGRAPH, "--json").stdout)
    with open(PARAGRAPH, encoding="utf-8") as f:
        r = lpemu.evaluate("stories260K", plan, text=f.read())
    assert r["tokens"][1:] == [t["token"] for t in cli["per_token"]]
    # The CLI prints 9 significant digits.
    np.testing.assert_allclose(r["nll"], [t["nll"] for t in cli["per_token"]], rtol=5e-9, atol=0)
    np.testing.assert_allclose(r["kl"], [t["kl"] for t in cli["per_token"]], rtol=5e-9, atol=1e-15)
    assert r["mean_nll"] == pytest.approx(cli["mean_nll"], rel=5e-9)
    assert r["top1_agreement"] == pytest.approx(cli["top1_agreement"], rel=5e-9)


def test_evaluate_on_token_ids_and_errors():
    m = lpemu.load_model("stories260K")
    ids = m.encode("Once upon a time, there was a little girl.")
    r = lpemu.evaluate(m, "fp32", tokens=ids)
    assert len(r["nll"]) == len(ids) - 1 and r["mean_kl"] == 0.0
    with pytest.raises(lpemu.Error, match="exactly one"):
        lpemu.evaluate(m, "fp32")
    with pytest.raises(lpemu.Error, match="fp8_e4m4_nonexistent_plan"):
        lpemu.load_plan("fp8_e4m4_nonexistent_plan")
    with pytest.raises(lpemu.IoError, match="no_such_model"):
        lpemu.load_model("no_such_model")


def test_cost_reports_rates_of_its_own_times():
    # Field-by-field equality with `lpemu cost --json` is tests/python/test_app.py's.
    r = lpemu.cost("bf16", "h100_sxm", "llama3_8b", phase="decode", batch=8, context=4096)
    assert [p["phase"] for p in r["phases"]] == ["decode"]
    ph = r["phases"][0]
    assert ph["tokens_per_s"] == pytest.approx(ph["tokens"] / ph["time_s"], rel=1e-12)
    assert ph["joules_per_token"] == pytest.approx(ph["energy_j"] / ph["tokens"], rel=1e-12)
    assert r["plan"]["mac_energy_pj"] > 0 and r["fits_in_memory"]
    assert sum(op["time_s"] * op["count"] for op in ph["ops"]) > 0
    both = lpemu.cost("bf16", "h100_sxm", "llama3_8b", batch=8, context=4096)
    assert [p["phase"] for p in both["phases"]] == ["prefill", "decode"]
    assert both["phases"][1] == ph


def test_sweep_and_read_results(tmp_path):
    exp = tmp_path / "tiny.toml"
    exp.write_text(f'''name = "tiny"
[source]
model = "stories260K"
text = "{PARAGRAPH}"
max_tokens = 48
[output]
dir = "{tmp_path / 'out'}"
[[plan]]
label = "fp32"
plan = "fp32"
[[plan]]
label = "fp8"
plan = "fp8_e4m3"
''')
    files = lpemu.sweep(exp)
    assert [p["label"] for p in files["plans"]] == ["fp32", "fp8"]
    assert os.path.exists(files["results_csv"]) and os.path.exists(files["report_md"])
    back = lpemu.read_sweep(files["dir"])
    assert [p["label"] for p in back] == ["fp32", "fp8"]
    assert back[1]["metrics"]["mean_nll"] == files["plans"][1]["metrics"]["mean_nll"]
    with open(PARAGRAPH, encoding="utf-8") as f:
        ids = lpemu.load_model("stories260K").eval_tokens(f.read())[:48]
    direct = lpemu.evaluate("stories260K", "fp8_e4m3", tokens=ids)
    assert back[1]["metrics"]["mean_nll"] == pytest.approx(direct["mean_nll"], rel=1e-12)
