#!/usr/bin/env bash
# Build the C++ shim AND llama.cpp with AddressSanitizer + UndefinedBehaviorSanitizer
# and run the tests under them. Not part of .ci/run: the build takes long on a
# small machine and the sanitized tests run several times slower.
#
#   scripts/sanitize.sh                  # the default subset (see TESTS below)
#   scripts/sanitize.sh tests/test_x.py  # any pytest arguments instead
#   scripts/sanitize.sh --build-only     # only build (and cache) the sanitized libraries
#
# - llama.cpp is built by native/llama_build.py as usual: the sanitizer flags
#   travel in CMAKE_ARGS, which is part of its cache key, so the sanitized build
#   is cached beside the normal one (~/.cache/spec_actor/llama-<key>) and built
#   only once. The shim gets the same flags from CMAKE_ARGS via scikit-build-core.
# - The sanitized extension goes into its own venv (SANITIZE_VENV, default
#   build/sanitize-venv) with its own build dir, so the normal venv is untouched.
# - Python itself is not sanitized: libasan is LD_PRELOADed, leak detection is
#   off (CPython keeps memory until exit), and every report is written to
#   $SANITIZE_LOGS/{asan,ubsan}.<pid> (default build/sanitize-logs), summarised
#   at the end. The exit status is pytest's, or 3 when there are reports.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${SANITIZE_VENV:-$ROOT/build/sanitize-venv}
LOGS=${SANITIZE_LOGS:-$ROOT/build/sanitize-logs}
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -g1"
export CMAKE_ARGS="-DCMAKE_C_FLAGS='$SAN' -DCMAKE_CXX_FLAGS='$SAN' \
-DCMAKE_SHARED_LINKER_FLAGS='-fsanitize=address,undefined' -DCMAKE_MODULE_LINKER_FLAGS='-fsanitize=address,undefined'"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv --system-site-packages "$VENV" || exit 1
fi
echo "[sanitize] building (llama.cpp is cached after the first time) ..." >&2
"$VENV/bin/pip" install -q --no-build-isolation --no-deps -Cbuild-dir=build/sanitize -e . || exit 1

[ "${1:-}" = "--build-only" ] && exit 0

LIBASAN=$(${CXX:-c++} -print-file-name=libasan.so)
[ -e "$LIBASAN" ] || { echo "[sanitize] libasan.so not found ($LIBASAN)" >&2; exit 1; }
rm -rf "$LOGS" && mkdir -p "$LOGS"
TESTS=("$@")
if [ ${#TESTS[@]} -eq 0 ]; then
    # Everything but the CLI/example tests (they time whole commands) and
    # the benchmark-shaped tests; add them by naming them.
    TESTS=(tests -q -x -p no:cacheprovider
           --deselect tests/test_examples.py --ignore tests/test_cli.py --ignore tests/test_examples.py)
fi
export ASAN_OPTIONS="detect_leaks=0:log_path=$LOGS/asan:abort_on_error=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$LOGS/ubsan"
export PYTHONMALLOC=malloc  # let ASan see Python's small allocations too
echo "[sanitize] running pytest ${TESTS[*]}" >&2
LD_PRELOAD="$LIBASAN" "$VENV/bin/python" -m pytest "${TESTS[@]}"
rc=$?

reports=$(ls "$LOGS" 2>/dev/null | wc -l)
echo "[sanitize] pytest exit status $rc; $reports report file(s) in $LOGS" >&2
if [ "$reports" -gt 0 ]; then
    grep -h "SUMMARY:" "$LOGS"/* | sort | uniq -c | sort -rn >&2
    [ $rc -eq 0 ] && rc=3
fi
exit $rc
