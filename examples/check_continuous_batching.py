#!/usr/bin/env python3
"""Checks what continuous_batching tells its user: --help describes every option and exits 0, an
unknown option exits 2, a run names its backend and device and prints a checksum, --check and
--graph say when they cannot apply, and the checksum does not depend on --graph's padding.
Usage: check_continuous_batching.py PROGRAM (run without a GPU, or with --host forced below)."""
import re
import subprocess
import sys

program = sys.argv[1]
failures = []


def run(*args):
    done = subprocess.run([program, *args], capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def expect(condition, what):
    if not condition:
        failures.append(what)


code, out, _ = run("--help")
expect(code == 0, "--help: exit status 0 expected, got %d" % code)
for option in ("--host", "--check", "--graph", "--require-gpu", "--help"):
    expect(re.search(r"^\s+%s\s+\S" % option, out, re.M), "--help: no description of " + option)

code, _, err = run("--frobnicate")
expect(code == 2, "an unknown option: exit status 2 expected, got %d" % code)
expect("unknown option --frobnicate" in err, "an unknown option: not named in: " + err[:200])

checksums = {}
for args in (("--host",), ("--host", "--graph"), ("--host", "--check")):
    code, out, err = run(*args)
    name = " ".join(args)
    expect(code == 0, "%s: exit status 0 expected, got %d: %s" % (name, code, err[-300:]))
    last = out.strip().splitlines()[-1] if out.strip() else ""
    m = re.match(r"ran on the host \(reference executor\); backend (REFERENCE)(.*); "
                 r"output checksum ([0-9a-f]{16}) ", last)
    expect(m, "%s: last line should name the device, the backend and a checksum, got: %s"
           % (name, last))
    if m:
        checksums[name] = m.group(3)
    if "--check" in args:
        expect("--check does not apply: --host was given" in out,
               "%s: does not say that --check cannot apply" % name)
    if "--graph" in args:
        expect("--graph: --host was given, so decode batches are padded" in out,
               "%s: does not say that no CUDA graph runs" % name)
expect(len(set(checksums.values())) == 1,
       "the reference's outputs differ between runs: %s" % checksums)

other_seed = subprocess.run([program, "--host"], capture_output=True, text=True, timeout=300,
                            env={"PA_SEED": "7"}).stdout
expect(checksums and re.search(r"output checksum ([0-9a-f]{16})", other_seed)
       and re.search(r"output checksum ([0-9a-f]{16})", other_seed).group(1)
       not in checksums.values(), "PA_SEED=7 gives the same checksum: it checks nothing")
for failure in failures:
    print(failure)
print("%d checks failed" % len(failures) if failures else "continuous_batching: all checks passed")
sys.exit(1 if failures else 0)
