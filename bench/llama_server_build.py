"""Build llama.cpp's ``llama-server`` from the same source and flags as spec_actor's cached build.

The server needs llama.cpp's tools (mtmd, cpp-httplib, the UI stub), which
the library build leaves out. This switches them on in the cached library
build directory (``<cache>/llama-<key>/build``, never the work tree) and
builds only ``llama-server``: the library targets keep their flags, so
nothing of them recompiles and the server runs the very same ggml and llama
code as spec_actor. The first call compiles the server (about 70 files);
later calls return the binary.

    python bench/llama_server_build.py     # prints the path of llama-server
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "native" / "llama"))

import llama_build  # noqa: E402

SERVER_OPTIONS = ["-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF",
                  "-DLLAMA_USE_PREBUILT_UI=OFF"]


def build_llama_server() -> Path:
    """Return the path of ``llama-server``, compiling it first if it is not there."""
    cmake = shutil.which("cmake") or "cmake"
    prefix = llama_build.ensure_built(cmake, None, None)
    build = prefix.parent / "build"
    exe = build / "bin" / "llama-server"
    if exe.exists():
        return exe
    src = Path((prefix / "source-dir.txt").read_text().strip())
    print(f"[bench] building llama-server in {build} (once)", file=sys.stderr, flush=True)
    subprocess.run([cmake, "-S", str(src), "-B", str(build), *SERVER_OPTIONS], check=True, stdout=sys.stderr)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    subprocess.run([cmake, "--build", str(build), "-j", jobs, "--target", "llama-server"], check=True,
                   stdout=sys.stderr)
    return exe


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    print(build_llama_server())
