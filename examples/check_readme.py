#!/usr/bin/env python3
"""Checks that README.md shows what is built and run: its C and Python blocks are
examples/readme_example.{c,py} verbatim; its test command, its pkg-config build line (with an rpath)
and its pip line are run by .ci/run, as is doc/vendoring.md's install recipe; its list of the
packages tools/bootstrap installs is the script's.
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


def sh_lines(text):
    return [line for lang, body in re.findall(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)
            if lang == "sh" for line in body.splitlines()]


def ci_runs(line, what):
    """.ci/run has the line alone, or followed by ' &&' (a step of a chain)."""
    if not any(re.sub(r"\s*&&$", "", ci_line.strip()) == line.strip() for ci_line in ci):
        failures.append(".ci/run does not run %s: %s" % (what, line))


# The README's pkg-config build line runs the program, so it needs an rpath (or ldconfig).
cc_lines = [c for c in commands if c.startswith("cc ")]
if len(cc_lines) != 1 or "-Wl,-rpath," not in cc_lines[0]:
    failures.append("README.md: expected one sh line 'cc ... -Wl,-rpath,...', got %s" % cc_lines)
else:
    ci_runs(cc_lines[0], "the README's pkg-config build line")

# The README's pip line, with the venv in CI's scratch folder and one GPU arch.
pip_lines = [c for c in commands if "pip install ." in c]
if len(pip_lines) != 1:
    failures.append("README.md: expected one sh line with 'pip install .', got %d" % len(pip_lines))
else:
    ci_runs(pip_lines[0].replace(".venv", "$venv").replace(
        "pip install .", "pip install . --config-settings=setup-args=-Dgpu_archs=80"),
            "the README's pip line")

# doc/vendoring.md's install recipe, with CI's prefix for /opt/pagedattn.
vendoring = sh_lines((root / "doc/vendoring.md").read_text())
recipe = [c for c in vendoring if "/opt/pagedattn" in c]
if len(recipe) != 2:
    failures.append("doc/vendoring.md: expected two sh lines with /opt/pagedattn (install, "
                    "PKG_CONFIG_PATH), got %d" % len(recipe))
for line in recipe:
    ci_runs(line.replace("/opt/pagedattn", "$prefix"), "doc/vendoring.md's recipe")

# The README lists the apt packages tools/bootstrap installs.
bootstrap = (root / "tools/bootstrap").read_text()
listed = re.search(r"^for package in ([^;]+); do", bootstrap, re.M)
said = re.search(r"`tools/bootstrap` installs `([^`]+)`\s+with apt", readme)
if not listed or not said or listed.group(1).split() != said.group(1).split():
    failures.append("README.md: the apt packages of tools/bootstrap (%s) are not the ones it lists "
                    "(%s)" % (listed and listed.group(1), said and said.group(1)))
for extra in re.findall(r"missing\+=\((python3-\w+)\)", bootstrap):
    if "`%s`" % extra not in readme:
        failures.append("README.md: does not say that tools/bootstrap may install %s" % extra)

for f in failures:
    print(f)
sys.exit(1 if failures else 0)
