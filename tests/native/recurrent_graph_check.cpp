// Checks two edits on a hybrid (recurrent + attention) model. Built and run
// by tests/test_llama_patches.py against spec_actor's cached llama.cpp build.
//
// - docs/decisions/0093: a one-token decode of a context with rollback
//   snapshots (n_rs_seq = 3) runs the graph of a context without them (the
//   same nodes, no snapshot copies) and gives bit-identical logits, while a
//   prompt's multi-token decode still writes its snapshots (more copies).
// - docs/decisions/0094: the first context of the process builds its
//   graphs without touching most of their metadata buffers: the page faults
//   of making it and decoding with it stay under one buffer's pages (each
//   buffer is max_nodes * ggml_tensor_overhead() bytes, from llama.cpp's own
//   log), where zeroing the buffers touched three of them.
//
// usage: recurrent_graph_check MODEL
// Prints "faults <minor faults> buffer_pages <pages of one metadata buffer>",
// then "prompt cpy <plain> <snapshots>" and "token nodes <plain> <snapshots>
// cpy <plain> <snapshots> equal <0|1>".

#include "ggml.h"
#include "llama.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

long g_max_nodes = 0;

// llama.cpp's log, read for the graph's node budget ("max_nodes = N").
void on_log(ggml_log_level, const char * text, void *) {
    if (const char * at = std::strstr(text, "max_nodes = ")) g_max_nodes = std::atol(at + std::strlen("max_nodes = "));
}

long minor_faults() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

struct NodeCount {
    int nodes = 0;
    int copies = 0;
};

// Every node of the graph, once: ask for none of them to be kept.
bool count_node(ggml_tensor * t, bool ask, void * data) {
    if (ask) {
        auto * c = static_cast<NodeCount *>(data);
        ++c->nodes;
        c->copies += t->op == GGML_OP_CPY ? 1 : 0;
    }
    return false;
}

llama_context * make_context(llama_model * model, uint32_t n_rs_seq, NodeCount * count) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.n_seq_max = 1;
    cp.n_rs_seq = n_rs_seq;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.cb_eval = count_node;
    cp.cb_eval_user_data = count;
    return llama_init_from_model(model, cp);
}

bool decode(llama_context * ctx, const std::vector<llama_token> & tokens, int pos0) {
    llama_batch batch = llama_batch_init((int32_t) tokens.size(), 0, 1);
    batch.n_tokens = (int32_t) tokens.size();
    for (size_t i = 0; i < tokens.size(); ++i) {
        batch.token[i] = tokens[i];
        batch.pos[i] = pos0 + (int) i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i + 1 == tokens.size();
    }
    const bool ok = llama_decode(ctx, batch) == 0;
    llama_batch_free(batch);
    return ok;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s MODEL\n", argv[0]);
        return 2;
    }
    llama_log_set(on_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (model == nullptr) return 1;
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const std::vector<llama_token> prompt{40, 41, 42, 43, 44, 45, 46, 47};

    NodeCount plain_count, snap_count;
    const long faults0 = minor_faults();
    llama_context * plain = make_context(model, 0, &plain_count);
    if (plain == nullptr || !decode(plain, prompt, 0)) return 1;
    const long faults = minor_faults() - faults0;
    const long buffer_pages = g_max_nodes * (long) ggml_tensor_overhead() / 4096;
    std::printf("faults %ld buffer_pages %ld\n", faults, buffer_pages);

    llama_context * snap = make_context(model, 3, &snap_count);
    if (snap == nullptr) return 1;
    plain_count = {};
    llama_memory_clear(llama_get_memory(plain), true);
    if (!decode(plain, prompt, 0) || !decode(snap, prompt, 0)) return 1;
    std::printf("prompt cpy %d %d\n", plain_count.copies, snap_count.copies);

    bool equal = true;
    NodeCount plain_token, snap_token;
    int pos = (int) prompt.size();
    for (int step = 0; step < 4; ++step, ++pos) {
        const float * logits = llama_get_logits_ith(plain, -1);
        llama_token next = 0;
        for (int v = 1; v < n_vocab; ++v) next = logits[v] > logits[next] ? v : next;
        plain_count = snap_count = {};
        if (!decode(plain, {next}, pos) || !decode(snap, {next}, pos)) return 1;
        equal = equal && std::memcmp(llama_get_logits_ith(plain, -1), llama_get_logits_ith(snap, -1),
                                     (size_t) n_vocab * sizeof(float)) == 0;
        plain_token = plain_count;
        snap_token = snap_count;
    }
    std::printf("token nodes %d %d cpy %d %d equal %d\n", plain_token.nodes, snap_token.nodes, plain_token.copies,
                snap_token.copies, equal ? 1 : 0);
    llama_free(snap);
    llama_free(plain);
    llama_model_free(model);
    return 0;
}
