// The session object shared by the shim's session files: contexts, the
// speculative state, statistics and the cancel flag (not part of the ABI).
#pragma once

#include "shim_internal.h"
#include "adaptive.h"
#include "auto_drafter.h"
#include "stats.h"
#include "thread_budget.h"

#include "ggml-cpu.h"
#include "speculative.h"

#include <atomic>
#include <memory>

struct sa_session {
    sa_model * model = nullptr;
    const sa_model * draft_model = nullptr;
    // Keep both models alive until the members below them are gone.
    sa::ModelRef model_ref, draft_ref;
    llama_context * ctx_tgt = nullptr;
    llama_context * ctx_dft = nullptr;
    // The session's own compute threads (docs/decisions/0006): decode, and
    // prompt batches when n_threads_batch differs (else null: decode's).
    ggml_threadpool * pool = nullptr;
    ggml_threadpool * pool_batch = nullptr;
    sa::ThreadLimits threads;  // the pools' sizes; budgeted: share the CPUs per run
    common_speculative * spec = nullptr;
    sa_spec_params sparams{};  // draft_model cleared: see draft_model above
    bool use_ckpt_tgt = false;  // the target rolls back from checkpoints (recurrent/hybrid)
    bool use_ckpt_dft = false;
    std::atomic<bool> cancel{false};
    sa::Stats stats;
    sa::AdaptiveDraft adaptive;
    // Spec("auto") (auto_session.cpp); sparams.type then names its model drafter, if any.
    std::unique_ptr<sa::AutoDrafter> autod;
    int32_t auto_n_cap = 0;
    sa::TokenMemory memory;
    std::atomic<int64_t> memory_capacity{0};
    std::atomic<bool> forget{false};
    std::atomic<int64_t> memory_tokens{0}, memory_bytes{0};
    std::atomic<int32_t> n_logprobs{-1};  // sa_session_set_logprobs: for the runs that follow
    std::string grammar_prefill;  // sa_session_set_grammar_prefill: set between runs, by the running thread

    sa_session() = default;
    sa_session(const sa_session &) = delete;
    sa_session & operator=(const sa_session &) = delete;

    ~sa_session() {
        autod.reset();
        common_speculative_free(spec);  // refers to both contexts: free it first
        if (ctx_dft) llama_free(ctx_dft);
        if (ctx_tgt) llama_free(ctx_tgt);
        if (pool_batch) ggml_threadpool_free(pool_batch);  // after the contexts that use them
        if (pool) ggml_threadpool_free(pool);
    }

    bool cancelled() const { return cancel.load(std::memory_order_relaxed); }
};

namespace sa {

// llama.cpp's enum value for one of ours (the two enums are not numbered alike).
common_speculative_type to_common_type(int32_t type);

// llama.cpp's name of a speculative type ("ngram-mod", ...).
std::string spec_type_name(int32_t type);

// Whether the type drafts with a second context (draft model, EAGLE-3, MTP, DFlash).
bool uses_draft_context(int32_t type);

// Creates the session's thread pools, contexts and common_speculative state
// from already validated parameters (session_setup.cpp).
sa_status create_session(sa_session & s, const sa_context_params & c);

// llama.cpp's speculative parameters of the session's common_speculative.
common_params_speculative make_spec_params(const sa_session & s);

// Spec("auto"), before the contexts exist: the ceiling goes to auto_n_cap and
// sparams becomes the model drafter's (MTP, draft model, EAGLE-3) or none.
void resolve_auto(sa_session & s);

// Spec("auto"), after create_session made the contexts: the chooser.
sa_status create_auto_drafter(sa_session & s);

// Spec("auto")'s summary for print_stats: per drafter, steps, drafted, accepted.
void print_auto_stats(const sa_session & s);

// Empties a context's memory (KV cache / recurrent state); null is a no-op.
void clear_memory(llama_context * ctx);

}  // namespace sa
