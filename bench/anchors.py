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

--prefill times pa_bench_prefill's rows instead (causal prefill, a chunk over a cached prefix, the
mixed step, the verify step, and 1 x 8k at pages 64 and 256), with the same FLOP count (4 * heads *
head_size * sum of new * (cached + new / 2)) and TB/s of the K + V bytes for the verify row:

  * SDPA with the flash backend and with the cuDNN backend on contiguous (B, Hk, L, D) K/V with
    enable_gqa (cuDNN falls back to K/V heads repeated before the capture if it refuses GQA), one
    call per group of equal sequences (the mixed step: the chunk, then the 63 decodes, in one graph);
    causal masks bottom-right (query j of a sequence with P cached tokens sees keys [0, P + j]):
    is_causal when the query covers the whole sequence, causal_lower_right (flash) or an explicit
    boolean mask (cuDNN) over a cached prefix, no mask for single-token queries;
  * FlexAttention over a page pool: every sequence's queries packed into one (1, H, tokens, D) row,
    K/V one (1, Hk, pages * page, D) pool with a shuffled block table, a BlockMask with one KV block
    per page built from a mask_mod that maps a pool index to (sequence, position) and admits keys of
    the query's sequence at positions <= the query's (its past length included).

Each anchor's output is first checked against a float32 attention of the last query rows of one
sequence per group (2e-2 of the largest reference value), then timed by CUDA-graph replays.

  python3 bench/anchors.py --prefill [--quick] [--no-flex] [--only REGEX]
"""
import argparse
import re
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


# ---- prefill anchors (--prefill) ------------------------------------------------------------------

PREFILL_SHAPES = [  # label (pa_bench_prefill's), heads, kv_heads, head_size, [(new, cached)], page
    ("causal 4x2k", 32, 8, 128, [(2048, 0)] * 4, 16),
    ("causal 1x8k", 32, 8, 128, [(8192, 0)], 16),
    ("chunk 2k over 30k", 32, 8, 128, [(2048, 30720)], 16),
    ("mixed 2k + 63x4k", 32, 8, 128, [(2048, 0)] + [(1, 4095)] * 63, 16),
    ("verify 64x4 over 4k", 32, 8, 128, [(4, 4096)] * 64, 16),
    ("causal 1x8k block 64", 32, 8, 128, [(8192, 0)], 64),  # FlexAttention only: SDPA is 1x8k's
    ("causal 1x8k block 256", 32, 8, 128, [(8192, 0)], 256),
]


def prefill_flops(heads, d, seqs):
    return sum(4.0 * heads * d * q * (past + q / 2.0) for q, past in seqs)


def reference_rows(q_rows, k, v, first_pos, scale):
    """float32 attention of query rows (H, r, D) at positions first_pos.. over k, v (Hk, L, D),
    bottom-right causal."""
    heads, kv_heads = q_rows.shape[0], k.shape[0]
    k = k.float().repeat_interleave(heads // kv_heads, dim=0)
    v = v.float().repeat_interleave(heads // kv_heads, dim=0)
    scores = (q_rows.float() @ k.transpose(1, 2)) * scale
    pos = first_pos + torch.arange(q_rows.shape[1], device=k.device).view(-1, 1)
    keys = torch.arange(k.shape[1], device=k.device).view(1, -1)
    scores = scores.masked_fill(keys > pos, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def check_rows(got, want, what):
    err = (got.float() - want).abs().max().item() / max(want.abs().max().item(), 1e-6)
    if not err <= 2e-2:
        raise SystemExit(f"check failed ({what}): error {err:.2e} of the largest value")
    return err


def sdpa_prefill(heads, kv_heads, d, seqs, backend_name):
    """SDPA on contiguous K/V, one call per group of equal (new, cached); microseconds, note."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend_name]
    groups = {}
    for q, past in seqs:
        groups[(q, past)] = groups.get((q, past), 0) + 1
    calls, notes = [], []
    for (q_len, past), count in groups.items():
        L = past + q_len
        q = torch.randn(count, heads, q_len, d, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(count, kv_heads, L, d, dtype=torch.bfloat16, device="cuda")
        v = torch.randn_like(k)
        if q_len == L:
            mask, causal = None, True
        elif q_len == 1:
            mask, causal = None, False  # one query at the last position sees every key
        elif backend_name == "flash":
            # CausalBias runs FlashAttention itself when it can, else falls back without a word:
            # make sure the number is flash's
            from torch.backends.cuda import SDPAParams, can_use_flash_attention
            if not can_use_flash_attention(SDPAParams(q, k, v, None, 0.0, False, True), True):
                raise SystemExit(f"flash cannot run {q_len} queries over {L} keys")
            mask, causal = causal_lower_right(q_len, L), False
        else:
            keys = torch.arange(L, device="cuda").view(1, -1)
            mask = (keys <= past + torch.arange(q_len, device="cuda").view(-1, 1)).view(1, 1, q_len, L)
            causal = False
        call = {"q": q, "k": k, "v": v, "mask": mask, "causal": causal, "gqa": True, "past": past}

        def run(c=call):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(c["q"], c["k"], c["v"], attn_mask=c["mask"],
                                                      is_causal=c["causal"], enable_gqa=c["gqa"])

        try:
            out = run()
        except RuntimeError as e:
            if backend_name != "cudnn":
                raise
            notes.append(f"K/V heads repeated ({str(e).splitlines()[0][:60]})")
            call["k"] = k.repeat_interleave(heads // kv_heads, dim=1)
            call["v"] = v.repeat_interleave(heads // kv_heads, dim=1)
            call["gqa"] = False
            out = run()
        rows = min(q_len, 32)
        want = reference_rows(q[0, :, q_len - rows:], k[0], v[0], past + q_len - rows, d ** -0.5)
        check_rows(out[0, :, q_len - rows:], want, f"sdpa {backend_name} ({q_len} over {past})")
        calls.append(run)

    def step():
        for run in calls:
            run()

    return replay_us(step), "; ".join(sorted(set(notes)))


def flex_prefill(heads, kv_heads, d, seqs, page, options):
    """FlexAttention over a shuffled page pool, every sequence's queries packed in one row."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    B = len(seqs)
    kv_lens = [q + past for q, past in seqs]
    pages_per_seq = [(L + page - 1) // page for L in kv_lens]
    num_pages = sum(pages_per_seq)
    pool = num_pages * page
    k_pool = torch.randn(1, kv_heads, pool, d, dtype=torch.bfloat16, device="cuda")
    v_pool = torch.randn_like(k_pool)
    ids = torch.randperm(num_pages)
    page_seq = torch.empty(num_pages, dtype=torch.int32)
    page_pos = torch.empty(num_pages, dtype=torch.int32)
    tables, first = [], 0
    for b, n in enumerate(pages_per_seq):
        table = ids[first:first + n]
        page_seq[table] = b
        page_pos[table] = torch.arange(n, dtype=torch.int32)
        tables.append(table)
        first += n
    page_seq, page_pos = page_seq.cuda(), page_pos.cuda()
    # the packed queries, padded to whole 128-row blocks with rows of no sequence (fully masked)
    total_q = sum(q for q, _ in seqs)
    padded_q = (total_q + 127) // 128 * 128
    q = torch.randn(1, heads, padded_q, d, dtype=torch.bfloat16, device="cuda")
    pad = torch.full((padded_q - total_q,), -1, dtype=torch.int32)
    q_seq = torch.cat([torch.repeat_interleave(torch.arange(B, dtype=torch.int32),
                                               torch.tensor([n for n, _ in seqs])), pad]).cuda()
    q_pos = torch.cat([past + torch.arange(n, dtype=torch.int32) for n, past in seqs] + [pad]).cuda()

    def mask_mod(b, h, q_idx, kv_idx):
        pg = kv_idx // page
        return (page_seq[pg] == q_seq[q_idx]) & (page_pos[pg] * page + kv_idx % page <= q_pos[q_idx])

    block_mask = create_block_mask(mask_mod, 1, None, padded_q, pool, device="cuda",
                                   BLOCK_SIZE=(128, page))
    compiled = torch.compile(flex_attention, dynamic=False)

    def step():
        return compiled(q, k_pool, v_pool, block_mask=block_mask, enable_gqa=True,
                        kernel_options=options)

    out = step()
    # check: the last rows of the first sequence of each distinct (new, cached)
    seen, start = set(), 0
    for b, (n, past) in enumerate(seqs):
        if (n, past) not in seen and n > 0:
            seen.add((n, past))
            rows = min(n, 32)
            slots = (tables[b].view(-1, 1) * page + torch.arange(page).view(1, -1)).reshape(-1)
            slots = slots[:past + n].cuda()
            k_b, v_b = k_pool[0][:, slots], v_pool[0][:, slots]
            want = reference_rows(q[0, :, start + n - rows:start + n], k_b, v_b, past + n - rows,
                                  d ** -0.5)
            check_rows(out[0, :, start + n - rows:start + n], want, f"flex ({n} over {past})")
        start += n
    torch.cuda.synchronize()
    return replay_us(step)


def child(kind, index, page, option):
    """One measurement in this process; prints its microseconds (or "n/a reason")."""
    if kind.startswith("prefill-"):
        label, heads, kv_heads, d, seqs, _ = PREFILL_SHAPES[index]
        torch.manual_seed(index)
        if kind == "prefill-flex":
            print(f"{flex_prefill(heads, kv_heads, d, seqs, page, option):.3f}")
        else:
            us, note = sdpa_prefill(heads, kv_heads, d, seqs, kind.split("-")[1])
            print(f"{us:.3f} {note}".rstrip())
        return 0
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
        value, _, rest = last.partition(" ")
        try:
            return float(value), rest
        except ValueError:
            return None, last
    err = (r.stderr.strip().splitlines() or ["?"])[-1]
    return None, f"failed: {err[:100]}"


def prefill_main(quick, flex, only):
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; prefill anchors, bf16, "
          "CUDA-graph replays, TFLOP/s = 4 * heads * head_size * sum new * (cached + new / 2)",
          flush=True)
    indices = (0, 3, 4) if quick else range(len(PREFILL_SHAPES))
    for index in indices:
        if only and not re.search(only, PREFILL_SHAPES[index][0]):
            continue
        label, heads, kv_heads, d, seqs, page = PREFILL_SHAPES[index]
        flops = prefill_flops(heads, d, seqs)
        kv_bytes = 2 * sum(q + past for q, past in seqs) * kv_heads * d * 2
        verify = label.startswith("verify")

        def figures(us):
            text = f"{us:8.1f} us {flops / (us * 1e-6) / 1e12:6.1f} TFLOP/s"
            return text + (f" {kv_bytes / (us * 1e-6) / 1e12:5.2f} TB/s" if verify else "")

        results = []
        options = [str(page), "default"] if page < 64 else ["default"]
        notes = []
        for option in options if flex else []:
            us, note = measure("prefill-flex", index, page, option)
            if us is not None:
                results.append(f"flex page {page}: {figures(us)}")
                break
            notes.append(f"BLOCK_N {option}: {note}")
        else:
            if flex:
                results.append(f"flex page {page}: n/a ({'; '.join(notes)})")
        if "block" not in label:
            for backend in ("flash", "cudnn"):
                us, note = measure(f"prefill-{backend}", index)
                results.append(f"sdpa {backend}: {figures(us)}{' (' + note + ')' if note else ''}"
                               if us is not None else f"sdpa {backend}: n/a {note}")
        print(f"{label:24s} | " + " | ".join(results), flush=True)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="pages 16 and 64, three shapes (each FlexAttention shape compiles); "
                             "with --prefill: three rows, FlexAttention at page 16")
    parser.add_argument("--prefill", action="store_true",
                        help="pa_bench_prefill's rows instead of the decode sweep")
    parser.add_argument("--no-flex", action="store_true",
                        help="with --prefill: SDPA flash and cuDNN only (FlexAttention compiles "
                             "for minutes)")
    parser.add_argument("--only", metavar="REGEX",
                        help="with --prefill: only the rows whose label matches REGEX")
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
    if args.prefill:
        return prefill_main(args.quick, not args.no_flex, args.only)
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
