// Session setup: thread pools, target and draft contexts, common_speculative.
#include "session/session.h"

#include "common.h"

#include <algorithm>
#include <string>
#include <vector>

namespace sa {

namespace {

bool abort_callback(void * data) { return static_cast<const sa_session *>(data)->abort_decode(); }

// plan.n_verify: the longest draft a step verifies (auto's ceiling may exceed its model drafter's n_draft).
llama_context_params make_context_params(const sa_context_params & c, const DraftPlan & plan, sa_session * s) {
    llama_context_params cp = llama_context_default_params();
    const int32_t n_seq = std::max(c.n_seq, 1);
    // n_ctx is per sequence: one unified cache of n_seq times it, where no
    // sequence holds more than n_ctx cells (docs/decisions/0050); with
    // kv_unified, n_ctx is the whole cache, which any sequence may fill
    // (docs/decisions/0113)
    cp.n_ctx = c.kv_unified ? c.n_ctx : c.n_ctx * (uint32_t) n_seq;
    cp.n_batch = c.n_batch;
    cp.n_ubatch = c.n_ubatch;
    cp.n_seq_max = (uint32_t) n_seq;
    cp.kv_unified = true;
    cp.n_threads = c.n_threads;
    cp.n_threads_batch = c.n_threads_batch;
    if (c.type_k >= 0) cp.type_k = (ggml_type) c.type_k;
    if (c.type_v >= 0) cp.type_v = (ggml_type) c.type_v;
    cp.flash_attn_type = c.flash_attn < 0 ? LLAMA_FLASH_ATTN_TYPE_AUTO
                       : c.flash_attn == 0 ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_ENABLED;
    const auto limits = common_speculative_get_output_limits((int32_t) c.n_batch, n_seq, std::max(plan.n_draft, plan.n_verify));
    cp.n_outputs_max = (uint32_t) std::max(limits.total, n_seq);  // llama.cpp asserts room for one per sequence
    cp.n_outputs_max_per_seq = (uint32_t) limits.per_seq;
    // several sequences roll back from per-sequence checkpoints instead (docs/decisions/0069)
    cp.n_rs_seq = needs_rollback_snapshots(plan.type) && n_seq == 1 ? (uint32_t) plan.n_draft : 0;
    cp.abort_callback = abort_callback;
    cp.abort_callback_data = s;
    cp.no_perf = false;
    return cp;
}

// The cells one sequence may hold of a cache of n_cells: its share, or with
// kv_unified the n_ctx asked for (llama.cpp pads the cache to a multiple of
// 256 cells: the rest is slack for the others), up to n_ctx_seq_max.
int32_t seq_budget(const sa_context_params & c, uint32_t n_cells, int32_t n_seq) {
    if (!c.kv_unified) return (int32_t) (n_cells / (uint32_t) n_seq);
    const int32_t n_whole = c.n_ctx > 0 ? (int32_t) std::min(c.n_ctx, n_cells) : (int32_t) n_cells;
    return c.n_ctx_seq_max > 0 ? std::min(n_whole, c.n_ctx_seq_max) : n_whole;
}

}  // namespace

common_params_speculative make_spec_params(const sa_session & s) {
    const sa_spec_params & p = s.sparams;
    common_params_speculative ps;
    ps.types = {to_common_type(s.plan.type)};
    ps.draft.n_max = s.plan.n_draft;
    ps.draft.n_min = p.n_min;
    ps.draft.p_min = p.p_min;
    ps.draft.p_split = p.p_split;
    ps.draft.ctx_tgt = s.ctx_tgt;
    ps.draft.ctx_dft = s.ctx_dft;
    // DFlash's block drafted with llama.cpp's backend samplers gave the last
    // of several sequences token ids read from the wrong buffer (decision 0069)
    if (s.n_seq > 1 && spec_facts(s.plan.type).noncausal_block) ps.draft.backend_sampling = false;
    const common_params_speculative_ngram_map map{(uint16_t) p.ngram_size_n, (uint16_t) p.ngram_size_m, (uint16_t) p.ngram_min_hits};
    ps.ngram_simple = map;
    ps.ngram_map_k = map;
    ps.ngram_map_k4v = map;
    ps.ngram_mod.n_match = p.ngram_mod_n_match;
    ps.ngram_mod.n_max = std::min(p.ngram_mod_n_max, s.plan.n_draft);
    ps.ngram_mod.n_min = std::min(p.ngram_mod_n_min, ps.ngram_mod.n_max);
    return ps;
}

namespace {

ggml_threadpool * new_pool(int32_t n_threads) {
    ggml_threadpool_params tp = ggml_threadpool_params_default(n_threads);
    // Sleep as soon as a graph is done. ggml's default (poll 50) spins
    // ~6.5 million pause rounds first, a core for a few hundred ms after every
    // request, which slowed the next session to start by 2x (decision 0006).
    tp.poll = 0;
    return ggml_threadpool_new(&tp);
}

// Every context of the session computes on the session's pools, whichever
// thread calls into it.
sa_status create_pools(sa_session & s, const sa_context_params & c) {
    const bool own_batch_pool = c.n_threads_batch != c.n_threads;
    s.pool = new_pool(c.n_threads);
    s.threads = {c.threads_budgeted != 0, c.n_threads, c.n_threads_batch};
    if (own_batch_pool) s.pool_batch = new_pool(c.n_threads_batch);
    if (s.pool == nullptr || (own_batch_pool && s.pool_batch == nullptr)) {
        return fail(SA_ERR_CONTEXT, "could not start " + std::to_string(std::max(c.n_threads, c.n_threads_batch)) +
                    " compute threads; pass a smaller n_threads / n_threads_batch");
    }
    return SA_OK;
}

sa_status create_draft_context(sa_session & s, const llama_context_params & cp) {
    const int32_t type = s.plan.type;
    llama_context_params dp = cp;
    dp.ctx_type = type == SA_SPEC_DRAFT_MTP ? LLAMA_CONTEXT_TYPE_MTP : LLAMA_CONTEXT_TYPE_DEFAULT;
    // A shared cache fills as the target's does (docs/decisions/0113): room
    // for every sequence's draft beyond it, so the target finds it full first.
    const uint32_t n_draft_room = (uint32_t) (std::max(s.plan.n_draft, s.plan.n_verify) + 2) * (uint32_t) s.n_seq;
    dp.n_ctx = llama_n_ctx(s.ctx_tgt) + (s.kv_unified ? n_draft_room : 0);
    dp.n_rs_seq = 0;
    dp.ctx_other = s.ctx_tgt;
    dp.type_k = GGML_TYPE_F16;
    dp.type_v = GGML_TYPE_F16;
    // each sequence drafts one token per decode (DFlash: its whole block); all of them draft together,
    // in one batch and, for DFlash's non-causal blocks, in one micro-batch (decision 0070)
    const uint32_t per_seq = spec_facts(type).noncausal_block ? (uint32_t) s.plan.n_draft + 1 : 1;
    const uint32_t all_drafts = per_seq * (uint32_t) s.n_seq;
    dp.n_outputs_max = all_drafts;
    dp.n_outputs_max_per_seq = per_seq;
    dp.n_batch = std::max(dp.n_batch, all_drafts);
    dp.n_ubatch = std::max(dp.n_ubatch, all_drafts);
    const llama_model * dm = type == SA_SPEC_DRAFT_MTP ? s.model->model : s.draft_model->model;
    s.ctx_dft = llama_init_from_model(const_cast<llama_model *>(dm), dp);
    if (s.ctx_dft == nullptr) {
        const std::string detail = last_native_log_error();
        return fail(SA_ERR_SPEC, "could not create the " + spec_type_name(type) + " draft context" +
                    (detail.empty() ? "" : ": " + detail));
    }
    return SA_OK;
}

sa_status create_speculative(sa_session & s) {
    const int32_t type = s.plan.type;
    common_params_speculative ps = make_spec_params(s);
    // one common_speculative for every sequence of a draft context (its
    // n_seq must be the context's); an n-gram drafter's tables stay per slot
    const uint32_t n_seq = uses_draft_context(type) ? (uint32_t) s.n_seq : 1;
    try {
        s.spec = common_speculative_init(ps, n_seq);
    } catch (const std::exception & e) {
        return fail(SA_ERR_SPEC, spec_type_name(type) + " setup failed: " + e.what());
    }
    if (s.spec == nullptr) {
        return fail(SA_ERR_SPEC, spec_type_name(type) + " could not be initialised for this model");
    }
    return SA_OK;
}

}  // namespace

common_speculative_type to_common_type(int32_t type) {
    switch (type) {
        case SA_SPEC_DRAFT_SIMPLE:  return COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE;
        case SA_SPEC_DRAFT_EAGLE3:  return COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3;
        case SA_SPEC_DRAFT_MTP:     return COMMON_SPECULATIVE_TYPE_DRAFT_MTP;
        case SA_SPEC_DRAFT_DFLASH:  return COMMON_SPECULATIVE_TYPE_DRAFT_DFLASH;
        case SA_SPEC_NGRAM_SIMPLE:  return COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE;
        case SA_SPEC_NGRAM_MAP_K:   return COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K;
        case SA_SPEC_NGRAM_MAP_K4V: return COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V;
        case SA_SPEC_NGRAM_MOD:     return COMMON_SPECULATIVE_TYPE_NGRAM_MOD;
        case SA_SPEC_NGRAM_CACHE:   return COMMON_SPECULATIVE_TYPE_NGRAM_CACHE;
        default:                    return COMMON_SPECULATIVE_TYPE_NONE;
    }
}

std::string spec_type_name(int32_t type) { return common_speculative_type_to_str(to_common_type(type)); }

sa_status create_session(sa_session & s, const sa_context_params & c) {
    if (sa_status st = create_pools(s, c); st != SA_OK) return st;
    const llama_context_params cp = make_context_params(c, s.plan, &s);
    s.ctx_tgt = llama_init_from_model(s.model->model, cp);
    if (s.ctx_tgt == nullptr) {
        const std::string detail = last_native_log_error();
        return fail(SA_ERR_CONTEXT, "could not create a context (n_ctx=" + std::to_string(c.n_ctx) +
                    "); try a smaller n_ctx or n_batch" + (detail.empty() ? "" : ": " + detail));
    }
#ifdef LLAMA_HAS_LOGITS_IN_PLACE  // a tree built without spec_actor's edits lacks it
    // each step reads its logits once, before the next decode: no copy of
    // them into the output buffer (docs/decisions/0089)
    llama_set_logits_in_place(s.ctx_tgt, true);
#endif
    const int32_t type = s.plan.type;
    s.n_seq = std::max(c.n_seq, 1);
    s.kv_unified = c.kv_unified != 0;
    if (uses_draft_context(type)) {
        if (sa_status st = create_draft_context(s, cp); st != SA_OK) return st;
    }
    for (llama_context * ctx : {s.ctx_tgt, s.ctx_dft}) {
        if (ctx) llama_attach_threadpool(ctx, s.pool, s.pool_batch);
    }
    s.use_ckpt_tgt = common_context_can_seq_rm(s.ctx_tgt) == COMMON_CONTEXT_SEQ_RM_TYPE_FULL;
    s.use_ckpt_dft = s.ctx_dft && common_context_can_seq_rm(s.ctx_dft) == COMMON_CONTEXT_SEQ_RM_TYPE_FULL;
    if (type != SA_SPEC_NONE) {
        if (sa_status st = create_speculative(s); st != SA_OK) return st;
    }
    s.prefill_step_ms = c.prefill_step_ms;
    s.n_ctx_seq = seq_budget(c, llama_n_ctx(s.ctx_tgt), s.n_seq);
    return create_engine(s, s.n_seq);
}

sa_status make_drafter(sa_session & s, common_speculative * spec, llama_seq_id seq, std::unique_ptr<Drafter> & out) {
    const int32_t type = s.plan.type;
    if (s.plan.automatic) {
        return s.plan.n_verify > 0 ? make_auto_drafter(s, spec, seq, out) : SA_OK;
    }
    if (spec != nullptr) {
        out = s.sparams.adaptive != 0
            ? make_adaptive_drafter(spec, type, s.plan.n_draft, uses_draft_context(type) ? 1 : 0, seq)
            : make_fixed_drafter(spec, type, s.plan.n_draft, seq);
    }
    return SA_OK;
}

void clear_memory(llama_context * ctx) {
    if (ctx == nullptr) return;
    llama_memory_t mem = llama_get_memory(ctx);
    // Cells only: zeroing the buffers too cost 10-15 ms on Gemma's 4096-cell
    // cache, before every cold prompt's first token. An empty cell is masked
    // and a new recurrent state is zeroed by the graph (decision 0082).
    if (mem != nullptr) llama_memory_clear(mem, false);
}

}  // namespace sa
