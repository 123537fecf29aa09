"""Build llama.cpp's own reference programs, and ours, against spec_actor's cached build.

``llama-completion`` (plain generation), ``llama-speculative-simple``
(llama.cpp's speculative loop) and ``llama-batched-bench`` (N sequences in one
context) are compiled from the same llama.cpp source and
linked to the same shared libraries that spec_actor uses, so a benchmark
compares the loops, not two builds. ``verify-cost`` (bench/verify_cost.cpp)
times one verification batch by size. Output goes next to the cached build.

    python bench/llama_tools.py     # builds llama.cpp's programs and prints their paths
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "native" / "llama"))

import llama_build  # noqa: E402

PROGRAMS = {
    "llama-completion": ["tools/completion/completion.cpp", "tools/completion/main.cpp"],
    "llama-speculative-simple": ["examples/speculative-simple/speculative-simple.cpp"],
    "llama-batched-bench": ["tools/batched-bench/batched-bench.cpp", "tools/batched-bench/main.cpp"],
}
"""llama.cpp's programs: name -> sources in the llama.cpp tree."""
OWN_PROGRAMS = {"verify-cost": [HERE / "verify_cost.cpp"]}
"""Ours: name -> sources in bench/ (rebuilt when a source is newer than the program)."""


def build_tools(names: list[str] | None = None) -> dict[str, Path]:
    """Return {program name: path} for ``names`` (default: llama.cpp's programs), compiling what is missing."""
    prefix = llama_build.ensure_built(llama_build.shutil.which("cmake") or "cmake", None, None)
    src = Path((prefix / "source-dir.txt").read_text().strip())
    out_dir = prefix.parent / "tools"
    out_dir.mkdir(exist_ok=True)
    paths = {}
    for name in names or list(PROGRAMS):
        sources = [src / s for s in PROGRAMS[name]] if name in PROGRAMS else OWN_PROGRAMS[name]
        exe = out_dir / name
        if not exe.exists() or any(s.stat().st_mtime > exe.stat().st_mtime for s in sources):
            print(f"[bench] compiling {name}", file=sys.stderr, flush=True)
            cmd = [os.environ.get("CXX", "g++"), "-O2", "-std=c++17", "-o", str(exe),
                   *[str(s) for s in sources],
                   *[f"-I{src / d}" for d in ("include", "ggml/include", "common", "vendor", "tools/completion")],
                   f"-L{prefix / 'lib'}", "-lllama-common", "-lllama", "-lggml", "-lggml-base",
                   f"-Wl,-rpath,{prefix / 'lib'}", "-lpthread"]
            subprocess.run(cmd, check=True)
        paths[name] = exe
    return paths


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    for name, path in build_tools().items():
        print(name, path)
