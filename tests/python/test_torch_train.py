"""lpemu.torch training: the backward pass of a PyTorch model under a plan (every linear map's
forward, data-gradient and weight-gradient GEMMs with their operands quantised along their own
contraction axis), the optimizer wrapper's formats, and DDP over gloo. References: PyTorch's own
autograd and optimizers, and lpemu.quantize of each tensor along the contraction axis."""

import copy
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lpemu
import lpemu.torch as lt

D, H, V = 64, 96, 64  # model width, MLP width, vocabulary: whole MX (32) and NVFP4 (16) blocks


class Attention(torch.nn.Module):
    """Two projections with the attention roles (no attention matmul: the linear maps are what is tested)."""

    def __init__(self):
        super().__init__()
        self.wq = torch.nn.Linear(D, D, bias=False)
        self.wo = torch.nn.Linear(D, D, bias=True)

    def forward(self, x):
        return self.wo(torch.tanh(self.wq(x)))


class FeedForward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(D, H, bias=False)
        self.w2 = torch.nn.Linear(H, D, bias=False)
        self.w3 = torch.nn.Linear(D, H, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(D)
        self.attention = Attention()
        self.feed_forward = FeedForward()

    def forward(self, x):
        x = x + self.attention(self.norm(x))
        return x + self.feed_forward(x)


class Net(torch.nn.Module):
    """A two-block language model: embedding, blocks, head; next-token cross-entropy."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(V, D)
        self.layers = torch.nn.ModuleList([Block(), Block()])
        self.output = torch.nn.Linear(D, V, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.layers:
            x = b(x)
        return self.output(x)


def loss_of(model, tokens):
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))


def batch(n=4, t=17, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (n, t), generator=g)  # n·(t−1) = 64 predictions


def plan_file(tmp_path, body, name="p"):
    path = tmp_path / f"{name}.toml"
    path.write_text(f'name = "{name}"\n[roles]\n{body}\n')
    return str(path)


def grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def test_fp32_plan_gives_torchs_own_gradients():
    ref = Net()
    model = copy.deepcopy(ref)
    runner = lt.apply_plan(model, "fp32")
    model.train()
    tokens = batch()
    loss = loss_of(model, tokens)
    loss.backward()
    ref_loss = loss_of(ref, tokens)
    ref_loss.backward()
    runner.remove()
    assert torch.equal(loss, ref_loss)
    g, rg = grads(model), grads(ref)
    assert g.keys() == rg.keys()
    for n in g:
        assert torch.equal(g[n], rg[n]), n


def test_eval_mode_and_no_grad_keep_the_inference_path(tmp_path):
    plan = plan_file(tmp_path, 'weights = "mxfp8_e4m3"\nlinear_input = "mxfp8_e4m3"\ngrad_output = "mxfp8_e5m2"')
    lin = torch.nn.Linear(D, H, bias=False)
    x = torch.randn(8, D)
    runner = lt.apply_plan(lin, plan)
    p = runner.plan
    expected = p.linear(p.quantize(x.numpy(), "linear_input", -1, "attention", "", 1),
                        p.quantize(lin.weight.detach().numpy(), "weights", -1, "attention", "", 1),
                        -1, "attention", "", 1)
    lin.eval()
    assert np.array_equal(lin(x).detach().numpy(), expected)
    lin.train()
    with torch.no_grad():
        assert np.array_equal(lin(x).numpy(), expected)
    runner.remove()


def block_formats():
    return [f["name"] for f in lpemu.formats() if f.get("kind") == "block" and f.get("granularity", "").startswith(
        "block")]


def q(fmt, x, axis):
    """lpemu.quantize of x, a block format's scales along `axis`."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if fmt not in block_formats():
        return lpemu.quantize(fmt, x)
    return lpemu.quantize(fmt, x, axis=axis)


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8",
                                 "nvfp4"])
def test_each_backward_gemm_sees_its_operands_quantised_along_its_contraction_axis(tmp_path, fmt):
    assert fmt in block_formats()
    plan = plan_file(tmp_path, f'weights = "{fmt}"\nlinear_input = "{fmt}"\ngrad_output = "{fmt}"')
    torch.manual_seed(3)
    lin = torch.nn.Linear(D, H, bias=False)  # W [N = 96, K = 64]
    x = torch.randn(64, D, requires_grad=True)  # X [M = 64, K]
    r = torch.randn(64, H)  # dY: loss = Σ Y ⊙ r
    runner = lt.apply_plan(lin, plan)
    runner.capture = []
    lin.train()
    (lin(x) * r).sum().backward()
    runner.remove()
    ops = {c["pass"]: c for c in runner.capture}
    assert sorted(ops) == ["dgrad", "forward", "wgrad"]
    xn, wn, rn = x.detach().numpy(), lin.weight.detach().numpy(), r.numpy()
    # forward Y = X·Wᵀ contracts K (axis 1 of X and of W)
    assert np.array_equal(ops["forward"]["a"], q(fmt, xn, 1))
    assert np.array_equal(ops["forward"]["b"], q(fmt, wn, 1))
    # dgrad dX = dY·W contracts N (axis 1 of dY, axis 0 of W)
    assert np.array_equal(ops["dgrad"]["a"], q(fmt, rn, 1))
    assert np.array_equal(ops["dgrad"]["b"], q(fmt, wn, 0).T)
    # wgrad dW = dYᵀ·X contracts M, the tokens (axis 0 of dY and of X)
    assert np.array_equal(ops["wgrad"]["a"], q(fmt, rn, 0).T)
    assert np.array_equal(ops["wgrad"]["b"], q(fmt, xn, 0).T)
    # the gradients are those GEMMs (float GEMM: Eigen's plain float sums, against float64 here)
    dx = ops["dgrad"]["a"].astype(np.float64) @ ops["dgrad"]["b"].astype(np.float64).T
    dw = ops["wgrad"]["a"].astype(np.float64) @ ops["wgrad"]["b"].astype(np.float64).T
    np.testing.assert_allclose(x.grad.numpy(), dx, rtol=1e-5, atol=1e-5 * np.abs(dx).max())
    np.testing.assert_allclose(lin.weight.grad.numpy(), dw, rtol=1e-5, atol=1e-5 * np.abs(dw).max())


@pytest.mark.parametrize("fmt,dp", [("bf16", "a100_bf16_fp32"), ("mxfp8_e4m3", "b200_mxfp8_fp32")])
def test_backward_gemms_run_on_the_plans_datapaths(tmp_path, fmt, dp):
    plan = plan_file(tmp_path, f'weights = "{fmt}"\nlinear_input = "{fmt}"\ngrad_output = "{fmt}"\n'
                     f'gemm = "{dp}"\ndgrad_gemm = "{dp}"\nwgrad_gemm = "{dp}"')
    torch.manual_seed(4)
    lin = torch.nn.Linear(D, H, bias=False)
    x = torch.randn(64, D, requires_grad=True)
    r = torch.randn(64, H)
    runner = lt.apply_plan(lin, plan)
    runner.capture = []
    lin.train()
    y = lin(x)
    (y * r).sum().backward()
    runner.remove()
    p = runner.plan
    for pas in ("forward", "dgrad", "wgrad"):
        assert p.gemm(0, "attention", 1, gemm_pass=pas) == dp
        assert not p.float_gemm(0, "attention", 1, gemm_pass=pas)
    ops = {c["pass"]: c for c in runner.capture}
    # each result is the datapath GEMM of the captured operands (for bf16 equal to the plan's GEMM of
    # that pass run directly on them), close to the exact float64 product, and not the float sums
    xn, wn, rn = x.detach().numpy(), lin.weight.detach().numpy(), r.numpy()
    want_ops = {"forward": (q(fmt, xn, 1), q(fmt, wn, 1)), "dgrad": (q(fmt, rn, 1), q(fmt, wn, 0).T),
                "wgrad": (q(fmt, rn, 0).T, q(fmt, xn, 0).T)}
    for pas, got in (("forward", y), ("dgrad", x.grad), ("wgrad", lin.weight.grad)):
        a, b = ops[pas]["a"], ops[pas]["b"]
        assert np.array_equal(a, want_ops[pas][0]) and np.array_equal(b, want_ops[pas][1]), pas
        c = got.detach().numpy()
        if fmt == "bf16":
            assert np.array_equal(c, p.linear(a, b, -1, "attention", "", 1, gemm_pass=pas)), pas
        exact = a.astype(np.float64) @ b.astype(np.float64).T
        np.testing.assert_allclose(c, exact, rtol=1e-4, atol=1e-5 * np.abs(exact).max())
        assert not np.array_equal(c, a @ b.T)  # not the float GEMM's sums


def test_two_d_tile_weights_give_forward_and_dgrad_one_quantised_weight(tmp_path):
    fdir = tmp_path / "formats" / "block"
    fdir.mkdir(parents=True)
    (fdir / "nvfp4_2d.toml").write_text(
        'name = "nvfp4_2d"\nsource = "NVFP4 with 16x16 weight tiles (NVIDIA NVFP4 training recipe)"\n'
        'element = "fp4_e2m1"\nscale = "fp8_e4m3"\ngranularity = "tile"\ntile = [16, 16]\n'
        'scale_rule = "amax_over_max"\ntensor_scale = "fp32"\n')
    ctx = lpemu.Context([tmp_path / "formats"])
    plan = ctx.load_plan(plan_file(tmp_path, 'weights = "nvfp4_2d"\nlinear_input = "nvfp4"\ngrad_output = "nvfp4"'))
    torch.manual_seed(5)
    lin = torch.nn.Linear(D, H, bias=False)
    x = torch.randn(64, D, requires_grad=True)
    runner = lt.apply_plan(lin, plan, context=ctx)
    assert runner.shares_weight(runner.maps[0])
    runner.capture = []
    lin.train()
    (lin(x) * torch.randn(64, H)).sum().backward()
    runner.remove()
    ops = {c["pass"]: c for c in runner.capture}
    wq = ctx.quantize("nvfp4_2d", lin.weight.detach().numpy())
    assert np.array_equal(ops["forward"]["b"], wq)
    assert np.array_equal(ops["dgrad"]["b"], wq.T)  # the same quantised values, transposed
    # a 1-D block weight format is re-quantised along N instead (not the same values)
    assert not np.array_equal(q("nvfp4", lin.weight.detach().numpy(), 0), q("nvfp4", lin.weight.detach().numpy(), 1))


def sr_plan(tmp_path, seed=7):
    return plan_file(tmp_path, f'grad_output = {{ format = "bf16", rounding = "stochastic", seed = {seed} }}',
                     f"sr{seed}")


def dgrad_operand(plan, c, step=0):
    lin = torch.nn.Linear(D, H, bias=False)
    x = torch.randn(64, D, requires_grad=True)
    runner = lt.apply_plan(lin, plan)
    runner.set_step(step)
    runner.capture = []
    lin.train()
    (lin(x) * torch.full((64, H), c)).sum().backward()
    runner.remove()
    return next(o["a"] for o in runner.capture if o["pass"] == "dgrad")


def test_stochastic_rounding_of_gradients_is_reproducible_and_unbiased(tmp_path):
    c = 1.0 + 1.0 / 3.0  # between two bf16 values: 1.328125 and 1.3359375 (spacing 2^-7)
    lo, hi = 1.328125, 1.3359375
    a = dgrad_operand(sr_plan(tmp_path), c)
    assert set(np.unique(a)) == {np.float32(lo), np.float32(hi)}
    assert np.array_equal(a, dgrad_operand(sr_plan(tmp_path), c))  # same seed and step: same draws
    assert not np.array_equal(a, dgrad_operand(sr_plan(tmp_path), c, step=1))  # next step: new draws
    assert not np.array_equal(a, dgrad_operand(sr_plan(tmp_path, seed=8), c))  # another seed: new draws
    draws = np.concatenate([dgrad_operand(sr_plan(tmp_path), c, step=s).ravel() for s in range(4)]).astype(np.float64)
    p = (np.float32(c) - lo) / (hi - lo)  # P(round up) of unbiased stochastic rounding
    sigma = (hi - lo) * np.sqrt(p * (1 - p) / draws.size)
    assert abs(draws.mean() - np.float32(c)) < 5 * sigma  # 5 sigma over 24 576 draws


def sgd_reference(w0, grads_seq, lr, momentum, fmt):
    """SGD with momentum as lpemu train defines it with optimizer_state, weight_update and
    master_weights in `fmt`: b ← μ·b + g (b = g at first), stored and used rounded to `fmt`;
    w ← round(w + round(−lr·b))."""
    rq = lambda x: torch.from_numpy(lpemu.quantize(fmt, x.numpy()))
    w, buf = w0.clone(), None
    for g in grads_seq:
        buf = rq(g.clone() if buf is None else momentum * buf + g)
        w = rq(w + rq(buf * -lr))
    return w


def adamw_reference(w0, grads_seq, lr, betas, eps, wd, fmt):
    """AdamW (bias correction, decoupled weight decay) with both moments stored and used rounded
    to `fmt`, the update −lr/(1−β1ᵗ)·m/(√v/√(1−β2ᵗ)+ε) rounded to `fmt`, and the weights too."""
    rq = lambda x: torch.from_numpy(lpemu.quantize(fmt, x.numpy()))
    w, m, v = w0.clone(), torch.zeros_like(w0), torch.zeros_like(w0)
    for t, g in enumerate(grads_seq, 1):
        m = rq(betas[0] * m + (1 - betas[0]) * g)
        v = rq(betas[1] * v + (1 - betas[1]) * g * g)
        update = (m / (v.sqrt() / np.sqrt(1 - betas[1] ** t) + eps)) * (-lr / (1 - betas[0] ** t))
        w = rq(w * (1 - lr * wd) + rq(update))
    return w


def train_steps(model, opt, steps=3):
    for s in range(steps):
        opt.zero_grad()
        loss_of(model, batch(seed=10 + s)).backward()
        opt.step()


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_plan_optimizer_under_fp32_is_torchs_optimizer(kind):
    ref = Net()
    model = copy.deepcopy(ref)

    def make(m):
        if kind == "sgd":
            return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        return torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)

    runner = lt.apply_plan(model, "fp32")
    model.train()
    train_steps(model, lt.PlanOptimizer(make(model), "fp32", model, session=runner))
    runner.remove()
    train_steps(ref, make(ref))
    for (n, p), (_, r) in zip(model.named_parameters(), ref.named_parameters()):
        assert torch.equal(p, r), n


@pytest.mark.parametrize("state", ["bf16", "mxfp8_e4m3"])
def test_plan_optimizer_states_lie_in_their_formats(tmp_path, state):
    plan = plan_file(tmp_path, f'master_weights = "bf16"\noptimizer_state = "{state}"\nweight_update = "bf16"')
    model = Net()
    runner = lt.apply_plan(model, plan)
    model.train()
    opt = lt.PlanOptimizer(torch.optim.AdamW(model.parameters(), lr=1e-2), plan, model, session=runner)
    train_steps(model, opt, 2)
    runner.remove()
    assert runner.step == 2
    for n, p in model.named_parameters():
        assert np.array_equal(p.detach().numpy(), lpemu.quantize("bf16", p.detach().numpy())), n
        st = opt.state[p]
        for key in ("exp_avg", "exp_avg_sq"):
            v = st[key].numpy()
            assert np.array_equal(v, q(state, v.reshape(-1, v.shape[-1] if v.ndim else 1), 1).reshape(v.shape)), \
                (n, key)
        assert np.count_nonzero(st["exp_avg"].numpy()) > st["exp_avg"].numel() // 2


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_plan_optimizer_matches_a_reference(tmp_path, kind):
    plan = plan_file(tmp_path, 'master_weights = "bf16"\noptimizer_state = "bf16"\nweight_update = "bf16"')
    torch.manual_seed(9)
    lin = torch.nn.Linear(D, H, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(lpemu.quantize("bf16", lin.weight.numpy())))
    w0 = lin.weight.detach().clone()
    if kind == "sgd":
        opt = torch.optim.SGD(lin.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.AdamW(lin.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    opt = lt.PlanOptimizer(opt, plan, lin)
    seq = [torch.randn(H, D) for _ in range(3)]
    for g in seq:
        lin.weight.grad = g.clone()
        opt.step()
    if kind == "sgd":
        want = sgd_reference(w0, seq, 0.05, 0.9, "bf16")
    else:
        want = adamw_reference(w0, seq, 0.01, (0.9, 0.999), 1e-8, 0.1, "bf16")
    np.testing.assert_array_equal(lin.weight.detach().numpy(), want.numpy())


def test_plan_optimizer_refuses_state_formats_for_other_optimizers(tmp_path):
    lin = torch.nn.Linear(D, H, bias=False)
    lin.weight.grad = torch.randn(H, D)
    plan = plan_file(tmp_path, 'optimizer_state = "bf16"')
    opt = lt.PlanOptimizer(torch.optim.Adagrad(lin.parameters()), plan, lin)
    with pytest.raises(lpemu.Error, match="optimizer_state or weight_update, which need torch.optim.SGD"):
        opt.step()
    ok = lt.PlanOptimizer(torch.optim.Adagrad(lin.parameters()), plan_file(tmp_path, 'master_weights = "bf16"', "m"),
                          lin)
    ok.step()  # master_weights alone works with any optimizer
    assert np.array_equal(lin.weight.detach().numpy(), lpemu.quantize("bf16", lin.weight.detach().numpy()))


def _ddp_worker(rank, world, plan, init_file, out_dir):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    model = Net()
    runner = lt.apply_plan(model, plan)
    runner.capture = []
    model.train()
    ddp = DDP(model)
    tokens = batch()
    half = tokens.shape[0] // world
    loss_of(ddp, tokens[rank * half:(rank + 1) * half]).backward()
    runner.remove()
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"),
             **{n: p.grad.numpy() for n, p in model.named_parameters()},
             **{f"op/{c['name']}/{c['pass']}/{ab}": c[ab] for c in runner.capture for ab in "ab"})
    dist.destroy_process_group()


def single_process(plan):
    torch.set_num_threads(1)
    model = Net()
    runner = lt.apply_plan(model, plan)
    runner.capture = []
    model.train()
    loss_of(model, batch()).backward()
    runner.remove()
    return grads(model), {f"{c['name']}/{c['pass']}/{ab}": c[ab] for c in runner.capture for ab in "ab"}


def run_ddp(tmp_path, plan):
    import torch.multiprocessing as mp

    out = tmp_path / "ddp"
    out.mkdir()
    mp.spawn(_ddp_worker, args=(2, plan, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(2)]


@pytest.mark.parametrize("quantised", [False, True])
def test_ddp_over_gloo_gives_the_gradients_of_one_process(tmp_path, quantised):
    """Two processes with half the batch each. Every GEMM operand equals the single process's: the
    weights, and the activation and gradient halves (each rank's dY is exactly twice the whole
    batch's, the mean being over half the tokens: a power of two that block scales absorb). The
    gradients agree to rounding: the all-reduce averages two partial sums where one process makes
    one (measured: relative 4e-7), so they are not bit-identical."""
    plan = "fp32"
    if quantised:
        plan = plan_file(tmp_path, 'weights = "mxfp8_e4m3"\nlinear_input = "mxfp8_e4m3"\ngrad_output = "mxfp8_e5m2"')
    ranks = run_ddp(tmp_path, plan)
    g, ops = single_process(plan)
    for n, want in g.items():
        for r in ranks:
            np.testing.assert_allclose(r[n], want.numpy(), rtol=1e-5, atol=1e-6 * np.abs(want.numpy()).max())
        assert np.array_equal(ranks[0][n], ranks[1][n])  # all-reduced: every rank holds the same gradient
    assert len(ops) == 2 * 3 * 11  # A and B of 3 GEMMs of 11 linear maps
    for key, want in ops.items():
        _, pas, ab = key.split("/")
        r0, r1 = ranks[0]["op/" + key], ranks[1]["op/" + key]
        if ab == "b" and pas != "wgrad":  # the weight
            assert np.array_equal(r0, want) and np.array_equal(r1, want), key
            continue
        whole = np.concatenate([r0, r1], axis=1 if pas == "wgrad" else 0)  # wgrad: tokens are columns
        if pas != "forward" and ab == "a":
            whole = whole / 2
        assert np.array_equal(whole, want), key


def test_multihead_attention_trains_under_a_plan():
    """nn.MultiheadAttention's projections (slices of in_proj_weight) get their gradients through
    lpemu.torch: under fp32 equal to PyTorch's own MultiheadAttention to rounding (lpemu.torch
    computes attention itself), and the attention matmuls' quantisers are straight-through."""
    torch.manual_seed(6)
    ref = torch.nn.MultiheadAttention(D, 4, batch_first=True)
    x = torch.randn(2, 16, D)
    want = ref(x, x, x, need_weights=False)[0]
    want.square().sum().backward()
    for matmuls in (False, True):
        mha = copy.deepcopy(ref)
        mha.zero_grad()
        runner = lt.apply_plan(mha, "fp32", attention_matmuls=matmuls)
        mha.train()
        got = mha(x, x, x, need_weights=False)[0]
        got.square().sum().backward()
        runner.remove()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
        for (n, p), (_, r) in zip(mha.named_parameters(), ref.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), rtol=1e-4, atol=1e-5 * r.grad.abs().max().item(),
                                       err_msg=n)


def test_a_shared_tile_weight_on_a_datapath_dgrad_is_refused(tmp_path):
    plan = plan_file(tmp_path, 'weights = "fp8_e4m3_tile128"\ngrad_output = "fp8_e4m3"\ndgrad_gemm = "h100_e4m3_fp32"')
    lin = torch.nn.Linear(D, H, bias=False)
    x = torch.randn(8, D, requires_grad=True)
    runner = lt.apply_plan(lin, plan)
    lin.train()
    y = lin(x).sum()
    with pytest.raises(lpemu.Error, match="2-D tile weight format shared .* datapath 'h100_e4m3_fp32'"):
        y.backward()
    runner.remove()


class LlamaModules(torch.nn.Module):
    """stories260K as nn.Linear modules (named as lpemu.torch reads roles: layers.i.attention.wq,
    ..., layers.i.feed_forward.w1..w3, and the head `output` tied to the embedding), built from
    model.h5 independently of the C++ engine."""

    def __init__(self, path):
        super().__init__()
        import h5py

        def lin(a):
            m = torch.nn.Linear(a.shape[1], a.shape[0], bias=False)
            m.weight = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(a[...], dtype=np.float32)))
            return m

        with h5py.File(path, "r") as f:
            self.cfg = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
            self.tok_embeddings = torch.nn.Parameter(torch.from_numpy(f["tok_embeddings"][...].astype(np.float32)))
            self.layers = torch.nn.ModuleList()
            for i in range(self.cfg["n_layers"]):
                g = f[f"layers/{i}"]
                blk = torch.nn.Module()
                blk.attention_norm = torch.nn.Parameter(torch.from_numpy(g["attention_norm"][...]))
                blk.ffn_norm = torch.nn.Parameter(torch.from_numpy(g["ffn_norm"][...]))
                blk.attention = torch.nn.Module()
                for n in ("wq", "wk", "wv", "wo"):
                    setattr(blk.attention, n, lin(g["attention"][n]))
                blk.feed_forward = torch.nn.Module()
                for n in ("w1", "w2", "w3"):
                    setattr(blk.feed_forward, n, lin(g["feed_forward"][n]))
                self.layers.append(blk)
            self.norm = torch.nn.Parameter(torch.from_numpy(f["norm"][...]))
        self.output = torch.nn.Linear(self.tok_embeddings.shape[1], self.tok_embeddings.shape[0], bias=False)
        self.output.weight = self.tok_embeddings  # tied

    def rms(self, x, w):
        return w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.cfg["norm_eps"]))

    def forward(self, tokens):
        from test_train import rope

        c = self.cfg
        b, t = tokens.shape
        h, kvh, d = c["n_heads"], c["n_kv_heads"], c["head_dim"]
        angle = np.arange(t, dtype=np.float64)[:, None] * np.power(c["rope_theta"], -2.0 * np.arange(d // 2) / d)
        cos = torch.from_numpy(np.cos(angle).astype(np.float32))
        sin = torch.from_numpy(np.sin(angle).astype(np.float32))
        x = self.tok_embeddings[tokens]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        for blk in self.layers:
            a = blk.attention
            xn = self.rms(x, blk.attention_norm)
            q = rope(a.wq(xn).view(b, t, h, d), cos, sin)
            k = rope(a.wk(xn).view(b, t, kvh, d), cos, sin).repeat_interleave(h // kvh, dim=2)
            v = a.wv(xn).view(b, t, kvh, d).repeat_interleave(h // kvh, dim=2)
            s = torch.einsum("bthd,bshd->bhts", q, k) / np.sqrt(d)
            p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
            x = x + a.wo(torch.einsum("bhts,bshd->bthd", p, v).reshape(b, t, h * d))
            ff = blk.feed_forward
            xn = self.rms(x, blk.ffn_norm)
            x = x + ff.w2(F.silu(ff.w1(xn)) * ff.w3(xn))
        return self.output(self.rms(x, self.norm))


MX_TRAIN = 'weights = "mxfp8_e4m3"\nlinear_input = "mxfp8_e4m3"\ngrad_output = "mxfp8_e5m2"'


OPT_FORMATS = 'master_weights = "bf16"\noptimizer_state = "bf16"\nweight_update = "bf16"'


@pytest.mark.parametrize("quantised", [False, True, "optimizer"])
def test_one_step_under_lpemu_torch_equals_lpemu_train(tmp_path, quantised):
    """One SGD step of stories260K under lpemu.torch (PyTorch autograd, lpemu's quantisers,
    PlanOptimizer) and `lpemu train` (the C++ backward pass and optimizer) on the same weights,
    batch and plan give the same weights: fp32, MXFP8 operands, and MXFP8 operands with bf16 master
    weights, momentum and update (measured: every weight bit-identical in that last case)."""
    from conftest import run_cli, SOURCE
    from test_train import lpemu_weights

    model_path = os.path.join(SOURCE, "data", "models", "stories260K", "model.h5")
    b, t, lr = 2, 16, 0.05
    tokens = np.random.default_rng(3).integers(0, 512, size=b * (t + 1)).astype(np.int32)
    np.save(tmp_path / "t.npy", tokens)
    body = {False: "", True: MX_TRAIN, "optimizer": MX_TRAIN + "\n" + OPT_FORMATS}[quantised]
    plan = plan_file(tmp_path, body, "p")
    run_cli("train", "--model", model_path, "--plan", plan, "--tokens", tmp_path / "t.npy", "--steps", 1,
            "--batch", b, "--seq", t, "--optimizer", "sgd", "--lr", lr, "--schedule", "constant",
            "--out", tmp_path / "run")

    model = LlamaModules(model_path)
    runner = lt.apply_plan(model, plan)
    model.train()
    opt = lt.PlanOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9), plan, model, session=runner)
    batch_t = torch.from_numpy(tokens.reshape(b, t + 1).astype(np.int64))  # windows 0 and 1 (docs/training.md)
    logits = model(batch_t[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch_t[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    runner.remove()

    log = np.genfromtxt(tmp_path / "run" / "log.csv", delimiter=",", names=True)
    np.testing.assert_allclose(float(log["loss"]), loss.item(), rtol=1e-5)
    got = lpemu_weights(tmp_path / "run" / "model.h5")
    start = lpemu_weights(model_path)
    ours = {"tok_embeddings": model.tok_embeddings, "norm": model.norm}
    for i, blk in enumerate(model.layers):
        ours[f"layers_{i}_attention_norm"] = blk.attention_norm
        ours[f"layers_{i}_ffn_norm"] = blk.ffn_norm
        for n in ("wq", "wk", "wv", "wo"):
            ours[f"layers_{i}_{n}"] = getattr(blk.attention, n).weight
        for n in ("w1", "w2", "w3"):
            ours[f"layers_{i}_{n}"] = getattr(blk.feed_forward, n).weight
    assert ours.keys() == got.keys()
    for name, p in ours.items():
        want = p.detach().numpy()
        step = np.linalg.norm((want - start[name]).astype(np.float64))
        assert step > 0, name
        if quantised == "optimizer":
            # bf16 weights: equal but where the two gradients' float rounding moves a weight across
            # a bf16 rounding boundary (then one bf16 step apart)
            assert np.array_equal(got[name], lpemu.quantize("bf16", got[name])), name
            differ = got[name] != want
            assert differ.mean() <= 0.01, f"{name}: {differ.mean():.2%} of the weights differ"
            bf16_step = np.abs(lpemu.quantize("bf16", want * np.float32(1 + 2 ** -7)) - want)
            assert np.all(np.abs(got[name] - want)[differ] <= 1.01 * bf16_step[differ] + 1e-30), name
            continue
        err = np.linalg.norm((got[name] - want).astype(np.float64))
        ulp = np.linalg.norm(np.spacing(want).astype(np.float64))  # one float32 ulp of every weight
        # the weight step (lr · gradient) agrees to float rounding of the independent non-linear
        # parts (norms, RoPE, softmax), which quantisation can move across a rounding boundary
        assert err <= (1e-4 if quantised else 1e-5) * step + ulp, f"{name}: |lpemu - torch| / |step| = {err / step}"
