#!/usr/bin/env bash
# Build the C++ shim AND llama.cpp with AddressSanitizer + UndefinedBehaviorSanitizer
# and run the tests under them. Not part of .ci/run: the build takes long on a
# small machine and the sanitized tests run several times slower.
#
#   scripts/sanitize.sh                  # the default subset (see TESTS below)
#   scripts/sanitize.sh tests/test_x.py  # any pytest arguments instead
#   scripts/sanitize.sh --build-only     # only build (and cache) the sanitized libraries
#   scripts/sanitize.sh --shim-only ...  # sanitize only the shim (see below); combines with the above
#
# - llama.cpp is built by native/llama/llama_build.py as usual: the sanitizer flags
#   travel in CMAKE_ARGS, which is part of its cache key, so the sanitized build
#   is cached beside the normal one (~/.cache/spec_actor/llama-<key>) and built
#   only once. The shim gets the same flags from CMAKE_ARGS via scikit-build-core.
# - The sanitized extension goes into its own venv (SANITIZE_VENV, default
#   build/sanitize-venv) with its own build dir, so the normal venv is untouched.
# - Python itself is not sanitized: libasan is LD_PRELOADed, leak detection is
#   off (CPython keeps memory until exit), and every report is written to
#   $SANITIZE_LOGS/{asan,ubsan}.<pid> (default build/sanitize-logs), summarised
#   at the end. The exit status is pytest's, or 3 when there are reports.
# - --shim-only: the shim and the cffi module are sanitized, llama.cpp is the
#   normal cached build (the flags go to scikit-build-core as cmake.define,
#   not through CMAKE_ARGS, so llama.cpp's cache key does not change). ASan
#   then checks every access the shim makes, and in llama.cpp only what goes
#   through its interceptors (malloc/free/new/delete, memcpy, str*). Use it
#   where the full build does not fit: on a loaded 2-core machine the
#   sanitized llama.cpp took 2-10 minutes per file (135 files).
set -uo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    # the comment above, as the usage: nothing is built or run
    echo "usage: $(basename "$0") [--build-only] [--shim-only] [PYTEST ARGUMENTS ...]"
    sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"
    exit 0
fi
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${SANITIZE_VENV:-$ROOT/build/sanitize-venv}
LOGS=${SANITIZE_LOGS:-$ROOT/build/sanitize-logs}
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -g1"
# -O1 (what ASan's documentation recommends) instead of the Release build's
# -O3: under UBSan, -O3 took 2-10 minutes per llama.cpp file on 2 cores.
SAN_OPT="-O1 -DNDEBUG"
SAN_LINK="-fsanitize=address,undefined"
BUILD_ONLY=0 SHIM_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --build-only) BUILD_ONLY=1 ;;
        --shim-only) SHIM_ONLY=1 ;;
        *) break ;;
    esac
    shift
done

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv --system-site-packages "$VENV" || exit 1
fi
if [ $SHIM_ONLY -eq 1 ]; then
    echo "[sanitize] building the shim only (llama.cpp: the normal cached build) ..." >&2
    unset CMAKE_ARGS
    "$VENV/bin/pip" install -q --no-build-isolation --no-deps -Cbuild-dir=build/sanitize-shim \
        "-Ccmake.define.CMAKE_C_FLAGS=$SAN" "-Ccmake.define.CMAKE_CXX_FLAGS=$SAN" \
        "-Ccmake.define.CMAKE_SHARED_LINKER_FLAGS=$SAN_LINK" "-Ccmake.define.CMAKE_MODULE_LINKER_FLAGS=$SAN_LINK" \
        -e . || exit 1
else
    echo "[sanitize] building (llama.cpp is cached after the first time) ..." >&2
    export CMAKE_ARGS="-DCMAKE_C_FLAGS='$SAN' -DCMAKE_CXX_FLAGS='$SAN' \
-DCMAKE_C_FLAGS_RELEASE='$SAN_OPT' -DCMAKE_CXX_FLAGS_RELEASE='$SAN_OPT' \
-DCMAKE_SHARED_LINKER_FLAGS='$SAN_LINK' -DCMAKE_MODULE_LINKER_FLAGS='$SAN_LINK'"
    "$VENV/bin/pip" install -q --no-build-isolation --no-deps -Cbuild-dir=build/sanitize -e . || exit 1
fi

[ $BUILD_ONLY -eq 1 ] && exit 0

LIBASAN=$(${CXX:-c++} -print-file-name=libasan.so)
[ -e "$LIBASAN" ] || { echo "[sanitize] libasan.so not found ($LIBASAN)" >&2; exit 1; }
# libstdc++ is preloaded too: ASan resolves its __cxa_throw interceptor when it
# starts, and python does not link libstdc++, so the first C++ exception
# (llama.cpp refusing a damaged GGUF) died in "CHECK failed ...
# real___cxa_throw != 0" instead of reaching the shim's catch.
LIBSTDCXX=$(${CXX:-c++} -print-file-name=libstdc++.so.6)
[ -e "$LIBSTDCXX" ] || { echo "[sanitize] libstdc++.so.6 not found ($LIBSTDCXX)" >&2; exit 1; }
rm -rf "$LOGS" && mkdir -p "$LOGS"
TESTS=("$@")
if [ ${#TESTS[@]} -eq 0 ]; then
    # The default selection: every test file that drives the native layer on
    # the tiny generated models (all speculative types, hybrid rollback,
    # lifetimes, misuse, the GGUF and grammar fuzz cases, the thread budget,
    # auto), plus the pure-Python ones. Left out for time, name them to run
    # them: the files that generate mostly with the embedded Gemma (under
    # ASan + UBSan at -O1 its matrix kernels run so slowly that
    # tests/test_actor.py alone took over 10 minutes on 2 cores), the CLI and
    # examples (they time whole commands), and the tests that bound RSS
    # growth: ASan holds freed memory in its quarantine (256 MiB by default)
    # so that a use after free is caught, and RSS grew past the bounds with
    # no report (the 200 start/cancel cycles: 99 MiB against 64; the 1,000
    # cancelled requests: 30.8 MiB against 24). The two hypothesis grammar
    # properties are left out too: under ASan one {2000}-repetition grammar
    # ran over 150 s, after which the dead worker fails every later example;
    # their fixed cases still run.
    TESTS=(tests -q -x -p no:cacheprovider
           --ignore tests/test_cli.py --ignore tests/test_examples.py
           --ignore tests/test_actor.py --ignore tests/test_session.py --ignore tests/test_streams.py
           --ignore tests/test_serve.py --ignore tests/test_serve_cancel.py --ignore tests/test_serve_cli.py
           --ignore tests/test_chat.py --ignore tests/test_pool.py --ignore tests/test_lossless_behaviours.py
           --ignore tests/test_bench_scripts.py --ignore tests/test_stats_snapshots.py
           --deselect tests/test_fuzz_grammar.py::test_random_grammars_neither_crash_nor_hang
           --deselect tests/test_fuzz_grammar.py::test_mutated_grammars_neither_crash_nor_hang
           --deselect tests/test_hardening_stress.py::test_a_thousand_randomly_cancelled_requests_leak_nothing)
fi
export ASAN_OPTIONS="detect_leaks=0:log_path=$LOGS/asan:abort_on_error=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$LOGS/ubsan"
export PYTHONMALLOC=malloc  # let ASan see Python's small allocations too
echo "[sanitize] running pytest ${TESTS[*]}" >&2
LD_PRELOAD="$LIBASAN $LIBSTDCXX" "$VENV/bin/python" -m pytest "${TESTS[@]}"
rc=$?

reports=$(ls "$LOGS" 2>/dev/null | wc -l)
echo "[sanitize] pytest exit status $rc; $reports report file(s) in $LOGS" >&2
if [ "$reports" -gt 0 ]; then
    grep -h "SUMMARY:" "$LOGS"/* | sort | uniq -c | sort -rn >&2
    [ $rc -eq 0 ] && rc=3
fi
exit $rc
