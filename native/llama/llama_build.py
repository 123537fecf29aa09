"""Obtain llama.cpp source and build it once per (source, flags) into a cache.

Run by CMake at configure time (see ../../CMakeLists.txt); usable by hand too:

    python native/llama/llama_build.py

Source, in order of preference:
  1. ``SPEC_ACTOR_LLAMA_CPP_DIR``: a local llama.cpp checkout, built as it is;
  2. the ``vendor/llama.cpp`` tree of the PyPI source distribution
     ``llama-cpp-python==0.3.36``, fetched with pip into the cache, with the
     patches of ``patches/`` applied to a copy of it (llama_patches.py).

The build lands in ``$SPEC_ACTOR_CACHE_DIR`` (default
``~/.cache/spec_actor``) under a key made of the source hash, the CMake flags
(``CMAKE_ARGS`` included, so e.g. scripts/sanitize.sh's sanitizer flags get
a build of their own) and the compiler, so a second install, an editable
install or a CI run on the same machine reuses it instead of recompiling.
Prints the install prefix (``lib/`` with the shared libraries, ``include/``)
as its last line.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_patches  # noqa: E402  (beside this file; run as a script by CMake)

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
BUILD_RECIPE_VERSION = "2"  # bump when the flags below change meaning

# llama.cpp options, in one place. Shared libraries so that every backend
# (CPU, CUDA, ...) carries its own link dependencies; they are installed next
# to the Python extension and found through an $ORIGIN rpath.
LLAMA_CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DLLAMA_BUILD_COMMON=ON",  # common_speculative, samplers, n-gram caches
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",  # no downloads from inside the library
    "-DLLAMA_SUBPROCESS=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DGGML_BACKEND_DL=OFF",
    # ggml's own thread pool, one per session, instead of OpenMP's team per
    # calling thread: with OpenMP a second thread that has ever computed
    # (trio's worker threads, another session) made every graph barrier
    # sleep instead of spin, 37% slower (docs/decisions/0006).
    "-DGGML_OPENMP=OFF",
    # ggml's RPC backend, for `load_model(rpc=[...])` and `spec-actor
    # rpc-worker` (docs/decisions/0097); TCP only, so the library needs no
    # RDMA driver where it is installed.
    "-DGGML_RPC=ON",
    "-DGGML_RPC_RDMA=OFF",
    "-DCMAKE_INSTALL_LIBDIR=lib",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",  # libraries find each other next to the extension
]

# Targets that the shim links; building only these skips unrelated code.
LLAMA_TARGETS = ["llama", "llama-common", "ggml"]


# x86 CPU features -> ggml options, for the AMX work-around below.
_X86_FEATURE_OPTIONS = {
    "sse4_2": "GGML_SSE42", "avx": "GGML_AVX", "avx2": "GGML_AVX2", "bmi2": "GGML_BMI2",
    "fma": "GGML_FMA", "f16c": "GGML_F16C", "avx_vnni": "GGML_AVX_VNNI", "avx512f": "GGML_AVX512",
    "avx512vbmi": "GGML_AVX512_VBMI", "avx512_vnni": "GGML_AVX512_VNNI", "avx512_bf16": "GGML_AVX512_BF16",
}


def cpu_features() -> set[str]:
    """This x86 CPU's feature flags (/proc/cpuinfo), or none where there is no such file."""
    if not os.path.exists("/proc/cpuinfo"):
        return set()
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def cpu_flags() -> list[str]:
    """CMake flags for this CPU (see docs/decisions/0002-no-amx.md).

    ggml's AMX matmul crashes (SIGSEGV in ggml_backend_amx_mul_mat) on the
    AMX-capable Xeons we build on, and -march=native turns it on. On such a
    CPU we build for its exact instruction set minus AMX instead; elsewhere
    GGML_NATIVE stays as llama.cpp sets it. A user's own GGML_NATIVE / CPU
    flags in CMAKE_ARGS win.
    """
    if "GGML_NATIVE" in os.environ.get("CMAKE_ARGS", ""):
        return []
    flags = cpu_features()
    if "amx_tile" not in flags:
        return []
    return ["-DGGML_NATIVE=OFF"] + [
        f"-D{option}={'ON' if feature in flags else 'OFF'}" for feature, option in _X86_FEATURE_OPTIONS.items()
    ]


def log(msg: str) -> None:
    print(f"[spec_actor build] {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    env = os.environ.get("SPEC_ACTOR_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "spec_actor"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_fingerprint(root: Path) -> str:
    """Hash of the paths, sizes and mtimes of the source files that get built."""
    digest = hashlib.sha256()
    for sub in ("CMakeLists.txt", "cmake", "include", "src", "common", "ggml", "vendor"):
        base = root / sub
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for p in files:
            st = p.stat()
            digest.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def fetch_sdist(dest: Path) -> Path:
    """Download the llama-cpp-python sdist with pip (no build, no deps)."""
    dest.mkdir(parents=True, exist_ok=True)
    found = sorted(dest.glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"))
    if found:
        return found[0]
    log(f"downloading llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} source with pip")
    subprocess.run(
        [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-build-isolation",
            "--no-binary", "llama-cpp-python", "--disable-pip-version-check",
            f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(dest),
        ],
        check=True,
        stdout=sys.stderr,
    )
    found = sorted(dest.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        raise SystemExit("pip download did not produce the llama-cpp-python sdist")
    return found[0]


def extract_vendor_tree(sdist: Path, dest: Path) -> Path:
    """Unpack only vendor/llama.cpp of the sdist into dest (idempotent)."""

    def unpack(tmp: Path) -> Path:
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name]
            tar.extractall(tmp, members=members, filter="data")
        roots = list(tmp.glob("*/vendor/llama.cpp"))
        if not roots:
            raise SystemExit(f"{sdist} has no vendor/llama.cpp tree")
        return roots[0]

    return publish_tree(dest, ".extracted", sdist.name, unpack)


def publish_tree(dest: Path, stamp: str, stamp_text: str, make: Callable[[Path], Path]) -> Path:
    """dest, made once: ``make`` builds the tree in a temporary folder beside it, which then moves into place.

    A tree whose stamp file exists is complete; an interrupted one is made again.
    """
    if (dest / stamp).exists():
        return dest
    tmp = Path(tempfile.mkdtemp(dir=dest.parent))
    tree = make(tmp)
    (tree / stamp).write_text(stamp_text)
    shutil.rmtree(dest, ignore_errors=True)
    tree.rename(dest)
    shutil.rmtree(tmp, ignore_errors=True)
    return dest


def compiler_id() -> str:
    """The C++ compiler's resolved path and version (not the name it was called by)."""
    cxx = shutil.which(os.environ.get("CXX", "c++")) or os.environ.get("CXX", "c++")
    try:
        out = subprocess.run([cxx, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True, check=False)
        return f"{os.path.realpath(cxx)} {out.stdout.strip()}"
    except OSError:
        return cxx


def resolve_source(root: Path) -> tuple[Path, str]:
    """Return (llama.cpp source dir, source hash)."""
    local = os.environ.get("SPEC_ACTOR_LLAMA_CPP_DIR")
    if local:
        src = Path(local).expanduser().resolve()
        if not (src / "include" / "llama.h").is_file():
            raise SystemExit(f"SPEC_ACTOR_LLAMA_CPP_DIR={local} is not a llama.cpp tree (no include/llama.h)")
        return src, "local-" + tree_fingerprint(src)
    pristine, sha = pristine_source(root)
    patches = llama_patches.fingerprint()
    return patched_copy(pristine, root / f"src-{sha[:16]}-patched-{patches}"), f"sdist-{sha}+patches-{patches}"


def pristine_source(root: Path) -> tuple[Path, str]:
    """The llama-cpp-python sdist's ``vendor/llama.cpp``, unpacked once under root, and the sdist's sha256."""
    sdist = fetch_sdist(root / "sdist")
    sha = file_sha256(sdist)
    return extract_vendor_tree(sdist, root / f"src-{sha[:16]}"), sha


def patched_copy(pristine: Path, dest: Path) -> Path:
    """dest: a copy of the unpacked tree with the patches of native/llama/patches/ applied (once; idempotent)."""

    def copy_and_edit(tmp: Path) -> Path:
        tree = tmp / "llama.cpp"
        shutil.copytree(pristine, tree, symlinks=True)
        llama_patches.apply(tree)
        return tree

    return publish_tree(dest, ".patched", llama_patches.fingerprint(), copy_and_edit)


def ensure_built(cmake: str, generator: str | None, make_program: str | None) -> Path:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / ".lock"):  # fetching and unpacking the source
        src, src_hash = resolve_source(root)
    user_args = cpu_flags() + shlex.split(os.environ.get("CMAKE_ARGS", ""))
    key_text = "\n".join([BUILD_RECIPE_VERSION, src_hash, compiler_id(), *LLAMA_CMAKE_FLAGS, *user_args])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:20]
    work = root / f"llama-{key}"
    prefix = work / "prefix"
    work.mkdir(exist_ok=True)
    # One lock per key: a long build (e.g. scripts/sanitize.sh's) does not
    # hold up installs that reuse another, finished build.
    with _locked(work / ".lock"):
        if (work / ".done").exists():
            log(f"reusing cached llama.cpp build {work}")
            return prefix
        log(f"building llama.cpp from {src} into {work} (cached for later installs)")
        build = work / "build"
        gen_args = ["-G", generator] if generator else (["-G", "Ninja"] if shutil.which("ninja") else [])
        if make_program:
            gen_args.append(f"-DCMAKE_MAKE_PROGRAM={make_program}")
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.run(
            [cmake, "-S", str(src), "-B", str(build), *gen_args, *LLAMA_CMAKE_FLAGS,
             f"-DCMAKE_INSTALL_PREFIX={prefix}", *user_args],
            check=True, stdout=sys.stderr,
        )
        targets = [a for t in LLAMA_TARGETS for a in ("--target", t)]
        subprocess.run([cmake, "--build", str(build), "-j", jobs, *targets], check=True, stdout=sys.stderr)
        install_tree(src, build, prefix)
        (work / "key.txt").write_text(key_text)
        (work / ".done").write_text("ok")
        return prefix


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on path (created if needed) for the block."""
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def install_tree(src: Path, build: Path, prefix: Path) -> None:
    """Copy the shared libraries and the headers the shim needs into prefix."""
    shutil.rmtree(prefix, ignore_errors=True)
    (prefix / "lib").mkdir(parents=True)
    for lib in build.rglob("*.so*"):
        if lib.is_file() or lib.is_symlink():
            target = prefix / "lib" / lib.name
            if lib.is_symlink():
                target.symlink_to(os.readlink(lib))
            else:
                shutil.copy2(lib, target)
    inc = prefix / "include"
    shutil.copytree(src / "include", inc)
    shutil.copytree(src / "ggml" / "include", inc, dirs_exist_ok=True)
    common_inc = inc / "common"
    common_inc.mkdir()
    for h in (src / "common").glob("*.h"):
        shutil.copy2(h, common_inc / h.name)
    for h in (src / "common").glob("*.hpp"):
        shutil.copy2(h, common_inc / h.name)
    vendor = src / "vendor"
    if vendor.is_dir():
        shutil.copytree(vendor, inc / "vendor", ignore=shutil.ignore_patterns("*.c", "*.cpp"))
    (prefix / "source-dir.txt").write_text(str(src))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cmake", default=shutil.which("cmake") or "cmake", help="cmake executable")
    parser.add_argument("--generator", default=None, help="CMake generator (default: Ninja if found)")
    parser.add_argument("--make-program", default=None, help="build tool for the generator")
    args = parser.parse_args()
    print(ensure_built(args.cmake, args.generator, args.make_program))


if __name__ == "__main__":
    main()
