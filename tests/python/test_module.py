"""lpemu's Python module against the `lpemu` command: the same bits for every built-in element
format, block format and datapath (the CLI is the independent front end over the same files)."""

import os
import zlib

import h5py
import numpy as np
import pytest

import lpemu
from conftest import bits, run_cli, SOURCE

ELEMENTS = [f["name"] for f in lpemu.formats() if f["kind"] == "element"]
BLOCKS = [f["name"] for f in lpemu.formats() if f["kind"] == "block"]


def float_inputs(seed=1, n=4000):
    """Random float32 bit patterns (all binades, subnormals, NaN, Inf) plus edge values."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([0.0, -0.0, 1.0, -1.0, 448.0, 464.0, 480.0, 57344.0, 6.0, 0.25, 1e-45, -1e-45, 2.0**-126,
                      np.inf, -np.inf, np.nan, -np.nan, 3.4e38, 65504.0, 65520.0], dtype=np.float32)
    small = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(np.float32)
    return np.concatenate([x, edges, small])


def same_values(a, b):
    """Equal values with equal NaN positions and equal signs (NaN payloads may differ in width)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (np.array_equal(a64, b64, equal_nan=True) and np.array_equal(np.isnan(a64), np.isnan(b64))
            and np.array_equal(np.signbit(a64), np.signbit(b64)))


def test_formats_lists_what_the_cli_lists():
    out = run_cli("formats", "list").stdout
    listed = [line.split()[0] for line in out.splitlines() if line and not line.startswith(("name", "block format"))]
    assert listed == ELEMENTS + BLOCKS
    assert len(ELEMENTS) >= 15 and len(BLOCKS) >= 12
    e4m3 = next(f for f in lpemu.formats() if f["name"] == "fp8_e4m3")
    assert e4m3["bits"] == 8 and e4m3["max_finite"] == 448.0 and e4m3["encoding"] in out


@pytest.mark.parametrize("fmt", ELEMENTS)
def test_element_quantize_encode_decode_match_cli(fmt, tmp_path):
    x = float_inputs()
    src = tmp_path / "x.npy"
    np.save(src, x)
    # quantize (the CLI's default overflow is saturate, as the module's)
    run_cli("quantize", "--format", fmt, src, tmp_path / "q.npy")
    assert np.array_equal(bits(lpemu.quantize(fmt, x)), bits(np.load(tmp_path / "q.npy")))
    # encode: fp32 codes -> fmt codes (native overflow, as the module's encode)
    run_cli("convert", "--from", "fp32", "--to", fmt, src, tmp_path / "c.npy")
    cli_codes = np.load(tmp_path / "c.npy")
    codes = lpemu.encode(fmt, x)
    assert codes.dtype.itemsize == cli_codes.dtype.itemsize
    assert np.array_equal(codes, cli_codes.view(codes.dtype))  # fp16/fp32/fp64 codes come as float .npy
    # decode: fmt codes -> fp64 values
    np.save(tmp_path / "codes.npy", codes)
    run_cli("convert", "--from", fmt, "--to", "fp64", tmp_path / "codes.npy", tmp_path / "d.npy")
    assert same_values(lpemu.decode(fmt, codes), np.load(tmp_path / "d.npy"))


OPTION_SETS = [
    ["--rounding", "toward_zero"],
    ["--rounding", "nearest_away", "--overflow", "native"],
    ["--rounding", "toward_negative", "--ftz", "--daz"],
    ["--rounding", "stochastic", "--seed", "7", "--sr-bits", "8"],
]


def kwargs_of(flags):
    k = {}
    i = 0
    while i < len(flags):
        name = flags[i][2:].replace("-", "_")
        if name in ("ftz", "daz"):
            k[name] = True
            i += 1
        else:
            k[name] = flags[i + 1] if name in ("rounding", "overflow") else int(flags[i + 1])
            i += 2
    return k


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp4_e2m1", "bf16", "int8", "e8m0"])
@pytest.mark.parametrize("flags", OPTION_SETS, ids=lambda f: "_".join(a.strip("-") for a in f))
def test_conversion_options_match_cli(fmt, flags, tmp_path):
    x = float_inputs(seed=5)
    np.save(tmp_path / "x.npy", x)
    run_cli("quantize", "--format", fmt, *flags, tmp_path / "x.npy", tmp_path / "q.npy")
    assert np.array_equal(bits(lpemu.quantize(fmt, x, **kwargs_of(flags))), bits(np.load(tmp_path / "q.npy")))
    run_cli("convert", "--from", "fp32", "--to", fmt, *flags, tmp_path / "x.npy", tmp_path / "c.npy")
    codes = lpemu.encode(fmt, x, **kwargs_of(flags))
    assert np.array_equal(codes, np.load(tmp_path / "c.npy").view(codes.dtype))


def test_float64_input_keeps_double_precision():
    x = np.array([1.0 + 2.0**-40, 1e300, -3.0], dtype=np.float64)
    q = lpemu.quantize("fp64", x)
    assert q.dtype == np.float64 and np.array_equal(q, x)
    assert lpemu.encode("fp64", x).dtype == np.uint64


def block_input(shape=(6, 96), seed=2):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * np.exp2(rng.integers(-8, 8, shape)).astype(np.float32)
    x[0, :5] = [0.0, -0.0, 1e-40, 7.5e5, -3.0]
    return x


@pytest.mark.parametrize("fmt", BLOCKS)
def test_block_quantize_and_packed_codes_match_cli(fmt, tmp_path):
    x = block_input()
    np.save(tmp_path / "x.npy", x)
    run_cli("quantize", "--format", fmt, tmp_path / "x.npy", tmp_path / "q.npy", "--packed", tmp_path / "p.h5")
    assert np.array_equal(bits(lpemu.quantize(fmt, x)), bits(np.load(tmp_path / "q.npy")))
    enc = lpemu.block_encode(fmt, x, packed=True)
    with h5py.File(tmp_path / "p.h5", "r") as f:
        assert np.array_equal(enc["codes"], f["codes"][...])
        assert np.array_equal(enc["scales"], f["scales"][...])
        assert enc["tensor_scale"] == pytest.approx(float(f.attrs["tensor_scale"]), rel=0, abs=0)
        assert enc["element_bits"] == int(f.attrs["code_bits"])
    unpacked = lpemu.block_encode(fmt, x)
    assert unpacked["codes"].shape == x.shape
    lay = unpacked["layout"]
    assert unpacked["scales"].size == lay["outer"] * -(-lay["rows"] // lay["block_rows"]) * -(-lay["cols"] // lay["block_cols"])


@pytest.mark.parametrize("fmt,flags", [
    ("mxfp8_e4m3", ["--axis", "0", "--block", "4"]),
    ("mxfp4", ["--block", "16", "--scale-rule", "ceil"]),
    ("nvfp4", ["--rounding", "stochastic", "--seed", "3"]),
    ("mxint8", ["--scale-rule", "search"]),
])
def test_block_overrides_match_cli(fmt, flags, tmp_path):
    x = block_input(seed=9)
    np.save(tmp_path / "x.npy", x)
    run_cli("quantize", "--format", fmt, *flags, tmp_path / "x.npy", tmp_path / "q.npy")
    kw = {}
    for i in range(0, len(flags), 2):
        k, v = flags[i][2:].replace("-", "_"), flags[i + 1]
        kw[k] = int(v) if k in ("axis", "block", "seed") else v
    assert np.array_equal(bits(lpemu.quantize(fmt, x, **kw)), bits(np.load(tmp_path / "q.npy")))


def datapaths():
    out = run_cli("datapath", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def random_codes(rng, fmt, n):
    """Codes of finite values of fmt drawn from normal inputs."""
    return lpemu.encode(fmt, rng.standard_normal(n).astype(np.float64), overflow="saturate").astype(np.uint64)


@pytest.mark.parametrize("dp", datapaths())
def test_dot_and_gemm_match_cli(dp, tmp_path):
    info = lpemu.datapath(dp)
    rng = np.random.default_rng(zlib.crc32(dp.encode()))
    m, n, k = 3, 4, 40
    a = random_codes(rng, info["a"], m * k).reshape(m, k)
    b = random_codes(rng, info["b"], k * n).reshape(k, n)
    # One CLI case per output element, in row-major order: case i·N+j uses stream i·N+j, as gemm does.
    lines = ["a,b,c"]
    for i in range(m):
        for j in range(n):
            lines.append(";".join(f"{v:x}" for v in a[i]) + "," + ";".join(f"{v:x}" for v in b[:, j]) + ",0")
    (tmp_path / "cases.csv").write_text("\n".join(lines) + "\n")
    out = run_cli("dot", "--datapath", dp, "--cases", tmp_path / "cases.csv").stdout.splitlines()[1:]
    cli_d = np.array([int(row.split(",")[3], 16) for row in out], dtype=np.uint64).reshape(m, n)
    d = lpemu.gemm(dp, a, b)
    assert np.array_equal(d, cli_d)
    assert lpemu.dot(dp, a[1], b[:, 2], 0, index=1 * n + 2) == cli_d[1, 2]


def test_datapath_error_matches_cli(tmp_path):
    names = ["h100_e4m3_fp32", "ideal"]
    r = lpemu.datapath_error(names, ks=[16, 256], trials=6, seed=3, inputs="fp8_e4m3")
    run_cli("datapath-error", "--datapath", ",".join(names), "--k", "16,256", "--trials", "6", "--seed", "3",
            "--inputs", "fp8_e4m3", "--out", tmp_path)
    rows = (tmp_path / "datapath_error.csv").read_text().splitlines()[1:]
    assert len(rows) == 4
    for row in rows:
        name, k, _, _, mean, mx = row.split(",")
        d, ki = names.index(name), [16, 256].index(int(k))
        assert r["mean"][d][ki] == float(mean)
        assert r["max"][d][ki] == float(mx)
    with pytest.raises(lpemu.SpecError):
        lpemu.datapath_error("ideal", ks=[16], trials=2, inputs="e8m0")


def test_errors_carry_the_library_message():
    with pytest.raises(lpemu.UnknownNameError, match="fp8_e4m3"):
        lpemu.encode("fp8_e4m4", np.zeros(3, np.float32))
    with pytest.raises(lpemu.SpecError, match="rounding"):
        lpemu.quantize("fp8_e4m3", np.zeros(3, np.float32), rounding="sideways")
    with pytest.raises(lpemu.SpecError, match="element format"):
        lpemu.quantize("fp8_e4m3", np.zeros(3, np.float32), block=32)
    with pytest.raises(lpemu.Error, match="is wider than format"):
        lpemu.decode("fp4_e2m1", np.array([0x1f], np.uint8))
    with pytest.raises(lpemu.ShapeError):
        lpemu.gemm("ideal", np.zeros((2, 3), np.uint64), np.zeros((4, 2), np.uint64))
    assert issubclass(lpemu.SpecError, lpemu.Error) and issubclass(lpemu.Error, ValueError)


def test_user_formats_from_toml_match_cli(tmp_path):
    d = os.path.join(SOURCE, "experiments", "proposals")
    ctx = lpemu.Context(formats_dirs=[d])
    names = [f["name"] for f in ctx.formats()]
    assert "fp7_e3m3" in names and "mx7_e3m3" in names and "fp7_e3m3" not in ELEMENTS
    x = float_inputs(seed=11)
    np.save(tmp_path / "x.npy", x)
    run_cli("--formats-dir", d, "convert", "--from", "fp32", "--to", "fp7_e3m3", tmp_path / "x.npy", tmp_path / "c.npy")
    codes = ctx.encode("fp7_e3m3", x)
    assert np.array_equal(codes, np.load(tmp_path / "c.npy").view(codes.dtype))
    y = block_input()
    np.save(tmp_path / "y.npy", y)
    run_cli("--formats-dir", d, "quantize", "--format", "mx7_e3m3", tmp_path / "y.npy", tmp_path / "q.npy")
    assert np.array_equal(bits(ctx.quantize("mx7_e3m3", y)), bits(np.load(tmp_path / "q.npy")))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.toml").write_text('name = "broken"\nexponent_bits = 0\nmantissa_bits = 3\n')
    with pytest.raises(lpemu.SpecError, match="broken.toml"):
        lpemu.Context(formats_dirs=[bad]).formats()


def test_import_lpemu_does_not_import_torch():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", "import sys, lpemu; lpemu.formats(); print('torch' in sys.modules)"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


@pytest.mark.parametrize("dp", datapaths())
def test_gemm_on_a_prepared_b_gives_the_bits_of_gemm_on_codes(dp):
    info = lpemu.datapath(dp)
    rng = np.random.default_rng(zlib.crc32(dp.encode()) + 1)
    m, n, k = 5, 37, 70  # row and column tails of the fast kernels' tiles and panels
    a = random_codes(rng, info["a"], m * k).reshape(m, k)
    b = random_codes(rng, info["b"], k * n).reshape(k, n)
    c = random_codes(rng, info["output"], m * n).reshape(m, n)
    if max(a.max(), b.max()) > 255:  # inputs wider than 8 bits: not preparable, said so
        with pytest.raises(lpemu.Error, match="8 bits"):
            lpemu.prepare_b(dp, b)
        return
    w = lpemu.prepare_b(dp, b)
    assert (w.datapath, w.k, w.n) == (dp, k, n) and w.bytes >= k * n
    if dp == "h100_e4m3_fp32":  # a fast kernel takes it: held packed
        assert w.packed and w.bytes > k * n
    for cc in (None, c):
        assert np.array_equal(lpemu.gemm(dp, a, w, cc), lpemu.gemm(dp, a, b, cc))
    with pytest.raises(lpemu.Error, match="prepared for datapath"):
        lpemu.gemm("ideal" if dp != "ideal" else "h100_e4m3_fp32", a, w)
    with pytest.raises(lpemu.ShapeError):
        lpemu.gemm(dp, a[:, :-1], w)
    with pytest.raises(lpemu.Error, match="does not fit 32 bits"):
        lpemu.gemm(dp, a, w, np.full((m, n), 1 << 40, np.uint64))


def test_codes_and_counts_are_validated_as_in_the_cli():
    """decode of int64 -1 used to give NaN (wrapped to 0xff), decode([1.5]) used code 1, a code
    above the format's width was narrowed, and datapath_error(ks=(0,)) reported error 0.0."""
    for bad, says in [(np.array([-1], np.int64), r"codes\[0\] = -1: expected a code >= 0"),
                      ([1.5], "dtype float64: expected integer codes"),
                      (np.array([0.0], np.float32), "dtype float32"),
                      (np.array([3, -7]), r"codes\[1\] = -7")]:
        with pytest.raises(lpemu.SpecError, match=says):
            lpemu.decode("fp8_e4m3", bad)
    with pytest.raises(lpemu.Error, match="is wider than format|does not fit"):
        lpemu.decode("fp4_e2m1", np.array([256], np.int64))  # 256 narrowed to uint8 would be code 0
    with pytest.raises(lpemu.Error):
        lpemu.decode("fp4_e2m1", [16])
    assert lpemu.decode("fp4_e2m1", [7])[0] == 6.0 and lpemu.decode("fp4_e2m1", [True])[0] == 0.5
    with pytest.raises(lpemu.SpecError, match="a: dtype float64"):
        lpemu.dot("ideal", [1.5], [1])
    with pytest.raises(lpemu.SpecError, match="k = 0: expected an integer in 1..1048576"):
        lpemu.datapath_error("ideal", ks=(0,), trials=2, inputs="fp8_e4m3")
    with pytest.raises(lpemu.SpecError, match="trials = 2000000"):
        lpemu.datapath_error("ideal", ks=(16,), trials=2_000_000, inputs="fp8_e4m3")
    for seed in (-5, -1, 99999999999999999999999):
        with pytest.raises((TypeError, OverflowError, lpemu.Error)):
            lpemu.datapath_error("ideal", ks=(16,), trials=2, seed=seed, inputs="fp8_e4m3")
