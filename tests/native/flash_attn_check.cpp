// Checks ggml's CPU flash attention against a double-precision reference on
// the batch shapes a batched engine makes (docs/decisions/0085): query rows of
// several sequences whose cells interleave in one cache, a single sequence's
// causal prompt, and both in one batch. Built and run by
// tests/test_llama_patches.py against spec_actor's cached llama.cpp build.
//
// usage: flash_attn_check THREADS
// Prints one line per case: "case <name> rows <n> max_err <e> nan <count>".

#include "ggml.h"
#include "ggml-cpu.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int DK = 64, DV = 64, N_HEAD = 16, N_HEAD_KV = 1;

// Which sequence owns each cache cell, its position there; each query row's
// sequence and position. A row sees the cells of its sequence at or before
// its position.
struct Layout {
    std::string name;
    std::vector<int> cell_seq, cell_pos, row_seq, row_pos;
};

Layout interleaved(int n_seq, int past, int rows_per_seq) {
    Layout l{"interleaved", {}, {}, {}, {}};
    for (int p = 0; p < past + rows_per_seq; ++p) {  // each step places every sequence's token side by side
        for (int s = 0; s < n_seq; ++s) {
            l.cell_seq.push_back(s);
            l.cell_pos.push_back(p);
        }
    }
    for (int s = 0; s < n_seq; ++s) {
        for (int r = 0; r < rows_per_seq; ++r) {
            l.row_seq.push_back(s);
            l.row_pos.push_back(past + r);
        }
    }
    return l;
}

// Appends sequence seq's prompt of n tokens: its own contiguous cells, a row each.
void add_prompt(Layout & l, int seq, int n) {
    for (int p = 0; p < n; ++p) {
        l.cell_seq.push_back(seq);
        l.cell_pos.push_back(p);
        l.row_seq.push_back(seq);
        l.row_pos.push_back(p);
    }
}

Layout causal_prompt(int n) {
    Layout l{"causal_prompt", {}, {}, {}, {}};
    add_prompt(l, 0, n);
    return l;
}

// 8 sequences decoding 2 rows each after `past` interleaved tokens, then a
// new sequence's prompt of n_prompt tokens in its own contiguous cells.
Layout mixed(int past, int n_prompt) {
    Layout l = interleaved(8, past, 2);
    l.name = "mixed";
    add_prompt(l, 8, n_prompt);
    return l;
}

// Tiles that alternate between the two paths, each 64 rows: 8 sequences'
// decode rows (8 each, interleaved cells: sparse), then a new sequence's
// 64-token prompt (contiguous cells: dense), twice over.
Layout alternating(int past) {
    Layout l = interleaved(8, past, 16);
    l.name = "alternating";
    l.row_seq.clear();
    l.row_pos.clear();
    for (int half = 0; half < 2; ++half) {
        for (int s = 0; s < 8; ++s) {
            for (int r = 0; r < 8; ++r) {
                l.row_seq.push_back(s);
                l.row_pos.push_back(past + 8*half + r);
            }
        }
        add_prompt(l, 8 + half, 64);
    }
    return l;
}

// 8 sequences whose steps place runs of 1 to 11 cells each, at every
// alignment, after a first sequence's 100-token prompt; each verifies 5 rows
// (40 rows: ggml's own per-row path). A row's masked cells come in runs
// long and short, so skipping them 8 at a time (decision 0088) meets every
// case: a whole run of 8, an open cell inside one, and a tail under 8.
Layout runs(int steps) {
    Layout l{"runs", {}, {}, {}, {}};
    add_prompt(l, 0, 100);
    l.row_seq.clear();
    l.row_pos.clear();
    std::vector<int> next(8, 0);
    next[0] = 100;
    for (int p = 0; p < steps; ++p) {
        for (int s = 0; s < 8; ++s) {
            for (int n = 1 + (3*s + p) % 11; n > 0; --n) {
                l.cell_seq.push_back(s);
                l.cell_pos.push_back(next[s]++);
            }
        }
    }
    for (int s = 0; s < 8; ++s) {
        for (int r = 5; r > 0; --r) {
            l.row_seq.push_back(s);
            l.row_pos.push_back(next[s] - r);
        }
    }
    return l;
}

bool sees(const Layout & l, int row, int cell) {
    return l.cell_seq[cell] == l.row_seq[row] && l.cell_pos[cell] <= l.row_pos[row];
}

void run_case(const Layout & l, int threads, std::mt19937 & rng) {
    const int n_kv = (int) l.cell_seq.size(), n_q = (int) l.row_seq.size();
    const size_t mem = (size_t) 64 * 1024 * 1024 + (size_t) n_kv * (DK + DV) * 8 + (size_t) n_q * n_kv * 4;
    ggml_init_params ip = {mem, nullptr, false};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, DK, n_q, N_HEAD);
    ggml_tensor * k = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, DK, n_kv, N_HEAD_KV);
    ggml_tensor * v = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, DV, n_kv, N_HEAD_KV);
    ggml_tensor * mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n_kv, n_q);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> qf((size_t) DK * n_q * N_HEAD), kf((size_t) DK * n_kv), vf((size_t) DV * n_kv);
    for (float & x : qf) x = normal(rng);
    for (float & x : kf) x = ggml_fp16_to_fp32(ggml_fp32_to_fp16(normal(rng)));  // as stored
    for (float & x : vf) x = ggml_fp16_to_fp32(ggml_fp32_to_fp16(normal(rng)));
    std::copy(qf.begin(), qf.end(), (float *) q->data);
    for (size_t i = 0; i < kf.size(); ++i) ((ggml_fp16_t *) k->data)[i] = ggml_fp32_to_fp16(kf[i]);
    for (size_t i = 0; i < vf.size(); ++i) ((ggml_fp16_t *) v->data)[i] = ggml_fp32_to_fp16(vf[i]);
    for (int r = 0; r < n_q; ++r) {
        for (int c = 0; c < n_kv; ++c) {
            ((ggml_fp16_t *) mask->data)[(size_t) r * n_kv + c] = ggml_fp32_to_fp16(sees(l, r, c) ? 0.0f : -INFINITY);
        }
    }
    const float scale = 1.0f / std::sqrt((float) DK);
    ggml_tensor * out = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0f, 0.0f);  // [DV, N_HEAD, n_q]
    ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, out);
    if (ggml_graph_compute_with_ctx(ctx, graph, threads) != GGML_STATUS_SUCCESS) {
        std::printf("case %s compute failed\n", l.name.c_str());
        std::exit(1);
    }
    double max_err = 0;
    int nan = 0;
    std::vector<double> w((size_t) n_kv);
    for (int h = 0; h < N_HEAD; ++h) {
        for (int r = 0; r < n_q; ++r) {
            const float * qr = qf.data() + ((size_t) h * n_q + r) * DK;
            double m = -INFINITY, sum = 0;
            for (int c = 0; c < n_kv; ++c) {
                if (!sees(l, r, c)) continue;
                double s = 0;
                for (int d = 0; d < DK; ++d) s += (double) qr[d] * kf[(size_t) c * DK + d];
                w[(size_t) c] = s * scale;
                m = std::max(m, w[(size_t) c]);
            }
            for (int c = 0; c < n_kv; ++c) {
                if (sees(l, r, c)) sum += (w[(size_t) c] = std::exp(w[(size_t) c] - m));
            }
            const float * got = (const float *) out->data + ((size_t) r * N_HEAD + h) * DV;
            for (int d = 0; d < DV; ++d) {
                double ref = 0;
                for (int c = 0; c < n_kv; ++c) {
                    if (sees(l, r, c)) ref += w[(size_t) c] * vf[(size_t) c * DV + d];
                }
                ref /= sum;
                if (std::isnan(got[d])) ++nan;
                else max_err = std::max(max_err, std::fabs(got[d] - ref));
            }
        }
    }
    std::printf("case %s rows %d max_err %.6g nan %d\n", l.name.c_str(), n_q, max_err, nan);
    ggml_free(ctx);
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s THREADS\n", argv[0]);
        return 2;
    }
    const int threads = std::atoi(argv[1]);
    std::mt19937 rng(7);
    run_case(interleaved(8, 150, 8), threads, rng);  // 64 rows of 8 sequences: the sparse tiles
    run_case(interleaved(8, 150, 9), threads, rng);  // 72 rows: a partial last tile
    run_case(causal_prompt(200), threads, rng);      // one sequence: the dense tiles
    // both in one batch; then tiles that alternate between the paths, so the
    // threads run them side by side and each must keep to its own scratch
    // (repeated: a clash depends on timing)
    run_case(mixed(100, 150), threads, rng);
    for (int rep = 0; rep < 10; ++rep) run_case(alternating(60), threads, rng);
    run_case(runs(40), threads, rng);  // masked runs of every length, skipped in blocks
    return 0;
}
