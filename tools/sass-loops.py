#!/usr/bin/env python3
"""The loops of a kernel's SASS and what they execute, without a GPU.

    tools/sass-loops.py FILE KERNEL [FILE ...]

FILE is an object file or a library with sm_XX machine code (build/libpagedattn.so, or one
translation unit compiled with nvcc -c); KERNEL is a regular expression that the mangled name of
one function, followed by a space and its architecture, must match (e.g.
'decode_kernelI13__nv_bfloat16NS0_8fp8_e4m3ELi128E.* sm_90a'). For each FILE,
every loop (a backward branch and the code it jumps over) that holds a tensor-core instruction
(HMMA, HGMMA) or a copy into shared memory (LDGSTS, UTMALDG) is printed innermost first: its
address range, its static instruction count and its ten most frequent opcodes. Two FILEs compare
two trees' builds of the same kernel, the figures doc/development.md quotes for the patches of
"Work in progress" ("tile loop 826 -> 710").

Static counts: an instruction under a branch that a tile does not take counts all the same, so
read the listing (cuobjdump -sass -fun NAME FILE) for the path a tile runs. cuobjdump comes from
the toolkit, else from $CUOBJDUMP, else from PyPI's nvidia-cuda-cuobjdump wheel (doc/development.md,
"On a GPU workstation").
"""
import collections
import os
import re
import shutil
import subprocess
import sys

MARKERS = ("HMMA", "HGMMA", "LDGSTS", "UTMALDG")
INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)\S*\s*(.*)")
FUNCTION = re.compile(r"\s*Function : (\S+)")
ARCH = re.compile(r"\s*code for (sm_\w+)")


def cuobjdump():
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        sys.exit("sass-loops: no cuobjdump (set CUOBJDUMP, or see the docstring)")
    return tool


def functions(path):
    """{"mangled name sm_XX": [(address, opcode, operands)]} of every function in path (a
    library built for several architectures holds each kernel once per architecture)."""
    text = subprocess.run([cuobjdump(), "-sass", path], capture_output=True, text=True,
                          check=True).stdout
    found, current, arch = {}, None, "sm_?"
    for line in text.splitlines():
        code_for = ARCH.match(line)
        if code_for:
            arch = code_for.group(1)
            continue
        name = FUNCTION.match(line)
        if name:
            current = found.setdefault(f"{name.group(1)} {arch}", [])
            continue
        instruction = INSTRUCTION.match(line)
        if instruction and current is not None:
            address, opcode, operands = instruction.groups()
            current.append((int(address, 16), opcode, operands))
    return found


def loops(code):
    """(start, end, body) of each backward branch holding a marker, innermost first."""
    found = []
    for address, opcode, operands in code:
        target = re.search(r"0x([0-9a-f]+)", operands) if opcode == "BRA" else None
        if target and int(target.group(1), 16) < address:
            start = int(target.group(1), 16)
            body = [i for i in code if start <= i[0] <= address]
            if any(i[1] in MARKERS for i in body):
                found.append((start, address, body))
    return sorted(found, key=lambda loop: len(loop[2]))


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    pattern = re.compile(argv[2])
    for path in [argv[1]] + argv[3:]:
        matches = {n: c for n, c in functions(path).items() if pattern.search(n)}
        if len(matches) != 1:
            sys.exit(f"sass-loops: {len(matches)} functions of {path} match {argv[2]!r}"
                     + "".join(f"\n  {n}" for n in sorted(matches)[:20]))
        (name, code), = matches.items()
        print(f"{path}: {name}: {len(code)} instructions")
        for start, end, body in loops(code):
            ops = collections.Counter(i[1] for i in body).most_common(10)
            print(f"  loop {start:#x}-{end:#x}: {len(body)} instructions; "
                  + " ".join(f"{op} {n}" for op, n in ops))


if __name__ == "__main__":
    main(sys.argv)
