#!/usr/bin/env python3
"""The error of PREFILL's fp8-GEMM option for fp8 e4m3 caches, simulated on the CPU (issue 18).

The Hopper PREFILL kernels run the GEMMs of 8-bit caches in fp16: the cache codes are exact in fp16,
Q goes to fp16 times a power of two per unit (fp16_q_shift), P is rounded to fp16, and wgmma
accumulates in fp32. The other option for fp8 caches runs both GEMMs in e4m3 (`wgmma` m64nNk32 on
the codes): Q rounded to e4m3 times a power of two per unit, P rounded to e4m3 times 256 (P <= 1
after the running maximum), the row sums taken from the rounded P so that numerator and denominator
agree. This script puts both, and the option with only P V in e4m3, beside an fp64 reference on
the data the gpu suite uses (test/gpu/harness.c): Q, K, V uniform in [-1, 1), Q rounded to bf16,
K and V quantized to e4m3 with per-tensor scales uniform in [1, 2.5) / 448, the softmax scale
1 / sqrt(head_size) or 0.25, 128-key tiles with the online softmax. It prints, per context length,
the largest |out - ref| / (1 + |ref|) over every row and draw as a fraction of the 2e-2 tolerance of
8-bit caches (doc/development.md, "Oracles and tolerances"): above 1 the suite would fail.

  python3 bench/fp8_gemm_error.py [--draws N] [--seed S] [--accumulator-bits B]

--accumulator-bits B keeps B mantissa bits of the e4m3 GEMMs' running sums after each 32-deep
k-step (Hopper's fp8 tensor cores are reported to keep about 14 bits, not fp32's 23).
Needs numpy and ml_dtypes.
"""
import argparse
import math

import ml_dtypes
import numpy as np

HEAD_SIZE = 128
ROWS = 16
TILE_KEYS = 128
TOLERANCE = 2e-2


def to_e4m3(x):
    return np.clip(x, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)


def to_fp16(x):
    return x.astype(np.float16).astype(np.float64)


def to_bf16(x):
    return x.astype(ml_dtypes.bfloat16).astype(np.float64)


def product(a, b, accumulator_bits):
    """a @ b, the running sum cut to accumulator_bits mantissa bits per 32-deep k-step if given."""
    if accumulator_bits is None:
        return a @ b
    total = np.zeros((a.shape[0], b.shape[1]))
    for k in range(0, a.shape[1], 32):
        mantissa, exponent = np.frexp(total + a[:, k:k + 32] @ b[k:k + 32])
        unit = 2.0 ** (accumulator_bits + 1)
        total = np.ldexp(np.trunc(mantissa * unit) / unit, exponent)
    return total


# Each path: how Q (and its power of two), P (and its scale) reach the tensor cores, and whether the
# GEMMs run on 8-bit operands (the accumulator model applies to those).
PATHS = {
    "fp16 (built)": dict(q8=False, p8=False),
    "e4m3 QK and PV": dict(q8=True, p8=True),
    "e4m3 PV only": dict(q8=False, p8=True),
}


def attention(path, q, k_codes, v_codes, k_scale, v_scale, scale, accumulator_bits):
    q_max = np.abs(q).max()
    if path["q8"]:
        shift = math.floor(math.log2(448.0 / q_max))
        q_in = to_e4m3(q * 2.0 ** shift)
    else:
        shift = 14 - math.floor(math.log2(q_max))  # the largest element in [2^14, 2^15)
        q_in = to_fp16(q * 2.0 ** shift)
    p_scale = 256.0 if path["p8"] else 1.0
    row_max = np.full((q.shape[0], 1), -np.inf)
    row_sum = np.zeros((q.shape[0], 1))
    out = np.zeros_like(q)
    for t in range(0, k_codes.shape[0], TILE_KEYS):
        k_tile, v_tile = k_codes[t:t + TILE_KEYS], v_codes[t:t + TILE_KEYS]
        bits = accumulator_bits if path["q8"] else None
        scores = product(q_in, k_tile.T, bits) * (scale * k_scale * 2.0 ** -shift)
        new_max = np.maximum(row_max, scores.max(axis=1, keepdims=True))
        rescale = np.exp(row_max - new_max)
        p = np.exp(scores - new_max)
        p_in = to_e4m3(p * p_scale) if path["p8"] else to_fp16(p)
        # e4m3 P: the sums of the rounded values; fp16 P: of the fp32 ones, as the kernel does
        row_sum = row_sum * rescale + (p_in.sum(axis=1, keepdims=True) / p_scale
                                       if path["p8"] else p.sum(axis=1, keepdims=True))
        bits = accumulator_bits if path["p8"] else None
        out = out * rescale + product(p_in, v_tile, bits) / p_scale
        row_max = new_max
    return out / row_sum * v_scale


def worst_fraction(rng, keys, scale, draws, accumulator_bits):
    worst = {name: 0.0 for name in PATHS}
    for _ in range(draws):
        q = to_bf16(rng.uniform(-1.0, 1.0, (ROWS, HEAD_SIZE)))
        k_scale, v_scale = rng.uniform(1.0, 2.5, 2) / 448.0
        k_codes = to_e4m3(rng.uniform(-1.0, 1.0, (keys, HEAD_SIZE)) / k_scale)
        v_codes = to_e4m3(rng.uniform(-1.0, 1.0, (keys, HEAD_SIZE)) / v_scale)
        scores = q @ (k_codes * k_scale).T * scale
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        ref = p @ (v_codes * v_scale) / p.sum(axis=1, keepdims=True)
        for name, path in PATHS.items():
            out = attention(path, q, k_codes, v_codes, k_scale, v_scale, scale, accumulator_bits)
            error = (np.abs(out - ref) / (1.0 + np.abs(ref))).max() / TOLERANCE
            worst[name] = max(worst[name], error)
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--accumulator-bits", type=int, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"worst |out - ref| / (1 + |ref|) as a fraction of the {TOLERANCE} tolerance "
          f"({args.draws} draws of {ROWS} rows, head size {HEAD_SIZE}, e4m3 accumulator: "
          f"{args.accumulator_bits or 'fp32'})")
    print(f"{'keys':>6} {'scale':>7}" + "".join(f" {name:>15}" for name in PATHS))
    for scale in (1.0 / math.sqrt(HEAD_SIZE), 0.25):
        for keys in (2, 3, 5, 17, 64, 400, 3000):
            worst = worst_fraction(rng, keys, scale, args.draws, args.accumulator_bits)
            print(f"{keys:>6} {scale:>7.4f}" + "".join(f" {worst[n]:>15.3f}" for n in PATHS))


if __name__ == "__main__":
    main()
