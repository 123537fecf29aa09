// Time llama_decode of a batch of n tokens with logits at every position,
// the shape of a speculative verification step (n = drafted tokens + 1),
// for each of N_SEQ sequences in one decode (a batched engine's step).
//
//   verify_cost MODEL THREADS REPS N_PAST N_SEQ N1 [N2 ...]
//
// Each sequence first holds N_PAST tokens of its own; each timed batch puts
// n tokens after them for every sequence (N_SEQ * n in all) and is removed
// again, so every batch sees the same context. The sizes go round-robin
// within each repeat, so load drift hits them alike. Prints one line per
// size: "n <size> <tokens decoded per batch> <times in us, space separated>".
#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// n tokens at positions pos0.. for each of sequences [seq0, seq1).
void fill(llama_batch & batch, int n, llama_pos pos0, int seq0, int seq1, llama_token first, bool all_logits) {
    batch.n_tokens = 0;
    for (int seq = seq0; seq < seq1; ++seq) {
        for (int i = 0; i < n; ++i) {
            const int k = batch.n_tokens++;
            batch.token[k] = first + 31 * seq + i;
            batch.pos[k] = pos0 + i;
            batch.n_seq_id[k] = 1;
            batch.seq_id[k][0] = seq;
            batch.logits[k] = all_logits || i == n - 1;
        }
    }
}

void quiet(ggml_log_level, const char *, void *) {}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 7) {
        std::fprintf(stderr, "usage: %s MODEL THREADS REPS N_PAST N_SEQ N1 [N2 ...]\n", argv[0]);
        return 2;
    }
    const int threads = std::atoi(argv[2]), reps = std::atoi(argv[3]), n_past = std::atoi(argv[4]);
    const int n_seq = std::atoi(argv[5]);
    if (n_seq < 1) return 2;
    std::vector<int> sizes;
    int n_max = 1;
    for (int i = 6; i < argc; ++i) {
        sizes.push_back(std::atoi(argv[i]));
        if (sizes.back() < 1) return 2;
        if (sizes.back() > n_max) n_max = sizes.back();
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (model == nullptr) return 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) (n_seq * (n_past + n_max) + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t) std::max(n_past, n_seq * n_max);
    cp.n_seq_max = (uint32_t) n_seq;
    cp.kv_unified = true;  // as spec_actor's engine: one cache for every sequence
    cp.n_threads = cp.n_threads_batch = threads;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (ctx == nullptr) return 1;
#ifdef LLAMA_HAS_LOGITS_IN_PLACE
    llama_set_logits_in_place(ctx, true);  // as spec_actor's steps read them (docs/decisions/0089)
#endif
    llama_batch batch = llama_batch_init((int32_t) cp.n_batch, 0, 1);
    for (int seq = 0; seq < n_seq; ++seq) {  // each context prefilled on its own
        fill(batch, n_past, 0, seq, seq + 1, 100, false);
        if (llama_decode(ctx, batch) != 0) return 1;
    }
    llama_memory_t mem = llama_get_memory(ctx);

    std::vector<std::vector<long>> times(sizes.size());
    std::vector<int> decoded(sizes.size(), 0);
    for (int rep = -1; rep < reps; ++rep) {  // rep -1: warm-up (buffers sized per batch shape)
        for (size_t k = 0; k < sizes.size(); ++k) {
            fill(batch, sizes[k], n_past, 0, n_seq, 200 + rep + 1, true);
            const auto t0 = std::chrono::steady_clock::now();
            if (llama_decode(ctx, batch) != 0) return 1;
            llama_synchronize(ctx);
            const auto t1 = std::chrono::steady_clock::now();
            decoded[k] = batch.n_tokens;
            if (rep >= 0) times[k].push_back((long) std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
            for (int seq = 0; seq < n_seq; ++seq) llama_memory_seq_rm(mem, seq, n_past, -1);
        }
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
        std::printf("n %d %d", sizes[k], decoded[k]);
        for (long t : times[k]) std::printf(" %ld", t);
        std::printf("\n");
    }
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
