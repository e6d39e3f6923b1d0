#!/usr/bin/env python3
"""operator_names.py SOURCE_DIR KGEN: no shared file names an operator.

An operator is one registered object (generator/registry.h and the runtime halves its own files
register), so the code shared by every operator (the CLI, the checking layer's shared parts, the
runtime layers, the generator's shared parts) iterates the registries and never names one. The
operators are those `KGEN show-config --json` lists. A file names an operator when its code or
strings, comments aside, hold the name as a word ("attention_fwd", "attention_fwd.bf16.d128").
Each operator's own files may name it: those whose name starts with the operator's
(generator/<op>.cpp, runtime/ops/<op>_tuning.h, check/reference_<op>.cpp, tools/sweep_<op>.cpp),
and for the operators whose files are named after their family, the patterns of OWN below. The
registry row and the public entry points may name every operator. A folder or own-file pattern that matches nothing fails the test too
(a moved file must be named here again, not skipped).
"""
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile

# The folders whose C++ files are scanned.
FOLDERS = ["tools", "check", "cache", "generator", "runtime/base", "runtime/compiler", "runtime/driver", "runtime/jit",
           "runtime/tuning", "runtime/ops"]
# Below those, what is not kgen's shared host code: the AMD emulator and the tools' Python tests.
SKIPPED = ["tools/amdemu/*", "tools/tests/*"]
# Each operator's own files: the names they may use.
ATTENTION = {"attention_fwd", "attention_bwd", "attention_double_bwd"}
LRPE = {"lrpe_cosine", "md_lrpe_cosine"}
OWN = [
    (["generator/attention_*", "generator/variant*", "runtime/ops/attention_*", "check/attention_*",
      "check/reference_cpu.*", "check/reference_gpu.*", "tools/sweep_attention.cpp"], ATTENTION),
    (["generator/lrpe.*", "runtime/ops/lrpe.*", "runtime/ops/lrpe_*", "check/lrpe_*", "check/reference_lrpe.*",
      "tools/sweep_lrpe.cpp"], LRPE),
    # The registry row and the public entry points of every operator.
    (["generator/registry.cpp", "runtime/ops/c_api.cpp"], None),
]
SOURCES = (".h", ".hpp", ".cpp", ".cuh")


def code_of(text):
    """`text` without its // and /* */ comments (string and character literals kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            out.append(" ")
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def named(text, names):
    """(line, name) for every operator name in the code of `text`."""
    found = []
    for number, line in enumerate(code_of(text).split("\n"), 1):
        for name in names:
            if re.search(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])", line):
                found.append((number, name))
    return found


def allowed(path, names):
    """The operator names `path` may use: a set, or None for all."""
    for patterns, own in OWN:
        if any(fnmatch.fnmatch(path, p) for p in patterns):
            return own
    stem = os.path.basename(path).split(".")[0]
    for prefix in ("sweep_", "reference_"):
        stem = stem[len(prefix):] if stem.startswith(prefix) else stem
    return {n for n in names if stem == n or stem.startswith(n + "_")}


def main():
    source_dir, kgen = sys.argv[1], sys.argv[2]
    # The scanner finds a planted name, and not one in a comment.
    assert named('if (op == "attention_fwd") return 1;', ["attention_fwd"]) == [(1, "attention_fwd")]
    assert named('x = 1;  // attention_fwd\n/* lrpe_cosine */ y = "md_lrpe_cosine.fwd";', ["attention_fwd", "lrpe_cosine"]) == []
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, KGEN_CACHE_DIR=cache, KGEN_TUNE_DB="", KGEN_LOG_LEVEL="error")
        config = json.loads(subprocess.run([kgen, "show-config", "--json"], check=True, capture_output=True, text=True,
                                           env=env).stdout)
    names = config["operators"]
    if not names:
        print("operator_names.py: kgen lists no operator")
        return 1
    problems = []
    files = []
    for folder in FOLDERS:
        if not os.path.isdir(os.path.join(source_dir, folder)):
            problems.append(f"no folder {folder}")
        for root, _, entries in os.walk(os.path.join(source_dir, folder)):
            for entry in entries:
                path = os.path.relpath(os.path.join(root, entry), source_dir)
                if path.endswith(SOURCES) and not any(fnmatch.fnmatch(path, p) for p in SKIPPED) and path not in files:
                    files.append(path)
    for patterns, _ in OWN:
        for p in patterns:
            if not any(fnmatch.fnmatch(f, p) for f in files):
                problems.append(f"no file matches the own-file pattern {p}")
    for path in sorted(files):
        may = allowed(path, names)
        if may is None:
            continue
        with open(os.path.join(source_dir, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for number, name in named(text, [n for n in names if n not in may]):
            problems.append(f"{path}:{number} names {name}")
    if problems:
        print("shared files that name an operator (iterate the registry instead; an operator's own files are listed in "
              "tests/layers/operator_names.py):")
        print("\n".join(problems))
        return 1
    print(f"no shared file names an operator ({len(files)} files, operators {', '.join(names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
