#include "generation.h"
#include "checks.h"
#include "event_batch.h"
#include "thread_budget.h"

#include "common.h"

#include <algorithm>
#include <optional>
#include <string>

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
    int32_t n_asked = 0;      // draft length asked for (0: a plain step)
    bool drafted = false;     // the drafter ran in this step
    int64_t t_draft_us = 0;
};

class Run {
public:
    Run(sa_session & s, const sa_run_params & p, common_sampler * smpl, sa_event_cb cb, void * user)
        : s_(s), p_(p), smpl_(smpl), events_(llama_model_get_vocab(s.model->model), cb, user),
          vocab_(llama_model_get_vocab(s.model->model)), batch_(s.ctx_tgt),
          mem_tgt_(llama_get_memory(s.ctx_tgt)), mem_dft_(s.ctx_dft ? llama_get_memory(s.ctx_dft) : nullptr),
          n_ctx_((int32_t) llama_n_ctx(s.ctx_tgt)), adaptive_(s.spec != nullptr && s.sparams.adaptive != 0 && !s.autod),
          n_cap_(s.spec ? s.sparams.n_draft : 0), threads_(s.threads, s.ctx_tgt, s.ctx_dft) {}

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
    const bool adaptive_;
    const int32_t n_cap_;
    ThreadShare threads_;  // this run's share of the CPUs (docs/decisions/0027)

    llama_tokens prompt_tgt_;  // tokens in the target's memory
    llama_token id_last_ = -1; // the newest token, not yet decoded
    int32_t n_past_ = 0;
    llama_tokens draft_;
    common_prompt_checkpoint ckpt_;
    RolledBack rolled_back_;
    int64_t t_start_ = 0;
    int64_t t_decode_start_ = 0;
    int32_t n_emitted_ = 0;
    int32_t next_stats_at_ = 0;
    bool fresh_ = false;  // keep nothing from earlier runs (forget() or memory 0)
    const int32_t n_logprobs_ = s_.n_logprobs.load();  // -1: none; else top alternatives per token

    bool cancelled() const { return s_.cancelled(); }

    // nullopt: the prompt is in; otherwise the run ends with that status.
    std::optional<sa_status> prefill();
    sa_status loop();
    DraftStep draft_step();
    // Decodes batch_ on the target and feeds it to the drafter. nullopt: done;
    // otherwise the run ends with that status (its Error event delivered).
    std::optional<sa_status> decode(const char * what, const char * drafter_what);
    // Restores the checkpoint after a partial acceptance on a target that cannot
    // drop a partial sequence; the accepted tokens become the next draft.
    void roll_back(llama_tokens && ids, common_sampler_ptr && smpl_save);
    // Emits the step's tokens; returns the terminal event kind or -1.
    int emit(const llama_tokens & ids, llama_token * eog_id);
    // A Stats, Done or Eog event (Eog also carries the end-of-generation token).
    void emit_stats(int kind, llama_token eog_id = -1);
    // Delivers a terminal Error event; the run then ends with SA_OK.
    sa_status end_with_error(int code, const std::string & msg);
};

sa_status Run::end_with_error(int code, const std::string & msg) {
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
        if (ret == 2 && cancelled()) return SA_CANCELLED;
        const std::string detail = last_native_log_error();
        return end_with_error(SA_ERR_DECODE, std::string(what) + " failed (llama_decode returned " + std::to_string(ret) + ")" +
                              (ret == 1 ? ": the context is full; raise n_ctx" : detail.empty() ? "" : ": " + detail));
    }
    if (s_.spec && !common_speculative_process(s_.spec, batch_)) {
        if (cancelled()) return SA_CANCELLED;
        return end_with_error(SA_ERR_DECODE, std::string("the speculative drafter failed to process ") + drafter_what);
    }
    return std::nullopt;
}

std::optional<sa_status> Run::prefill() {
    const int64_t t0 = ggml_time_us();
    const int32_t n_batch = (int32_t) llama_n_batch(s_.ctx_tgt);
    const int32_t n = p_.n_prompt - 1;  // the last prompt token is decoded with the first draft
    for (int32_t i0 = 0; i0 < n; i0 += n_batch) {
        if (cancelled()) return SA_CANCELLED;
        batch_.clear();
        const int32_t i1 = std::min(n, i0 + n_batch);
        for (int32_t i = i0; i < i1; ++i) batch_.add(p_.prompt[i], i, 0, false);
        if (auto ended = decode("prompt prefill", "the prompt")) return ended;
    }
    prompt_tgt_.assign(p_.prompt, p_.prompt + n);
    id_last_ = p_.prompt[n];
    s_.stats.add(&Counters::t_prefill_us, ggml_time_us() - t0);
    return std::nullopt;
}

sa_status Run::execute() {
    t_start_ = ggml_time_us();
    s_.stats.begin_run(t_start_, (uint64_t) p_.n_prompt);
    next_stats_at_ = p_.emit_stats_every;
    clear_memory(s_.ctx_tgt);
    clear_memory(s_.ctx_dft);
    const bool forget = s_.forget.exchange(false);
    if (forget) s_.memory.clear();
    s_.memory.set_capacity((size_t) s_.memory_capacity.load());
    fresh_ = forget || s_.memory.capacity() == 0;
    prompt_tgt_.reserve(n_ctx_);
    const std::optional<sa_status> ended = prefill();
    const sa_status st = ended ? *ended : loop();
    s_.stats.set_elapsed(ggml_time_us(), t_decode_start_);
    s_.stats.end_run();
    s_.memory_tokens.store((int64_t) s_.memory.size_tokens());
    s_.memory_bytes.store((int64_t) s_.memory.bytes());
    return st;
}

DraftStep Run::draft_step() {
    DraftStep d;
    if (!s_.spec && !s_.autod) return d;
    ckpt_.update_pos((int64_t) prompt_tgt_.size(), llama_memory_seq_pos_min(mem_tgt_, 0), llama_memory_seq_pos_max(mem_tgt_, 0));
    if (s_.use_ckpt_dft) ckpt_.update_dft(s_.ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    const int32_t n_budget = std::max(std::min(n_ctx_ - n_past_ - 2, p_.max_tokens - n_emitted_ - 1), 0);
    d.n_asked = s_.autod ? n_budget : std::min(n_budget, adaptive_ ? s_.adaptive.choose() : n_cap_);
    if (adaptive_) s_.stats.set_n_draft(d.n_asked);
    if (s_.autod) {
        const int64_t t0 = ggml_time_us();
        s_.autod->draft(d.n_asked, n_past_, id_last_, prompt_tgt_, draft_);
        d.drafted = true;
        d.t_draft_us = ggml_time_us() - t0;
        s_.stats.add(&Counters::t_draft_us, d.t_draft_us);
        s_.stats.set_n_draft((int32_t) draft_.size());
    } else if (d.n_asked > 0 &&
               (s_.sparams.type != SA_SPEC_NGRAM_CACHE || ngram_cache_can_draft(prompt_tgt_.size() + 1))) {
        const int64_t t0 = ggml_time_us();
        common_speculative_get_draft_params(s_.spec, 0) = {
            /* .drafting = */ true,
            /* .n_max    = */ d.n_asked,
            /* .pos0     = */ n_past_,
            /* .id_last  = */ id_last_,
            /* .prompt   = */ &prompt_tgt_,
            /* .result   = */ &draft_,
        };
        common_speculative_draft(s_.spec);
        d.drafted = true;
        d.t_draft_us = ggml_time_us() - t0;
        s_.stats.add(&Counters::t_draft_us, d.t_draft_us);
    }
    if (!draft_.empty() && s_.use_ckpt_tgt) ckpt_.update_tgt(s_.ctx_tgt, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    if (s_.ctx_dft) {
        if (s_.use_ckpt_dft) ckpt_.load_dft(s_.ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        if (mem_dft_) llama_memory_seq_rm(mem_dft_, 0, ckpt_.pos_max + 1, -1);
    }
    return d;
}

void Run::roll_back(llama_tokens && ids, common_sampler_ptr && smpl_save) {
    draft_ = std::move(ids);
    ckpt_.load_tgt(s_.ctx_tgt, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    llama_memory_seq_rm(mem_tgt_, 0, ckpt_.pos_max + 1, -1);
    if (s_.ctx_dft) {
        ckpt_.load_dft(s_.ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        if (mem_dft_) llama_memory_seq_rm(mem_dft_, 0, ckpt_.pos_max + 1, -1);
    }
    prompt_tgt_.resize((size_t) ckpt_.n_tokens);
    smpl_ = std::move(smpl_save);
    n_past_ = (int32_t) prompt_tgt_.size();
}

int Run::emit(const llama_tokens & ids, llama_token * eog_id) {
    for (size_t k = 0; k < ids.size(); ++k) {  // ids[k] was sampled from output k of the verify batch
        const llama_token id = ids[k];
        prompt_tgt_.push_back(id_last_);
        id_last_ = id;
        if (llama_vocab_is_eog(vocab_, id)) {
            *eog_id = id;
            return SA_EV_EOG;
        }
        events_.token(id, s_.ctx_tgt, (int32_t) k, n_logprobs_);
        ++n_emitted_;
        s_.stats.add(&Counters::tokens_emitted, (uint64_t) 1);
        if (n_emitted_ == 1) s_.stats.set_ttft(ggml_time_us() - t_start_);
        if (n_emitted_ >= p_.max_tokens) return SA_EV_DONE;
    }
    return -1;
}

sa_status Run::loop() {
    if (adaptive_) s_.adaptive.reset(n_cap_, uses_draft_context(s_.sparams.type) ? 1 : 0);
    n_past_ = (int32_t) prompt_tgt_.size();
    common_speculative_begin(s_.spec, 0, prompt_tgt_);
    if (s_.autod) s_.autod->begin(prompt_tgt_, p_.prompt, p_.n_prompt, fresh_, p_.sampling.temp > 0.0f);
    t_decode_start_ = ggml_time_us();

    while (true) {
        if (cancelled()) return SA_CANCELLED;
        threads_.refresh();  // before the drafter decodes too
        const DraftStep d = draft_.empty() ? draft_step() : DraftStep{};

        // verify [id_last, draft...] on the target
        const int64_t t_v0 = ggml_time_us();
        batch_.clear();
        batch_.add(id_last_, n_past_++, 0, true);
        for (size_t i = 0; i < draft_.size(); ++i) batch_.add(draft_[i], n_past_ + (int32_t) i, 0, true);
        if (auto ended = decode("decoding", "a batch")) return *ended;
        const int64_t t_verify = ggml_time_us() - t_v0;
        s_.stats.add(&Counters::t_verify_us, t_verify);

        common_sampler_ptr smpl_save;
        if (s_.use_ckpt_tgt) smpl_save.reset(common_sampler_clone(smpl_.get()));
        const int32_t n_draft = (int32_t) draft_.size();
        const int64_t t_s0 = ggml_time_us();
        llama_tokens ids = common_sampler_sample_and_accept_n(smpl_.get(), s_.ctx_tgt, draft_);
        const int64_t t_sample = ggml_time_us() - t_s0;
        s_.stats.add(&Counters::t_sample_us, t_sample);
        if (ids.empty()) return end_with_error(SA_ERR_INTERNAL, "the sampler returned no token");
        const int32_t n_accepted = (int32_t) ids.size() - 1;
        const bool rolls_back = s_.use_ckpt_tgt && n_accepted < n_draft;
        if (s_.autod) s_.autod->observe(ids, n_draft, t_verify, t_sample, !rolls_back);
        const int32_t drafter = n_draft == 0 ? SA_SPEC_NONE : s_.autod ? s_.autod->active() : s_.sparams.type;

        if (rolls_back) {
            if (!rolled_back_.active) {
                rolled_back_ = {true, drafter, n_draft, n_accepted};
                if (adaptive_ && d.drafted) s_.adaptive.observe(d.n_asked, n_draft, n_accepted, d.t_draft_us, t_verify);
            } else {
                rolled_back_.n_accepted = std::min(rolled_back_.n_accepted, n_accepted);
            }
            roll_back(std::move(ids), std::move(smpl_save));
            continue;
        }

        if (s_.spec && !s_.autod && (d.drafted || n_accepted > 0)) common_speculative_accept(s_.spec, 0, (uint16_t) n_accepted);
        // plain steps (nothing drafted) feed the step-cost line too
        if (adaptive_ && (d.drafted || n_draft == 0)) {
            s_.adaptive.observe(d.n_asked, n_draft, n_accepted, d.t_draft_us, t_verify);
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
        llama_memory_seq_rm(mem_tgt_, 0, n_past_, -1);
        if (mem_dft_) llama_memory_seq_rm(mem_dft_, 0, n_past_, -1);
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
