#include "generation.h"
#include "step_cost_calibration.h"
#include "checks.h"
#include "checkpoint.h"
#include "event_batch.h"
#include "thread_budget.h"

#include "common.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace sa {

namespace {

// A draft that a checkpointed target accepted only in part: the target rolls
// back and re-verifies the accepted prefix (plus the token sampled after it)
// as the next "draft". Its counts are recorded once, when its tokens commit.
struct RolledBack {
    bool active = false;
    int32_t drafter = 0;     // sa_drafter id of the original draft
    int32_t n_drafted = 0;   // the original draft's length
    int32_t n_accepted = 0;  // its tokens accepted so far (re-verification may accept fewer)
};

// What the drafting phase of one step did.
struct DraftStep {
    int64_t t_draft_us = 0;
    int64_t t_checkpoint_us = 0;  // saving the target's state before verifying
};

class Run {
public:
    Run(sa_session & s, const sa_run_params & p, common_sampler * smpl, sa_event_cb cb, void * user)
        : s_(s), p_(p), smpl_(smpl), events_(llama_model_get_vocab(s.model->model), cb, user),
          vocab_(llama_model_get_vocab(s.model->model)), batch_(s.ctx_tgt),
          mem_tgt_(llama_get_memory(s.ctx_tgt)), mem_dft_(s.ctx_dft ? llama_get_memory(s.ctx_dft) : nullptr),
          n_ctx_((int32_t) llama_n_ctx(s.ctx_tgt)), n_rs_((int32_t) llama_n_rs_seq(s.ctx_tgt)),
          drafter_(s.drafter.get()), threads_(s.threads, s.ctx_tgt, s.ctx_dft) {}

    sa_status execute();

private:
    sa_session & s_;
    const sa_run_params & p_;
    common_sampler_ptr smpl_;
    EventBatch events_;
    const llama_vocab * vocab_;
    common_batch batch_;
    llama_memory_t mem_tgt_;
    llama_memory_t mem_dft_;
    const int32_t n_ctx_;
    const int32_t n_rs_;  // recurrent snapshots: rejections up to this deep are trimmed with seq_rm
    Drafter * const drafter_;  // the session's; null: plain decoding
    ThreadShare threads_;  // this run's share of the CPUs (docs/decisions/0027)

    llama_tokens prompt_tgt_;  // tokens in the target's memory
    llama_token id_last_ = -1; // the newest token, not yet decoded
    int32_t n_past_ = 0;
    llama_tokens draft_;
    RollbackPoint rb_;
    RolledBack rolled_back_;
    int64_t t_restore_us_ = 0;  // the last checkpoint restore, charged to the step that re-verifies
    int64_t t_start_ = 0;
    int64_t t_decode_start_ = 0;
    int32_t n_emitted_ = 0;
    int32_t next_stats_at_ = 0;
    bool fresh_ = false;  // keep nothing from earlier runs (forget() or memory 0)
    int32_t n_reused_ = 0;     // prompt tokens whose state the prefix cache kept
    llama_tokens tail_;        // decoded past the terminal token (a stopped step's accepted drafts)
    llama_pos last_pos_ = -1;  // the last position the target decoded
    bool cut_ = false;         // a decode was cancelled midway: a recurrent state is not trusted
    bool errored_ = false;     // an Error event ended the run
    const int32_t n_logprobs_ = s_.n_logprobs.load();  // -1: none; else top alternatives per token

    bool cancelled() const { return s_.cancelled(); }

    // nullopt: the prompt is in; otherwise the run ends with that status.
    std::optional<sa_status> prefill();
    sa_status loop();
    // Drafts into draft_ (and saves the rollback point); nullopt: go on.
    std::optional<sa_status> draft_step(DraftStep & d);
    // Whether a draft of n tokens needs the target's state saved before it is
    // verified: always where only whole sequences can be removed, and past the
    // recurrent snapshots where rejections are trimmed from them (n_rs_).
    bool needs_checkpoint(int32_t n) const { return s_.use_ckpt_tgt || (n_rs_ > 0 && n > n_rs_); }
    // Removes positions [p0, end) of the sequence; false: llama.cpp refused
    // (or a test made it refuse, sa_testing_refuse_next_seq_rm).
    bool trim(llama_memory_t mem, llama_pos p0);
    // Ends the run with an Error event naming the refused rollback.
    sa_status rollback_failed(const char * what);
    // Decodes batch_ on the target and feeds it to the drafter. nullopt: done;
    // otherwise the run ends with that status (its Error event delivered).
    std::optional<sa_status> decode(const char * what, const char * drafter_what);
    // Restores the checkpoint after a partial acceptance on a target that cannot
    // drop a partial sequence; the accepted tokens become the next draft.
    // nullopt: rolled back; otherwise the run ends with that status.
    std::optional<sa_status> roll_back(llama_tokens && ids, common_sampler_ptr && smpl_save);
    // Emits the step's tokens; returns the terminal event kind or -1.
    int emit(const llama_tokens & ids, llama_token * eog_id);
    // A Stats, Done or Eog event (Eog also carries the end-of-generation token).
    void emit_stats(int kind, llama_token eog_id = -1);
    // Delivers a terminal Error event; the run then ends with SA_OK.
    sa_status end_with_error(int code, const std::string & msg);
    // Hands what the contexts hold at the end of the run to the prefix cache.
    void keep_prefix(sa_status st);
};

sa_status Run::end_with_error(int code, const std::string & msg) {
    errored_ = true;
    events_.error(code, msg);
    events_.flush();
    return SA_OK;
}

void Run::emit_stats(int kind, llama_token eog_id) {
    sa_stats snap;
    s_.stats.set_elapsed(ggml_time_us(), t_decode_start_);
    s_.stats.read(1, &snap);
    events_.stats(kind, snap, eog_id);
}

std::optional<sa_status> Run::decode(const char * what, const char * drafter_what) {
    threads_.refresh();
    const int32_t ret = llama_process(s_.ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, batch_.get());
    if (ret != 0) {
        cut_ = true;
        if (ret == 2 && cancelled()) return SA_CANCELLED;
        const std::string detail = last_native_log_error();
        return end_with_error(SA_ERR_DECODE, std::string(what) + " failed (llama_decode returned " + std::to_string(ret) + ")" +
                              (ret == 1 ? ": the context is full; raise n_ctx" : detail.empty() ? "" : ": " + detail));
    }
    last_pos_ = batch_.tokens.back().pos[0];
    if (s_.fail_decode_at.load() > 0 && s_.fail_decode_at.fetch_sub(1) == 1) {
        return end_with_error(SA_ERR_DECODE, std::string(what) + " failed: injected by sa_testing_fail_decode");
    }
    if (drafter_ && !drafter_->process(batch_)) {
        cut_ = true;
        if (cancelled()) return SA_CANCELLED;
        return end_with_error(SA_ERR_DECODE, std::string("the speculative drafter failed to process ") + drafter_what);
    }
    return std::nullopt;
}

std::optional<sa_status> Run::prefill() {
    const int64_t t0 = ggml_time_us();
    const int32_t n_batch = (int32_t) llama_n_batch(s_.ctx_tgt);
    const int32_t n = p_.n_prompt - 1;  // the last prompt token is decoded with the first draft
    // The end of the prompt is where a request that repeats or extends it
    // resumes. With a draft context such a request decodes the last two
    // prompt tokens again (PrefixCache::resume), so a checkpoint of a
    // recurrent target goes before them: a batch ends there.
    const int32_t n_ckpt = n - (s_.ctx_dft ? 1 : 0);
    prompt_tgt_.assign(p_.prompt, p_.prompt + n_reused_);
    for (int32_t i0 = n_reused_; i0 < n;) {
        if (cancelled()) return SA_CANCELLED;
        batch_.clear();
        int32_t i1 = std::min(n, i0 + n_batch);
        if (i0 < n_ckpt && n_ckpt < i1) i1 = n_ckpt;
        for (int32_t i = i0; i < i1; ++i) batch_.add(p_.prompt[i], i, 0, false);
        if (auto ended = decode("prompt prefill", "the prompt")) return ended;
        prompt_tgt_.insert(prompt_tgt_.end(), p_.prompt + i0, p_.prompt + i1);  // what a cancel keeps
        if (i1 == n_ckpt) s_.prefix.checkpoint(s_, n_ckpt);
        i0 = i1;
    }
    id_last_ = p_.prompt[n];
    s_.stats.add(&Counters::t_prefill_us, ggml_time_us() - t0);
    return std::nullopt;
}

sa_status Run::execute() {
    t_start_ = ggml_time_us();
    next_stats_at_ = p_.emit_stats_every;
    const bool forget = s_.forget.exchange(false);
    if (forget) s_.memory.clear();
    s_.memory.set_capacity((size_t) s_.memory_capacity.load());
    fresh_ = forget || s_.memory.capacity() == 0;
    n_reused_ = s_.prefix.resume(s_, p_.prompt, p_.n_prompt, forget);
    threads_.refresh();
    calibrate_step_cost(s_);  // auto's step-cost table, measured once per process (before the prefill)
    s_.stats.begin_run(t_start_, (uint64_t) p_.n_prompt, (uint64_t) n_reused_);
    prompt_tgt_.reserve(n_ctx_);
    const std::optional<sa_status> ended = prefill();
    const sa_status st = ended ? *ended : loop();
    keep_prefix(st);
    s_.stats.set_elapsed(ggml_time_us(), t_decode_start_);
    s_.stats.end_run();
    s_.memory_tokens.store((int64_t) s_.memory.size_tokens());
    s_.memory_bytes.store((int64_t) s_.memory.bytes());
    return st;
}

void Run::keep_prefix(sa_status st) {
    if (errored_) {
        s_.prefix.drop(s_);
        return;
    }
    // prompt_tgt_ holds the tokens decoded before the newest one, at a step's
    // end or up to the last completed prefill batch; a recurrent state also
    // holds the tail (a trimmable memory drops it).
    llama_tokens tokens = std::move(prompt_tgt_);
    if (needs_checkpoints(s_)) tokens.insert(tokens.end(), tail_.begin(), tail_.end());
    const bool live = !(st == SA_CANCELLED && cut_);
    // A rollback snapshot that llama.cpp applies with the next decode (n_rs_seq)
    // is not in the state a checkpoint would save now.
    const bool settled = last_pos_ < (llama_pos) tokens.size();
    s_.prefix.keep(s_, std::move(tokens), live, st == SA_OK && settled);
}

bool Run::trim(llama_memory_t mem, llama_pos p0) {
    if (s_.refuse_next_seq_rm.exchange(false)) return false;
    return llama_memory_seq_rm(mem, 0, p0, -1);
}

sa_status Run::rollback_failed(const char * what) {
    return end_with_error(SA_ERR_DECODE, std::string("rolling back rejected draft tokens failed: ") + what +
                          "; the request ended here and the session is ready for the next one");
}

std::optional<sa_status> Run::draft_step(DraftStep & d) {
    if (!drafter_) return std::nullopt;
    rb_.n_tokens = (int64_t) prompt_tgt_.size();
    rb_.pos_max = llama_memory_seq_pos_max(mem_tgt_, 0);
    rb_.has_tgt = false;
    if (s_.use_ckpt_dft && !rb_.dft.save(s_.ctx_dft, 0)) return rollback_failed("saving the draft context's state");
    // Under auto the first step drafts nothing: its token is the request's
    // first, due as soon as the prompt is in (decision 0049).
    const bool first_token = n_emitted_ == 0 && s_.plan.automatic;
    const int32_t n_budget = first_token ? 0 : std::max(std::min(n_ctx_ - n_past_ - 2, p_.max_tokens - n_emitted_ - 1), 0);
    const int64_t t0 = ggml_time_us();
    drafter_->draft(DraftInput{n_budget, n_past_, id_last_, prompt_tgt_}, draft_);
    d.t_draft_us = ggml_time_us() - t0;
    s_.stats.add(&Counters::t_draft_us, d.t_draft_us);
    if (const int32_t n = drafter_->n_draft_in_use(); n >= 0) s_.stats.set_n_draft(n);
    if (!draft_.empty() && needs_checkpoint((int32_t) draft_.size())) {
        const int64_t t_save = ggml_time_us();
        if (!rb_.tgt.save(s_.ctx_tgt, 0)) return rollback_failed("saving the target's state before verifying");
        rb_.has_tgt = true;
        d.t_checkpoint_us = ggml_time_us() - t_save;
    }
    if (s_.ctx_dft) {
        if (s_.use_ckpt_dft && !rb_.dft.restore(s_.ctx_dft, 0)) return rollback_failed("restoring the draft context's state");
        if (mem_dft_ && !trim(mem_dft_, rb_.pos_max + 1)) return rollback_failed("the draft context refused llama_memory_seq_rm");
    }
    return std::nullopt;
}

std::optional<sa_status> Run::roll_back(llama_tokens && ids, common_sampler_ptr && smpl_save) {
    const int64_t t0 = ggml_time_us();
    draft_ = std::move(ids);
    if (!rb_.tgt.restore(s_.ctx_tgt, 0)) return rollback_failed("the target refused its saved state");
    if (!trim(mem_tgt_, rb_.pos_max + 1)) return rollback_failed("the target refused llama_memory_seq_rm after a restore");
    if (s_.ctx_dft) {
        if (s_.use_ckpt_dft && !rb_.dft.restore(s_.ctx_dft, 0)) return rollback_failed("the draft context refused its saved state");
        if (mem_dft_ && !trim(mem_dft_, rb_.pos_max + 1)) return rollback_failed("the draft context refused llama_memory_seq_rm");
    }
    prompt_tgt_.resize((size_t) rb_.n_tokens);
    smpl_ = std::move(smpl_save);
    n_past_ = (int32_t) prompt_tgt_.size();
    t_restore_us_ = ggml_time_us() - t0;
    return std::nullopt;
}

int Run::emit(const llama_tokens & ids, llama_token * eog_id) {
    for (size_t k = 0; k < ids.size(); ++k) {  // ids[k] was sampled from output k of the verify batch
        const llama_token id = ids[k];
        prompt_tgt_.push_back(id_last_);
        id_last_ = id;
        int terminal = -1;
        if (llama_vocab_is_eog(vocab_, id)) {
            *eog_id = id;
            terminal = SA_EV_EOG;
        } else {
            events_.token(id, s_.ctx_tgt, (int32_t) k, n_logprobs_);
            ++n_emitted_;
            s_.stats.add(&Counters::tokens_emitted, (uint64_t) 1);
            if (n_emitted_ == 1) s_.stats.set_ttft(ggml_time_us() - t_start_);
            if (n_emitted_ >= p_.max_tokens) terminal = SA_EV_DONE;
        }
        if (terminal >= 0) {
            // ids[k..] past this token were decoded too, all but the last (the target's own sample)
            tail_.assign(ids.begin() + (std::ptrdiff_t) k, ids.end() - 1);
            return terminal;
        }
    }
    return -1;
}

sa_status Run::loop() {
    n_past_ = (int32_t) prompt_tgt_.size();
    if (drafter_) drafter_->begin(RunStart{prompt_tgt_, p_.prompt, p_.n_prompt, fresh_, p_.sampling.temp > 0.0f});
    t_decode_start_ = ggml_time_us();

    while (true) {
        if (cancelled()) return SA_CANCELLED;
        threads_.refresh();  // before the drafter decodes too
        DraftStep d;
        if (draft_.empty()) {
            if (auto ended = draft_step(d)) return *ended;
        }

        // verify [id_last, draft...] on the target
        const int64_t t_v0 = ggml_time_us();
        batch_.clear();
        batch_.add(id_last_, n_past_++, 0, true);
        for (size_t i = 0; i < draft_.size(); ++i) batch_.add(draft_[i], n_past_ + (int32_t) i, 0, true);
        if (auto ended = decode("decoding", "a batch")) return *ended;
        // the step's checkpoint (or the restore that led to this re-verification) is part of its cost
        const int64_t t_verify = ggml_time_us() - t_v0 + d.t_checkpoint_us + std::exchange(t_restore_us_, 0);
        s_.stats.add(&Counters::t_verify_us, t_verify);

        common_sampler_ptr smpl_save;
        if (rb_.has_tgt) smpl_save.reset(common_sampler_clone(smpl_.get()));
        const int32_t n_draft = (int32_t) draft_.size();
        const int64_t t_s0 = ggml_time_us();
        llama_tokens ids = common_sampler_sample_and_accept_n(smpl_.get(), s_.ctx_tgt, draft_);
        const int64_t t_sample = ggml_time_us() - t_s0;
        s_.stats.add(&Counters::t_sample_us, t_sample);
        if (ids.empty()) return end_with_error(SA_ERR_INTERNAL, "the sampler returned no token");
        const int32_t n_accepted = (int32_t) ids.size() - 1;
        const int32_t n_rejected = n_draft - n_accepted;
        const bool rolls_back = n_rejected > 0 && rb_.has_tgt && (s_.use_ckpt_tgt || n_rejected > n_rs_);
        if (drafter_) drafter_->observe(StepOutcome{ids, n_draft, d.t_draft_us, t_verify, t_sample, !rolls_back});
        const int32_t drafter = n_draft == 0 || !drafter_ ? SA_SPEC_NONE : drafter_->last_drafter();

        if (rolls_back) {
            if (!rolled_back_.active) {
                rolled_back_ = {true, drafter, n_draft, n_accepted};
            } else {
                rolled_back_.n_accepted = std::min(rolled_back_.n_accepted, n_accepted);
            }
            if (auto ended = roll_back(std::move(ids), std::move(smpl_save))) return *ended;
            continue;
        }

        if (rolled_back_.active) {
            // re-verified: count the original draft once, and of its tokens
            // those the re-verification kept (not the re-fed sampled token)
            s_.stats.add_step(rolled_back_.drafter, rolled_back_.n_drafted, std::min(rolled_back_.n_accepted, n_accepted));
            rolled_back_ = {};
        } else {
            s_.stats.add_step(drafter, n_draft, n_accepted);
        }
        n_past_ += n_accepted;

        llama_token eog_id = -1;
        int terminal = emit(ids, &eog_id);
        draft_.clear();
        rb_.has_tgt = false;
        if (!trim(mem_tgt_, n_past_)) return rollback_failed("the target refused llama_memory_seq_rm");
        if (mem_dft_ && !trim(mem_dft_, n_past_)) return rollback_failed("the draft context refused llama_memory_seq_rm");
        if (terminal < 0 && n_past_ + 1 >= n_ctx_) terminal = SA_EV_DONE;  // context full

        if (terminal >= 0) {
            emit_stats(terminal, eog_id);
        } else if (p_.emit_stats_every > 0 && n_emitted_ >= next_stats_at_) {
            emit_stats(SA_EV_STATS);
            while (next_stats_at_ <= n_emitted_) next_stats_at_ += p_.emit_stats_every;
        } else {
            s_.stats.set_elapsed(ggml_time_us(), t_decode_start_);
        }
        if (!events_.flush()) return terminal >= 0 ? SA_OK : SA_STOPPED;
        if (terminal >= 0) return SA_OK;
    }
}

}  // namespace

sa_status run_generation(sa_session & s, const sa_run_params & p, common_sampler * smpl, sa_event_cb cb, void * user) {
    Run run(s, p, smpl, cb, user);
    return run.execute();
}

}  // namespace sa
