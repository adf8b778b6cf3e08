#!/usr/bin/env python3
"""Prints the library version read from include/pagedattn/version.h (the single source)."""
import pathlib, re
text = (pathlib.Path(__file__).resolve().parent.parent / "include/pagedattn/version.h").read_text()
print(".".join(re.search(rf"#define PA_VERSION_{part} (\d+)", text).group(1)
               for part in ("MAJOR", "MINOR", "PATCH")))
