// The C ABI of sessions: create, run, cancel, statistics, the prefix cache,
// the cross-request memory (see spec_actor.h).
#include "draft/step_cost_calibration.h"
#include "report/logprobs.h"
#include "session/checks.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "session/session.h"

#include "common.h"

#include <cstdio>
#include <string>
#include <memory>

using namespace sa;

namespace {

void print_prefix_stats(const sa_session & s, const Slot & slot) {
    sa_stats total;
    slot.stats->read(0, &total);
    sa_prefix_usage u;
    slot.prefix->usage(&u);
    std::fprintf(stderr, "prefix cache: %s, %llu of %llu prompt tokens reused, %lld tokens held",
                 slot.prefix->enabled.load() ? "on" : "off", (unsigned long long) total.prompt_reused,
                 (unsigned long long) total.prompt_tokens, (long long) u.tokens);
    if (needs_checkpoints(s)) {
        std::fprintf(stderr, ", %lld checkpoints (%.2f MiB; %lld saved in %.1f ms, %lld restored in %.1f ms)",
                     (long long) u.checkpoints, (double) u.checkpoint_bytes / (1 << 20), (long long) u.saves,
                     (double) u.save_us / 1000.0, (long long) u.restores, (double) u.restore_us / 1000.0);
    }
    std::fprintf(stderr, "\n");
}

}  // namespace

extern "C" {

sa_status sa_session_new(sa_model * model, const sa_context_params * cparams, const sa_spec_params * sparams, sa_session ** out) {
    if (model == nullptr || cparams == nullptr || sparams == nullptr || out == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_session_new: null argument");
    }
    *out = nullptr;
    if (model->vocab_only) return fail(SA_ERR_INVALID_ARG, "the model was loaded with vocab_only=True; it can tokenize but not generate");
    if (const std::string why = rpc_failure(*model); !why.empty()) return fail(SA_ERR_CONTEXT, why);
    sa_status st = validate_context_params(*cparams);
    if (st == SA_OK) st = validate_spec_params(*sparams, *cparams);
    if (st != SA_OK) return st;
    return guarded("creating session", [&]() -> sa_status {
        auto s = std::make_unique<sa_session>();
        s->model = model;
        s->draft_model = sparams->draft_model;
        s->model_ref.reset(model);
        s->draft_ref.reset(sparams->draft_model);
        s->sparams = *sparams;
        s->sparams.draft_model = nullptr;
        plan_drafting(*s, *cparams);
        sa_status st2 = check_spec_models(s->plan.type, *model, s->draft_model);
        if (st2 == SA_OK) st2 = check_ubatch(s->plan.type, s->plan.n_draft, *model, *cparams);
        if (st2 == SA_OK) st2 = create_session(*s, *cparams);
        if (st2 != SA_OK) return st2;
        *out = s.release();
        return SA_OK;
    });
}

void sa_session_free(sa_session * session) { delete session; }

sa_status sa_session_run(sa_session * s, int32_t seq, const sa_run_params * params, int32_t n_logprobs,
                         const char * grammar_prefill, sa_event_cb cb, void * user) {
    if (s == nullptr || params == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_session_run: null argument");
    if (seq < 0 || seq >= s->n_seq) {
        return fail(SA_ERR_INVALID_ARG, "seq=" + std::to_string(seq) + " is out of range: the session has " +
                    std::to_string(s->n_seq) + " sequence(s)");
    }
    if (n_logprobs < -1 || n_logprobs > MAX_TOP_LOGPROBS) {
        return fail(SA_ERR_INVALID_ARG, "n_logprobs must be -1 (none) or 0.." + std::to_string(MAX_TOP_LOGPROBS));
    }
    sa_status st = validate_run(*s, *params);
    if (st != SA_OK) return st;
    if (s->cancelled() || s->engine->slots[(size_t) seq]->cancel.load()) return SA_CANCELLED;
    const std::string prefill = grammar_prefill ? grammar_prefill : "";
    return guarded("generation", [&]() -> sa_status {
        sa_status sst = SA_OK;
        common_sampler * smpl = make_sampler(*s->model, params->sampling, &sst, prefill);
        if (smpl == nullptr) return sst;
        return run_on_slot(*s, seq, *params, smpl, n_logprobs, cb, user);
    });
}

int32_t sa_session_n_seq(const sa_session * s) { return s ? s->n_seq : 0; }

int32_t sa_session_can_batch(const sa_model * model, const sa_context_params * cparams, const sa_spec_params * sparams) {
    // every spec batches (docs/decisions/0050, 0061, 0069); a model loaded for its vocabulary only runs nothing
    return model != nullptr && cparams != nullptr && sparams != nullptr && !model->vocab_only ? 1 : 0;
}

namespace {
Slot * slot_of(const sa_session * s, int32_t seq) {
    return s != nullptr && s->engine && seq >= 0 && seq < s->n_seq ? s->engine->slots[(size_t) seq].get() : nullptr;
}
}  // namespace

void sa_session_cancel_seq(sa_session * s, int32_t seq) {
    if (Slot * slot = slot_of(s, seq)) {
        slot->cancel.store(true);
        s->engine->wake();
    }
}

void sa_session_clear_cancel_seq(sa_session * s, int32_t seq) {
    if (Slot * slot = slot_of(s, seq)) slot->cancel.store(false);
}

void sa_session_resume_seq(sa_session * s, int32_t seq) {
    if (Slot * slot = slot_of(s, seq)) {
        slot->pauses.fetch_sub(1);
        s->engine->wake();
    }
}

void sa_session_seq_stats(const sa_session * s, int32_t seq, int32_t which, sa_stats * out) {
    if (const Slot * slot = slot_of(s, seq); slot != nullptr && out != nullptr) slot->stats->read(which, out);
}

uint64_t sa_session_seq_stats_version(const sa_session * s, int32_t seq) {
    const Slot * slot = slot_of(s, seq);
    return slot ? slot->stats->version() : 0;
}

uint64_t sa_session_steps(const sa_session * s) { return s && s->engine ? s->engine->steps.load() : 0; }

void sa_session_cancel(sa_session * s) {
    if (s == nullptr) return;
    s->cancel.store(true, std::memory_order_relaxed);
    if (s->engine) s->engine->wake();
}

void sa_session_clear_cancel(sa_session * s) {
    if (s) s->cancel.store(false, std::memory_order_relaxed);
}

sa_status sa_session_set_prefix_cache(sa_session * s, int32_t enabled, int64_t checkpoint_bytes) {
    if (s == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_session_set_prefix_cache: null session");
    if (checkpoint_bytes < 0) {
        return fail(SA_ERR_INVALID_ARG, "prefix_checkpoint_bytes=" + std::to_string(checkpoint_bytes) + " must be >= 0");
    }
    for (const auto & slot : s->engine->slots) {
        slot->prefix->enabled.store(enabled != 0);
        slot->prefix->checkpoint_budget.store(checkpoint_bytes);
    }
    return SA_OK;
}

void sa_session_seq_prefix_usage(const sa_session * s, int32_t seq, sa_prefix_usage * out) {
    if (const Slot * slot = slot_of(s, seq); slot != nullptr && out != nullptr) slot->prefix->usage(out);
}

uint32_t sa_session_n_ctx(const sa_session * s) { return s ? (uint32_t) s->n_ctx_seq : 0; }

uint32_t sa_session_n_batch(const sa_session * s) { return s ? llama_n_batch(s->ctx_tgt) : 0; }

void sa_session_print_stats(const sa_session * s, int32_t seq) {
    const Slot * slot = slot_of(s, seq);
    if (slot == nullptr) return;
    print_with_log_level(3, [&] {
        if (s->plan.automatic) {
            print_auto_stats(*s, *slot);
        } else if (slot->spec) {
            common_speculative_print_stats(slot->spec);
        } else {
            std::fprintf(stderr, "speculative decoding: none (plain decoding)\n");
        }
        print_prefix_stats(*s, *slot);
        common_perf_print(s->ctx_tgt, nullptr);
    });
}

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
    prepare_session(*s);
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
    // a shared cache's cells are counted once: each sequence's share of them (docs/decisions/0113)
    *capacity = s->kv_unified ? (int32_t) (llama_n_ctx(s->ctx_tgt) / (uint32_t) s->n_seq) : s->n_ctx_seq;
    return SA_OK;
}

void sa_session_memory_usage(const sa_session * s, int64_t * tokens, int64_t * bytes) {
    if (s == nullptr) return;
    if (tokens) *tokens = s->memory_tokens.load();
    if (bytes) *bytes = s->memory_bytes.load();
}

}  // extern "C"
