"""Tensor parallelism over GPUs: the attention heads sharded across ranks of torch.distributed.

Each rank owns kv_num_heads / world_size KV heads and the query heads of their groups, holds the
KV cache of those heads only, and runs libpagedattn on its own device (each call plans for the
rank's device and head shard). A prefill step of a ragged batch is followed by decode steps; after
each step the ranks all-gather their output columns into the full output, which rank 0 compares with
a one-GPU run of all heads on the same inputs (and the gathered cache shards with that run's cache).

    python3 examples/python/tensor_parallel.py --nproc 2     # launches 2 ranks with torchrun
    torchrun --standalone --nproc-per-node 2 examples/python/tensor_parallel.py   # the same

With as many GPUs as ranks, rank r uses GPU r and the gather goes through NCCL. With fewer GPUs
(2 ranks over one GPU, for trying it out), ranks share devices round-robin, and since NCCL refuses
two ranks on one GPU, the gather goes through gloo on host copies; the attention still runs on the
GPU. `--host` runs the same sharding on the reference executor (host tensors, gloo), without a GPU.
Exits 77 (a skipped test) without torch or, unless --host, a CUDA device; 1 when the gathered
output or caches differ from the one-device run.
"""
import argparse
import os
import subprocess
import sys

try:
    import torch
    import torch.distributed as dist
except ImportError:
    torch = None

import numpy as np

NUM_HEADS, KV_NUM_HEADS, HEAD_SIZE, BLOCK_SIZE = 32, 8, 128, 16
PROMPTS = (37, 5, 64, 1)          # prefill lengths of the batch (ragged)
DECODE_STEPS = 6
BLOCKS_PER_SEQ = 6                # up to 96 tokens per sequence
TOLERANCE = 5e-3                  # fp16, relative to 1 + |one-GPU output| (doc/semantics.md)


def unavailable(host):
    """Why this cannot run here (printed, exit 77), or None."""
    if torch is None:
        return "torch is not installed: skipped"
    if not host and not torch.cuda.is_available():
        return "no CUDA device: skipped (--host runs it on the reference executor)"
    return None


def launch(nproc, host):
    """Runs this script under torch.distributed.run with nproc ranks; returns its exit status."""
    if unavailable(host):
        print(unavailable(host))
        return 77
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(nproc), os.path.abspath(__file__)] + (["--host"] if host else [])
    print("launching:", " ".join(command), flush=True)
    return subprocess.call(command)


def all_gather(tensor, backend, world):
    """Every rank's `tensor`, in rank order, on `tensor`'s device. gloo gets host bytes."""
    source = tensor if backend == "nccl" else tensor.cpu().view(torch.uint8)
    parts = [torch.empty_like(source) for _ in range(world)]
    dist.all_gather(parts, source)
    return [p.view(tensor.dtype).to(tensor.device) for p in parts]


def full_inputs(seed=2026):
    """Every rank draws the same full-size data on the host: the caches' history, the block table,
    and each step's new tokens."""
    rng = np.random.default_rng(seed)
    batch = len(PROMPTS)
    num_blocks = batch * BLOCKS_PER_SEQ + 3
    cache_shape = (num_blocks, BLOCK_SIZE, KV_NUM_HEADS, HEAD_SIZE)
    caches = [torch.from_numpy(rng.standard_normal(cache_shape).astype(np.float16))
              for _ in range(2)]  # stale pool contents: masked until written
    block_table = torch.from_numpy(
        rng.permutation(num_blocks)[:batch * BLOCKS_PER_SEQ].astype(np.int32)
        .reshape(batch, BLOCKS_PER_SEQ))
    steps = []
    past = [0] * batch
    for step in range(1 + DECODE_STEPS):
        q_lens = PROMPTS if step == 0 else (1,) * batch
        tokens = sum(q_lens)
        new = [torch.from_numpy(rng.standard_normal((tokens, heads * HEAD_SIZE)).astype(np.float16))
               for heads in (NUM_HEADS, KV_NUM_HEADS, KV_NUM_HEADS)]
        cu = torch.tensor(np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32))
        steps.append(dict(query=new[0], key=new[1], value=new[2], cu_seqlens=cu,
                          past_seqlens=torch.tensor(past, dtype=torch.int32),
                          kind="prefill" if step == 0 else "decode"))
        past = [p + q for p, q in zip(past, q_lens)]
    return caches, block_table, steps


def head_columns(tensor, first_head, end_head):
    """The columns of heads [first_head, end_head) of a (tokens, heads * HEAD_SIZE) tensor."""
    return tensor[:, first_head * HEAD_SIZE:end_head * HEAD_SIZE].contiguous()


def attention(step, k_cache, v_cache, block_table, heads, kv_heads, device, q, k, v):
    import pagedattn
    return pagedattn.paged_attention(
        q.to(device), k.to(device), v.to(device), k_cache, v_cache,
        step["cu_seqlens"].to(device), step["past_seqlens"].to(device), block_table,
        num_heads=heads, kv_num_heads=kv_heads)


def run_rank(host):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if KV_NUM_HEADS % world:
        print("rank %d: world size %d does not divide kv_num_heads %d" % (rank, world, KV_NUM_HEADS))
        return 2
    if host:  # the reference executor on host tensors: the same sharding, no GPU needed
        device, gpus, backend, where = torch.device("cpu"), 0, "gloo", "the host (reference)"
    else:
        gpus = torch.cuda.device_count()
        device = torch.device("cuda", local_rank % gpus)
        torch.cuda.set_device(device)
        own_gpu = int(os.environ.get("LOCAL_WORLD_SIZE", world)) <= gpus
        backend = "nccl" if own_gpu else "gloo"
        where = "%s (%s)" % (device, torch.cuda.get_device_name(device))
    dist.init_process_group(backend)

    kv_per_rank = KV_NUM_HEADS // world
    q_per_rank = NUM_HEADS // world
    kv0, q0 = rank * kv_per_rank, rank * q_per_rank
    print("rank %d/%d on %s: KV heads [%d, %d), query heads [%d, %d); gather through %s"
          % (rank, world, where, kv0, kv0 + kv_per_rank, q0, q0 + q_per_rank, backend), flush=True)

    caches, block_table, steps = full_inputs()
    shard_caches = [c[:, :, kv0:kv0 + kv_per_rank].contiguous().to(device) for c in caches]
    block_table_dev = block_table.to(device)
    if rank == 0:  # the one-GPU run: every head on one device
        full_caches = [c.to(device) for c in caches]

    worst = 0.0
    for number, step in enumerate(steps):
        shard_out = attention(step, *shard_caches, block_table_dev, q_per_rank, kv_per_rank, device,
                              head_columns(step["query"], q0, q0 + q_per_rank),
                              head_columns(step["key"], kv0, kv0 + kv_per_rank),
                              head_columns(step["value"], kv0, kv0 + kv_per_rank))
        # the output columns of every rank: heads are contiguous per token, so rank order is head
        # order
        gathered = torch.cat(all_gather(shard_out, backend, world), dim=1)
        if rank == 0:
            full_out = attention(step, *full_caches, block_table_dev, NUM_HEADS, KV_NUM_HEADS,
                                 device, step["query"], step["key"], step["value"])
            ref = full_out.float()
            err = ((gathered.float() - ref).abs() / (1 + ref.abs())).max().item()
            worst = max(worst, err)
            print("step %d %-7s tokens %3d: output %s, max error against one device %.2e"
                  % (number, step["kind"], step["query"].shape[0], tuple(gathered.shape), err),
                  flush=True)

    # the caches: every rank's shard, against the one-device caches, bit for bit
    caches_equal = True
    for index, (name, shard) in enumerate(zip(("key_cache", "value_cache"), shard_caches)):
        gathered = torch.cat(all_gather(shard, backend, world), dim=2)
        if rank == 0:
            equal = torch.equal(gathered, full_caches[index])
            caches_equal &= equal
            print("%s: gathered shards %s the one-device cache"
                  % (name, "equal" if equal else "DIFFER FROM"))
    failed = 0 if rank else int(worst > TOLERANCE or not caches_equal)
    status = torch.tensor([failed], device=device if backend == "nccl" else "cpu")
    dist.broadcast(status, 0)
    ok = int(status.item()) == 0
    if rank == 0:
        print("tensor parallel over %d ranks on %s: %s (worst error %.2e, tolerance %.0e)"
              % (world, "the host" if host else "%d GPU(s)" % min(world, gpus),
                 "matches the one-device run" if ok else "MISMATCH", worst, TOLERANCE))
    dist.destroy_process_group()
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int,
                        help="launch this many ranks with torch.distributed.run and wait for them")
    parser.add_argument("--host", action="store_true",
                        help="run on the reference executor (host tensors, gloo): no GPU needed")
    args = parser.parse_args()
    if args.nproc:
        return launch(args.nproc, args.host)
    if unavailable(args.host):
        print(unavailable(args.host))
        return 77
    if "RANK" not in os.environ:
        print("run under torchrun, or with --nproc N (see the docstring)")
        return 2
    return run_rank(args.host)


if __name__ == "__main__":
    sys.exit(main())
