#!/usr/bin/env python3
"""Checks that README.md and doc/*.md cite only files that are in the repository: every markdown
link to a local file, and every path-like word (a/b.ext) that is not a build output (build*/) or
an installed location. A path may be relative to the repository root, to the document's folder,
to include/ (header names as a program includes them) or to cuda/ (the architecture drawing of
doc/development.md names the kernels' folders that way).
Usage: check_docs.py SOURCE_ROOT"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1]).resolve()
EXTENSIONS = r"(?:md|c|h|cu|cuh|py|txt|patch|build|sh|toml|json|csv|png|map|in)"
PATH = re.compile(r"(?<![\w./$-])((?:\.\./|\./)?[\w.-]+(?:/[\w.-]+)+\." + EXTENSIONS + r")(?![\w/])")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
NOT_IN_REPO = ("build", "/usr/", "/opt/", "/tmp/", "http")  # outputs and installed locations
failures = []

for doc in [root / "README.md", *sorted((root / "doc").glob("*.md"))]:
    text = doc.read_text()
    cited = {m.group(1) for m in LINK.finditer(text) if "://" not in m.group(1)}
    cited |= {m.group(1) for m in PATH.finditer(text)}
    for path in sorted(cited):
        if path.startswith(NOT_IN_REPO) or re.match(r"build[\w-]*/", path):
            continue
        bases = (root, doc.parent, root / "include", root / "cuda")
        if not any((base / path).exists() for base in bases):
            line = text[:text.find(path)].count("\n") + 1
            failures.append("%s:%d: cites %s, which is not in the repository"
                            % (doc.relative_to(root), line, path))

for failure in failures:
    print(failure)
print("%d citations of missing files" % len(failures) if failures else "docs: every cited file exists")
sys.exit(1 if failures else 0)
