// Checks ggml's CPU matrix product of quantized weights (Q8_0, Q5_0, Q4_0)
// by F32 activations, the product of every layer and of the output head
// (docs/decisions/0090): against a double-precision reference of the same
// quantized values, and for batch invariance, that a column's results are
// the same bits whatever other columns share its product (2 to 37 columns,
// or 1 to 37 where spec_actor's AVX512 kernels take one-column products too;
// 1 or 2 threads). Rows not a multiple of the tile, and rows of an odd
// number of blocks, are among the shapes. Built and run by
// tests/test_llama_patches.py against spec_actor's cached llama.cpp build.
//
// usage: q0_matmul_check ONE_COLUMN
// ONE_COLUMN 1: the one-column product is among the runs compared.
// Prints one line per case:
//   "case <type> m <rows> k <width> max_rel_err <e> nan <count> invariant <0|1>".

#include "ggml.h"
#include "ggml-cpu.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

// The column counts each product is run with; 2 and more reach llamafile's
// kernels on every CPU, 1 only with spec_actor's AVX512 ones.
const int COLUMN_COUNTS[] = {1, 2, 3, 5, 8, 13, 37};
constexpr int MAX_COLUMNS = 37;

// A row's values quantized to `type` and back: what the product multiplies.
std::vector<float> round_trip(ggml_type type, const std::vector<float> & x, int64_t rows, int64_t width,
                              std::vector<uint8_t> * packed) {
    packed->resize(ggml_row_size(type, width) * rows);
    ggml_quantize_chunk(type, x.data(), packed->data(), 0, rows, width, nullptr);
    std::vector<float> back(x.size());
    ggml_get_type_traits(type)->to_float(packed->data(), back.data(), (int64_t) x.size());
    return back;
}

// C = A * B for the first n columns of B, on `threads` threads: C[j][i], column j's row i.
std::vector<float> product(ggml_type type, const std::vector<uint8_t> & a, int64_t m, int64_t k,
                           const std::vector<float> & b, int n, int threads) {
    const size_t mem = a.size() + (size_t) k * n * 8 + (size_t) m * n * 4 + 64 * 1024 * 1024;
    ggml_init_params ip = {mem, nullptr, false};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * ta = ggml_new_tensor_2d(ctx, type, k, m);
    ggml_tensor * tb = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
    std::memcpy(ta->data, a.data(), a.size());
    std::memcpy(tb->data, b.data(), sizeof(float) * k * n);
    ggml_tensor * tc = ggml_mul_mat(ctx, ta, tb);
    ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, tc);
    std::vector<float> out;
    if (ggml_graph_compute_with_ctx(ctx, graph, threads) == GGML_STATUS_SUCCESS) {
        out.assign((const float *) tc->data, (const float *) tc->data + m * n);
    }
    ggml_free(ctx);
    return out;
}

bool run_case(ggml_type type, int64_t m, int64_t k, bool one_column, std::mt19937 & rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> a(m * k), b(k * MAX_COLUMNS);
    for (float & x : a) x = normal(rng);
    for (float & x : b) x = normal(rng);
    std::vector<uint8_t> a_packed, b_packed;
    const std::vector<float> av = round_trip(type, a, m, k, &a_packed);
    // ggml quantizes the activations to Q8_0 before a quantized product
    const std::vector<float> bv = round_trip(GGML_TYPE_Q8_0, b, MAX_COLUMNS, k, &b_packed);

    double max_rel = 0.0;
    int nan = 0;
    bool invariant = true;
    std::vector<float> first;  // every column's results from the first run that had it
    for (int threads = 1; threads <= 2; ++threads) {
        for (int n : COLUMN_COUNTS) {
            if (n == 1 && !one_column) continue;
            const std::vector<float> c = product(type, a_packed, m, k, b, n, threads);
            if (c.empty()) return false;
            for (int j = 0; j < n; ++j) {
                for (int64_t i = 0; i < m; ++i) {
                    double ref = 0.0, scale = 0.0;
                    for (int64_t t = 0; t < k; ++t) {
                        ref += (double) av[i * k + t] * bv[j * k + t];
                        scale += std::fabs((double) av[i * k + t] * bv[j * k + t]);
                    }
                    const float got = c[j * m + i];
                    if (std::isnan(got)) ++nan;
                    max_rel = std::max(max_rel, std::fabs(got - ref) / (scale + 1e-30));
                }
            }
            if (first.empty()) first.assign(c.begin(), c.end());
            // the columns both runs have: the same bits
            const size_t shared = std::min(first.size(), c.size());
            if (std::memcmp(first.data(), c.data(), shared * sizeof(float)) != 0) invariant = false;
            if (c.size() > first.size()) first.assign(c.begin(), c.end());
        }
    }
    std::printf("case %s m %lld k %lld max_rel_err %.3g nan %d invariant %d\n", ggml_type_name(type),
                (long long) m, (long long) k, max_rel, nan, invariant ? 1 : 0);
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    const bool one_column = argc > 1 && argv[1][0] == '1';
    ggml_cpu_init();
    std::mt19937 rng(7);
    struct Shape { ggml_type type; int64_t m, k; };
    // k = 32 * blocks: 20 and 4 blocks (even), 7 and 1 (odd); m = 66 and 7
    // leave rows beyond the last full tile
    const Shape shapes[] = {
        {GGML_TYPE_Q8_0, 64, 640}, {GGML_TYPE_Q8_0, 66, 224}, {GGML_TYPE_Q8_0, 7, 32},
        {GGML_TYPE_Q5_0, 64, 640}, {GGML_TYPE_Q5_0, 66, 224}, {GGML_TYPE_Q5_0, 7, 128},
        {GGML_TYPE_Q4_0, 64, 640}, {GGML_TYPE_Q4_0, 7, 224},
    };
    for (const Shape & s : shapes) {
        if (!run_case(s.type, s.m, s.k, one_column, rng)) {
            std::printf("error %s m %lld k %lld\n", ggml_type_name(s.type), (long long) s.m, (long long) s.k);
            return 1;
        }
    }
    return 0;
}
