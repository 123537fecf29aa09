// Checks llama_set_logits_in_place (docs/decisions/0089): a decode whose batch
// is one micro-batch leaves its logits where the graph wrote them, and they
// equal, bit for bit, the logits the default copy gives; a batch split into
// several micro-batches is still copied. Built and run by
// tests/test_llama_patches.py against spec_actor's cached llama.cpp build.
//
// usage: logits_in_place_check MODEL
// Prints one line per case: "case <name> rows <n> equal <0|1> in_place <0|1>".

#include "llama.h"

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

void quiet(ggml_log_level, const char *, void *) {}

// rows tokens of sequence 0 from position 0, each with its logits.
void fill(llama_batch & batch, int rows) {
    batch.n_tokens = rows;
    for (int i = 0; i < rows; ++i) {
        batch.token[i] = 1000 + 37 * i;
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
}

// Decodes the batch from an empty memory; the logits of every row, and the
// address row 0's logits were read from.
std::vector<float> decode(llama_context * ctx, llama_batch & batch, int n_vocab, const float ** row0) {
    llama_memory_clear(llama_get_memory(ctx), true);
    if (llama_decode(ctx, batch) != 0) return {};
    std::vector<float> out;
    for (int i = 0; i < batch.n_tokens; ++i) {
        const float * row = llama_get_logits_ith(ctx, i);
        if (row == nullptr) return {};
        if (i == 0) *row0 = row;
        out.insert(out.end(), row, row + n_vocab);
    }
    return out;
}

// The same batch with logits copied, then kept in place: equal, and whether
// the second read them from elsewhere than the output buffer.
bool run_case(llama_model * model, const char * name, int rows, int n_ubatch) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 256;
    cp.n_ubatch = (uint32_t) n_ubatch;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (ctx == nullptr) return false;
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_batch batch = llama_batch_init(rows, 0, 1);
    fill(batch, rows);
    const float * copied_at = nullptr;
    const float * kept_at = nullptr;
    const std::vector<float> copied = decode(ctx, batch, n_vocab, &copied_at);
    llama_set_logits_in_place(ctx, true);
    const std::vector<float> kept = decode(ctx, batch, n_vocab, &kept_at);
    const bool equal = !copied.empty() && copied.size() == kept.size() &&
                       std::memcmp(copied.data(), kept.data(), copied.size() * sizeof(float)) == 0;
    std::printf("case %s rows %d equal %d in_place %d\n", name, rows, equal ? 1 : 0, kept_at != copied_at ? 1 : 0);
    llama_batch_free(batch);
    llama_free(ctx);
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s MODEL\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (model == nullptr) return 1;
    const bool ok = run_case(model, "one_ubatch", 24, 256)  // kept where the graph wrote them
                    && run_case(model, "split", 40, 16);    // three micro-batches: copied as before
    llama_model_free(model);
    llama_backend_free();
    return ok ? 0 : 1;
}
