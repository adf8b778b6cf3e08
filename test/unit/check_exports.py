#!/usr/bin/env python3
"""The shared library exports exactly the public API: every symbol is pa_ but not pa__, and every
function the header declares with PA_API is there."""
import re
import subprocess
import sys


def main() -> int:
    library, header = sys.argv[1], sys.argv[2]
    listing = subprocess.run(["nm", "-D", "--defined-only", library], check=True,
                             capture_output=True, text=True).stdout
    exported = {line.split()[-1] for line in listing.splitlines() if line.strip()}
    declared = set(re.findall(r"^PA_API\b[^(]*?\b(pa_\w+)\s*\(", open(header).read(), re.M))
    not_api = sorted(s for s in exported if not s.startswith("pa_") or s.startswith("pa__"))
    missing = sorted(declared - exported)
    print(f"{library}: {len(exported)} exported symbols, {len(declared)} declared in {header}")
    for symbol in not_api:
        print(f"exported but not public API: {symbol}")
    for symbol in missing:
        print(f"declared PA_API but not exported: {symbol}")
    return 1 if not_api or missing or not declared else 0


if __name__ == "__main__":
    sys.exit(main())
