#!/usr/bin/env python3
"""Profiles one kernel launch per benchmark row with ncu and prints what holds each row back.

    tools/ncu-rows.py BUILD OUTDIR [ROWS_FILE]

ROWS_FILE has one row per line, `name | bench program and its arguments | kernel regex`
(a regex over the demangled name; `#` starts a comment). Without it, the DECODE rows of issue 21
below. Each row runs `ncu --clock-control none` on BUILD/bench/PROGRAM ARGS, skipping the first
three matching launches (the correctness check and warm-up) and profiling the next one with the
sections SpeedOfLight, Occupancy, LaunchStats, WarpStateStats, SchedulerStats,
ComputeWorkloadAnalysis (pipe utilization) and MemoryWorkloadAnalysis; the report goes to
OUTDIR/NAME.ncu-rep and its raw metrics to OUTDIR/NAME.csv. Printed as each row is done:
kernel time, DRAM and SM throughput (% of peak), achieved occupancy, issue slots busy, warp cycles
per issued instruction, tensor pipe activity, shared-memory bank conflicts of loads and of stores
through the LSU pipe beside all shared wavefronts (collected with --metrics: no section has
them), and the four largest stall reasons (warps stalled per issued instruction).
"""
import csv
import os
import re
import shlex
import subprocess
import sys

BF16 = "decode_kernel<__nv_bfloat16, __nv_bfloat16"
ISSUE_21_ROWS = [
    ("32/8 64x4k bf16", 'pa_bench_decode --only "32/8 d128 64x4k" --block 16', BF16),
    ("32/8 256x4k bf16", 'pa_bench_decode --only "32/8 d128 256x4k" --block 16', BF16),
    ("64/8 64x4k bf16", 'pa_bench_decode --only "64/8 d128 64x4k" --block 16', BF16),
    ("32/4 64x4k bf16", 'pa_bench_decode --only "32/4 d128 64x4k" --block 16', BF16),
    ("64/8 d64 64x8k bf16", 'pa_bench_decode --only "64/8 d64 64x8k" --block 16', BF16),
    ("32/8 1x128k bf16", 'pa_bench_decode --only "32/8 d128 1x128k" --block 16', BF16),
    ("32/8 64x4k int8", 'pa_bench_decode --only "32/8 d128 64x4k" --block 16',
     "decode_kernel<__nv_bfloat16, signed char"),
    ("32/8 64x4k fp8", 'pa_bench_decode --only "32/8 d128 64x4k" --block 16',
     "decode_kernel<__nv_bfloat16, .*fp8_e4m3"),
    ("write 8192 int8", 'pa_bench_write --only "8192 int8 unstaged"', "write_copy_kernel"),
]

SECTIONS = ["SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "SchedulerStats",
            "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis"]
COLUMNS = [
    ("us", "gpu__time_duration.sum", 1e-3),
    ("DRAM %", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("SM %", "sm__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("occupancy %", "sm__warps_active.avg.pct_of_peak_sustained_active", 1),
    ("issue busy %", "smsp__issue_active.avg.pct_of_peak_sustained_active", 1),
    ("cycles/issue", "smsp__average_warp_latency_per_inst_issued.ratio", 1),
    ("tensor pipe %", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", 1),
    ("smem ld conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", 1),
    ("smem st conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", 1),
    ("smem wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 1),
]
# metrics no section above collects
EXTRA_METRICS = [metric for title, metric, _ in COLUMNS if title.startswith("smem")]
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")


def parse_rows(text):
    rows = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, command, kernel = (part.strip() for part in line.split("|"))
        rows.append((name, command, kernel))
    return rows


def raw_metrics(report):
    text = subprocess.run(["ncu", "--import", report, "--csv", "--page", "raw",
                           "--print-units", "base"],
                          capture_output=True, text=True, check=True).stdout
    table = list(csv.reader(text.splitlines()))
    if len(table) < 3:
        return {}
    header, values = table[0], table[2]  # table[1] holds the units
    return dict(zip(header, values))


def number(metrics, name, factor=1.0):
    value = metrics.get(name, "").replace(",", "")
    try:
        return float(value) * factor
    except ValueError:
        return None


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    build, outdir = sys.argv[1], sys.argv[2]
    rows = parse_rows(open(sys.argv[3]).read()) if len(sys.argv) == 4 else ISSUE_21_ROWS
    os.makedirs(outdir, exist_ok=True)
    # the table's rows as they come (a call cut short keeps the rows done)
    print("| row | " + " | ".join(title for title, _, _ in COLUMNS) + " | largest stalls |")
    print("|---" * (len(COLUMNS) + 2) + "|", flush=True)
    for name, command, kernel in rows:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")
        report = os.path.join(outdir, slug)
        program, _, args = command.partition(" ")
        ncu = ["ncu", "--clock-control", "none", "--kernel-name-base", "demangled",
               "--kernel-name", "regex:" + kernel, "--launch-skip", "3", "--launch-count", "1",
               "-f", "-o", report]
        for section in SECTIONS:
            ncu += ["--section", section]
        ncu += ["--metrics", ",".join(EXTRA_METRICS)]
        shell = " ".join(shlex.quote(word) for word in ncu) + " " + \
            shlex.quote(os.path.join(build, "bench", program)) + " " + args
        result = subprocess.run(shell, shell=True, capture_output=True, text=True)
        with open(report + ".log", "w") as log:
            log.write(shell + "\n" + result.stdout + result.stderr)
        if result.returncode != 0 or not os.path.exists(report + ".ncu-rep"):
            print(f"| {name} | ncu failed (rc {result.returncode}, see {slug}.log) |", flush=True)
            continue
        metrics = raw_metrics(report + ".ncu-rep")
        with open(report + ".csv", "w") as out:
            writer = csv.writer(out)
            for key in sorted(metrics):
                writer.writerow([key, metrics[key]])
        cells = []
        for _, metric, factor in COLUMNS:
            value = number(metrics, metric, factor)
            cells.append("-" if value is None else f"{value:.1f}")
        stalls = sorted(((number(metrics, key) or 0.0, STALL.match(key).group(1))
                         for key in metrics if STALL.match(key)), reverse=True)
        cells.append(", ".join(f"{reason} {value:.2f}" for value, reason in stalls[:4]) or "-")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
