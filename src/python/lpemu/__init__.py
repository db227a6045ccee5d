"""lpemu: bit-exact emulation of low-precision number formats, datapaths and transformer models.

The functions here run the same C++ library as the ``lpemu`` command (same bits). NumPy arrays go
in and come out; float32 or float64 arrays in C order are read without a copy. Library errors
raise ``lpemu.Error`` (or its subclasses SpecError, IoError, ShapeError, UnknownNameError) with
the library's message (file, field, value and what was expected).

    import numpy as np, lpemu
    x = np.array([0.3, 1000.0, -2.5e-3], dtype=np.float32)
    lpemu.encode("fp8_e4m3", x, overflow="saturate")      # uint8 codes (1000 saturates to 448)
    lpemu.quantize("mxfp4", np.ones((4, 64), np.float32))  # block-scaled fake quantisation

User formats: ``lpemu.Context(formats_dirs=["my_formats"])`` (TOML files as for ``--formats-dir``;
``LPEMU_FORMATS_PATH`` is honoured too). PyTorch models: ``lpemu.torch`` (imports torch lazily).
"""

import os

import numpy as np

from . import _lpemu
from ._lpemu import Error, IoError, Model, Plan, PreparedB, ShapeError, SpecError, UnknownNameError

__all__ = [
    "Context", "Error", "IoError", "Model", "Plan", "PreparedB", "ShapeError", "SpecError", "UnknownNameError",
    "formats", "encode", "decode", "quantize", "block_encode", "datapath", "datapath_error", "dot", "gemm", "prepare_b",
    "load_model", "load_plan", "evaluate", "replay", "sweep", "read_sweep", "cost", "call", "commands",
]


def _default_data_dirs():
    """Where shipped models and plans are looked up: an install prefix's share/lpemu, then the
    source tree the module was built from ($LPEMU_DATA_DIR and the working directory follow)."""
    here = os.path.dirname(os.path.abspath(__file__))
    prefix = os.path.normpath(os.path.join(here, "..", "..", "..", ".."))
    return [os.path.join(prefix, "share", "lpemu"), _lpemu.source_dir]


def _opts(rounding, overflow, seed, sr_bits, ftz, daz):
    return _lpemu._options(rounding, overflow, int(seed), int(sr_bits), bool(ftz), bool(daz))


def _array(x):
    """x as an ndarray, keeping float32/float64 and code dtypes (no copy when already an array)."""
    return x if isinstance(x, np.ndarray) else np.asarray(x)


def _codes(x, what="codes"):
    """x as uint64 codes: integer (or bool) arrays only, every element >= 0; a float such as 1.5 or a
    negative integer is refused (never truncated or wrapped), as the command refuses such codes."""
    a = _array(x)
    if a.dtype.kind not in "iub":
        raise SpecError(f"{what}: dtype {a.dtype}: expected integer codes (e.g. uint8, int64)")
    if a.dtype.kind == "i" and a.size != 0 and a.min() < 0:
        i = int(np.argmax(a.reshape(-1) < 0))
        raise SpecError(f"{what}[{i}] = {int(a.reshape(-1)[i])}: expected a code >= 0")
    return a.astype(np.uint64, copy=False)


class Context:
    """Registries and factories of one set of user format directories (built on first use)."""

    def __init__(self, formats_dirs=(), data_dirs=None):
        """formats_dirs: directories of TOML formats (as ``lpemu --formats-dir``)."""
        dirs = list(data_dirs) if data_dirs is not None else _default_data_dirs()
        self._c = _lpemu.Context([str(d) for d in formats_dirs], [str(d) for d in dirs])

    def formats(self):
        """Every element format, then every block format, as dicts (the fields of `lpemu formats list`)."""
        return self._c.formats()

    def encode(self, fmt, x, rounding="nearest_even", overflow="native", seed=0, sr_bits=32, ftz=False, daz=False):
        """Codes of x in element format fmt (uint8/16/32 for float32 input, uint64 for float64)."""
        return self._c.encode(fmt, _array(x), _opts(rounding, overflow, seed, sr_bits, ftz, daz))

    def decode(self, fmt, codes):
        """Values of codes (float32 when every value of fmt is a float32, else float64)."""
        return self._c.decode(fmt, _codes(codes))

    def quantize(self, fmt, x, axis=None, block=None, scale_rule="", rounding="nearest_even",
                 overflow="saturate", seed=0, sr_bits=32, ftz=False, daz=False):
        """x fake-quantised to an element or block format (defaults as ``lpemu quantize``)."""
        ov = _lpemu._BlockOverrides(axis, block, scale_rule or "")
        return self._c.quantize(fmt, _array(x), ov, _opts(rounding, overflow, seed, sr_bits, ftz, daz))

    def block_encode(self, fmt, x, axis=None, block=None, scale_rule="", rounding="nearest_even",
                     seed=0, sr_bits=32, daz=False, packed=False):
        """Codes and scales of x in block format fmt: a dict with codes (x's shape, uint32), scales
        ([outer, block rows, block cols]), tensor_scale, layout; packed=True gives the bit streams
        `lpemu quantize --packed` writes (uint8, LSB first)."""
        ov = _lpemu._BlockOverrides(axis, block, scale_rule or "")
        return self._c.block_encode(fmt, _array(x), ov, _opts(rounding, "saturate", seed, sr_bits, False, daz),
                                    bool(packed))

    def datapath(self, name):
        """A datapath's input, output formats and summary."""
        return self._c.datapath(name)

    def datapath_error(self, datapaths, ks=(16, 64, 256, 1024, 4096), dist="normal", trials=100, seed=1, inputs=""):
        """Relative error |d - exact| / |exact| of each datapath against K over random inputs, as
        `lpemu datapath-error`: a dict with datapaths, k, mean[d][k] and max[d][k]."""
        names = [datapaths] if isinstance(datapaths, str) else list(datapaths)
        return self._c.datapath_error(names, [int(k) for k in ks], dist, int(trials), int(seed), inputs or "")

    def dot(self, datapath, a, b, c=0, scales_a=None, scales_b=None, index=0):
        """d = c + sum a_i*b_i as the datapath computes it, on codes (an int code of its output);
        scales_a/b: per-block power-of-two exponents (int32) for block-scaled datapaths."""
        return self._c.dot(datapath, _codes(a, "a"), _codes(b, "b"), int(c), _scales(scales_a), _scales(scales_b),
                           int(index))

    def gemm(self, datapath, a, b, c=None, scales_a=None, scales_b=None):
        """D[M, N] = C + A[M, K]·B[K, N] on codes (uint64 codes of the datapath's output). B is codes
        or a PreparedB of the same datapath (prepare_b): the same bits, without re-packing B."""
        cc = None if c is None else _codes(c, "c")
        aa = _codes(a, "a")
        if isinstance(b, PreparedB):
            if b.datapath != datapath:
                raise Error(f"gemm: B was prepared for datapath '{b.datapath}', not '{datapath}'")
            return b.gemm(aa, cc, _scales(scales_a), _scales(scales_b))
        return self._c.gemm(datapath, aa, _codes(b, "b"), cc, _scales(scales_a), _scales(scales_b))

    def prepare_b(self, datapath, b):
        """B[K, N] (codes of at most 8 bits) checked and packed once for many gemm() calls under
        datapath, as a weight is: a PreparedB (its .packed, .bytes, .k, .n)."""
        return self._c.prepare_b(datapath, _array(b).astype(np.uint64, copy=False))

    def load_model(self, name="stories260K"):
        """A model: an .h5 path or a shipped name (data/models/NAME/model.h5)."""
        return self._c.load_model(str(name))

    def load_plan(self, name):
        """A plan: a .toml path, fp32/fp64, or a shipped name (experiments/plans/NAME.toml)."""
        return self._c.load_plan(str(name))

    def evaluate(self, model, plan, text=None, tokens=None, reference="fp32"):
        """Per-token NLL, KL and top-1 of plan against reference on text or token ids (as
        ``lpemu eval``); model and plans are names, paths or loaded objects."""
        m = model if isinstance(model, Model) else self.load_model(model)
        p = plan if isinstance(plan, Plan) else self.load_plan(plan)
        r = reference if isinstance(reference, Plan) else self.load_plan(reference)
        if (text is None) == (tokens is None):
            raise Error("evaluate: give exactly one of text= or tokens=")
        ids = m.eval_tokens(text) if text is not None else [int(t) for t in tokens]
        return self._c.evaluate(m, p, ids, r)

    def replay(self, activations, plan, model=None):
        """Each recorded linear layer of an activations file under plan (as ``lpemu replay``)."""
        p = plan if isinstance(plan, Plan) else self.load_plan(plan)
        m = model if (model is None or isinstance(model, Model)) else self.load_model(model)
        return self._c.replay(str(activations), p, m)

    def sweep(self, experiment, out="", jobs=1, shard=0, shards=1, force=False):
        """Runs (or resumes) an experiment file's plans; returns its files and per-plan results."""
        return self.call("sweep", experiment=experiment, out=out, jobs=jobs, shard=shard, shards=shards,
                         force=force)

    def call(self, command, **request):
        """Runs an lpemu command (``lpemu.commands()``) on named request fields; its result as the
        dict ``lpemu COMMAND --json`` prints (NaN stays NaN here)."""
        return self._c.call(command, request)

    def cost(self, plan="bf16", target=None, model=None, **request):
        """Prices a plan (a plan file, fp32/fp64 or a shipped name) on a hardware target for a model
        shape, exactly as ``lpemu cost --json``: target, model, plan (bits per weight, the operand
        formats and datapaths computed, MAC area and energy), memory use and per phase time, energy
        and one entry per op. Other fields as the command's options with underscores: phase
        ("prefill", "decode", "both", "train"), batch, context, weights, activations, kv_cache,
        datapath, system, devices, parallel, search, step_time, batches, global_batch,
        micro_batch, recompute, gradients, optimizer_states, master_weights, comm, grad_comm,
        act_comm, flash_attention, overlap_dp, top, cost_dirs."""
        return self.call("cost", plan=plan, target=target, model=model, **request)


def _scales(s):
    return None if s is None else _array(s).astype(np.int32, copy=False)


_default = None


def default_context():
    """The context the module-level functions use (built-ins plus LPEMU_FORMATS_PATH)."""
    global _default
    if _default is None:
        _default = Context()
    return _default


def formats():
    """Every element format, then every block format, as dicts (the fields of `lpemu formats list`)."""
    return default_context().formats()


def encode(fmt, x, **options):
    """Codes of x in element format fmt; options: rounding, overflow, seed, sr_bits, ftz, daz."""
    return default_context().encode(fmt, x, **options)


def decode(fmt, codes):
    """Values of codes of element format fmt."""
    return default_context().decode(fmt, codes)


def quantize(fmt, x, **options):
    """x fake-quantised to an element or block format; see Context.quantize for the options."""
    return default_context().quantize(fmt, x, **options)


def block_encode(fmt, x, **options):
    """Codes and scales of x in a block format; see Context.block_encode."""
    return default_context().block_encode(fmt, x, **options)


def datapath(name):
    """A datapath's input, output formats and summary."""
    return default_context().datapath(name)


def datapath_error(datapaths, **options):
    """Relative error of datapaths versus K against the exact dot product; see Context.datapath_error."""
    return default_context().datapath_error(datapaths, **options)


def dot(datapath_name, a, b, c=0, **options):
    """d = c + sum a_i*b_i under a datapath, on codes; see Context.dot."""
    return default_context().dot(datapath_name, a, b, c, **options)


def gemm(datapath_name, a, b, c=None, **options):
    """D = C + A·B under a datapath, on codes; see Context.gemm."""
    return default_context().gemm(datapath_name, a, b, c, **options)


def prepare_b(datapath_name, b):
    """B prepared once for many gemm() calls under a datapath; see Context.prepare_b."""
    return default_context().prepare_b(datapath_name, b)


def load_model(name="stories260K"):
    """A model by path or shipped name."""
    return default_context().load_model(name)


def load_plan(name):
    """A precision plan by path, fp32/fp64 or shipped name."""
    return default_context().load_plan(name)


def evaluate(model, plan, **options):
    """Scores a text or token ids under a plan; see Context.evaluate."""
    return default_context().evaluate(model, plan, **options)


def replay(activations, plan, model=None):
    """Replays recorded linear layers under a plan; see Context.replay."""
    return default_context().replay(activations, plan, model)


def sweep(experiment, **options):
    """Runs an experiment's plans; see Context.sweep."""
    return default_context().sweep(experiment, **options)


def read_sweep(directory):
    """Every plan result of a sweep's output directory (its plans/NNNN.h5 files), in plan order."""
    return _lpemu.read_sweep(str(directory))


def cost(plan="bf16", target=None, model=None, **request):
    """Prices a plan on a target for a model shape; see Context.cost."""
    return default_context().cost(plan, target, model, **request)


def call(command, **request):
    """Runs an lpemu command on named request fields; see Context.call."""
    return default_context().call(command, **request)


def commands():
    """Names of the commands Context.call runs."""
    return _lpemu.commands()
