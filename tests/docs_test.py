#!/usr/bin/env python3
"""The documentation holds together:
- the generated references (docs/algorithms.md, docs/flags.md) are what the binaries print now
  (docs/generate.py --check): a new flag or algorithm without regenerating them fails here;
- every relative link of README.md and docs/*.md names a file of the repository, and every
  #anchor a heading of that file (GitHub's and mkdocs' slugs);
- README.md stays a front door (at most 300 lines);
- the site builds with `mkdocs build --strict` (skipped, saying so, without Debian's mkdocs).
Usage: docs_test.py SOURCE_DIR BIN_DIR"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

source, bin_dir = sys.argv[1], sys.argv[2]
failures = []

r = subprocess.run([sys.executable, os.path.join(source, "docs/generate.py"), bin_dir, "--check"],
                   capture_output=True, text=True)
if r.returncode != 0:
    failures.append((r.stderr or r.stdout).strip())


def slug(heading):
    """A heading's anchor: lower case, punctuation dropped, spaces to '-' (GitHub, mkdocs)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    found, fenced = set(), False
    for line in open(path):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.*)", line)):
            found.add(slug(m.group(1)))
    return found


pages = [os.path.join(source, "README.md")] + sorted(glob.glob(os.path.join(source, "docs/*.md")))
links = 0
for page in pages:
    text = re.sub(r"```.*?```", "", open(page).read(), flags=re.S)  # code is not linked
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        links += 1
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        name = os.path.relpath(page, source)
        if not resolved.startswith(os.path.abspath(source)) and not resolved.startswith(source):
            failures.append(f"{name}: link '{target}' leaves the repository")
        elif not os.path.exists(resolved):
            failures.append(f"{name}: link '{target}': no such file")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            failures.append(f"{name}: link '{target}': no heading with that anchor")

readme_lines = len(open(os.path.join(source, "README.md")).read().splitlines())
if readme_lines > 300:
    failures.append(f"README.md has {readme_lines} lines: a front door has at most 300 (move "
                    "the rest to docs/)")

if shutil.which("mkdocs") is None:
    print("skipped the site: mkdocs is not installed (install_deps.sh --tests installs it)")
else:
    with tempfile.TemporaryDirectory() as site:
        r = subprocess.run(["mkdocs", "build", "--strict", "-q", "-f",
                            os.path.join(source, "mkdocs.yml"), "-d", site],
                           capture_output=True, text=True)
        if r.returncode != 0:
            failures.append("mkdocs build --strict: " + (r.stderr or r.stdout).strip())

for f in failures:
    print("FAIL:", f)
print(f"{len(pages)} pages, {links} links, README {readme_lines} lines")
sys.exit(1 if failures else 0)
