#!/usr/bin/env python3
"""Runs the meson `gpu` suite of a build directory as parallel processes on the GPU machine.

meson runs the matrix tests one process each, and test_gpu_write's full matrix alone takes about
five minutes; here the four matrix tests are split into PA_GPU_TEST_SHARD shares (same seed, so
together they run every case once), every other gpu test runs once, and memcheck runs on the quick
write-path matrix, all at the same time. One line per process is appended to SUMMARY; each process's
output is in LOGDIR/suite-NN.log.

  tools/gpu-suite-parallel.py BUILD_DIR SUMMARY [--seconds 300] [--logdir /tmp]
"""
import argparse, json, os, subprocess, time

SHARDS = {"gpu_write": 8, "gpu_unfused": 4, "gpu_decode": 2, "gpu_prefill": 4, "gpu_latent": 8}

ap = argparse.ArgumentParser()
ap.add_argument("build"); ap.add_argument("summary")
ap.add_argument("--seconds", type=float, default=300, help="wall-clock cap for all processes")
ap.add_argument("--logdir", default="/tmp")
ap.add_argument("--seed", default=os.environ.get("PA_TEST_SEED", str(int(time.time()))))
args = ap.parse_args()

tests = [t for t in json.loads(subprocess.check_output(["meson", "introspect", "--tests", args.build]))
         if any(s.endswith(":gpu") for s in t["suite"])]


def test_env(test_vars):
    """os.environ with a test's own variables, as meson test sets them: a path list such as
    LD_LIBRARY_PATH goes in front of the caller's, which keeps .devdeps/lib (cmocka) in it."""
    env = dict(os.environ)
    for name, value in (test_vars or {}).items():
        path_list = name.endswith("PATH") and env.get(name)
        env[name] = f"{value}{os.pathsep}{env[name]}" if path_list else value
    return env


jobs = []
for t in tests:
    n = SHARDS.get(t["name"], 1)
    for i in range(n):
        env = dict(test_env(t.get("env")), PA_TEST_SEED=args.seed)
        if n > 1:
            env["PA_GPU_TEST_SHARD"] = f"{i}/{n}"
        jobs.append((t["name"] + (f" shard {i}/{n}" if n > 1 else ""), t["cmd"], env))
jobs.append(("memcheck write quick",
             ["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "9",
              os.path.join(args.build, "test/gpu/test_gpu_write")],
             dict(os.environ, PA_GPU_TEST_QUICK="1", PA_TEST_SEED=args.seed)))

os.makedirs(args.logdir, exist_ok=True)
start = time.time()
procs = []
for k, (name, cmd, env) in enumerate(jobs):
    log = open(os.path.join(args.logdir, f"suite-{k:02d}.log"), "w")
    procs.append((name, subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
with open(args.summary, "a") as out:
    out.write(f"gpu suite of {args.build}, seed {args.seed}, {len(jobs)} processes\n")
    for name, p, log in procs:
        try:
            rc = p.wait(timeout=max(1, args.seconds - (time.time() - start)))
        except subprocess.TimeoutExpired:
            p.kill(); p.wait(); rc = "timeout"
        log.close()
        lines = [l for l in open(log.name).read().splitlines() if l.strip()]
        key = [l for l in lines if "passed," in l or "ERROR SUMMARY" in l or "FAIL" in l][-4:]
        out.write(f"{name}: rc={rc} ({time.time() - start:.0f} s) "
                  f"{' | '.join(key) or (lines[-1] if lines else '')}\n")
        out.flush()
