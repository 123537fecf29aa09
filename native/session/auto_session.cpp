// Spec("auto") on a session: which model drafter it may use, its chooser,
// and its print_stats summary.
#include "draft/auto_drafter.h"
#include "session/session.h"

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

void print_auto_stats(const sa_session & s, const Slot & slot) {
    sa_stats snap;
    slot.stats->read(0, &snap);
    std::fprintf(stderr, "speculative decoding: auto, memory %lld tokens (drafter: steps, drafted, accepted)\n",
                 (long long) s.memory_tokens.load());
    for (int32_t d = 0; d < SA_N_DRAFTERS; ++d) {
        if (snap.drafter_steps[d] == 0) continue;
        std::fprintf(stderr, "  %-14s %8llu %8llu %8llu\n", sa_drafter_name(d), (unsigned long long) snap.drafter_steps[d],
                     (unsigned long long) snap.drafter_drafted[d], (unsigned long long) snap.drafter_accepted[d]);
    }
    const auto * autod = dynamic_cast<const AutoDrafter *>(slot.drafter.get());
    if (autod != nullptr && autod->model_dropped()) {
        std::fprintf(stderr, "  %s dropped: it cost more than it earned\n", sa_drafter_name(s.plan.type));
    }
    if (slot.spec) common_speculative_print_stats(slot.spec);
}

}  // namespace sa
