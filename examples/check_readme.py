#!/usr/bin/env python3
"""Checks that README.md shows what is built and run: its C and Python blocks are
examples/readme_example.{c,py} verbatim, and its test command is the one .ci/run runs.
Usage: check_readme.py SOURCE_ROOT"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
readme = (root / "README.md").read_text()
blocks = re.findall(r"^```(\w*)\n(.*?)^```$", readme, re.S | re.M)
failures = []


def block_is_file(language, path):
    found = [body for lang, body in blocks if lang == language]
    text = (root / path).read_text()
    if text not in found:
        failures.append("README.md: no ```%s block equal to %s (%d %s blocks)"
                        % (language, path, len(found), language))


block_is_file("c", "examples/readme_example.c")
block_is_file("python", "examples/readme_example.py")

commands = [line for lang, body in blocks if lang == "sh" for line in body.splitlines()]
test_commands = [c for c in commands if "meson test" in c]
ci = (root / ".ci/run").read_text().splitlines()
if len(test_commands) != 1:
    failures.append("README.md: expected one sh line with 'meson test', got %d" % len(test_commands))
elif not any(line.strip() == test_commands[0].strip() for line in ci):
    failures.append(".ci/run does not run the README's test command: %s" % test_commands[0])

for f in failures:
    print(f)
sys.exit(1 if failures else 0)
