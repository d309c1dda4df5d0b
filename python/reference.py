#!/usr/bin/env python3
"""Prints the API reference of the gpusched package: pydoc's text for it, without the
sections that name this machine's paths. docs/python-reference.txt is its output, and a test
keeps the two equal:

    python3 python/reference.py > docs/python-reference.txt
"""
import os
import pydoc
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("GPUSCHED_LIBRARY", "libgpusched.so.0")
import gpusched  # noqa: E402

text = pydoc.render_doc(gpusched, "Python Library Documentation: %s", renderer=pydoc.plaintext)
# Drop the FILE section (an absolute path) and the list of the package's modules.
out, skip = [], False
for line in text.splitlines():
    if re.match(r"^[A-Z][A-Z ]+$", line):
        skip = line in ("FILE", "PACKAGE CONTENTS", "SUBMODULES")
    if not skip:
        out.append(line.rstrip())
print("\n".join(out).rstrip())
