#include "engine/vec_argmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sa {

namespace {

// Sixteen floats, one AVX-512 register (two AVX2 ones, four SSE2 ones).
typedef float Lanes __attribute__((vector_size(64)));

// One copy per instruction set, picked when the library loads (the build
// itself targets no extension).
#if defined(__x86_64__) && defined(__GNUC__)
#define SA_WIDEST_SIMD __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SA_WIDEST_SIMD
#endif

// The largest of x[0..n); a NaN is passed over (every compare with it is
// false). Four accumulators hide the max instruction's latency.
SA_WIDEST_SIMD float block_max(const float * x, int32_t n) {
    Lanes acc[4];
    for (Lanes & a : acc) {
        for (int j = 0; j < 16; ++j) a[j] = -INFINITY;
    }
    int32_t i = 0;
    for (; i + 64 <= n; i += 64) {
        for (int k = 0; k < 4; ++k) {
            Lanes v;
            std::memcpy(&v, x + i + 16 * k, sizeof v);
            acc[k] = v > acc[k] ? v : acc[k];
        }
    }
    float m = -INFINITY;
    for (const Lanes & a : acc) {
        for (int j = 0; j < 16; ++j) m = m < a[j] ? a[j] : m;
    }
    for (; i < n; ++i) m = m < x[i] ? x[i] : m;
    return m;
}

// Floats per block: 8 KiB, so the block that holds the maximum is still in
// the L1 cache when it is searched for the maximum's first index.
constexpr int32_t kBlock = 2048;

}  // namespace

int32_t first_argmax(const float * x, int32_t n) {
    float best = -INFINITY;
    int32_t best_block = 0;
    for (int32_t b = 0; b < n; b += kBlock) {
        const float m = block_max(x + b, std::min(kBlock, n - b));
        if (m > best) {  // strictly: the first block holding the maximum
            best = m;
            best_block = b;
        }
    }
    const int32_t end = std::min(n, best_block + kBlock);
    for (int32_t i = best_block; i < end; ++i) {
        if (x[i] == best) return i;
    }
    return 0;  // every value NaN, or all -inf (then index 0 holds the maximum)
}

}  // namespace sa
