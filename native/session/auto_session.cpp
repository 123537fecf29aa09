// Spec("auto") on a session: which model drafter it may use, its chooser,
// the cross-request memory's C ABI, and its print_stats summary.
#include "draft/auto_drafter.h"
#include "session/session.h"
#include "draft/step_cost_calibration.h"

#include <algorithm>
#include <cstdio>
#include <string>

// llama.cpp's own (src/llama-ext.h, exported but not installed): the target
// layers an EAGLE-3 / DFlash drafter reads.
uint32_t llama_model_target_layer_ids_n(const struct llama_model * model);

namespace sa {

namespace {

// Tokens auto's model drafter drafts per step (a forward pass of the drafter each).
constexpr int32_t kAutoModelDraft = 3;

// The model drafter auto may use, as a fixed type (SA_SPEC_NONE: none): the
// draft model given (EAGLE-3 or DFlash when it names target layers), else
// the model's own MTP layers when it was loaded with them.
int32_t auto_model_drafter(const sa_session & s) {
    if (s.draft_model != nullptr) {
        const uint32_t n_ids = llama_model_target_layer_ids_n(s.draft_model->model);
        return n_ids == 3 ? SA_SPEC_DRAFT_EAGLE3 : n_ids > 0 ? SA_SPEC_DRAFT_DFLASH : SA_SPEC_DRAFT_SIMPLE;
    }
    if (s.model->load_mtp && llama_model_n_layer_nextn(s.model->model) > 0) return SA_SPEC_DRAFT_MTP;
    return SA_SPEC_NONE;
}

}  // namespace

void plan_drafting(sa_session & s, const sa_context_params & c) {
    const sa_spec_params & p = s.sparams;
    if (p.type != SA_SPEC_AUTO) {
        const int32_t n = p.type == SA_SPEC_NONE ? 0 : p.n_draft;
        s.plan = {p.type, n, n, false};
        return;
    }
    const int32_t n_cap = std::max(std::min(p.n_draft, (int32_t) c.n_batch - 1), 0);
    int32_t model = n_cap > 0 ? auto_model_drafter(s) : SA_SPEC_NONE;
    int32_t model_n = std::min(kAutoModelDraft, n_cap);
    // A small n_ubatch shortens the model drafter's drafts to what fits
    // (min_ubatch: recurrent snapshots, DFlash's non-causal block), or leaves it out.
    while (model_n > 0 && min_ubatch(model, model_n, *s.model) > (int32_t) c.n_ubatch) --model_n;
    if (model_n <= 0) model = SA_SPEC_NONE;
    s.plan = {model, model == SA_SPEC_NONE ? 0 : model_n, n_cap, true};
}

sa_status make_auto_drafter(sa_session & s, common_speculative * spec, llama_seq_id seq, std::unique_ptr<Drafter> & out) {
    common_params_speculative ps = make_spec_params(s);
    ps.draft.n_max = s.plan.n_verify;
    ps.draft.n_min = 0;
    ps.ngram_mod.n_max = std::min(s.sparams.ngram_mod_n_max, s.plan.n_verify);
    ps.ngram_mod.n_min = std::min(s.sparams.ngram_mod_n_min, ps.ngram_mod.n_max);
    auto autod = std::make_unique<AutoDrafter>();
    try {
        autod->init(ps, spec, s.plan.type, s.plan.n_draft, &s.memory, llama_model_get_vocab(s.model->model), seq,
                    shares_draft_context(s));
    } catch (const std::exception & e) {
        return fail(SA_ERR_SPEC, std::string("auto drafting setup failed: ") + e.what());
    }
    out = std::move(autod);
    return SA_OK;
}

void print_auto_stats(const sa_session & s) {
    sa_stats snap;
    s.stats.read(0, &snap);
    std::fprintf(stderr, "speculative decoding: auto, memory %lld tokens (drafter: steps, drafted, accepted)\n",
                 (long long) s.memory_tokens.load());
    for (int32_t d = 0; d < SA_N_DRAFTERS; ++d) {
        if (snap.drafter_steps[d] == 0) continue;
        std::fprintf(stderr, "  %-14s %8llu %8llu %8llu\n", sa_drafter_name(d), (unsigned long long) snap.drafter_steps[d],
                     (unsigned long long) snap.drafter_drafted[d], (unsigned long long) snap.drafter_accepted[d]);
    }
    const auto * autod = dynamic_cast<const AutoDrafter *>(s.drafter.get());
    if (autod != nullptr && autod->model_dropped()) {
        std::fprintf(stderr, "  %s dropped: it cost more than it earned\n", sa_drafter_name(s.plan.type));
    }
    if (s.spec) common_speculative_print_stats(s.spec);
}

}  // namespace sa

using namespace sa;

extern "C" {

sa_status sa_session_set_memory(sa_session * s, int64_t capacity_tokens) {
    if (s == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_session_set_memory: null session");
    if (capacity_tokens < 0 || capacity_tokens > ((int64_t) 1 << 30)) {
        return fail(SA_ERR_INVALID_ARG, "memory=" + std::to_string(capacity_tokens) + " is out of range: 0..2^30 tokens");
    }
    s->memory_capacity.store(capacity_tokens);
    return SA_OK;
}

sa_status sa_session_prepare(sa_session * s) {
    if (s == nullptr || !s->engine) return fail(SA_ERR_INVALID_ARG, "sa_session_prepare: null session");
    sa::prepare_session(*s);
    return SA_OK;
}

void sa_session_forget(sa_session * s) {
    if (s == nullptr) return;
    s->forget.store(true);
    for (const auto & slot : s->engine->slots) {
        slot->forget.store(true);
        // its kept cells are dropped before the next request places any: free
        // to use (a running request's are published again by its next step)
        slot->cells.store(0);
    }
}

sa_status sa_session_seq_cells(const sa_session * s, int32_t seq, int32_t * held, int32_t * capacity) {
    if (s == nullptr || held == nullptr || capacity == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_session_seq_cells: null argument");
    }
    if (seq < 0 || seq >= s->n_seq) {
        return fail(SA_ERR_INVALID_ARG, "sequence " + std::to_string(seq) + " is outside 0.." + std::to_string(s->n_seq - 1));
    }
    *held = s->engine->slots[(size_t) seq]->cells.load();
    *capacity = s->n_ctx_seq;
    return SA_OK;
}

void sa_session_memory_usage(const sa_session * s, int64_t * tokens, int64_t * bytes) {
    if (s == nullptr) return;
    if (tokens) *tokens = s->memory_tokens.load();
    if (bytes) *bytes = s->memory_bytes.load();
}

const char * sa_drafter_name(int32_t drafter) {
    // built once: the names of the spec types that draft, and the memory
    static const std::vector<std::string> names = [] {
        std::vector<std::string> n(SA_N_DRAFTERS);
        for (int32_t d = SA_SPEC_NONE; d <= SA_SPEC_NGRAM_CACHE; ++d) n[(size_t) d] = spec_type_name(d);
        n[SA_DRAFTER_MEMORY] = "memory";
        n[SA_DRAFTER_TEXT] = "text";
        n[SA_DRAFTER_SPLICE] = "splice";
        return n;
    }();
    return drafter >= 0 && drafter < SA_N_DRAFTERS ? names[(size_t) drafter].c_str() : "";
}

}  // extern "C"
