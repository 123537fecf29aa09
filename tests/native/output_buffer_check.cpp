// Checks that a context whose caller bounds its outputs (n_outputs_max) holds
// the buffer for all of them from the start (docs/decisions/0086): a decode
// that asks for every one of those rows must not replace the buffer, which
// llama.cpp did by allocating and clearing a new one. Built and run by
// tests/test_llama_patches.py against spec_actor's cached llama.cpp build.
//
// usage: output_buffer_check MODEL N_OUTPUTS
// Prints "rows <n> same_buffer <0|1> first_logit_finite <0|1>".

#include "llama.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace {

void quiet(ggml_log_level, const char *, void *) {}

}  // namespace

int main(int argc, char ** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s MODEL N_OUTPUTS\n", argv[0]);
        return 2;
    }
    const int n_out = std::atoi(argv[2]);
    if (n_out < 2) return 2;
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (model == nullptr) return 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = cp.n_ubatch = 256;
    cp.n_seq_max = 1;
    cp.n_outputs_max = (uint32_t) n_out;
    cp.n_threads = cp.n_threads_batch = 2;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (ctx == nullptr) return 1;
    llama_batch batch = llama_batch_init(n_out, 0, 1);
    // one row first, as a request's first step makes
    batch.n_tokens = 1;
    batch.token[0] = 2;
    batch.pos[0] = 0;
    batch.n_seq_id[0] = 1;
    batch.seq_id[0][0] = 0;
    batch.logits[0] = 1;
    if (llama_decode(ctx, batch) != 0) return 1;
    const float * before = llama_get_logits(ctx);
    // then every row the context was made for, each with its logits
    batch.n_tokens = n_out;
    for (int i = 0; i < n_out; ++i) {
        batch.token[i] = 1000 + 17 * i;
        batch.pos[i] = 1 + i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    if (llama_decode(ctx, batch) != 0) return 1;
    const float * after = llama_get_logits(ctx);
    const float * last = llama_get_logits_ith(ctx, n_out - 1);
    std::printf("rows %d same_buffer %d first_logit_finite %d\n", n_out, before == after ? 1 : 0,
                last != nullptr && std::isfinite(last[0]) ? 1 : 0);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
