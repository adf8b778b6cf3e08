#!/usr/bin/env python3
"""The include rules of doc/development.md ("Who may include whom") for the device side:

* a file under cuda/common/ includes only cuda/common/ files, the public header and system headers;
* a kernel header (any other cuda/**/*.cuh whose name does not start with "launch_") includes only
  kernel headers, cuda/common/ files, the public header and system headers.

So neither includes a lib/ header (problem.h, internal.h, workspace.h, ...) nor a launcher header
(cuda/launch_common.cuh, cuda/*/launch_*.cuh), directly or through another header.

    check_includes.py SOURCE_ROOT      checks the tree; exit status 1 on a violation
    check_includes.py --self-test      checks that a violating tree is caught
"""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def is_launcher_header(path: str) -> bool:
    return os.path.basename(path).startswith("launch_")


def violations(root: str) -> list:
    cuda = os.path.join(root, "cuda")
    common = os.path.join(cuda, "common")
    lib_headers = {name for name in os.listdir(os.path.join(root, "lib")) if name.endswith(".h")}
    problems = []
    for directory, _, names in os.walk(cuda):
        for name in sorted(names):
            path = os.path.join(directory, name)
            in_common = os.path.commonpath([path, common]) == common
            if not in_common and not (name.endswith(".cuh") and not is_launcher_header(name)):
                continue  # launchers (.cu, launch_*.cuh) may include anything
            what = "cuda/common/ file" if in_common else "kernel header"
            for included in INCLUDE.findall(open(path, encoding="utf-8").read()):
                where = os.path.relpath(path, root)
                if included.startswith("pagedattn/"):
                    continue  # the public header
                target = os.path.normpath(os.path.join(directory, included))
                if not os.path.isfile(target):
                    reason = ("a lib/ header" if os.path.basename(included) in lib_headers
                              else "not a file of cuda/ (resolved from the including file)")
                    problems.append(f'{where}: {what} includes "{included}": {reason}')
                elif in_common and os.path.commonpath([target, common]) != common:
                    problems.append(f'{where}: {what} includes "{included}", outside cuda/common/')
                elif is_launcher_header(target) or not target.endswith(".cuh"):
                    problems.append(f'{where}: {what} includes "{included}", a launcher file')
    return problems


def self_test() -> int:
    """A tree with one clean kernel header and three that break a rule must give three problems."""
    files = {
        "lib/problem.h": "",
        "cuda/common/numeric.cuh": '#include "pagedattn/pagedattn.h"\n',
        "cuda/common/bad.cuh": '#include "../decode/decode_kernel.cuh"\n',
        "cuda/launch_common.cuh": '#include "problem.h"\n',
        "cuda/decode/decode_kernel.cuh": '#include "../common/numeric.cuh"\n',
        "cuda/decode/bad_kernel.cuh": '#include "problem.h"\n',
        "cuda/decode/worse_kernel.cuh": '#include "../launch_common.cuh"\n',
        "cuda/decode/decode.cu": '#include "../launch_common.cuh"\n#include "internal.h"\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            open(os.path.join(root, name), "w").write(text)
        found = violations(root)
    for problem in found:
        print("expected:", problem)
    ok = len(found) == 3 and all(("bad" in p or "worse" in p) for p in found)
    print("self-test", "passed" if ok else "FAILED: expected exactly the three bad files")
    return 0 if ok else 1


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1]
    problems = violations(root)
    for problem in problems:
        print(problem)
    print(f"include rules of doc/development.md: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
