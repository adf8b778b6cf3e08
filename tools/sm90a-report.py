#!/usr/bin/env python3
"""What ptxas makes of the sm_90a kernels (the wgmma ones), without a GPU: run it on a patch before
spending device time on it.

    tools/sm90a-report.py [PATCH ...]

Compiles each sm_90a translation unit (cuda/prefill/prefill_hopper*.cu, cuda/latent/latent_hopper.cu)
for sm_90a alone with the library's flags, in this tree, or with PATCHes applied in order in a
scratch copy of its tracked files. Prints one line per kernel: registers, spill stores / loads,
and ptxas's "Potential Performance Loss" notes by code (C7510-C7520: wgmma serialized, each
wgmma then waited on by itself; the session-38 half tiles lost 17-20 % so). Where cuobjdump and
nvdisasm are found (CUOBJDUMP or PATH; PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm
wheels carry them, doc/development.md), also the kernel's SASS instructions, HGMMAs and
WARPGROUP.ARRIVE / DEPBAR operations (main's PREFILL and LATENT kernels have a few; about two per
HGMMA means serialized, whatever the notes say). Exits 1 when a translation unit does not compile.
"""
import collections
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

UNITS = ["cuda/prefill/prefill_hopper.cu", "cuda/prefill/prefill_hopper_int8.cu",
         "cuda/prefill/prefill_hopper_fp8.cu", "cuda/latent/latent_hopper.cu"]
FLAGS = ["-O3", "-DNDEBUG", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
         "-DCUB_WRAPPED_NAMESPACE=pa_cub", "-DTHRUST_WRAPPED_NAMESPACE=pa_thrust",
         "-DPA_FP8_KV_CACHE=1", '-DPA_GPU_ARCHS="90a"', "-Ilib", "-Iinclude", "-I.",
         "-Xptxas=-v"]
COMPILING = re.compile(r"ptxas info\s*: Compiling entry function '(\S+)' for 'sm_90a'")
SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
REGISTERS = re.compile(r"ptxas info\s*: Used (\d+) registers")
NOTE = re.compile(r"\((C75\d\d)\) Potential Performance Loss.*in the function '(\S+)'")


def short_name(mangled):
    """The demangled kernel name without namespaces and parameter list."""
    out = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
    out = re.sub(r"\(.*\)$", "", out or mangled)
    return out.replace("pa::detail::", "").replace("pa::", "")


def ptxas_lines(stderr):
    """{mangled: {"registers", "spills", "notes"}} from nvcc -Xptxas=-v output."""
    kernels, current = {}, None

    def kernel(name):
        return kernels.setdefault(name, {"registers": "?", "spills": "0/0",
                                         "notes": collections.Counter()})

    for line in stderr.splitlines():
        m = COMPILING.search(line)
        if m:
            current = kernel(m.group(1))
            continue
        m = NOTE.search(line)
        if m:
            kernel(m.group(2))["notes"][m.group(1)] += 1
            continue
        if current is None:
            continue
        m = SPILLS.search(line)
        if m:
            current["spills"] = f"{m.group(1)}/{m.group(2)}"
        m = REGISTERS.search(line)
        if m:
            current["registers"] = m.group(1)
    return kernels


def sass_counts(obj):
    """{mangled: (instructions, HGMMAs, WARPGROUP ops)} where cuobjdump and nvdisasm run."""
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool or not shutil.which("nvdisasm"):
        return {}
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("sass_loops", os.path.join(here, "sass-loops.py"))
    sass_loops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sass_loops)
    counts = {}
    for key, code in sass_loops.functions(obj).items():
        name = key.split()[0]
        ops = collections.Counter(op.split(".")[0] for _, op, _ in code)
        counts[name] = (len(code), ops["HGMMA"], ops["WARPGROUP"])
    return counts


def main(patches):
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True).stdout.strip()
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    with tempfile.TemporaryDirectory(prefix="sm90a-report-") as scratch:
        tree = root
        if patches:
            tree = os.path.join(scratch, "tree")
            os.makedirs(tree)
            files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                                   check=True).stdout
            subprocess.run(["tar", "--null", "-T", "-", "-cf", "-"], cwd=root, input=files,
                           stdout=open(os.path.join(scratch, "tree.tar"), "wb"), check=True)
            subprocess.run(["tar", "-xf", os.path.join(scratch, "tree.tar"), "-C", tree], check=True)
            for patch in patches:
                subprocess.run(["git", "apply", os.path.abspath(patch)], cwd=tree, check=True)
        status = 0
        for unit in UNITS:
            obj = os.path.join(scratch, os.path.basename(unit) + ".o")
            run = subprocess.run([nvcc, *FLAGS, "-c", unit, "-o", obj], cwd=tree,
                                 capture_output=True, text=True)
            if run.returncode != 0:
                print(f"{unit}: does not compile\n{run.stderr[-3000:]}")
                status = 1
                continue
            kernels = ptxas_lines(run.stderr)
            sass = sass_counts(obj)
            print(unit)
            for mangled, k in sorted(kernels.items(), key=lambda kv: short_name(kv[0])):
                notes = " ".join(f"{code} x{n}" for code, n in sorted(k["notes"].items())) or "-"
                line = (f"  {short_name(mangled)}: {k['registers']} registers, spills "
                        f"{k['spills']} bytes, notes {notes}")
                if mangled in sass:
                    n, hgmma, warpgroup = sass[mangled]
                    line += f", SASS {n} instructions, {hgmma} HGMMA, {warpgroup} WARPGROUP"
                print(line)
        return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
