"""lpemu.torch: a PyTorch re-implementation of stories260K (built here from model.h5, independently
of the C++ engine) under a plan matches `lpemu eval`; the recorder captures every linear map of a
model with nn.MultiheadAttention and `lpemu replay` reports each under its role."""

import json
import math
import os

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lpemu
import lpemu.torch as lt
from conftest import run_cli, SOURCE

MODEL = os.path.join(SOURCE, "data", "models", "stories260K", "model.h5")
PARAGRAPH = os.path.join(SOURCE, "data", "models", "stories260K", "paragraph.txt")


class RMSNorm(torch.nn.Module):
    def __init__(self, w, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.from_numpy(w))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps))


def linear(w):
    m = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
    m.weight = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(w)))
    return m


class Attention(torch.nn.Module):
    def __init__(self, g, cfg):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (linear(g[n][...]) for n in ("wq", "wk", "wv", "wo"))
        self.h, self.kvh, self.d = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]

    def forward(self, x, cos, sin):
        t = x.shape[0]
        q = self.wq(x).view(t, self.h, self.d)
        k = self.wk(x).view(t, self.kvh, self.d)
        v = self.wv(x).view(t, self.kvh, self.d)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = self.h // self.kvh  # query head h uses KV head h / rep (data/README.md)
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(self.d)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        p = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        out = torch.einsum("hts,shd->thd", p, v).reshape(t, self.h * self.d)
        return self.wo(out)


def rope(x, cos, sin):
    """Interleaved pairs (2j, 2j+1) rotated by p·θ^(−2j/d) (data/README.md)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * cos[:, None, :] - x1 * sin[:, None, :]
    out[..., 1::2] = x0 * sin[:, None, :] + x1 * cos[:, None, :]
    return out


class FeedForward(torch.nn.Module):
    def __init__(self, g):
        super().__init__()
        self.w1, self.w2, self.w3 = (linear(g[n][...]) for n in ("w1", "w2", "w3"))

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(torch.nn.Module):
    def __init__(self, g, cfg):
        super().__init__()
        self.attention_norm = RMSNorm(g["attention_norm"][...], cfg["norm_eps"])
        self.attention = Attention(g["attention"], cfg)
        self.ffn_norm = RMSNorm(g["ffn_norm"][...], cfg["norm_eps"])
        self.feed_forward = FeedForward(g["feed_forward"])

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(torch.nn.Module):
    """stories260K in PyTorch, from the HDF5 schema of data/README.md."""

    def __init__(self, path):
        super().__init__()
        with h5py.File(path, "r") as f:
            cfg = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
            self.cfg = cfg
            self.tok_embeddings = torch.nn.Embedding.from_pretrained(torch.from_numpy(f["tok_embeddings"][...]))
            self.layers = torch.nn.ModuleList([Block(f[f"layers/{i}"], cfg) for i in range(cfg["n_layers"])])
            self.norm = RMSNorm(f["norm"][...], cfg["norm_eps"])
            self.output = linear(f["output"][...])

    def forward(self, tokens):
        t, d = len(tokens), self.cfg["head_dim"]
        pos = np.arange(t, dtype=np.float64)[:, None]
        angle = pos * np.power(self.cfg["rope_theta"], -2.0 * np.arange(d // 2) / d)  # in double, as the spec
        cos = torch.from_numpy(np.cos(angle).astype(np.float32))
        sin = torch.from_numpy(np.sin(angle).astype(np.float32))
        x = self.tok_embeddings(torch.tensor(tokens))
        for b in self.layers:
            x = b(x, cos, sin)
        return self.output(self.norm(x))


def nll_of(logits, tokens):
    lp = torch.log_softmax(logits.to(torch.float64), dim=-1)
    return -lp[torch.arange(len(tokens) - 1), torch.tensor(tokens[1:])].numpy()


PLAN_TOML = """name = "torch_linear_{fmt}"
description = "linear layers in {fmt}, classifier in bf16 (the roles lpemu.torch covers)"
[roles]
weights = "{fmt}"
linear_input = "{fmt}"
lm_head = "bf16"
lm_head_input = "bf16"
"""


@pytest.fixture(scope="module")
def llama():
    m = Llama(MODEL)
    m.eval()
    return m


@pytest.fixture(scope="module")
def tokens():
    with open(PARAGRAPH, encoding="utf-8") as f:
        return lpemu.load_model(MODEL).eval_tokens(f.read())


def test_linear_maps_are_labelled_from_the_module_tree(llama):
    roles = {m.name: m.role for m in lt.linear_maps(llama)}
    assert len(roles) == 5 * 7 + 1
    assert roles["layers.0.attention.wq"] == "attention.q" and roles["layers.4.attention.wo"] == "attention.out"
    assert roles["layers.2.feed_forward.w1"] == "mlp.gate" and roles["layers.2.feed_forward.w2"] == "mlp.down"
    assert roles["output"] == "head"


@pytest.mark.parametrize("fmt", ["fp32", "fp8_e4m3", "mxfp8_e4m3", "nvfp4"])
def test_stories260k_in_pytorch_under_a_plan_matches_lpemu_eval(llama, tokens, fmt, tmp_path):
    plan = tmp_path / f"{fmt}.toml"
    plan.write_text(PLAN_TOML.format(fmt=fmt) if fmt != "fp32" else 'name = "fp32_file"\n[roles]\n')
    cli = json.loads(run_cli("eval", "--model", MODEL, "--plan", plan, "--text", PARAGRAPH, "--json").stdout)
    ref = np.array([t["nll"] for t in cli["per_token"]])
    session = lt.apply_plan(llama, str(plan))
    try:
        with torch.no_grad():
            ours = nll_of(llama(tokens), tokens)
    finally:
        session.remove()
    diff = np.abs(ours - ref)
    # Independent float32 code for norms, RoPE, softmax and SiLU: agreement to float32 round-off,
    # except where that round-off moves a value across a rounding boundary of the format.
    print(f"{fmt}: {len(ref)} tokens, max |dNLL| {diff.max():.3g}, mean {diff.mean():.3g}, "
          f"mean NLL {ours.mean():.6f} vs {ref.mean():.6f}")
    assert len(ours) == len(ref)
    if fmt == "fp32":
        assert diff.max() < 5e-5
    else:
        assert diff.max() < 1e-3 and diff.mean() < 1e-5
    # And without lpemu the model is plain PyTorch again.
    with torch.no_grad():
        plain = nll_of(llama(tokens), tokens)
    assert np.abs(plain - np.array([t["ref_nll"] for t in cli["per_token"]])).max() < 1e-4


def test_one_linear_map_is_bit_identical_to_the_library(llama, tokens):
    """Through lpemu.torch, a linear layer's output equals Plan.quantize + Plan.linear bit for bit."""
    plan = lpemu.load_plan("fp8_e4m3")
    lin = llama.layers[1].attention.wq
    x = torch.randn(7, 64)
    session = lt.apply_plan(llama, plan)
    try:
        with torch.no_grad():
            y = lin(x).numpy()
    finally:
        session.remove()
    n = llama.cfg["n_layers"]
    xq = plan.quantize(x.numpy(), "linear_input", 1, "attention", "x", n)
    wq = plan.quantize(lin.weight.detach().numpy(), "weights", 1, "attention", "w", n)
    assert np.array_equal(y.view(np.uint32), plan.linear(xq, wq, 1, "attention", "wq", n).view(np.uint32))
    # fp8_e4m3's grid: every quantised input is a code of the format
    assert np.array_equal(lpemu.quantize("fp8_e4m3", xq), xq)


class MhaBlock(torch.nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.self_attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, d))

    def forward(self, x):
        h = self.norm(x)
        x = x + self.self_attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(x)


class MhaModel(torch.nn.Module):
    def __init__(self, d=16, heads=4, hidden=32, layers=2, vocab=40):
        super().__init__()
        self.layers = torch.nn.ModuleList([MhaBlock(d, heads, hidden) for _ in range(layers)])
        self.adapter = torch.nn.Linear(d, d)  # a map of unknown role: reported by name
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        for b in self.layers:
            x = b(x)
        return self.lm_head(self.adapter(x))


def test_recorder_captures_every_linear_map_of_multihead_attention(tmp_path):
    torch.manual_seed(0)
    model = MhaModel()
    model.eval()
    xs = [torch.randn(2, 5, 16), torch.randn(1, 3, 16)]
    with torch.no_grad():
        expected = [model(x) for x in xs]
    out = tmp_path / "acts.h5"
    names = lt.record(model, xs, str(out), model_name="mha")
    # 2 blocks x (q, k, v, out_proj, mlp up, mlp down) + adapter + head = 14 linear maps
    assert len(names) == 14
    with torch.no_grad():  # recording restored the model's own forward passes
        assert all(torch.equal(model(x), e) for x, e in zip(xs, expected))
    # lpemu.torch's own nn.MultiheadAttention forward (which calls each projection) agrees with PyTorch's.
    s = lt.Session(model)
    try:
        with torch.no_grad():
            for x, e in zip(xs, expected):
                torch.testing.assert_close(model(x), e, rtol=1e-5, atol=1e-6)
    finally:
        s.remove()
    with h5py.File(out, "r") as f:
        roles = {n: f["linear/" + n].attrs["role"] for n in f["linear"]}
        assert roles["layers.0.self_attn.q"] == "attention.q" and roles["layers.1.self_attn.v"] == "attention.v"
        assert roles["layers.0.self_attn.out_proj"] == "attention.out" and roles["layers.1.mlp.0"] == "mlp"
        assert roles["adapter"] == "other" and roles["lm_head"] == "head"
        # The recorded k input is the normed block input, batch by batch; its weight is in_proj's second third.
        g = f["linear/layers.0.self_attn.k"]
        assert np.array_equal(g["weight"][...], model.layers[0].self_attn.in_proj_weight[16:32].detach().numpy())
        with torch.no_grad():
            h = np.concatenate([model.layers[0].norm(x).reshape(-1, 16).numpy() for x in xs])
        assert np.array_equal(g["input"][...], h)
    r = run_cli("replay", "--activations", out, "--plan", "fp8_e4m3", "--json")
    rows = json.loads(r.stdout)["rows"]
    assert {row["tensor"]: row["role"] for row in rows} == roles
    head = next(row for row in rows if row["role"] == "head")
    assert head["weight_format"] == "bf16"  # the plan's lm_head entry, not the body's
    text = run_cli("replay", "--activations", out, "--plan", "fp32").stdout
    assert "attention.out" in text and "other" in text


def test_unknown_maps_are_not_guessed_when_the_plan_depends_on_the_kind(tmp_path):
    torch.manual_seed(1)
    model = MhaModel()
    out = tmp_path / "acts.h5"
    lt.record(model, [torch.randn(1, 4, 16)], str(out))
    plan = tmp_path / "by_kind.toml"
    plan.write_text('name = "by_kind"\n[roles]\nweights = "fp8_e4m3"\n'
                    '[[override]]\nkind = "attention"\nweights = "bf16"\n')
    r = run_cli("replay", "--activations", out, "--plan", plan, check=False)
    assert r.returncode == 2 and "'adapter'" in r.stderr and "by_kind" in r.stderr, r.stderr
    with pytest.raises(lpemu.Error, match="adapter"):
        lt.apply_plan(model, str(plan))
    # the failed apply_plan left the model's own forward passes in place
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_attention_matmuls_quantise_scores_and_probabilities_per_head(tmp_path):
    torch.manual_seed(2)
    model = MhaModel().eval()
    plan = tmp_path / "attn.toml"
    plan.write_text('name = "attn"\n[defaults]\noverflow = "saturate"\n[roles]\nscores = "fp8_e5m2"\nprobs = "fp8_e4m3"\n')
    s = lt.apply_plan(model, str(plan), attention_matmuls=True)
    calls = []
    own = s.matmul_hook

    def spy(t, role, lmap, head):
        q = own(t, role, lmap, head)
        calls.append((role, head, t.numpy().copy(), q.numpy().copy()))
        return q

    s.matmul_hook = spy
    try:
        with torch.no_grad():
            model(torch.randn(3, 5, 16))
    finally:
        s.remove()
    assert len(calls) == 2 * 2 * 3 * 4  # layers x roles x batch x heads
    assert sorted({c[1] for c in calls}) == [0, 1, 2, 3]
    for role, _, t, q in calls:
        fmt = "fp8_e5m2" if role == "scores" else "fp8_e4m3"
        assert q.shape == t.shape == (5, 5)
        assert np.array_equal(q.view(np.uint32), lpemu.quantize(fmt, t).view(np.uint32))
