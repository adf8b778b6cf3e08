#!/usr/bin/env python3
"""Fails unless every symbol the shared library exports is public API: pa_ but not pa__."""
import subprocess
import sys


def main() -> int:
    library = sys.argv[1]
    listing = subprocess.run(["nm", "-D", "--defined-only", library], check=True,
                             capture_output=True, text=True).stdout
    symbols = [line.split()[-1] for line in listing.splitlines() if line.strip()]
    bad = [s for s in symbols if not s.startswith("pa_") or s.startswith("pa__")]
    print(f"{library}: {len(symbols)} exported symbols")
    for symbol in bad:
        print(f"not public API: {symbol}")
    if not symbols:
        print("no exported symbols at all")
    return 1 if bad or not symbols else 0


if __name__ == "__main__":
    sys.exit(main())
