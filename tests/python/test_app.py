"""Every application command gives the same result through the CLI (`lpemu CMD ... --json`) and
through Python (`lpemu.call(CMD, ...)`), field by field: both front ends only parse, call the one
library function and print its one serialised result."""

import csv
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import lpemu
from conftest import SOURCE, run_cli

MODEL_DIR = os.path.join(SOURCE, "data", "models", "stories260K")
PARAGRAPH = os.path.join(MODEL_DIR, "paragraph.txt")
ACTIVATIONS = os.path.join(MODEL_DIR, "activations.h5")
NORMAL = os.path.join(SOURCE, "tests", "regression", "npy_normal_64x64.npy")


def write_checkpoint(d):
    """A tiny random Llama checkpoint folder (config.json and one float32 safetensors file)."""
    os.makedirs(d, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16, "vocab_size": 11,
           "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
           "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
    with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    g = np.random.default_rng(3)
    p = "model.layers.0."
    shapes = {"model.embed_tokens.weight": (11, 8), p + "input_layernorm.weight": (8,),
              p + "self_attn.q_proj.weight": (8, 8), p + "self_attn.k_proj.weight": (4, 8),
              p + "self_attn.v_proj.weight": (4, 8), p + "self_attn.o_proj.weight": (8, 8),
              p + "post_attention_layernorm.weight": (8,), p + "mlp.gate_proj.weight": (16, 8),
              p + "mlp.up_proj.weight": (16, 8), p + "mlp.down_proj.weight": (8, 16),
              "model.norm.weight": (8,), "lm_head.weight": (11, 8)}
    header, blobs, off = {}, [], 0
    for name, shape in shapes.items():
        raw = g.standard_normal(shape).astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_verify_results(prop, results):
    """A results CSV that gives every conversion row of proposal `prop` its expected code."""
    with open(results, "w", encoding="utf-8") as out:
        out.write("file,row,code\n")
        for name in ("conversion_float32.csv", "conversion_bf16.csv"):
            with open(os.path.join(prop, name), encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    out.write(f"{name},{row['row']},{row['expected_code']}\n")


def cases(tmp):
    """(command, CLI arguments, Python request fields) triples, several per command. Commands that
    write files name the same output in both runs, with force (the output's name is a field)."""
    half = os.path.join(tmp, "half.txt")
    with open(PARAGRAPH, encoding="utf-8") as f, open(half, "w", encoding="utf-8") as g:
        g.write(f.read()[:300])
    exp = os.path.join(tmp, "e.toml")
    with open(exp, "w", encoding="utf-8") as f:
        f.write(f'name = "parity"\n[source]\nmodel = "stories260K"\ntext = "{PARAGRAPH}"\nmax_tokens = 24\n'
                '[cost]\ntarget = "h100_sxm"\nshape = "llama3_8b"\n'
                '[grid]\nformats = ["fp32", "fp8_e4m3"]\n')
    out = os.path.join(tmp, "sweep")
    raw = os.path.join(tmp, "values.f32")
    np.load(NORMAL).astype("<f4").tofile(raw)
    cases_csv = os.path.join(tmp, "cases.csv")
    with open(cases_csv, "w", encoding="utf-8") as f:
        f.write("a,b,c,expected_result\n0x38;0x40;0xb8,0x38;0x38;0x30,0x0,0x40200000\n"
                "0x7e;0x01,0x7e;0x01,0x3f800000,0x48440000\n")
    a, b = os.path.join(tmp, "a.npy"), os.path.join(tmp, "b.npy")
    g = np.random.default_rng(1)
    np.save(a, g.standard_normal((4, 64)).astype(np.float32))
    np.save(b, g.standard_normal((3, 64)).astype(np.float32))
    ckpt = os.path.join(tmp, "ckpt")
    write_checkpoint(ckpt)
    prop = os.path.join(tmp, "prop")
    run_cli("proposal", "fp4_e2m1", "--out", prop)
    results = os.path.join(tmp, "results.csv")
    write_verify_results(prop, results)
    o = lambda name: os.path.join(tmp, name)  # noqa: E731
    return [
        ("core", ["--core", "scalesim_eyeriss", "--m", "33", "--n", "17", "--k", "45"],
         dict(core="scalesim_eyeriss", m=33, n=17, k=45)),
        ("core", ["--core", "example_fp8_fp6_fp4", "--datapath", "generic_fp4", "--model", "llama3_8b",
                  "--scope", "step", "--phase", "prefill", "--batch", "2", "--context", "512"],
         dict(core="example_fp8_fp6_fp4", datapath="generic_fp4", model="llama3_8b", scope="step",
              phase="prefill", batch=2, context=512)),
        ("cost", ["--target", "h100_sxm", "--model", "llama3_8b", "--plan", "bf16", "--phase", "decode",
                  "--batch", "8", "--context", "4096"],
         dict(target="h100_sxm", model="llama3_8b", plan="bf16", phase="decode", batch=8, context=4096)),
        ("core", ["--core", "h100_sm_like", "--datapath", "generic_fp8", "--m", "128", "--n", "256", "--k", "4096"],
         dict(core="h100_sm_like", datapath="generic_fp8", m=128, n=256, k=4096)),
        ("cost", ["--target", "h100_sxm", "--model", "llama3_8b", "--plan", "bf16", "--phase", "decode",
                  "--batch", "8", "--context", "4096", "--core", "example_fp8"],
         dict(target="h100_sxm", model="llama3_8b", plan="bf16", phase="decode", batch=8, context=4096,
              core="example_fp8")),
        ("cost", ["--target", "h100_sxm", "--model", "llama3_8b", "--plan", "bf16", "--weights", "fp8_e4m3",
                  "--activations", "fp8_e4m3", "--kv-cache", "fp8_e4m3", "--datapath", "h100_e4m3_fp32"],
         dict(target="h100_sxm", model="llama3_8b", plan="bf16", weights="fp8_e4m3", activations="fp8_e4m3",
              kv_cache="fp8_e4m3", datapath="h100_e4m3_fp32")),
        ("cost", ["--system", "dgx_h100", "--model", "llama3_70b", "--phase", "train", "--devices", "1024",
                  "--parallel", "tp=8,pp=4,sp=1,zero=1", "--context", "8192", "--global-batch", "512",
                  "--comm", "fp8_e4m3"],
         dict(system="dgx_h100", model="llama3_70b", phase="train", devices=1024,
              parallel="tp=8,pp=4,sp=1,zero=1", context=8192, global_batch=512, comm="fp8_e4m3")),
        ("cost", ["--system", "dgx_h100", "--model", "llama3_8b", "--phase", "train", "--devices", "64",
                  "--search", "--top", "3"],
         dict(system="dgx_h100", model="llama3_8b", phase="train", devices=64, search=True, top=3)),
        ("cost", ["--system", "dgx_h100", "--model", "llama3_70b", "--parallel", "tp=8", "--batches", "1,16"],
         dict(system="dgx_h100", model="llama3_70b", parallel="tp=8", batches=[1, 16])),
        ("eval", ["--plan", "fp8_e4m3", "--text", half],
         dict(plan="fp8_e4m3", texts=[half])),
        ("eval", ["--plan", "mxfp4", "--text", half, PARAGRAPH, "--context", "64"],
         dict(plan="mxfp4", texts=[half, PARAGRAPH], context=64)),
        ("eval", ["--plan", "h100_e4m3", "--text", half, PARAGRAPH, "--context", "48", "--stride", "32",
                  "--batch-tokens", "4096"],
         dict(plan="h100_e4m3", texts=[half, PARAGRAPH], context=48, stride=32, batch_tokens=4096)),
        ("replay", ["--plan", "fp8_e4m3", "--activations", ACTIVATIONS],
         dict(plan="fp8_e4m3", activations=ACTIVATIONS)),
        # The CLI runs first; Python resumes its plan files, so timings agree too.
        ("sweep", [exp, "--out", out], dict(experiment=exp, out=out)),
        ("convert", ["--to", "fp8_e4m3", "--force", NORMAL, o("c.npy")],
         dict(to="fp8_e4m3", force=True, input=NORMAL, output=o("c.npy"))),
        ("convert", ["--from", "fp32", "--to", "fp4_e2m1", "--packed", "--rounding", "stochastic", "--seed", "7",
                     "--force", raw, o("c.fp4")],
         {"from": "fp32", "to": "fp4_e2m1", "packed": True, "rounding": "stochastic", "seed": 7, "force": True,
          "input": raw, "output": o("c.fp4")}),
        ("quantize", ["--format", "mxfp8_e4m3", "--stats", "--force", NORMAL, o("q.npy")],
         dict(format="mxfp8_e4m3", stats=True, force=True, input=NORMAL, output=o("q.npy"))),
        ("quantize", ["--format", "fp8_e4m3", "--overflow", "native", "--packed", o("q.h5"), "--force", NORMAL,
                      o("q8.npy")],
         dict(format="fp8_e4m3", overflow="native", packed=o("q.h5"), force=True, input=NORMAL, output=o("q8.npy"))),
        ("formats list", [], {}),
        ("formats show", ["fp8_e4m3", "--values"], dict(name="fp8_e4m3", values=True)),
        ("formats show", ["int8"], dict(name="int8")),
        ("encode", ["fp8_e4m3", "0.3", "--rounding", "toward_zero"],
         dict(format="fp8_e4m3", value=0.3, rounding="toward_zero")),
        ("decode", ["fp4_e2m1", "0b0111"], dict(format="fp4_e2m1", code="0b0111")),
        ("decode", ["bf16", "16256"], dict(format="bf16", code=16256)),
        ("dot", ["--datapath", "h100_e4m3_fp32", "--cases", cases_csv],
         dict(datapath="h100_e4m3_fp32", cases=cases_csv)),
        ("datapath-error", ["--datapath", "ideal,h100_e4m3_fp32", "--k", "16,64", "--trials", "10"],
         dict(datapath=["ideal", "h100_e4m3_fp32"], k=[16, 64], trials=10)),
        ("datapath list", [], {}),
        ("datapath show", ["h100_e4m3_fp32"], dict(name="h100_e4m3_fp32")),
        ("gemm", ["--datapath", "h100_e4m3_fp32", "--a-format", "fp8_e4m3", "--b-format", "fp8_e4m3", "--force",
                  a, b, o("c_gemm.npy")],
         dict(datapath="h100_e4m3_fp32", a_format="fp8_e4m3", b_format="fp8_e4m3", force=True, a=a, b=b,
              out=o("c_gemm.npy"))),
        ("proposal", ["fp4_e2m1", "--datapath", "h100_e4m3_fp32", "--out", o("p2"), "--force"],
         dict(format="fp4_e2m1", datapath="h100_e4m3_fp32", out=o("p2"), force=True)),
        ("proposal verify", [prop, "--results", results], dict(dir=prop, results=results)),
        ("import", [ckpt, o("m.h5"), "--force"], dict(dir=ckpt, out=o("m.h5"), force=True)),
        ("run", ["--prompt", "Once upon a time", "--steps", "24"], dict(prompt="Once upon a time", steps=24)),
        ("train", ["--text", PARAGRAPH, "--steps", "2", "--batch", "2", "--seq", "8", "--optimizer", "sgd",
                   "--lr", "0.01", "--val-fraction", "0.25", "--eval-every", "1", "--sqnr-every", "1",
                   "--out", o("train")],
         dict(texts=[PARAGRAPH], steps=2, batch=2, seq=8, optimizer="sgd", lr=0.01, val_fraction=0.25,
              eval_every=1, sqnr_every=1, out=o("train"))),
        ("run", ["--plan", "fp8_e4m3", "--temperature", "0.8", "--top-k", "20", "--seed", "5", "--steps", "16"],
         dict(plan="fp8_e4m3", temperature=0.8, top_k=20, seed=5, steps=16)),
        ("cost mac", ["--format", "fp8_e4m3", "--iso-target", "h100_sxm"],
         dict(format="fp8_e4m3", iso_target="h100_sxm")),
        ("cost mac", ["--format", "fp4_e2m1", "--datapath", "b200_nvfp4_fp32"],
         dict(format="fp4_e2m1", datapath="b200_nvfp4_fp32")),
        ("cost mac", [], {}),
        ("cost targets", [], {}),
        # The shards are run first (shard_sweeps); the CLI merges, then Python merges into the same folder.
        ("sweep merge", [o("s0"), o("s1"), "--out", o("merged")], dict(dirs=[o("s0"), o("s1")], out=o("merged"))),
    ]


def shard_sweeps(tmp):
    """The two shards `sweep merge`'s case joins."""
    for i in range(2):
        run_cli("sweep", os.path.join(tmp, "e.toml"), "--out", os.path.join(tmp, f"s{i}"), "--shard", f"{i}/2")


def same(a, b, path="result"):
    """Asserts CLI JSON `a` equals Python value `b` field by field (NaN and ±Inf print as null)."""
    if path.endswith(".timing"):
        # Wall-clock seconds per stage differ from run to run: the same stages, each a time.
        assert isinstance(a, dict) and list(a) == list(b), f"{path}: fields {list(a)} vs {list(b)}"
        assert all(isinstance(v, (int, float)) and v >= 0 for v in [*a.values(), *b.values()]), path
        return
    if isinstance(b, float) and not math.isfinite(b):
        assert a is None, f"{path}: CLI {a!r}, Python {b!r}"
    elif isinstance(b, dict):
        assert isinstance(a, dict) and list(a) == list(b), f"{path}: fields {list(a)} vs {list(b)}"
        for k in b:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    else:
        assert type(a) is type(b) and a == b, f"{path}: CLI {a!r}, Python {b!r}"


N_CASES = 40  # len(cases(...)); test_every_command_has_a_parity_case checks it


def test_every_command_has_a_parity_case(tmp_path):
    all_cases = cases(str(tmp_path))
    assert {c for c, _, _ in all_cases} == set(lpemu.commands())
    assert len(all_cases) == N_CASES


@pytest.mark.parametrize("i", range(N_CASES))
def test_cli_and_python_agree(tmp_path, i):
    command, args, request = cases(str(tmp_path))[i]
    if command == "sweep merge":
        shard_sweeps(str(tmp_path))
    cli = json.loads(run_cli(*command.split(), *args, "--json").stdout)
    py = lpemu.call(command, **request)
    same(cli, py)


def test_unknown_fields_and_commands_are_named():
    with pytest.raises(lpemu.SpecError, match="unknown field.*bacth"):
        lpemu.call("cost", target="h100_sxm", model="llama3_8b", bacth=8)
    with pytest.raises(lpemu.SpecError, match="batch = \"8\": expected an integer"):
        lpemu.call("cost", target="h100_sxm", model="llama3_8b", batch="8")
    with pytest.raises(lpemu.UnknownNameError, match="unknown command 'cots'"):
        lpemu.call("cots")


def test_ported_commands_name_bad_fields(tmp_path):
    with pytest.raises(lpemu.SpecError, match="convert: to .* is required"):
        lpemu.call("convert", input=NORMAL, output=str(tmp_path / "x.bin"))
    with pytest.raises(lpemu.SpecError, match="quantize: block = 0: expected 1..4096"):
        lpemu.call("quantize", format="mxfp8_e4m3", block=0, input=NORMAL, output=str(tmp_path / "q.npy"))
    with pytest.raises(lpemu.SpecError, match="CODE = '0xff': code 0xff is wider than format 'fp4_e2m1'"):
        lpemu.call("decode", format="fp4_e2m1", code="0xff")
    with pytest.raises(lpemu.SpecError, match="encode: rounding = 7: expected a string"):
        lpemu.call("encode", format="fp8_e4m3", value=1.0, rounding=7)
    with pytest.raises(lpemu.SpecError, match="has 32-bit codes; --values lists formats of at most 16 bits"):
        lpemu.call("formats show", name="fp32", values=True)
    assert not (tmp_path / "x.bin").exists() and not (tmp_path / "q.npy").exists()


def test_user_directories_hold_every_record_kind(tmp_path):
    # One convention: a --formats-dir (Context(formats_dirs=...)) directory holds hardware/,
    # shapes/ and systems/ beside element/, block/ and datapath/.
    (tmp_path / "hardware").mkdir()
    with open(os.path.join(SOURCE, "data", "hardware", "h100_sxm.toml"), encoding="utf-8") as f:
        text = f.read()
    assert 'name = "h100_sxm"' in text
    (tmp_path / "hardware" / "my_h100.toml").write_text(text.replace('name = "h100_sxm"', 'name = "my_h100"'))
    request = dict(model="llama3_8b", plan="bf16", phase="decode", batch=8)
    mine = lpemu.Context(formats_dirs=[tmp_path]).cost(target="my_h100", **request)
    cli = json.loads(run_cli("--formats-dir", tmp_path, "cost", "--target", "my_h100", "--model", "llama3_8b",
                             "--plan", "bf16", "--phase", "decode", "--batch", "8", "--json").stdout)
    same(cli, mine)
    builtin = lpemu.cost(target="h100_sxm", **request)
    assert mine["target"] == "my_h100"
    assert mine["phases"] == builtin["phases"]
    with pytest.raises(lpemu.UnknownNameError, match="my_h100"):
        lpemu.cost(target="my_h100", **request)


def test_interpreter_exits_cleanly_after_a_failed_h5_write(tmp_path):
    """.h5 writes stopped by the file-size limit (a quantized dataset, then a training run's
    state.h5) raise an error naming the file, leave no file, and the interpreter then exits with
    status 0 (libhdf5's exit handler, H5close, used to crash with SIGSEGV on a file whose flush had
    failed; HDF5 now writes in memory and lpemu puts the bytes on disk)."""
    paragraph = os.path.join(SOURCE, "data", "models", "stories260K", "paragraph.txt")
    plan = os.path.join(SOURCE, "experiments", "plans", "fp32.toml")
    script = (
        "import resource, signal, sys\n"
        "import lpemu\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "calls = [\n"
        f"    dict(command='quantize', format='mxfp8_e4m3', input={NORMAL!r}, output={str(tmp_path / 'q.h5')!r} + ':/q'),\n"
        f"    dict(command='train', plan={plan!r}, texts=[{paragraph!r}], steps=2, batch=2, seq=16,\n"
        f"         out={str(tmp_path / 'run')!r}),\n"
        "]\n"
        "for c in calls:\n"
        "    try:\n"
        "        lpemu.call(c.pop('command'), **c)\n"
        "    except lpemu.Error as e:\n"
        "        print('refused:', e)\n"
        "    else:\n"
        "        sys.exit(5)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout
    assert "q.h5: write failed" in lines[0] and ".h5: write failed" in lines[1], r.stdout
    assert [p for p in tmp_path.rglob("*") if not p.is_dir()] == []
