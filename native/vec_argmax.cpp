#include "vec_argmax.h"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define SA_X86 1
#endif

namespace sa {

namespace {

using BlockMax = float (*)(const float *, int32_t);

// max(m, x) that ignores a NaN x (maxps keeps its first operand then).
inline float larger(float m, float x) { return m < x ? x : m; }

float block_max_scalar(const float * x, int32_t n) {
    float m = -INFINITY;
    for (int32_t i = 0; i < n; ++i) m = larger(m, x[i]);
    return m;
}

#ifdef SA_X86
// Four accumulators hide the max instruction's latency; a NaN in x leaves
// them as they were (x is the first operand: maxps returns the second when
// either is NaN).
__attribute__((target("avx512f"))) float block_max_avx512(const float * x, int32_t n) {
    __m512 a = _mm512_set1_ps(-INFINITY), b = a, c = a, d = a;
    int32_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a = _mm512_max_ps(_mm512_loadu_ps(x + i), a);
        b = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), b);
        c = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), c);
        d = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), d);
    }
    float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a, b), _mm512_max_ps(c, d)));
    for (; i < n; ++i) m = larger(m, x[i]);
    return m;
}

__attribute__((target("avx2"))) float block_max_avx2(const float * x, int32_t n) {
    __m256 a = _mm256_set1_ps(-INFINITY), b = a, c = a, d = a;
    int32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a = _mm256_max_ps(_mm256_loadu_ps(x + i), a);
        b = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), b);
        c = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), c);
        d = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), d);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(_mm256_max_ps(a, b), _mm256_max_ps(c, d)));
    float m = block_max_scalar(lanes, 8);
    for (; i < n; ++i) m = larger(m, x[i]);
    return m;
}

float block_max_sse2(const float * x, int32_t n) {
    __m128 a = _mm_set1_ps(-INFINITY), b = a, c = a, d = a;
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a = _mm_max_ps(_mm_loadu_ps(x + i), a);
        b = _mm_max_ps(_mm_loadu_ps(x + i + 4), b);
        c = _mm_max_ps(_mm_loadu_ps(x + i + 8), c);
        d = _mm_max_ps(_mm_loadu_ps(x + i + 12), d);
    }
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(a, b), _mm_max_ps(c, d)));
    float m = block_max_scalar(lanes, 4);
    for (; i < n; ++i) m = larger(m, x[i]);
    return m;
}
#endif

BlockMax pick_block_max() {
#ifdef SA_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return block_max_avx512;
    if (__builtin_cpu_supports("avx2")) return block_max_avx2;
    return block_max_sse2;
#else
    return block_max_scalar;
#endif
}

// Floats per block: 8 KiB, so the block that holds the maximum is still in
// the L1 cache when it is searched for the maximum's first index.
constexpr int32_t kBlock = 2048;

}  // namespace

int32_t first_argmax(const float * x, int32_t n) {
    static const BlockMax block_max = pick_block_max();
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
