#!/usr/bin/env python3
"""Decode anchors for pa_bench_decode: the same shapes through torch, timed in the same way.

  * SDPA (flash backend) on a contiguous (B, Hk, L, D) copy of the KV, with enable_gqa;
  * FlexAttention over a page pool: K/V as one (1, Hk, num_pages * page, D) pool, a BlockMask whose
    KV blocks are the pages of each sequence (a shuffled block table), so each KV block is one page.

Every callable is captured in a CUDA graph and timed by replays (median of >= 100 after warm-up);
TB/s counts the K + V bytes of the step once, as pa_bench_decode does, next to a device-to-device
copy measured in the same run. Random bf16 data, never zeros. Each measurement runs in its own
process: a FlexAttention configuration that fails with a device-side assert poisons its CUDA
context, and must not take the other anchors with it.

  python3 bench/anchors.py [--quick]
"""
import argparse
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F

SHAPES = [  # label, heads, kv_heads, head_size, kv lengths (the current token included)
    ("32/8 d128 64x4k", 32, 8, 128, [4096] * 64),
    ("32/8 d128 256x4k", 32, 8, 128, [4096] * 256),
    ("32/8 d128 1x128k", 32, 8, 128, [131072]),
    ("32/8 d128 32x32k", 32, 8, 128, [32768] * 32),
    ("64/8 d128 64x4k", 64, 8, 128, [4096] * 64),
    ("128/8 d128 64x4k", 128, 8, 128, [4096] * 64),
    ("32/4 d128 64x4k", 32, 4, 128, [4096] * 64),
    ("64/8 d64 64x8k", 64, 8, 64, [8192] * 64),
    ("32/8 d128 1x128k+63x2k", 32, 8, 128, [131072] + [2048] * 63),
    ("32/8 d128 1x1k (latency)", 32, 8, 128, [1024]),
]


def replay_us(fn, reps=100):
    """Captures fn in a CUDA graph; median microseconds of one replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(10):
        graph.replay()
    times = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0)
    return statistics.median(times)


def copy_tbps():
    a = torch.empty(1 << 29, dtype=torch.int16, device="cuda").random_()
    b = torch.empty_like(a)
    us = replay_us(lambda: b.copy_(a), reps=30)
    return 2 * a.numel() * a.element_size() / (us * 1e-6) / 1e12


def sdpa_anchor(heads, kv_heads, d, lens):
    if len(set(lens)) != 1:
        return None  # ragged: SDPA has no paged or ragged decode
    B, L = len(lens), lens[0]
    q = torch.randn(B, heads, 1, d, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(B, kv_heads, L, d, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def step():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    return replay_us(step)


def flex_anchor(heads, kv_heads, d, lens, page, options):
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    B = len(lens)
    pages_per_seq = [(L + page - 1) // page for L in lens]
    num_pages = sum(pages_per_seq)
    max_pages = max(pages_per_seq)
    k_pool = torch.randn(1, kv_heads, num_pages * page, d, dtype=torch.bfloat16, device="cuda")
    v_pool = torch.randn_like(k_pool)
    q = torch.randn(B, heads, 1, d, dtype=torch.bfloat16, device="cuda")
    ids = torch.randperm(num_pages, device="cuda", dtype=torch.int32)
    table = torch.zeros(B, max_pages, dtype=torch.int32, device="cuda")
    first = 0
    for b, n in enumerate(pages_per_seq):
        table[b, :n] = ids[first:first + n]
        first += n
    # every page is full: list them as full blocks (no mask_mod evaluation); the index rows are
    # as wide as the pool, since BlockMask densifies them to (rows, width) to transpose
    full_num = torch.tensor(pages_per_seq, dtype=torch.int32, device="cuda").view(B, 1, 1)
    full_idx = torch.zeros(B, 1, 1, num_pages, dtype=torch.int32, device="cuda")
    full_idx[:, 0, 0, :max_pages] = table
    partial_num = torch.zeros_like(full_num)
    partial_idx = torch.zeros_like(full_idx)
    mask = BlockMask.from_kv_blocks(partial_num, partial_idx, full_num, full_idx,
                                    BLOCK_SIZE=(128, page), seq_lengths=(1, num_pages * page))
    k_all, v_all = k_pool.expand(B, -1, -1, -1), v_pool.expand(B, -1, -1, -1)
    compiled = torch.compile(flex_attention, dynamic=False)

    def step():
        return compiled(q, k_all, v_all, block_mask=mask, enable_gqa=True, kernel_options=options)

    step()
    torch.cuda.synchronize()
    return replay_us(step)


def child(kind, index, page, option):
    """One measurement in this process; prints its microseconds (or "n/a reason")."""
    label, heads, kv_heads, d, lens = SHAPES[index]
    torch.manual_seed(index)
    if kind == "copy":
        print(f"{copy_tbps():.4f}")
    elif kind == "sdpa":
        us = sdpa_anchor(heads, kv_heads, d, lens)
        print("n/a (ragged)" if us is None else f"{us:.3f}")
    else:
        print(f"{flex_anchor(heads, kv_heads, d, lens, page, option):.3f}")
    return 0


def measure(kind, index=0, page=0, option="default"):
    """Runs child() in a fresh process; returns (microseconds or None, note)."""
    cmd = [sys.executable, __file__, "--child", kind, str(index), str(page), option]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    last = (r.stdout.strip().splitlines() or [""])[-1]
    if r.returncode == 0:
        try:
            return float(last), ""
        except ValueError:
            return None, last
    err = (r.stderr.strip().splitlines() or ["?"])[-1]
    return None, f"failed: {err[:100]}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="pages 16 and 64, three shapes (each FlexAttention shape compiles)")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "SHAPE", "PAGE", "OPTION"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 77
    if args.child:
        kind, index, page, option = args.child
        options = None if option == "default" else {"BLOCK_N": int(option)}
        return child(kind, int(index), int(page), options)
    copy, note = measure("copy")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; "
          f"device-to-device copy (torch copy_) {copy or 0:.2f} TB/s (read + write) {note}",
          flush=True)
    pages = [16, 64] if args.quick else [16, 32, 64]
    indices = (0, 1, 3) if args.quick else range(len(SHAPES))  # quick: the rows B x L >= 256k
    for index in indices:
        label, heads, kv_heads, d, lens = SHAPES[index]
        kv_bytes = 2 * sum(lens) * kv_heads * d * 2
        results = []
        for page in pages:
            # FlexAttention's default KV block is larger than a 16 or 32-token page: ask for the
            # page first, then the default
            options = [str(page), "default"] if page < 64 else ["default"]
            notes = []
            for option in options:
                us, note = measure("flex", index, page, option)
                if us is not None:
                    results.append(f"flex page {page}: {us:8.1f} us "
                                   f"{kv_bytes / (us * 1e-6) / 1e12:5.2f} TB/s")
                    break
                notes.append(f"BLOCK_N {option}: {note}")
            else:
                results.append(f"flex page {page}: n/a ({'; '.join(notes)})")
        us, note = measure("sdpa", index)
        results.append(f"sdpa contiguous: {us:8.1f} us {kv_bytes / (us * 1e-6) / 1e12:5.2f} TB/s"
                       if us is not None else f"sdpa: n/a {note}")
        print(f"{label:26s} | " + " | ".join(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
