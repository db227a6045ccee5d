"""lpemu.torch: PyTorch models under an lpemu precision plan, and a recorder of their linear maps.

    import lpemu.torch
    runner = lpemu.torch.apply_plan(model, "experiments/plans/fp8_e4m3.toml")
    logits = model(tokens)          # every linear map: inputs and weights quantised, GEMM on lpemu
    runner.remove()                 # the model is back to plain PyTorch

Every ``nn.Linear`` and the projections inside ``nn.MultiheadAttention`` (q, k, v from
``in_proj_weight`` or ``q/k/v_proj_weight``, and ``out_proj``) are found from the module tree and
labelled with a role: ``attention.q|k|v|qkv|out``, ``mlp.gate|up|down`` or ``mlp``, ``head``, or
``other`` (reported by its module name, never guessed). Under a plan, each map quantises its input
(role ``linear_input``; ``lm_head_input`` for the head) and its weight (``weights``; ``lm_head``)
with lpemu's bit-exact kernels and computes ``x·Wᵀ`` on the plan's GEMM strategy (lpemu's
deterministic float GEMM, or a bit-exact datapath); biases are added in PyTorch. With
``attention_matmuls=True``, ``nn.MultiheadAttention`` also quantises its scores and probabilities
per head (roles ``scores`` and ``probs``).

In training mode (``model.train()`` with gradients enabled) each linear map is an autograd function
whose three GEMMs (forward ``X·Wᵀ``, data gradient ``dY·W``, weight gradient ``dYᵀ·X``) each see
their operands quantised along their own contraction axis in the plan's formats (``grad_output``
for dY; ``grad_activation`` and ``grad_weights`` quantise the results), run on the plan's
``gemm``, ``dgrad_gemm`` and ``wgrad_gemm`` datapaths; a plain float GEMM runs in PyTorch.
``PlanOptimizer`` applies ``master_weights``, ``optimizer_state`` and ``weight_update`` around a
torch optimizer's step.

This module imports torch; ``import lpemu`` alone does not.
"""

import math
import re

import h5py
import numpy as np
import torch
import torch.nn.functional as F

import lpemu

SCHEMA = "lpemu-linear-activations"
SCHEMA_VERSION = 1

_ATTN_PARENT = re.compile(r"attention|attn|selfattn", re.I)
_MLP_PARENT = re.compile(r"mlp|ffn|feedforward|feed_forward", re.I)
# Attribute names of linear maps inside an attention or MLP module, by role.
_ATTN_NAMES = {
    "q": {"q", "wq", "q_proj", "query", "to_q"},
    "k": {"k", "wk", "k_proj", "key", "to_k"},
    "v": {"v", "wv", "v_proj", "value", "to_v"},
    "qkv": {"qkv", "wqkv", "qkv_proj", "c_attn", "in_proj", "to_qkv"},
    "out": {"o", "wo", "o_proj", "out_proj", "c_proj", "dense", "proj", "to_out"},
}
_MLP_NAMES = {
    "gate": {"w1", "gate_proj", "gate"},
    "up": {"w3", "up_proj", "fc1", "c_fc", "fc_in", "up"},
    "down": {"w2", "down_proj", "fc2", "c_proj", "fc_out", "down"},
}
# PyTorch's own layers whose linear maps have generic names.
_KNOWN_CLASSES = {
    "TransformerEncoderLayer": {"linear1": "mlp.up", "linear2": "mlp.down"},
    "TransformerDecoderLayer": {"linear1": "mlp.up", "linear2": "mlp.down"},
}
_HEAD_NAMES = {"lm_head", "output", "head", "classifier", "embed_out"}


class LinearMap:
    """One linear map y = x·Wᵀ + b of a model: where it is, what it is and how to get W."""

    def __init__(self, name, module, role, layer, weight, bias=None, in_features=None, mha=None):
        self.mha = mha              # the nn.MultiheadAttention that computes this map, or None
        self.in_mha = mha is not None
        self.name = name            # dotted module path (".q"/".k"/".v" appended inside nn.MultiheadAttention)
        self.module = module        # the nn.Module that owns the weight
        self.role = role            # attention.q|k|v|qkv|out, mlp.gate|up|down, mlp, attention, head, other
        self.layer = layer          # block index (first integer in the path), -1 outside blocks
        self._weight = weight       # callable returning the [out, in] weight tensor
        self._bias = bias           # callable returning the bias or None
        self.in_features = in_features

    @property
    def kind(self):
        """The plan's layer kind: attention, mlp, head, or other."""
        return self.role.split(".")[0] if self.role != "other" else "other"

    def weight(self):
        """The current [out, in] weight."""
        return self._weight()

    def bias(self):
        """The bias, or None."""
        return self._bias() if self._bias is not None else None

    def __repr__(self):
        return f"LinearMap({self.name!r}, role={self.role!r}, layer={self.layer})"


def _layer_of(name):
    for part in name.split("."):
        if part.isdigit():
            return int(part)
    return -1


def _role_in(names_by_role, attr):
    a = attr.lower()
    for role, names in names_by_role.items():
        if a in names:
            return role
    return None


def _role_of(name, module, parents):
    """Role of nn.Linear `name` from its attribute name and its ancestors' class and attribute names."""
    attr = name.split(".")[-1]
    for pname, pmod in reversed(parents):  # nearest ancestor first; the model itself says nothing
        if not pname:
            continue
        known = _KNOWN_CLASSES.get(type(pmod).__name__, {})
        if attr in known:
            return known[attr]
        pattr = pname.split(".")[-1]
        if isinstance(pmod, torch.nn.MultiheadAttention) or _ATTN_PARENT.search(type(pmod).__name__) \
                or _ATTN_PARENT.search(pattr):
            r = _role_in(_ATTN_NAMES, attr)
            return "attention." + r if r else "attention"
        if _MLP_PARENT.search(type(pmod).__name__) or _MLP_PARENT.search(pattr):
            r = _role_in(_MLP_NAMES, attr)
            return "mlp." + r if r else "mlp"
    a = attr.lower()
    if _ATTN_PARENT.search(a):
        return "attention"
    if _MLP_PARENT.search(a):
        return "mlp"
    if a in _HEAD_NAMES and _layer_of(name) < 0:
        return "head"
    return "other"


def linear_maps(model):
    """Every linear map of `model`, in module order, with its role from the module tree."""
    maps = []
    stack = []  # (name, module) ancestors of the current module
    for name, mod in model.named_modules():
        while stack and not (name.startswith(stack[-1][0] + ".") or stack[-1][0] == ""):
            stack.pop()
        if isinstance(mod, torch.nn.MultiheadAttention):
            maps.extend(_mha_maps(name, mod))
        elif isinstance(mod, torch.nn.Linear):
            parent = stack[-1][1] if stack else None
            if isinstance(parent, torch.nn.MultiheadAttention):
                pass  # out_proj: listed by _mha_maps
            else:
                maps.append(LinearMap(name, mod, _role_of(name, mod, stack), _layer_of(name),
                                      lambda m=mod: m.weight, lambda m=mod: m.bias, mod.in_features))
        stack.append((name, mod))
    return maps


def _mha_maps(name, mha):
    """q, k, v and out projections of an nn.MultiheadAttention (which calls none of them as modules)."""
    e = mha.embed_dim
    layer = _layer_of(name)
    maps = []
    for i, r in enumerate("qkv"):
        if mha._qkv_same_embed_dim:
            w = (lambda i=i: mha.in_proj_weight[i * e:(i + 1) * e])
            fin = e
        else:
            w = (lambda r=r: getattr(mha, f"{r}_proj_weight"))
            fin = getattr(mha, f"{r}_proj_weight").shape[1]
        b = None if mha.in_proj_bias is None else (lambda i=i: mha.in_proj_bias[i * e:(i + 1) * e])
        maps.append(LinearMap(f"{name}.{r}" if name else r, mha, "attention." + r, layer, w, b, fin, mha))
    out = mha.out_proj
    maps.append(LinearMap(f"{name}.out_proj" if name else "out_proj", out, "attention.out", layer,
                          lambda: out.weight, lambda: out.bias, out.in_features, mha))
    return maps


class _Linear:
    """Computes one linear map: plain PyTorch, through a recorder, or under a plan."""

    def __init__(self, session, lmap):
        self.session = session
        self.map = lmap

    def __call__(self, x):
        return self.session.linear(self.map, x)


class Session:
    """Hooks installed on a model: each linear map goes through `linear()`; remove() undoes them."""

    def __init__(self, model, attention_matmuls=False):
        self.model = model
        self.maps = linear_maps(model)
        self.attention_matmuls = attention_matmuls
        self.n_layers = max([m.layer for m in self.maps] + [0]) + 1
        self._undo = []
        mha = {}
        for m in self.maps:
            if m.in_mha:
                mha.setdefault(id(m.mha), (m.mha, []))[1].append(m)
            else:
                self._patch(m.module, lambda x, f=_Linear(self, m): f(x))
        for mod, ms in mha.values():
            self._patch(mod, lambda *a, mod=mod, ms=ms, **k: self._mha(mod, ms, *a, **k))

    def _patch(self, mod, fn):
        mod.forward = fn
        self._undo.append(mod)

    def remove(self):
        """Restores every module's own forward."""
        for mod in self._undo:
            if "forward" in mod.__dict__:
                del mod.forward
        self._undo = []

    def linear(self, lmap, x):
        """y = x·Wᵀ + b in plain PyTorch (subclasses quantise or record)."""
        return F.linear(x, lmap.weight(), lmap.bias())

    def matmul_hook(self, tensor, role, lmap, head):
        """Called on attention scores and probabilities when attention_matmuls is on."""
        return tensor

    def _mha(self, mha, maps, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
             average_attn_weights=True, is_causal=False):
        """nn.MultiheadAttention.forward with each projection through linear() (no add_bias_kv,
        add_zero_attn or dropout in training)."""
        if mha.bias_k is not None or mha.add_zero_attn or (mha.training and mha.dropout > 0):
            raise lpemu.Error(f"lpemu.torch: nn.MultiheadAttention options add_bias_kv, add_zero_attn and training "
                              f"dropout are not supported ({maps[0].name})")
        q_map, k_map, v_map, o_map = maps
        batched = query.dim() == 3
        if not batched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
        elif not mha.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        b, tq, e = query.shape  # batch first from here on: projections see rows in (batch, time) order
        ts = key.shape[1]
        h, d = mha.num_heads, mha.head_dim
        q = self.linear(q_map, query).reshape(b, tq, h, d).transpose(1, 2).reshape(b * h, tq, d)
        k = self.linear(k_map, key).reshape(b, ts, h, d).transpose(1, 2).reshape(b * h, ts, d)
        v = self.linear(v_map, value).reshape(b, ts, h, d).transpose(1, 2).reshape(b * h, ts, d)
        scores = torch.bmm(q, k.transpose(1, 2)) / (d ** 0.5)
        mask = attn_mask
        if is_causal and mask is None:
            mask = torch.ones(tq, ts, dtype=torch.bool, device=q.device).triu(1)
        if mask is not None:
            if mask.dtype == torch.bool:
                mask = torch.zeros_like(mask, dtype=q.dtype).masked_fill(mask, float("-inf"))
            scores = scores + (mask if mask.dim() == 3 else mask.unsqueeze(0))
        if key_padding_mask is not None:
            kpm = key_padding_mask
            if kpm.dtype == torch.bool:
                kpm = torch.zeros_like(kpm, dtype=q.dtype).masked_fill(kpm, float("-inf"))
            scores = scores + kpm.reshape(b, 1, 1, ts).expand(b, h, 1, ts).reshape(b * h, 1, ts)
        if self.attention_matmuls:
            scores = self._per_head(scores, "scores", q_map, b, h)
        probs = torch.softmax(scores, dim=-1)
        if self.attention_matmuls:
            probs = self._per_head(probs, "probs", q_map, b, h)
        att = torch.bmm(probs, v).reshape(b, h, tq, d).transpose(1, 2).reshape(b, tq, e)
        out = self.linear(o_map, att)
        if not batched:
            out = out.squeeze(0)
        elif not mha.batch_first:
            out = out.transpose(0, 1)
        weights = None
        if need_weights:
            weights = probs.reshape(b, h, tq, ts)
            weights = weights.mean(dim=1) if average_attn_weights else weights
            if not batched:
                weights = weights.squeeze(0)
        return out, weights

    def _per_head(self, t, role, lmap, b, h):
        parts = []
        for i in range(b * h):
            parts.append(self.matmul_hook(t[i], role, lmap, i % h))
        return torch.stack(parts)


class PlanSession(Session):
    """Linear maps (and optionally attention matmuls) quantised and computed under an lpemu plan."""

    def __init__(self, model, plan, context=None, attention_matmuls=False):
        self.context = context or lpemu.default_context()
        self.plan = plan if isinstance(plan, lpemu.Plan) else self.context.load_plan(plan)
        self._weights = {}
        self._tiles = None
        self.capture = None  # a list to record every training GEMM's operands, or None
        self.set_step(0)
        super().__init__(model, attention_matmuls)
        try:
            self._check_unknown()
        except Exception:
            self.remove()
            raise

    def _check_unknown(self):
        others = [m.name for m in self.maps if m.kind == "other"]
        if others:
            # Unknown maps take the body roles only where attention and MLP layers agree.
            for m in self.maps:
                if m.kind != "other":
                    continue
                for role in ("linear_input", "weights"):
                    a = self.plan.format(role, m.layer, "attention", self.n_layers)
                    b = self.plan.format(role, m.layer, "mlp", self.n_layers)
                    if a != b:
                        raise lpemu.Error(f"lpemu.torch: linear map '{m.name}' has no known role and plan "
                                          f"'{self.plan.name}' gives attention ({a}) and MLP ({b}) layers different "
                                          f"{role} formats there")
        self.unknown = others  # names of maps whose role is "other"

    def _kind(self, lmap):
        return "attention" if lmap.kind == "other" else lmap.kind

    def _weight(self, lmap):
        w = lmap.weight()
        key = (lmap.name, w.data_ptr(), w._version)
        if key not in self._weights:
            head = lmap.kind == "head"
            wn = w.detach().to(torch.float32).cpu().contiguous().numpy()
            self._weights[key] = self.plan.quantize(wn, "lm_head" if head else "weights", lmap.layer,
                                                    self._kind(lmap), lmap.name, self.n_layers)
        return self._weights[key]

    def linear(self, lmap, x):
        w = lmap.weight()
        if self.model.training and torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
            y = _PlanLinear.apply(x, w, self, lmap)
            b = lmap.bias()
            return y + b if b is not None else y
        head = lmap.kind == "head"
        shape = x.shape
        x2 = x.detach().to(torch.float32).cpu().reshape(-1, shape[-1]).contiguous().numpy()
        xq = self.plan.quantize(x2, "lm_head_input" if head else "linear_input", lmap.layer, self._kind(lmap),
                                lmap.name, self.n_layers)
        y = self.plan.linear(xq, self._weight(lmap), lmap.layer, self._kind(lmap), lmap.name, self.n_layers)
        out = torch.from_numpy(y).to(x.dtype).to(x.device).reshape(*shape[:-1], y.shape[1])
        b = lmap.bias()
        return out + b.detach() if b is not None else out

    def matmul_hook(self, tensor, role, lmap, head):
        t = tensor.detach().to(torch.float32).cpu().contiguous().numpy()
        q = self.plan.quantize(t, role, lmap.layer, "attention", role, self.n_layers, head=head)
        q = torch.from_numpy(q).to(tensor.dtype).to(tensor.device)
        if tensor.requires_grad:  # training: straight through (the gradient passes unchanged)
            return tensor + (q - tensor).detach()
        return q

    # Training ---------------------------------------------------------------------------------

    def set_step(self, step):
        """Sets the training step whose stochastic-rounding draws the quantisers make (0 at first);
        PlanOptimizer.step() advances it. The same seed and step give the same draws."""
        self.step = int(step)
        self._calls = {}

    def _tag(self, lmap, operand):
        """The stochastic-rounding stream name of one operand of one call of `lmap` at this step."""
        call = self._calls.get(lmap.name, 0)
        return f"{lmap.name}/{operand}@{self.step}.{call}"

    def _roles(self, lmap):
        head = lmap.kind == "head"
        return ("lm_head_input" if head else "linear_input"), ("lm_head" if head else "weights")

    def _quantize(self, t, role, lmap, tag):
        """t [rows, contraction] quantised as `role` of `lmap` along its rows (axis 1): a float32
        CPU tensor, or `t` itself when the plan leaves the role unquantised."""
        if self.plan.format(role, lmap.layer, self._kind(lmap), self.n_layers) is None:
            return t
        a = t.detach().to(torch.float32).cpu().contiguous().numpy()
        q = self.plan.quantize(a, role, lmap.layer, self._kind(lmap), tag, self.n_layers)
        return torch.from_numpy(q).to(t.device)

    def shares_weight(self, lmap):
        """True when the weight format of `lmap` is a 2-D tile block format: forward and data
        gradient then share one quantised weight (transposed), as in NVFP4 training recipes."""
        fmt = self.plan.format(self._roles(lmap)[1], lmap.layer, self._kind(lmap), self.n_layers)
        if fmt is None:
            return False
        if self._tiles is None:
            self._tiles = {f["name"] for f in self.context.formats() if str(f.get("granularity", "")).startswith("tile")}
        return fmt in self._tiles

    def _pass_roles(self, lmap, gemm_pass):
        role_x, role_w = self._roles(lmap)
        return {"forward": (role_x, role_w), "dgrad": ("grad_output", role_w),
                "wgrad": ("grad_output", role_x)}[gemm_pass]

    def _gemm(self, lmap, gemm_pass, a, a_tag, b, b_tag, b_quantised=None):
        """C = A·Bᵀ of one pass from high-precision A [M, contraction] and B [N, contraction], each
        quantised by its role in that pass along the contraction (`b_quantised`: B already
        quantised, a shared 2-D tile weight). A plain float GEMM runs in PyTorch on the quantised
        operands; a datapath GEMM on lpemu, the operands entering with their encodings."""
        role_a, role_b = self._pass_roles(lmap, gemm_pass)
        kind = self._kind(lmap)
        if self.plan.float_gemm(lmap.layer, kind, self.n_layers, gemm_pass):
            aq = self._quantize(a, role_a, lmap, a_tag)
            bq = b_quantised if b_quantised is not None else self._quantize(b, role_b, lmap, b_tag)
            c = aq.to(torch.float32).mm(bq.to(torch.float32).t())
        else:
            if b_quantised is not None:
                raise lpemu.Error(f"lpemu.torch: linear map '{lmap.name}': a 2-D tile weight format shared by the "
                                  f"forward and data-gradient GEMMs cannot run the data gradient on datapath "
                                  f"'{self.plan.gemm(lmap.layer, kind, self.n_layers, gemm_pass)}' (its encoding "
                                  f"is not kept); use a float dgrad_gemm or a 1-D block weight format")
            an = a.detach().to(torch.float32).cpu().contiguous().numpy()
            bn = b.detach().to(torch.float32).cpu().contiguous().numpy()
            cn, aqn, bqn = self.plan.linear_quantized(an, bn, lmap.layer, kind, lmap.name, self.n_layers,
                                                      gemm_pass, a_tag, b_tag)
            c, aq, bq = (torch.from_numpy(v).to(a.device) for v in (cn, aqn, bqn))
        if self.capture is not None:
            self.capture.append({"name": lmap.name, "pass": gemm_pass,
                                 "a": aq.detach().to(torch.float32).cpu().numpy().copy(),
                                 "b": bq.detach().to(torch.float32).cpu().numpy().copy()})
        return c, bq

    def _result(self, c, role, lmap, tag):
        return self._quantize(c, role, lmap, tag)


class _PlanLinear(torch.autograd.Function):
    """y = x·Wᵀ with the forward, data-gradient and weight-gradient GEMMs under the session's plan.

    Layouts are [rows, contraction] so block scales run along each GEMM's contraction axis:
    forward A = X [M, K], B = W [N, K]; dgrad A = dY [M, N], B = Wᵀ [K, N]; wgrad A = dYᵀ [N, M],
    B = Xᵀ [K, M]. Backward operands are re-quantised from the high-precision X and W (a 2-D tile
    weight is quantised once and shared by forward and dgrad). Quantisers are straight-through."""

    @staticmethod
    def forward(ctx, x, w, session, lmap):
        s = session
        x2 = x.reshape(-1, x.shape[-1])
        y, wq = s._gemm(lmap, "forward", x2, s._tag(lmap, "input"), w, s._tag(lmap, "weights"))
        shared = s.shares_weight(lmap)
        ctx.session, ctx.lmap, ctx.shape, ctx.dtype = s, lmap, x.shape, x.dtype
        ctx.tags = {o: s._tag(lmap, o) for o in ("grad_output", "weights_t", "grad_output_t", "input_t",
                                                   "grad_activation", "grad_weights")}
        s._calls[lmap.name] = s._calls.get(lmap.name, 0) + 1
        ctx.save_for_backward(x2, w, wq if shared else None)
        ctx.shared = shared
        return y.to(x.dtype).to(x.device).reshape(*x.shape[:-1], y.shape[1])

    @staticmethod
    def backward(ctx, dy):
        s, lmap, t = ctx.session, ctx.lmap, ctx.tags
        x2, w, wq = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1])
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx, _ = s._gemm(lmap, "dgrad", dy2, t["grad_output"], w.t(), t["weights_t"],
                            wq.t().contiguous() if ctx.shared else None)
            dx = s._result(dx, "grad_activation", lmap, t["grad_activation"])
            dx = dx.to(ctx.dtype).to(dy.device).reshape(ctx.shape)
        if ctx.needs_input_grad[1]:
            dw, _ = s._gemm(lmap, "wgrad", dy2.t(), t["grad_output_t"], x2.t(), t["input_t"])
            dw = s._result(dw, "grad_weights", lmap, t["grad_weights"])
            dw = dw.to(w.dtype).to(w.device)
        return dx, dw, None, None


def apply_plan(model, plan, context=None, attention_matmuls=False):
    """Runs `model`'s linear maps under `plan` (a name, path or lpemu.Plan) until .remove()."""
    return PlanSession(model, plan, context, attention_matmuls)


class PlanOptimizer:
    """A torch optimizer whose step applies the plan's training formats as ``lpemu train`` does:
    the state (SGD's ``momentum_buffer``, AdamW's ``exp_avg`` and ``exp_avg_sq``) is rounded to
    ``optimizer_state`` as soon as the step has updated it and the update is computed from the
    rounded state; the update (SGD: −lr·b; AdamW: −lr/(1−β1ᵗ)·m/(√v/√(1−β2ᵗ)+ε), after decoupled
    weight decay) is rounded to ``weight_update`` and added; the weights (the master copy) are
    rounded to ``master_weights``. Roles the plan leaves at ``"none"`` are untouched, so under an
    fp32 plan the step is the optimizer's own. ``optimizer_state`` and ``weight_update`` need
    torch.optim.SGD (dampening 0, not Nesterov) or torch.optim.AdamW; ``master_weights`` works with
    any optimizer. Each parameter resolves the roles at its layer and kind (from `model`'s linear
    maps; other parameters take their block's attention formats, or the [roles] ones outside
    blocks). Tensors are quantised as [rows, last dimension], block formats along the last
    dimension. Stochastic rounding draws afresh each step, reproducibly for a seed. ``step()`` also
    advances `session` (an apply_plan result)."""

    def __init__(self, optimizer, plan, model, session=None, context=None):
        self.optimizer = optimizer
        self.context = context or (session.context if session is not None else lpemu.default_context())
        self.plan = plan if isinstance(plan, lpemu.Plan) else self.context.load_plan(plan)
        self.session = session
        self.steps = 0
        maps = linear_maps(model)
        self.n_layers = max([m.layer for m in maps] + [0]) + 1
        by_param = {}
        for m in maps:
            if not m.in_mha:
                by_param[id(m.module.weight)] = (m.layer, "attention" if m.kind == "other" else m.kind)
        self._where = {}  # id(param) -> (name, layer, kind)
        for name, p in model.named_parameters():
            layer, kind = by_param.get(id(p), (_layer_of(name), "attention"))
            self._where[id(p)] = (name, layer, kind)

    @property
    def param_groups(self):
        """The wrapped optimizer's parameter groups (learning rates, ...)."""
        return self.optimizer.param_groups

    @property
    def state(self):
        """The wrapped optimizer's state."""
        return self.optimizer.state

    def zero_grad(self, set_to_none=True):
        """As torch.optim.Optimizer.zero_grad."""
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def quantize(self, t, role, p, what):
        """A copy of tensor `t` (shaped like parameter `p` or its state) quantised as `role` at
        `p`'s layer and kind, or `t` itself when the plan leaves the role unquantised."""
        name, layer, kind = self._where.get(id(p), ("param", -1, "attention"))
        if self.plan.format(role, layer, kind, self.n_layers) is None:
            return t
        a = t.detach().to(torch.float32).cpu().reshape(-1, t.shape[-1] if t.dim() else 1).contiguous().numpy()
        q = self.plan.quantize(a, role, layer, kind, f"{name}/{what}@{self.steps}", self.n_layers)
        return torch.from_numpy(q).reshape(t.shape).to(t.dtype).to(t.device)

    @torch.no_grad()
    def step(self, closure=None):
        """The wrapped optimizer's step with the plan's optimizer_state, weight_update and
        master_weights formats; returns the closure's loss."""
        params = [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
        recompute = any(self._set("optimizer_state", p) or self._set("weight_update", p) for p in params)
        if recompute:
            self._check_supported()
        old = {id(p): p.detach().clone() for p in params}
        loss = self.optimizer.step(closure)
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in old:
                    continue
                if recompute:
                    p.copy_(self._update(group, p, old[id(p)]))
                p.copy_(self.quantize(p, "master_weights", p, "master_weights"))
        self.steps += 1
        if self.session is not None:
            self.session.set_step(self.steps)
        return loss

    def _check_supported(self):
        opt = self.optimizer
        ok = isinstance(opt, torch.optim.AdamW) or (
            isinstance(opt, torch.optim.SGD)
            and all(g.get("dampening", 0) == 0 and not g.get("nesterov", False) for g in opt.param_groups))
        if not ok:
            raise lpemu.Error(f"lpemu.torch.PlanOptimizer: plan '{self.plan.name}' sets optimizer_state or "
                              f"weight_update, which need torch.optim.SGD (dampening 0, not Nesterov) or "
                              f"torch.optim.AdamW, not {type(opt).__name__}")

    def _update(self, group, p, old):
        """The weight after the step from the stored state rounded to optimizer_state, the update
        rounded to weight_update (the formulas of torch.optim.SGD and torch.optim.AdamW)."""
        st = self.optimizer.state[p]
        lr = group["lr"]
        if isinstance(self.optimizer, torch.optim.AdamW):
            m, v = st["exp_avg"], st["exp_avg_sq"]
            m.copy_(self.quantize(m, "optimizer_state", p, "exp_avg"))
            v.copy_(self.quantize(v, "optimizer_state", p, "exp_avg_sq"))
            t = float(st["step"])
            beta1, beta2 = group["betas"]
            base = old * (1 - lr * group["weight_decay"])
            denom = (v.sqrt() / math.sqrt(1 - beta2 ** t)).add_(group["eps"])
            update = (m / denom) * (-lr / (1 - beta1 ** t))
        else:
            base = old
            buf = st.get("momentum_buffer")
            if buf is None:  # momentum 0: the update is the gradient (with weight decay folded in)
                g = p.grad if group["weight_decay"] == 0 else p.grad.add(old, alpha=group["weight_decay"])
                update = g * -lr
            else:
                buf.copy_(self.quantize(buf, "optimizer_state", p, "momentum_buffer"))
                update = buf * -lr
        return base + self.quantize(update, "weight_update", p, "weight_update")

    def _set(self, role, p):
        _, layer, kind = self._where.get(id(p), ("param", -1, "attention"))
        return self.plan.format(role, layer, kind, self.n_layers) is not None


class RecordSession(Session):
    """Captures the input of every linear map (flattened to [tokens, in_features], float32)."""

    def __init__(self, model):
        self.captured = {}
        super().__init__(model)

    def linear(self, lmap, x):
        self.captured.setdefault(lmap.name, []).append(
            x.detach().to(torch.float32).reshape(-1, x.shape[-1]).cpu().numpy().copy())
        return super().linear(lmap, x)


def record(model, batches, path, model_name="model", max_tokens=None):
    """Runs `model` on each input of `batches` (tensors or tuples) and writes the input and weight of
    every linear map to `path` (schema lpemu-linear-activations, data/README.md); returns the names."""
    s = RecordSession(model)
    if not s.maps:
        s.remove()
        raise ValueError("the model has no linear maps (nn.Linear, nn.MultiheadAttention) to record")
    model.eval()
    try:
        with torch.no_grad():
            for b in batches:
                model(*b) if isinstance(b, (tuple, list)) else model(b)
    finally:
        s.remove()
    with h5py.File(path, "w") as f:
        f.attrs["schema"] = SCHEMA
        f.attrs["schema_version"] = np.int32(SCHEMA_VERSION)
        f.attrs["model_name"] = model_name
        f.attrs["recorded_with"] = "torch " + torch.__version__
        for m in s.maps:
            if m.name not in s.captured:
                continue
            x = np.concatenate(s.captured[m.name], axis=0)
            if max_tokens is not None:
                x = x[:max_tokens]
            g = f.create_group("linear/" + m.name)
            g.attrs["module"] = m.name
            g.attrs["layer"] = np.int32(m.layer)
            g.attrs["kind"] = m.kind
            g.attrs["role"] = m.role
            g.create_dataset("input", data=np.ascontiguousarray(x, dtype=np.float32))
            g.create_dataset("weight", data=m.weight().detach().to(torch.float32).cpu().numpy())
            if m.bias() is not None:
                g.create_dataset("bias", data=m.bias().detach().to(torch.float32).cpu().numpy())
    return sorted(s.captured)
