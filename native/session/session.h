// The session object shared by the shim's session files: contexts, the
// speculative state, statistics and the cancel flag (not part of the ABI).
#pragma once

#include "support/shim_internal.h"
#include "draft/drafter.h"
#include "engine/engine.h"
#include "engine/prefix_cache.h"
#include "draft/spec_types.h"
#include "draft/token_memory.h"
#include "report/stats.h"
#include "session/test_hooks.h"
#include "session/thread_budget.h"

#include "ggml-cpu.h"
#include "speculative.h"

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

namespace sa {
// What the session drafts with, resolved from the caller's spec (which stays
// as given): the type that owns the common_speculative and the draft context
// (under auto, its model drafter or none) and the longest draft verified.
struct DraftPlan {
    int32_t type = SA_SPEC_NONE;  // the common_speculative's type
    int32_t n_draft = 0;          // its draft length
    int32_t n_verify = 0;         // the longest draft a step verifies (auto: its ceiling)
    bool automatic = false;       // Spec("auto"): the chooser drafts
};
}  // namespace sa

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
    sa_spec_params sparams{};  // the caller's spec as given (draft_model cleared: see draft_model above)
    sa::DraftPlan plan;
    bool use_ckpt_tgt = false;  // the target rolls back from checkpoints (recurrent/hybrid)
    bool use_ckpt_dft = false;
    std::atomic<bool> cancel{false};
    sa::TokenMemory memory;
    std::atomic<int64_t> memory_capacity{0};
    std::atomic<bool> forget{false};
    std::atomic<int64_t> memory_tokens{0}, memory_bytes{0};
    int32_t n_seq = 1;      // sequences of the context (sa_context_params.n_seq)
    int32_t prefill_step_ms = 0;  // sa_context_params.prefill_step_ms
    int32_t n_ctx_seq = 0;  // positions each sequence may hold
    bool kv_unified = false;  // the sequences share one cache of n_ctx cells (docs/decisions/0113)
    // Its slots, each with its own stats, prefix cache and drafter (engine.h).
    std::unique_ptr<sa::Engine> engine;
    // The faults a test armed (abi/testing_abi.cpp), made when it armed the
    // first; null otherwise. A run reads it once, when it starts.
    std::atomic<sa::TestHooks *> test_hooks{nullptr};

    sa_session() = default;
    sa_session(const sa_session &) = delete;
    sa_session & operator=(const sa_session &) = delete;

    ~sa_session() {
        engine.reset();  // the slots' drafters before the contexts
        common_speculative_free(spec);  // refers to both contexts: free it first
        if (ctx_dft) llama_free(ctx_dft);
        if (ctx_tgt) llama_free(ctx_tgt);
        if (pool_batch) ggml_threadpool_free(pool_batch);  // after the contexts that use them
        if (pool) ggml_threadpool_free(pool);
        delete test_hooks.load();
    }

    bool cancelled() const { return cancel.load(std::memory_order_relaxed); }
    // Sequence 0's slot: a one-sequence session's only one; what every slot
    // shares (the drafter's kind) is asked of it.
    sa::Slot & slot0() const { return *engine->slots[0]; }
    // llama.cpp's abort callback: the session is cancelled, or the sequence alone in the decode under way.
    bool abort_decode() const;
};

namespace sa {

// llama.cpp's enum value for one of ours (the two enums are not numbered alike).
common_speculative_type to_common_type(int32_t type);

// llama.cpp's name of a speculative type ("ngram-mod", ...).
std::string spec_type_name(int32_t type);


// Creates the session's thread pools, contexts and common_speculative state
// from already validated parameters (session_setup.cpp).
sa_status create_session(sa_session & s, const sa_context_params & c);

// llama.cpp's speculative parameters of the session's common_speculative.
common_params_speculative make_spec_params(const sa_session & s);

// Fills s.plan from the caller's spec, before the contexts exist. Under
// Spec("auto") the ceiling is n_draft, at most n_batch - 1, and the plan's
// type is auto's model drafter (MTP, draft model, EAGLE-3, DFlash) or none.
void plan_drafting(sa_session & s, const sa_context_params & c);

// The drafter of slot seq over spec (the session's common_speculative or a
// slot's own): fixed, adaptive or auto, as the session's spec says; null
// for plain decoding.
sa_status make_drafter(sa_session & s, common_speculative * spec, llama_seq_id seq, std::unique_ptr<Drafter> & out);

// Spec("auto"): the chooser of slot seq over spec (its model drafter, or null).
sa_status make_auto_drafter(sa_session & s, common_speculative * spec, llama_seq_id seq, std::unique_ptr<Drafter> & out);

// Whether the session's draft context serves several sequences: its
// common_speculative is shared by the slots' drafters, and the engine feeds
// it each decoded batch once (docs/decisions/0069).
inline bool shares_draft_context(const sa_session & s) { return s.ctx_dft != nullptr && s.n_seq > 1; }

// Spec("auto")'s summary of slot's requests for print_stats: per drafter, steps, drafted, accepted.
void print_auto_stats(const sa_session & s, const Slot & slot);

// Empties a context's memory (KV cache / recurrent state); null is a no-op.
void clear_memory(llama_context * ctx);

}  // namespace sa
