# The README's "Python" example, run as the ctest python/readme_example (from the source tree).
import numpy as np
import torch

import lpemu
import lpemu.torch

# Formats: the same bits as `lpemu encode` / `lpemu quantize`.
x = np.array([0.3, 1000.0, -2.5e-3], dtype=np.float32)
codes = lpemu.encode("fp8_e4m3", x, overflow="saturate")           # uint8 codes
print([hex(c) for c in codes], lpemu.decode("fp8_e4m3", codes))  # 0x2a 0x7e 0x81: 0.3125 448 -0.001953125
w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
mx = lpemu.block_encode("mxfp4", w)                                # codes [4, 64], one E8M0 scale per 32
print(mx["scales"].size, np.abs(lpemu.quantize("mxfp4", w) - w).max())  # 8 scales

# Datapaths: D = A·B on fp8 codes, bit-exact as an H100 tensor core with fp32 accumulation.
a = lpemu.encode("fp8_e4m3", w[:2, :32])
b = lpemu.encode("fp8_e4m3", w[2:, :32].T)
d = lpemu.gemm("h100_e4m3_fp32", a, b)                              # fp32 codes [2, 2]
print(lpemu.decode("fp32", d.astype(np.uint32)))

# Models: score a text under a plan, as `lpemu eval`.
r = lpemu.evaluate("stories260K", "fp8_e4m3", text="Once upon a time, there was a little cat.")
print(f"NLL {r['mean_nll']:.4f} (fp32 {r['ref_mean_nll']:.4f}), KL {r['mean_kl']:.4f}")

# Cost: price a plan on a target.
c = lpemu.cost("nvfp4", "h100_sxm", "llama3_8b", phase="decode", batch=8, context=4096)
d = c["phases"][0]
print(f"{d['tokens_per_s']:.0f} tokens/s, {d['joules_per_token']:.3g} J/token")

# PyTorch: any nn.Module's linear maps (nn.Linear, nn.MultiheadAttention) under a plan.
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(64, 4, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))

    def forward(self, x):
        x = x + self.attn(x, x, x, need_weights=False)[0]
        return x + self.mlp(x)


model = Block().eval()
session = lpemu.torch.apply_plan(model, "fp8_e4m3")   # weights and inputs in fp8_e4m3
with torch.no_grad():
    y = model(torch.from_numpy(w)[None])
session.remove()                                       # plain PyTorch again
print([(m.name, m.role) for m in session.maps])        # (attn.q, attention.q) ... (mlp.2, mlp)
lpemu.torch.record(model, [torch.from_numpy(w)[None]], "/tmp/lpemu_readme_acts.h5")  # for `lpemu replay`
