#include "engine/generation.h"
#include "draft/step_cost_calibration.h"
#include "session/checks.h"
#include "engine/sampler.h"
#include "engine/shared_prefix.h"

#include "common.h"

#include <algorithm>
#include <string>
#include <utility>

namespace sa {

Sequence::Sequence(sa_session & s, Slot & slot, const sa_run_params & p, common_sampler * smpl, int32_t n_logprobs,
                   sa_event_cb cb, void * user)
    : s_(s), slot_(slot), p_(p), seq_(slot.seq), smpl_(smpl), events_(llama_model_get_vocab(s.model->model), cb, user),
      vocab_(llama_model_get_vocab(s.model->model)), mem_tgt_(llama_get_memory(s.ctx_tgt)),
      mem_dft_(s.ctx_dft ? llama_get_memory(s.ctx_dft) : nullptr), n_ctx_(s.n_ctx_seq),
      n_rs_((int32_t) llama_n_rs_seq(s.ctx_tgt)), drafter_(slot.drafter.get()), stats_(*slot.stats), prefix_(*slot.prefix),
      n_logprobs_(n_logprobs), probs_after_sampling_(n_logprobs >= 0 && p.logprobs_after_sampling != 0),
      keeps_sampled_probs_(probs_after_sampling_ && p.sampling.temp > 0.0f), argmax_(picks_argmax(vocab_, p.sampling)),
      hooks_(s.test_hooks.load(std::memory_order_acquire)), rb_(slot.rollback) {
    prof_.start(hooks_ != nullptr ? &hooks_->profile : nullptr);
    rb_.has_tgt = false;
}

void Sequence::end_with_error(int code, const std::string & msg) {
    errored_ = true;
    events_.error(code, msg);
    events_.flush();
    finish(SA_OK);
}

void Sequence::emit_stats(int kind, llama_token eog_id) {
    sa_stats snap;
    stats_.set_elapsed(ggml_time_us(), t_decode_start_);
    stats_.read(1, &snap);
    events_.stats(kind, snap, eog_id);
}

void Sequence::note_progress() {
    if (!p_.emit_progress) return;
    // the context's tokens (the last prompt token joins once the prompt is in: it is decoded with the
    // first token's step or row); a kept first token comes with the whole prompt
    const int32_t processed = phase_ == Phase::Prefill ? std::max((int32_t) prompt_tgt_.size(), n_reused_)
                                                       : p_.n_prompt;
    if (processed == progress_sent_) return;
    progress_sent_ = processed;
    events_.progress(p_.n_prompt, n_reused_, processed, t_prefill_us_);
}

bool Sequence::flush_events() {
    const int rc = events_.flush();
    if (rc == SA_CB_PAUSE) {
        slot_.pauses.fetch_add(1);
    } else if (rc != 0) {
        finish(SA_STOPPED);
        return false;
    }
    return true;
}

void Sequence::start() {
    t_start_ = ggml_time_us();
    if (drafter_) drafter_->before_prompt();
    next_stats_at_ = p_.emit_stats_every;
    if (s_.forget.exchange(false)) s_.memory.clear();
    const bool forget = slot_.forget.exchange(false);
    s_.memory.set_capacity((size_t) s_.memory_capacity.load());
    fresh_ = forget || s_.memory.capacity() == 0;
    fused_ = fuses_first_token();
    n_reused_ = prefix_.resume(s_, p_.prompt, p_.n_prompt, forget, fused_ ? &first_kept_ : nullptr);
    calibrate_step_cost(s_, slot_.drafter.get());  // auto's step-cost table, measured once per process (before the prefill)
    stats_.begin_run(t_start_, (uint64_t) p_.n_prompt, (uint64_t) n_reused_);
    prompt_tgt_.reserve((size_t) n_ctx_);
    // a kept first token comes with the whole prompt; the last prompt token joins when it is taken
    prompt_tgt_.assign(p_.prompt, p_.prompt + n_reused_ - (first_kept_ >= 0 ? 1 : 0));
    phase_ = Phase::Prefill;
}

bool Sequence::fuses_first_token() const {
    return argmax_ && n_logprobs_ < 0 && s_.ctx_dft == nullptr && !needs_checkpoints(s_) &&
           (drafter_ == nullptr || !drafter_->drafts_first_token());
}

void Sequence::finish(sa_status st) {
    if (ended_) return;
    prof_.end();
    if (phase_ != Phase::Start) {
        keep_prefix(st);
        if (drafter_) drafter_->end();
        stats_.set_elapsed(ggml_time_us(), t_decode_start_);
        stats_.end_run();
        s_.memory_tokens.store((int64_t) s_.memory.size_tokens());
        s_.memory_bytes.store((int64_t) s_.memory.bytes());
    }
    phase_ = Phase::Ended;
    status_ = st;
    ended_.store(true, std::memory_order_release);
}

void Sequence::keep_prefix(sa_status st) {
    if (errored_) {
        prefix_.drop(s_);
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
    prefix_.keep(s_, std::move(tokens), live, st == SA_OK && settled, first_ >= 0 ? p_.n_prompt : 0, first_);
}


bool Sequence::begin_step() {
    prof_.begin_step();
    step_ = StepPart{};
    if (ended_) return false;
    if (phase_ == Phase::Start) {
        start();
        note_progress();  // before any prompt token is evaluated
        if (!flush_events()) return false;
    }
    if (cancelled()) {
        finish(SA_CANCELLED);
        return false;
    }
    return true;
}

int32_t Sequence::plan(common_batch & batch, int32_t room, const std::vector<Sequence *> & peers) {
    const int32_t n0 = batch.size();
    if (phase_ == Phase::Prefill) {
        // a chunk's decode is the prompt's alone: complete() begins decoding after the last one (decision 0050)
        if (!plan_prefill(batch, room, peers) || step_.i_chunk1 > step_.i_chunk0) return batch.size() - n0;
        begin_decoding();
        note_progress();  // the prompt is in without a chunk of its own (kept, or copied from a peer)
        if (first_kept_ >= 0) {  // the same prompt as the previous run: its first token too
            take_first_token(std::exchange(first_kept_, -1), -1, 0);
            if (ended_ || slot_.pauses.load() > 0) return batch.size() - n0;
        } else if (!flush_events() || slot_.pauses.load() > 0) {
            return batch.size() - n0;
        }
    }
    if (prepare_verify(room - (batch.size() - n0))) add_verify(batch);
    return batch.size() - n0;
}

bool Sequence::draft_for_step(int32_t room, bool defer) {
    return begin_step() && prepare_verify(room, defer);
}

bool Sequence::plan_prefill(common_batch & batch, int32_t room, const std::vector<Sequence *> & peers) {
    // the last prompt token is decoded with the first draft, or (fused_) with the last chunk
    const int32_t n = n_prefill();
    if (!share_prefill(peers, p_.n_prompt - 1)) return false;  // the last token's row is always its own
    const int32_t i0 = (int32_t) prompt_tgt_.size();
    if (i0 >= n || first_kept_ >= 0) return true;
    if (room <= 0) return false;
    // The end of the prompt is where a request that repeats or extends it
    // resumes. With a draft context such a request decodes the last two
    // prompt tokens again (PrefixCache::resume), so a checkpoint of a
    // recurrent target goes before them: a batch ends there.
    const int32_t n_ckpt = n - (s_.ctx_dft ? 1 : 0);
    int32_t i1 = std::min(n, i0 + room);
    if (i0 < n_ckpt && n_ckpt < i1) i1 = n_ckpt;
    for (int32_t i = i0; i < i1; ++i) {
        const bool row = fused_ && i == p_.n_prompt - 1;
        const int32_t k = batch.add(p_.prompt[i], i, seq_, row);
        if (row) step_.i_first = k;
    }
    step_.i_chunk0 = i0;
    step_.i_chunk1 = i1;
    last_pos_ = i1 - 1;
    return i1 == n;
}

bool Sequence::share_prefill(const std::vector<Sequence *> & peers, int32_t n) {
    if (!prefix_.enabled.load() || !can_share_prefixes(s_)) return true;  // nothing to copy, so nothing to wait for
    const int32_t i0 = (int32_t) prompt_tgt_.size();
    if (const int32_t k = take_shared_prefix(s_, *this, peers, p_.prompt, i0, n); k > 0) {
        prompt_tgt_.insert(prompt_tgt_.end(), p_.prompt + i0, p_.prompt + i0 + k);
        last_pos_ = std::max(last_pos_, (llama_pos) (i0 + k - 1));
        stats_.share_prompt((uint64_t) k);
    }
    return !waits_for_shared_prefill(*this, peers, p_.prompt, (int32_t) prompt_tgt_.size(), n);
}

void Sequence::begin_decoding() {
    id_last_ = p_.prompt[p_.n_prompt - 1];
    n_past_ = (int32_t) prompt_tgt_.size();
    if (drafter_) drafter_->begin(RunStart{prompt_tgt_, p_.prompt, p_.n_prompt, fresh_, p_.sampling.temp > 0.0f});
    // A slot's first checkpoint would allocate its buffers (megabytes of a
    // recurrent state, page by page) in the step of a draft: size them now
    // that the state holds the prompt. Later requests find them sized.
    if (drafter_ && needs_checkpoint(std::max(s_.plan.n_draft, s_.plan.n_verify))) rb_.tgt.reserve(s_.ctx_tgt, seq_);
    if (drafter_ && s_.use_ckpt_dft) rb_.dft.reserve(s_.ctx_dft, seq_);
    t_decode_start_ = ggml_time_us();
    decoding_since_ = s_.engine->order.fetch_add(1) + 1;
    phase_ = Phase::Decode;
}

bool Sequence::prepare_verify(int32_t room, bool defer) {
    if (room <= 0) return false;
    const bool fresh = draft_.empty();
    if (fresh && !draft_step(room, defer)) return false;
    if ((int32_t) draft_.size() + 1 > room) return false;  // a re-verification waits for a step with room
    step_.verify = fresh ? Verify::Draft : Verify::Reverify;
    return true;
}

bool Sequence::offer(DraftOption & out) const {
    if (step_.verify != Verify::Draft || drafter_ == nullptr || !drafter_->offer(out)) return false;
    out.rollback = rollback_price();
    return true;
}

void Sequence::resize_draft(int32_t n) {
    drafter_->resize(n, draft_);
    note_draft_in_use();
}

void Sequence::note_draft_in_use() {
    if (const int32_t n = drafter_->n_draft_in_use(); n >= 0) stats_.set_n_draft(n);
}

bool Sequence::add_verify(common_batch & batch) {
    if (step_.verify == Verify::Nothing) return false;
    if (step_.verify == Verify::Draft && !draft_.empty() && needs_checkpoint((int32_t) draft_.size())) {
        const int64_t t_save = ggml_time_us();
        if (!rb_.tgt.save(s_.ctx_tgt, seq_)) {
            step_.verify = Verify::Nothing;
            return rollback_failed("saving the target's state before verifying"), false;
        }
        rb_.has_tgt = true;
        step_.t_checkpoint_us = ggml_time_us() - t_save;
        prof_.add_us(kPartCheckpoint, step_.t_checkpoint_us);
        slot_.rollback_cost.saved(step_.t_checkpoint_us);
    }
    step_.i_verify = batch.add(id_last_, n_past_, seq_, true);
    for (size_t i = 0; i < draft_.size(); ++i) batch.add(draft_[i], n_past_ + 1 + (int32_t) i, seq_, true);
    last_pos_ = n_past_ + (int32_t) draft_.size();
    return true;
}

bool Sequence::trim(llama_memory_t mem, llama_pos p0) {
    if (hooks_ != nullptr && hooks_->take_seq_rm_refusal()) return false;
    return llama_memory_seq_rm(mem, seq_, p0, -1);
}

bool Sequence::trim_draft(llama_pos p0) {
    if (mem_dft_ == nullptr || llama_memory_seq_pos_max(mem_dft_, seq_) < p0) return true;
    return trim(mem_dft_, p0);
}

void Sequence::rollback_failed(const char * what) {
    end_with_error(SA_ERR_DECODE, std::string("rolling back rejected draft tokens failed: ") + what +
                   "; the request ended here and the session is ready for the next one");
}

bool Sequence::draft_step(int32_t room, bool defer) {
    if (!drafter_) return true;
    rb_.n_tokens = (int64_t) prompt_tgt_.size();
    rb_.pos_max = llama_memory_seq_pos_max(mem_tgt_, seq_);
    rb_.has_tgt = false;
    if (s_.use_ckpt_dft && !rb_.dft.save(s_.ctx_dft, seq_)) return rollback_failed("saving the draft context's state"), false;
    // A drafter may leave the first step plain: its token is the request's
    // first, due as soon as the prompt is in (auto, decision 0049).
    const bool first_token = n_emitted_ == 0 && !drafter_->drafts_first_token();
    const int32_t n_budget =
        first_token ? 0 : std::max(std::min({n_ctx_ - n_past_ - 2, p_.max_tokens - n_emitted_ - 1, room - 1}), 0);
    const int64_t t0 = ggml_time_us();
    drafter_->draft(DraftInput{n_budget, n_past_, id_last_, prompt_tgt_, share_, defer, rollback_price()}, draft_);
    step_.t_draft_us = ggml_time_us() - t0;
    prof_.add_us(kPartArms, drafter_->proposals_us());
    prof_.add_us(kPartChoose, step_.t_draft_us - drafter_->proposals_us());
    step_.n_pending_max = n_budget;
    return drafter_->pending() || end_draft();
}

RollbackPrice Sequence::rollback_price() const {
    if (s_.use_ckpt_tgt) return slot_.rollback_cost.price(0);
    return n_rs_ > 0 ? slot_.rollback_cost.price(n_rs_) : RollbackPrice{};
}

bool Sequence::draft_pending() const { return step_.verify == Verify::Draft && drafter_ && drafter_->pending(); }

bool Sequence::finish_draft(int64_t t_us) {
    drafter_->finish_draft(draft_, t_us);
    step_.t_draft_us += t_us;
    prof_.add_us(kPartChoose, t_us);
    if (end_draft()) return true;
    step_.verify = Verify::Nothing;
    return false;
}

bool Sequence::end_draft() {
    stats_.add(&Counters::t_draft_us, step_.t_draft_us);
    note_draft_in_use();
    if (s_.ctx_dft) {
        if (s_.use_ckpt_dft && !rb_.dft.restore(s_.ctx_dft, seq_)) return rollback_failed("restoring the draft context's state"), false;
        if (!trim_draft(rb_.pos_max + 1)) return rollback_failed("the draft context refused llama_memory_seq_rm"), false;
    }
    return true;
}

bool Sequence::roll_back(llama_tokens && ids, common_sampler_ptr && smpl_save) {
    const int64_t t0 = ggml_time_us();
    draft_ = std::move(ids);
    if (!rb_.tgt.restore(s_.ctx_tgt, seq_)) return rollback_failed("the target refused its saved state"), false;
    if (!trim(mem_tgt_, rb_.pos_max + 1)) return rollback_failed("the target refused llama_memory_seq_rm after a restore"), false;
    if (s_.ctx_dft) {
        if (s_.use_ckpt_dft && !rb_.dft.restore(s_.ctx_dft, seq_)) return rollback_failed("the draft context refused its saved state"), false;
        if (mem_dft_ && !trim(mem_dft_, rb_.pos_max + 1)) return rollback_failed("the draft context refused llama_memory_seq_rm"), false;
    }
    prompt_tgt_.resize((size_t) rb_.n_tokens);
    smpl_ = std::move(smpl_save);
    n_past_ = (int32_t) prompt_tgt_.size();
    t_restore_us_ = ggml_time_us() - t0;
    prof_.add_us(kPartRestore, t_restore_us_);
    slot_.rollback_cost.restored(t_restore_us_);
    return true;
}

int Sequence::emit(const llama_tokens & ids, int32_t i0, llama_token * eog_id) {
    for (size_t k = 0; k < ids.size(); ++k) {  // ids[k] was sampled from output i0 + k of the batch
        const llama_token id = ids[k];
        prompt_tgt_.push_back(id_last_);
        id_last_ = id;
        int terminal = -1;
        if (llama_vocab_is_eog(vocab_, id)) {
            *eog_id = id;
            terminal = SA_EV_EOG;
        } else {
            if (probs_after_sampling_) {
                events_.token(id, probs_sampled_from(k, id));
            } else {
                events_.token(id, s_.ctx_tgt, i0 + (int32_t) k, n_logprobs_);
            }
            ++n_emitted_;
            stats_.add(&Counters::tokens_emitted, (uint64_t) 1);
            if (n_emitted_ == 1) stats_.set_ttft(ggml_time_us() - t_start_);
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

void Sequence::decode_failed(int32_t ret, const std::string & detail) {
    if (ended_) return;
    const bool prefill = step_.i_verify < 0;
    const std::string what = prefill ? "prompt prefill" : "decoding";
    if (ret == 0) {  // sa_testing_fail_decode: the decode itself succeeded
        end_with_error(SA_ERR_DECODE, what + " failed: " + detail);
        return;
    }
    cut_ = true;
    if (ret == 2 && cancelled()) {
        finish(SA_CANCELLED);
        return;
    }
    end_with_error(SA_ERR_DECODE, what + " failed (llama_decode returned " + std::to_string(ret) + ")" +
                   (ret == 1 ? ": the context is full; raise n_ctx" : detail.empty() ? "" : ": " + detail));
}

void Sequence::evict_for_room(const std::string & why) {
    if (ended_) return;
    end_with_error(SA_ERR_DECODE, why);  // an error drops the prefix: its cells and checkpoints go
}

void Sequence::complete(const common_batch & batch, int64_t t_us, bool priced) {
    if (ended_) return;
    const int32_t n_chunk = step_.i_chunk1 - step_.i_chunk0;
    const int32_t n_verify = step_.i_verify < 0 ? 0 : (int32_t) draft_.size() + 1;
    // only a draft context reads the batch; a shared one the engine fed already,
    // and a verification's committed part is fed once it is known (verified)
    if (n_verify == 0 && feeds_draft_context() && !drafter_->process(batch)) return drafter_failed();
    if (n_chunk > 0) {  // a prompt chunk (its decode never holds this sequence's verification)
        stats_.add(&Counters::t_prefill_us, t_us);
        t_prefill_us_ += t_us;
        const bool last_row = step_.i_first >= 0;  // the prompt's last token, whose row makes the first token
        // what a cancel keeps (the last token joins once its row is sampled)
        prompt_tgt_.insert(prompt_tgt_.end(), p_.prompt + step_.i_chunk0, p_.prompt + step_.i_chunk1 - (last_row ? 1 : 0));
        if (last_row) {
            begin_decoding();
            note_progress();  // with the first token, in its batch
            const int64_t t0 = ggml_time_us();
            const llama_tokens ids = argmax_sample_and_accept_n(s_.ctx_tgt, {step_.i_first}, {});
            take_first_token(ids.empty() ? -1 : ids[0], step_.i_first, ggml_time_us() - t0);
        } else if (!fused_) {  // the last prompt token is decoded with the first draft
            const int32_t n = p_.n_prompt - 1;
            if (step_.i_chunk1 == n - (s_.ctx_dft ? 1 : 0)) prefix_.checkpoint(s_, step_.i_chunk1);
            if (step_.i_chunk1 == n) begin_decoding();
        }
        if (!last_row) {
            note_progress();
            if (!flush_events()) return;
        }
    }
    if (n_verify > 0) verified(batch, t_us, batch.size() - n_verify, priced);
}

bool Sequence::feeds_draft_context() const { return s_.ctx_dft && !shares_draft_context(s_) && drafter_; }

bool Sequence::feed_committed(const common_batch & batch, int32_t n_accepted) {
    if (!feeds_draft_context()) return true;
    // a session of one sequence: its verification is the whole batch (never beside its own prompt chunk)
    committed_.clear();
    committed_.tokens.assign(batch.tokens.begin(), batch.tokens.begin() + n_accepted + 1);
    return drafter_->process(committed_);
}

void Sequence::drafter_failed() {
    if (ended_) return;
    cut_ = true;
    if (cancelled()) return finish(SA_CANCELLED);
    end_with_error(SA_ERR_DECODE, std::string("the speculative drafter failed to process ") +
                   (step_.i_verify >= 0 ? "a batch" : "the prompt"));
}

double Sequence::expected_tokens() const {
    if (step_.verify == Verify::Nothing) return 0.0;
    return drafter_ && !draft_.empty() ? drafter_->expected_tokens() : 1.0;
}

void Sequence::verified(const common_batch & batch, int64_t t_us, int32_t n_others, bool priced) {
    ++n_past_;
    // the step's checkpoint (or the restore that led to this re-verification) is part of its cost
    const int64_t t_verify = t_us + step_.t_checkpoint_us + std::exchange(t_restore_us_, 0);
    stats_.add(&Counters::t_verify_us, t_verify);

    common_sampler_ptr smpl_save;
    if (rb_.has_tgt) smpl_save.reset(common_sampler_clone(smpl_.get()));
    const int32_t n_draft = (int32_t) draft_.size();
    std::vector<int> idxs((size_t) n_draft + 1);
    for (int32_t i = 0; i <= n_draft; ++i) idxs[(size_t) i] = step_.i_verify + i;
    const int64_t t_s0 = ggml_time_us();
    llama_tokens ids = argmax_              ? argmax_sample_and_accept_n(s_.ctx_tgt, idxs, draft_)
                     : keeps_sampled_probs_ ? sample_and_accept_n_keeping_probs(smpl_.get(), s_.ctx_tgt, idxs, draft_,
                                                                                n_logprobs_, sampled_probs_)
                                            : common_sampler_sample_and_accept_n(smpl_.get(), s_.ctx_tgt, idxs, draft_);
    const int64_t t_sample = ggml_time_us() - t_s0;
    stats_.add(&Counters::t_sample_us, t_sample);
    prof_.add_us(kPartDecode, t_us);
    prof_.add_us(kPartSample, t_sample);
    if (ids.empty()) return end_with_error(SA_ERR_INTERNAL, "the sampler returned no token");
    const int32_t n_accepted = (int32_t) ids.size() - 1;
    const int32_t drafter = n_draft == 0 || !drafter_ ? SA_SPEC_NONE : drafter_->last_drafter();
    prof_.verified(n_draft, step_.verify == Verify::Reverify, n_accepted, drafter);
    const int32_t n_rejected = n_draft - n_accepted;
    const bool rolls_back = n_rejected > 0 && rb_.has_tgt && (s_.use_ckpt_tgt || n_rejected > n_rs_);
    // a batch undone by a checkpoint restore is not read: its re-verification is
    int64_t t_part = prof_.now();
    if (!rolls_back && !feed_committed(batch, n_accepted)) return drafter_failed();
    prof_.add(kPartFeed, t_part);
    t_part = prof_.now();
    // the drafter learns the decode's cost; its checkpoints are priced apart (decision 0091)
    if (drafter_) drafter_->observe(StepOutcome{ids, n_draft, step_.t_draft_us, t_us, t_sample, !rolls_back, n_others, priced});
    prof_.add(kPartObserve, t_part);

    if (rolls_back) {
        if (!rolled_back_.active) {
            rolled_back_ = {true, drafter, n_draft, n_accepted};
        } else {
            rolled_back_.n_accepted = std::min(rolled_back_.n_accepted, n_accepted);
        }
        roll_back(std::move(ids), std::move(smpl_save));
        return;
    }

    if (rolled_back_.active) {
        // re-verified: count the original draft once, and of its tokens
        // those the re-verification kept (not the re-fed sampled token)
        stats_.add_step(rolled_back_.drafter, rolled_back_.n_drafted, std::min(rolled_back_.n_accepted, n_accepted));
        rolled_back_ = {};
    } else {
        stats_.add_step(drafter, n_draft, n_accepted);
    }
    n_past_ += n_accepted;

    t_part = prof_.now();
    llama_token eog_id = -1;
    const int terminal = emit(ids, step_.i_verify, &eog_id);
    prof_.add(kPartEmit, t_part);
    draft_.clear();
    rb_.has_tgt = false;
    t_part = prof_.now();
    if (!trim(mem_tgt_, n_past_)) return rollback_failed("the target refused llama_memory_seq_rm");
    if (!trim_draft(n_past_)) return rollback_failed("the draft context refused llama_memory_seq_rm");
    prof_.add(kPartTrim, t_part);
    t_part = prof_.now();
    deliver(terminal, eog_id);
    prof_.add(kPartEmit, t_part);
}

SampledProbs Sequence::probs_sampled_from(size_t k, llama_token id) const {
    if (keeps_sampled_probs_ && k < sampled_probs_.size()) return sampled_probs_[k];
    SampledProbs pick;  // greedy: the pick, with probability 1
    if (n_logprobs_ > 0) pick.top.emplace_back(id, 1.0f);
    return pick;
}

void Sequence::take_first_token(llama_token id, int32_t idx, int64_t t_sample_us) {
    if (id < 0) return end_with_error(SA_ERR_INTERNAL, "the sampler returned no token");
    ++n_past_;
    first_ = id;
    const llama_tokens ids{id};
    stats_.add(&Counters::t_sample_us, t_sample_us);
    stats_.add_step(SA_SPEC_NONE, 0, 0);
    // the drafter's history takes the token; a prompt's decode prices no step (decision 0074)
    if (drafter_) drafter_->observe(StepOutcome{ids, 0, 0, 0, t_sample_us, true, 0, false});
    llama_token eog_id = -1;
    const int terminal = emit(ids, idx, &eog_id);
    deliver(terminal, eog_id);
}

void Sequence::deliver(int terminal, llama_token eog_id) {
    if (terminal < 0 && n_past_ + 1 >= n_ctx_) terminal = SA_EV_DONE;  // context full

    if (terminal >= 0) {
        emit_stats(terminal, eog_id);
    } else if (p_.emit_stats_every > 0 && n_emitted_ >= next_stats_at_) {
        emit_stats(SA_EV_STATS);
        while (next_stats_at_ <= n_emitted_) next_stats_at_ += p_.emit_stats_every;
    } else {
        stats_.set_elapsed(ggml_time_us(), t_decode_start_);
    }
    if (terminal >= 0) {
        events_.flush();
        return finish(SA_OK);
    }
    flush_events();
}

}  // namespace sa
