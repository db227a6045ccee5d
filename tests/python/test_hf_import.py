#!/usr/bin/env python3
"""`lpemu import` of tiny random Hugging Face checkpoints (written here as safetensors by hand:
8-byte little-endian header length, JSON header, raw data), then `lpemu eval --tokens` against an
independent float64 forward pass written from the transformers modelling equations
(modeling_llama.py, modeling_mistral.py, modeling_qwen2.py, modeling_mixtral.py, modeling_gpt2.py),
not lpemu's code.

Run: LPEMU_BINARY=build/release/lpemu python3 -m pytest -q tests/python/test_hf_import.py
"""

import json
import math
import os
import struct
import subprocess

import numpy as np
import pytest
import torch

LPEMU = os.environ.get("LPEMU_BINARY", "build/release/lpemu")
DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def write_safetensors(path, tensors):
    """The safetensors layout (github.com/huggingface/safetensors, "Format")."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def save_checkpoint(d, config, tensors, shards=1):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
        return
    names = list(tensors)
    weight_map = {}
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        write_safetensors(os.path.join(d, fn), part)
        weight_map.update({n: fn for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def rnd(g, *shape, scale=0.2, dtype=torch.float32):
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


# ---------- independent references (float64), transformers' equations ----------

def rms_norm(x, w, eps):  # LlamaRMSNorm
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def causal_attention(q, k, v):  # q [H, T, hd], k/v [H, T, hd]
    hd = q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(hd)
    t = q.shape[1]
    s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(s, -1) @ v


def llama_inv_freq(cfg, hd):
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type") == "llama3":  # modeling_rope_utils._compute_llama3_parameters
        factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], \
            rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


def llama_forward(cfg, W, ids):
    W = {k: v.double() for k, v in W.items()}
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd = cfg.get("head_dim", d // H)
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * llama_inv_freq(cfg, hd)[None]
    emb = torch.cat((ang, ang), -1)
    cos, sin = emb.cos(), emb.sin()
    h = W["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        x = rms_norm(h, W[p + "input_layernorm.weight"], eps)

        def proj(name):
            y = x @ W[p + f"self_attn.{name}.weight"].T
            return y + W[p + f"self_attn.{name}.bias"] if p + f"self_attn.{name}.bias" in W else y
        q = proj("q_proj").view(T, H, hd).transpose(0, 1)
        k = proj("k_proj").view(T, KV, hd).transpose(0, 1)
        v = proj("v_proj").view(T, KV, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, 0)  # repeat_kv
        v = v.repeat_interleave(H // KV, 0)
        a = causal_attention(q, k, v).transpose(0, 1).reshape(T, H * hd)
        h = h + a @ W[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, W[p + "post_attention_layernorm.weight"], eps)
        if "num_local_experts" in cfg:
            h = h + mixtral_moe(cfg, W, p, x)
            continue
        g = x @ W[p + "mlp.gate_proj.weight"].T
        u = x @ W[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
    h = rms_norm(h, W["model.norm.weight"], eps)
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return h @ head.T


def gpt2_forward(cfg, W, ids):
    W = {k.removeprefix("transformer."): v.double() for k, v in W.items()}
    d, H = cfg["n_embd"], cfg["n_head"]
    hd = d // H
    eps = cfg["layer_norm_epsilon"]
    T = len(ids)
    h = W["wte.weight"][ids] + W["wpe.weight"][:T]
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        x = layer_norm(h, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = x @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]  # Conv1D: x W + b
        q, k, v = (t.view(T, H, hd).transpose(0, 1) for t in qkv.split(d, -1))
        a = causal_attention(q, k, v).transpose(0, 1).reshape(T, d)
        h = h + a @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        x = layer_norm(h, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        m = x @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"]
        m = 0.5 * m * (1 + torch.tanh(math.sqrt(2 / math.pi) * (m + 0.044715 * m ** 3)))  # gelu_new
        h = h + m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    h = layer_norm(h, W["ln_f.weight"], W["ln_f.bias"], eps)
    return h @ W["wte.weight"].T


def mixtral_moe(cfg, W, p, x):
    """MixtralSparseMoeBlock.forward (modeling_mixtral.py): router logits, softmax over the experts
    in float, top-k, weights renormalised to sum 1, each expert's SwiGLU on its tokens, scaled by
    its weight and index_add-ed in expert order."""
    E, k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    router_logits = x @ W[p + "block_sparse_moe.gate.weight"].T
    routing_weights = torch.softmax(router_logits, dim=1)
    routing_weights, selected = torch.topk(routing_weights, k, dim=-1)
    routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
    final = torch.zeros_like(x)
    expert_mask = torch.nn.functional.one_hot(selected, num_classes=E).permute(2, 1, 0)
    for e in range(E):
        idx, top_x = torch.where(expert_mask[e])
        if top_x.numel() == 0:
            continue
        q = f"{p}block_sparse_moe.experts.{e}."
        cur = x[top_x]
        h = (torch.nn.functional.silu(cur @ W[q + "w1.weight"].T) * (cur @ W[q + "w3.weight"].T)) @ W[q + "w2.weight"].T
        final.index_add_(0, top_x, h * routing_weights[top_x, idx, None])
    return final


# ---------- tiny checkpoints ----------

def llama_like(arch, dtype, seed, **over):
    cfg = {"architectures": [arch], "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 48, "vocab_size": 61, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
           "bos_token_id": 1, "eos_token_id": 2}
    cfg.update(over)
    g = torch.Generator().manual_seed(seed)
    d, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", d // H)
    I, V = cfg["intermediate_size"], cfg["vocab_size"]
    W = {"model.embed_tokens.weight": rnd(g, V, d, scale=1.0, dtype=dtype)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        W[p + "input_layernorm.weight"] = (1 + rnd(g, d)).to(dtype)
        W[p + "self_attn.q_proj.weight"] = rnd(g, H * hd, d, dtype=dtype)
        W[p + "self_attn.k_proj.weight"] = rnd(g, KV * hd, d, dtype=dtype)
        W[p + "self_attn.v_proj.weight"] = rnd(g, KV * hd, d, dtype=dtype)
        if arch == "Qwen2ForCausalLM":
            W[p + "self_attn.q_proj.bias"] = rnd(g, H * hd, dtype=dtype)
            W[p + "self_attn.k_proj.bias"] = rnd(g, KV * hd, dtype=dtype)
            W[p + "self_attn.v_proj.bias"] = rnd(g, KV * hd, dtype=dtype)
        W[p + "self_attn.o_proj.weight"] = rnd(g, d, H * hd, dtype=dtype)
        W[p + "post_attention_layernorm.weight"] = (1 + rnd(g, d)).to(dtype)
        if arch == "MixtralForCausalLM":
            W[p + "block_sparse_moe.gate.weight"] = rnd(g, cfg["num_local_experts"], d, scale=1.0, dtype=dtype)
            for e in range(cfg["num_local_experts"]):
                q = f"{p}block_sparse_moe.experts.{e}."
                W[q + "w1.weight"] = rnd(g, I, d, dtype=dtype)
                W[q + "w2.weight"] = rnd(g, d, I, dtype=dtype)
                W[q + "w3.weight"] = rnd(g, I, d, dtype=dtype)
            continue
        W[p + "mlp.gate_proj.weight"] = rnd(g, I, d, dtype=dtype)
        W[p + "mlp.up_proj.weight"] = rnd(g, I, d, dtype=dtype)
        W[p + "mlp.down_proj.weight"] = rnd(g, d, I, dtype=dtype)
    W["model.norm.weight"] = (1 + rnd(g, d)).to(dtype)
    if not cfg["tie_word_embeddings"]:
        W["lm_head.weight"] = rnd(g, V, d, dtype=dtype)
    return cfg, W


def gpt2(seed, dtype=torch.float32):
    cfg = {"architectures": ["GPT2LMHeadModel"], "n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": None,
           "vocab_size": 57, "n_positions": 40, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
           "bos_token_id": 50, "eos_token_id": 50}
    g = torch.Generator().manual_seed(seed)
    d, V = 32, 57
    W = {"transformer.wte.weight": rnd(g, V, d, scale=1.0, dtype=dtype),
         "transformer.wpe.weight": rnd(g, 40, d, dtype=dtype)}
    for l in range(2):
        p = f"transformer.h.{l}."
        W[p + "ln_1.weight"] = (1 + rnd(g, d)).to(dtype)
        W[p + "ln_1.bias"] = rnd(g, d, dtype=dtype)
        W[p + "attn.c_attn.weight"] = rnd(g, d, 3 * d, dtype=dtype)
        W[p + "attn.c_attn.bias"] = rnd(g, 3 * d, dtype=dtype)
        W[p + "attn.c_proj.weight"] = rnd(g, d, d, dtype=dtype)
        W[p + "attn.c_proj.bias"] = rnd(g, d, dtype=dtype)
        W[p + "ln_2.weight"] = (1 + rnd(g, d)).to(dtype)
        W[p + "ln_2.bias"] = rnd(g, d, dtype=dtype)
        W[p + "mlp.c_fc.weight"] = rnd(g, d, 4 * d, dtype=dtype)
        W[p + "mlp.c_fc.bias"] = rnd(g, 4 * d, dtype=dtype)
        W[p + "mlp.c_proj.weight"] = rnd(g, 4 * d, d, dtype=dtype)
        W[p + "mlp.c_proj.bias"] = rnd(g, d, dtype=dtype)
    W["transformer.ln_f.weight"] = (1 + rnd(g, d)).to(dtype)
    W["transformer.ln_f.bias"] = rnd(g, d, dtype=dtype)
    return cfg, W


def lpemu(*args, check=True):
    r = subprocess.run([LPEMU, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"lpemu {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r


def eval_logits(tmp_path, d, n_tokens, seed):
    out = tmp_path / "model.h5"
    lpemu("import", str(d), str(out))
    with open(os.path.join(d, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    ids = np.random.default_rng(seed).integers(0, vocab, n_tokens).astype(np.int64)
    np.save(tmp_path / "ids.npy", ids)
    lpemu("eval", "--model", str(out), "--tokens", str(tmp_path / "ids.npy"),
          "--logits-out", str(tmp_path / "logits.npy"), "--json")
    return ids, np.load(tmp_path / "logits.npy"), out


def assert_logits_close(got, ref):
    # float32 round-off of a 2-layer forward: a few ulps of the largest logit per operation.
    err = np.abs(got.astype(np.float64) - ref).max()
    assert err <= 2e-5 * max(1.0, np.abs(ref).max()), f"max |lpemu - reference| = {err:g}"


CASES = {
    # Llama 3.2 style: BF16 storage, GQA, llama3 RoPE scaling, untied head, sharded.
    "llama3": lambda: (llama_like("LlamaForCausalLM", torch.bfloat16, 1, rope_theta=500000.0,
                                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
                       2),
    # Llama 2 style: F32, multi-head (no GQA), tied embeddings (no lm_head tensor).
    "llama2_tied": lambda: (llama_like("LlamaForCausalLM", torch.float32, 2, num_key_value_heads=4,
                                       tie_word_embeddings=True), 1),
    # Mistral: F16, explicit head_dim different from hidden/heads, sliding window longer than the text.
    "mistral": lambda: (llama_like("MistralForCausalLM", torch.float16, 3, head_dim=16, sliding_window=4096,
                                   rope_theta=1000000.0), 1),
    # Mixtral: sparse MoE (4 experts, top 2), BF16, GQA, sharded; and 8 experts, top 3, F32.
    "mixtral": lambda: (llama_like("MixtralForCausalLM", torch.bfloat16, 17, num_local_experts=4,
                                   num_experts_per_tok=2, sliding_window=None, rope_theta=1000000.0), 2),
    "mixtral_top3": lambda: (llama_like("MixtralForCausalLM", torch.float32, 18, num_local_experts=8,
                                        num_experts_per_tok=3, intermediate_size=24), 1),
    # Qwen2: QKV bias, tied embeddings.
    "qwen2": lambda: (llama_like("Qwen2ForCausalLM", torch.float32, 4, tie_word_embeddings=True,
                                 rms_norm_eps=1e-6), 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_llama_family_logits_match_reference(tmp_path, name):
    (cfg, W), shards = CASES[name]()
    d = tmp_path / name
    save_checkpoint(d, cfg, W, shards)
    ids, got, _ = eval_logits(tmp_path, d, 20, 7)
    assert got.shape == (20, cfg["vocab_size"])
    assert_logits_close(got, llama_forward(cfg, W, torch.tensor(ids)).numpy())


@pytest.mark.parametrize("shards", [1, 3])
def test_gpt2_logits_match_reference(tmp_path, shards):
    cfg, W = gpt2(5)
    if shards == 1:  # the hub's original files have no "transformer." prefix
        W = {k.removeprefix("transformer."): v for k, v in W.items()}
    d = tmp_path / "gpt2"
    save_checkpoint(d, cfg, W, shards)
    ids, got, _ = eval_logits(tmp_path, d, 24, 8)
    assert_logits_close(got, gpt2_forward(cfg, W, torch.tensor(ids)).numpy())


def test_provenance_recorded(tmp_path):
    cfg, W = gpt2(6)
    d = tmp_path / "ck"
    save_checkpoint(d, cfg, W, 2)
    out = tmp_path / "m.h5"
    lpemu("import", str(d), str(out))
    import hashlib
    import h5py
    with h5py.File(out, "r") as f:
        assert f.attrs["hf_architecture"] == "GPT2LMHeadModel"
        assert json.loads(f.attrs["hf_config"]) == cfg
        files = [x.decode() for x in f["provenance/files"][...]]
        sums = [x.decode() for x in f["provenance/sha256"][...]]
    for fn, s in zip(files, sums):
        assert hashlib.sha256(open(d / fn, "rb").read()).hexdigest() == s, fn
    assert set(files) == {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors"}


@pytest.mark.parametrize("dtype,bits", [(torch.bfloat16, 16), (torch.float16, 16), (torch.float32, 32)])
def test_weights_keep_their_stored_precision(tmp_path, dtype, bits):
    """BF16/F16 checkpoints are stored in 16 bits in the model file (an HDF5 float type that
    widens exactly on read), F32 ones in 32; evaluation of the imported file still matches."""
    import h5py
    cfg, W = llama_like("LlamaForCausalLM", dtype, 23)
    save_checkpoint(tmp_path / "ck", cfg, W)
    ids, got, out = eval_logits(tmp_path, tmp_path / "ck", 12, 24)
    with h5py.File(out, "r") as f:
        for name in ("tok_embeddings", "output", "layers/1/attention/wk", "layers/0/feed_forward/w2"):
            assert f[name].id.get_type().get_size() * 8 == bits, name
    assert_logits_close(got, llama_forward(cfg, W, torch.tensor(ids)).numpy())


def test_refuses_unsupported_by_name(tmp_path):
    cfg, W = gpt2(7)
    cfg["architectures"] = ["FalconForCausalLM"]
    d = tmp_path / "falcon"
    save_checkpoint(d, cfg, W)
    r = lpemu("import", str(d), str(tmp_path / "x.h5"), check=False)
    assert r.returncode == 2
    assert "architectures[0] = \"FalconForCausalLM\": expected one of LlamaForCausalLM" in r.stderr
    cfg, W = llama_like("LlamaForCausalLM", torch.float32, 8, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    save_checkpoint(tmp_path / "yarn", cfg, W)
    r = lpemu("import", str(tmp_path / "yarn"), str(tmp_path / "y.h5"), check=False)
    assert r.returncode == 2 and "rope_scaling.rope_type = \"yarn\"" in r.stderr
    cfg, W = llama_like("LlamaForCausalLM", torch.float32, 9)
    W["model.layers.1.mlp.up_proj.weight"] = W["model.layers.1.mlp.up_proj.weight"][:, :31].contiguous()
    save_checkpoint(tmp_path / "bad", cfg, W)
    r = lpemu("import", str(tmp_path / "bad"), str(tmp_path / "b.h5"), check=False)
    assert r.returncode == 2
    assert "tensor 'model.layers.1.mlp.up_proj.weight' has shape [48, 31], expected [48, 32]" in r.stderr
    # Layers are written as they are read: layer 0 was in the file when layer 1 failed, yet nothing
    # is left behind (the file is written under a temporary name and renamed only when complete).
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("b.h5")]
    cfg, W = llama_like("LlamaForCausalLM", torch.float32, 10)
    del W["model.layers.0.self_attn.k_proj.weight"]
    save_checkpoint(tmp_path / "missing", cfg, W)
    r = lpemu("import", str(tmp_path / "missing"), str(tmp_path / "c.h5"), check=False)
    assert r.returncode == 2
    assert f"{tmp_path / 'missing'}: no tensor 'model.layers.0.self_attn.k_proj.weight'" in r.stderr


def test_import_never_replaces_a_file_without_force(tmp_path):
    cfg, W = gpt2(12)
    save_checkpoint(tmp_path / "ck", cfg, W)
    out = tmp_path / "m.h5"
    out.write_bytes(b"mine")
    r = lpemu("import", str(tmp_path / "ck"), str(out), check=False)
    assert r.returncode != 0 and "exists" in r.stderr and "--force" in r.stderr
    assert out.read_bytes() == b"mine"
    r = lpemu("import", str(tmp_path / "ck"), str(tmp_path / "ck" / "config.json"), "--force", check=False)
    assert r.returncode != 0 and json.loads((tmp_path / "ck" / "config.json").read_text()) == cfg
    lpemu("import", str(tmp_path / "ck"), str(out), "--force")
    import h5py
    with h5py.File(out, "r") as f:
        assert f.attrs["hf_architecture"] == "GPT2LMHeadModel"
        assert f["layers/1/attention/wq"].shape == (cfg["n_embd"], cfg["n_embd"])


def bf16_round(t):
    return t.to(torch.bfloat16).to(t.dtype)


# Which checkpoint tensors a plan's role quantises: the mixture-of-experts roles and their fallback.
MOE_ROLES = {
    "expert_weights": lambda n: ".experts." in n,
    "router_weights": lambda n: ".gate." in n,
    "weights": lambda n: ".layers." in n and n.endswith("proj.weight") or ".experts." in n or ".gate." in n,
}


@pytest.mark.parametrize("role", sorted(MOE_ROLES))
def test_mixtral_expert_roles_in_a_plan(tmp_path, role):
    """A plan giving only `role` bf16 rounds exactly the tensors the reference rounds: expert
    weights and the router are roles of their own, and both fall back to `weights`."""
    cfg, W = llama_like("MixtralForCausalLM", torch.float32, 19, num_local_experts=4, num_experts_per_tok=2)
    save_checkpoint(tmp_path / "ck", cfg, W)
    ids, plain, out = eval_logits(tmp_path, tmp_path / "ck", 16, 20)
    (tmp_path / "plan.toml").write_text(f'name = "moe"\n[roles]\n{role} = "bf16"\n')
    lpemu("eval", "--model", str(out), "--plan", str(tmp_path / "plan.toml"), "--tokens", str(tmp_path / "ids.npy"),
          "--logits-out", str(tmp_path / "q.npy"))
    got = np.load(tmp_path / "q.npy")
    Wq = {n: bf16_round(t) if MOE_ROLES[role](n) else t for n, t in W.items()}
    assert sum(MOE_ROLES[role](n) for n in W) > 0
    assert_logits_close(got, llama_forward(cfg, Wq, torch.tensor(ids)).numpy())
    assert np.abs(got - plain).max() > 1e-4  # the rounding shows


def test_mixtral_refusals(tmp_path):
    cfg, W = llama_like("MixtralForCausalLM", torch.float32, 21, num_local_experts=4, num_experts_per_tok=5)
    save_checkpoint(tmp_path / "k5", cfg, W)
    r = lpemu("import", str(tmp_path / "k5"), str(tmp_path / "x.h5"), check=False)
    assert r.returncode == 2 and "num_experts_per_tok = 5: expected an integer in 1..num_local_experts (4)" in r.stderr
    cfg, W = llama_like("MixtralForCausalLM", torch.float32, 22, num_local_experts=4, num_experts_per_tok=2)
    del W["model.layers.1.block_sparse_moe.experts.3.w2.weight"]
    save_checkpoint(tmp_path / "miss", cfg, W)
    r = lpemu("import", str(tmp_path / "miss"), str(tmp_path / "y.h5"), check=False)
    assert r.returncode == 2 and "no tensor 'model.layers.1.block_sparse_moe.experts.3.w2.weight'" in r.stderr
    (tmp_path / "bad.toml").write_text('[roles]\nexpert_weight = "bf16"\n')
    np.save(tmp_path / "ids.npy", np.array([1, 2, 3], dtype=np.int64))
    r = lpemu("eval", "--model", "stories260K", "--plan", str(tmp_path / "bad.toml"), "--tokens",
              str(tmp_path / "ids.npy"), check=False)
    assert r.returncode == 2 and "expected a known role" in r.stderr and "closest known names: expert_weights" in r.stderr


def hf_perplexity_recipe(forward, ids, max_length, stride):
    """transformers docs, "Perplexity of fixed-length models": windows of max_length every stride
    tokens, targets before the window's new part set to -100, loss = mean NLL of the remaining
    (shifted) targets; here summed per token so every scored token weighs the same."""
    nll_sum, count, prev_end = 0.0, 0, 0
    n = len(ids)
    for begin in range(0, n, stride):
        end = min(begin + max_length, n)
        trg_len = end - prev_end
        window = ids[begin:end]
        target = window.clone()
        target[:-trg_len] = -100
        logits = forward(window)
        shift_logits, shift_labels = logits[:-1], target[1:]
        valid = shift_labels != -100
        logp = torch.log_softmax(shift_logits, -1)
        nll_sum += -logp[valid].gather(1, shift_labels[valid][:, None]).sum().item()
        count += int(valid.sum())
        prev_end = end
        if end == n:
            break
    return nll_sum / count, count


def test_sliding_window_perplexity_matches_recipe(tmp_path):
    cfg, W = llama_like("LlamaForCausalLM", torch.float32, 11, max_position_embeddings=16)
    d = tmp_path / "ck"
    save_checkpoint(d, cfg, W)
    out = tmp_path / "m.h5"
    lpemu("import", str(d), str(out))
    rng = np.random.default_rng(12)
    docs = [rng.integers(0, cfg["vocab_size"], 64).astype(np.int64),  # 4x the context
            rng.integers(0, cfg["vocab_size"], 37).astype(np.int32)]
    for i, x in enumerate(docs):
        np.save(tmp_path / f"d{i}.npy", x)
    fwd = lambda w: llama_forward(cfg, W, w)  # noqa: E731
    for stride in (16, 5):
        r = lpemu("eval", "--model", str(out), "--tokens", str(tmp_path / "d0.npy"), str(tmp_path / "d1.npy"),
                  "--stride", str(stride), "--json")
        res = json.loads(r.stdout)
        assert "tokens, " in r.stderr and "left" in r.stderr  # progress with an estimate of time left
        total, count = 0.0, 0
        for i, x in enumerate(docs):
            ref, n = hf_perplexity_recipe(fwd, torch.tensor(x, dtype=torch.long), 16, stride)
            got = res["documents"][i]
            assert got["tokens"] == len(x)
            assert abs(got["mean_nll"] - ref) <= 1e-5 * max(1.0, ref), (stride, i, got["mean_nll"], ref)
            assert abs(got["ref_mean_nll"] - ref) <= 1e-5 * max(1.0, ref)
            total += ref * n
            count += n
        # Disjoint windows (stride = context) leave each window's first token unscored, as the recipe does.
        assert res["scored"] == count == (64 + 37 - 2 if stride < 16 else 60 + 34)
        assert abs(res["perplexity"] - math.exp(total / count)) <= 1e-5 * math.exp(total / count)
    r = lpemu("eval", "--model", str(out), "--tokens", str(tmp_path / "d0.npy"), "--stride", "17", check=False)
    assert r.returncode == 2 and "stride 17: expected 1..16" in r.stderr


def test_sweep_experiment_with_token_ids(tmp_path):
    cfg, W = llama_like("Qwen2ForCausalLM", torch.bfloat16, 13, tie_word_embeddings=True)
    save_checkpoint(tmp_path / "ck", cfg, W)
    lpemu("import", str(tmp_path / "ck"), str(tmp_path / "m.h5"))
    ids = np.random.default_rng(14).integers(0, cfg["vocab_size"], 24).astype(np.int64)
    np.save(tmp_path / "ids.npy", ids)
    (tmp_path / "exp.toml").write_text(
        f'name = "hf"\n[source]\nmodel = "{tmp_path / "m.h5"}"\ntokens = "ids.npy"\n[output]\ndir = "out"\n'
        '[[plan]]\nlabel = "fp32"\nplan = "fp32"\n[[plan]]\nlabel = "mxfp4"\n'
        '[plan.roles]\nweights = "mxfp4"\nlinear_input = "mxfp4"\n')
    r = lpemu("sweep", str(tmp_path / "exp.toml"), "--out", str(tmp_path / "out"), check=False)
    assert r.returncode == 0, r.stderr
    rows = {}
    for line in (tmp_path / "out" / "results.csv").read_text().splitlines()[1:]:
        _, label, metric, value = line.split(",")
        rows[(label, metric)] = float(value)
    # The fp32 plan's perplexity equals the independent forward's on the same ids; mxfp4 differs.
    ref = llama_forward(cfg, W, torch.tensor(ids))
    nll = -torch.log_softmax(ref[:-1], -1).gather(1, torch.tensor(ids[1:])[:, None]).mean().item()
    assert abs(rows[("fp32", "perplexity")] - math.exp(nll)) <= 1e-5 * math.exp(nll)
    assert rows[("mxfp4", "perplexity")] != rows[("fp32", "perplexity")]


def gpt2_byte_tokenizer_json():
    """A byte-level tokenizer.json: GPT-2's bytes_to_unicode (openai/gpt-2 src/encoder.py) pieces
    at ids 0..255, one merge, and <|endoftext|> = 256."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): i for i, c in enumerate(cs)}
    vocab["he"] = 257
    return {"version": "1.0", "added_tokens": [{"id": 256, "content": "<|endoftext|>", "special": True}],
            "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            "post_processor": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": vocab, "merges": ["h e"]}}


def test_text_and_sampling_through_tokenizer_json(tmp_path):
    cfg, W = gpt2(15)
    cfg["vocab_size"] = 258
    g = torch.Generator().manual_seed(16)
    W["transformer.wte.weight"] = rnd(g, 258, 32, scale=1.0)
    d = tmp_path / "ck"
    save_checkpoint(d, cfg, W)
    (d / "tokenizer.json").write_text(json.dumps(gpt2_byte_tokenizer_json()))
    out = tmp_path / "m.h5"
    lpemu("import", str(d), str(out))
    text = "hello héllo 🙂"
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    r = json.loads(lpemu("eval", "--model", str(out), "--text", str(tmp_path / "t.txt"), "--json").stdout)
    # Expected ids from the byte map written in this file: GPT-2's regex splits the text into
    # "hello", " héllo", " 🙂"; each byte becomes its character's id, and "h e" merges.
    tj = gpt2_byte_tokenizer_json()
    seq = []
    for word in ["hello", " h\u00e9llo", " \U0001F642"]:  # GPT-2's regex splits these three words
        bs = word.encode()
        syms = [gpt2_char(b) for b in bs]
        if syms[:2] == ["h", "e"]:
            syms = ["he"] + syms[2:]
        seq += [tj["model"]["vocab"][s] for s in syms]
    assert [t["token"] for t in r["per_token"]] == seq[1:]
    a = lpemu("run", "--model", str(out), "--prompt", "hello", "--steps", "12", "--temperature", "1",
              "--top-k", "20", "--seed", "4").stdout
    b = lpemu("run", "--model", str(out), "--prompt", "hello", "--steps", "12", "--temperature", "1",
              "--top-k", "20", "--seed", "4").stdout
    assert a == b and a.startswith("hello")


def gpt2_char(b):
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in bs:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in bs].index(b))


def _import_fails(tmp_path, name, cfg, W, says, shards=1, tokenizer=None):
    """Imports a checkpoint that must be refused: exit 2, `says` in the message, nothing left behind."""
    d = tmp_path / name
    save_checkpoint(d, cfg, W, shards=shards)
    if tokenizer is not None:
        (d / "tokenizer.json").write_text(json.dumps(tokenizer))
    r = lpemu("import", str(d), str(tmp_path / f"{name}.h5"), check=False)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr, r.stderr
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(f"{name}.h5")]
    return d


def test_import_checks_what_the_engine_needs(tmp_path):
    """Integers past 32 bits, layer counts, duplicate shards, malformed rope_scaling, ids outside the
    vocabulary and shapes no forward pass can run are refused by name (they used to be truncated,
    dropped, taken from the wrong shard or written as models eval then refused)."""
    cfg, W = llama_like("LlamaForCausalLM", torch.float32, 20)
    cases = [
        ({"hidden_size": 2**32 + 32}, "hidden_size = 4294967328: expected an integer in -2147483647..2147483647"),
        ({"eos_token_id": [2, 2**40]}, "eos_token_id = [2,1099511627776]"),
        ({"num_hidden_layers": 1}, "num_hidden_layers = 1: expected the 2 layers the checkpoint stores"),
        ({"bos_token_id": -3}, "bos_id = -3: expected a token id in 0..60"),
        ({"rms_norm_eps": -1.0}, "norm_eps = -1: expected a finite number >= 0"),
        ({"rope_theta": 0.0}, "rope_theta = 0: expected a finite number > 0"),
        ({"rope_scaling": "linear"}, "rope_scaling = \"linear\": expected an object"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": "8"}}, "rope_scaling.factor = \"8\": expected a number"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling.low_freq_factor = missing"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 0.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 32}}, "rope_factor = 0: expected a finite number >= 1"),
    ]
    for i, (over, says) in enumerate(cases):
        _import_fails(tmp_path, f"c{i}", dict(cfg, **over), W, says)
    # head_dim 7: RoPE rotates pairs of features.
    c7, W7 = llama_like("LlamaForCausalLM", torch.float32, 21, hidden_size=28, num_attention_heads=4,
                        num_key_value_heads=2)
    _import_fails(tmp_path, "hd7", c7, W7, "head_dim = 7: expected an even number")
    # A tensor in two shards used to be taken from the shard the index does not name.
    d = tmp_path / "dup"
    save_checkpoint(d, cfg, W, shards=2)
    weight_map = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    name = "model.layers.0.self_attn.q_proj.weight"
    other = next(s for s in sorted(set(weight_map.values())) if s != weight_map[name])
    part = {n: t for n, t in W.items() if weight_map[n] == other}
    part[name] = torch.zeros_like(W[name])
    write_safetensors(d / other, part)
    r = lpemu("import", str(d), str(tmp_path / "dup.h5"), check=False)
    assert r.returncode == 2 and f"tensor '{name}' is also in" in r.stderr, r.stderr
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("dup.h5")]


def test_import_refuses_bad_tokenizer_ids(tmp_path):
    """added_tokens id -1 used to crash the import and leave a temporary file; an id of 5e7 in a
    small file allocated gigabytes; ids past 32 bits wrapped onto other pieces."""
    cfg, W = gpt2(30)
    for i, bad in enumerate([-1, 50_000_000, 2**32 + 5]):
        tok = gpt2_byte_tokenizer_json()
        tok["added_tokens"].append({"id": bad, "content": "<x>", "special": True})
        _import_fails(tmp_path, f"t{i}", cfg, W, f"added_tokens[].id = {bad}: expected a token id in 0..", tokenizer=tok)


def gpt2_258(seed):
    """gpt2() with the 258 ids of gpt2_byte_tokenizer_json()."""
    cfg, W = gpt2(seed)
    cfg["vocab_size"] = 258
    W["transformer.wte.weight"] = rnd(torch.Generator().manual_seed(seed), 258, 32, scale=1.0)
    return cfg, W


def test_import_refuses_tokenizer_ids_past_the_vocabulary(tmp_path):
    """A tokenizer id at or past config.json's vocab_size names no embedding row: refused by the
    tokenizer's file, field and the model's vocabulary (it used to be imported)."""
    cfg, W = gpt2_258(31)
    tok = gpt2_byte_tokenizer_json()
    tok["added_tokens"].append({"id": 258, "content": "<x>", "special": True})
    _import_fails(tmp_path, "a", cfg, W, "tokenizer.json: added_tokens[].id = 258: expected a token id in "
                  "0..257 (the model's vocab_size is 258)", tokenizer=tok)
    tok = gpt2_byte_tokenizer_json()
    tok["model"]["vocab"]["zz"] = 300
    _import_fails(tmp_path, "v", cfg, W, "tokenizer.json: model.vocab.zz = 300: expected a token id in 0..257",
                  tokenizer=tok)
    # The largest id, 257, is fine.
    d = tmp_path / "ok"
    save_checkpoint(d, cfg, W)
    (d / "tokenizer.json").write_text(json.dumps(gpt2_byte_tokenizer_json()))
    lpemu("import", str(d), str(tmp_path / "ok.h5"))


def _limited_fsize():
    import resource
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # `ulimit -f 8`


def test_import_write_failures_leave_nothing(tmp_path):
    """A file-size limit or a result lost on a full stdout: exit 2, the failure named, no model and
    no temporary file left (the import used to crash in libhdf5 after the failed write)."""
    cfg, W = gpt2_258(32)
    d = tmp_path / "ck"
    save_checkpoint(d, cfg, W)
    (d / "tokenizer.json").write_text(json.dumps(gpt2_byte_tokenizer_json()))
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run([LPEMU, "import", str(d), str(out / "m.h5")], capture_output=True, text=True,
                       preexec_fn=_limited_fsize)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "lpemu: error: " in r.stderr and "m.h5" in r.stderr, r.stderr
    assert list(out.iterdir()) == []
    with open("/dev/full", "w") as full:
        r = subprocess.run([LPEMU, "import", "--json", str(d), str(out / "m.h5")], stdout=full,
                           stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2 and "write failed" in r.stderr, r.stderr
    assert list(out.iterdir()) == []
    # An existing model replaced with --force comes back when the result is lost.
    lpemu("import", str(d), str(out / "m.h5"))
    before = (out / "m.h5").read_bytes()
    cfg2, W2 = gpt2_258(33)
    save_checkpoint(tmp_path / "ck2", cfg2, W2)
    with open("/dev/full", "w") as full:
        r = subprocess.run([LPEMU, "import", "--json", "--force", str(tmp_path / "ck2"), str(out / "m.h5")],
                           stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2, r.stderr
    assert [p.name for p in out.iterdir()] == ["m.h5"] and (out / "m.h5").read_bytes() == before
