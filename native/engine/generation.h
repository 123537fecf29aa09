// One request on one slot of the engine (engine.h): prefill, then draft ->
// verify -> accept until a terminal event, a cancel, or the consumer stops
// it, one engine step at a time.
#pragma once

#include "engine/checkpoint.h"
#include "engine/engine.h"
#include "report/event_batch.h"
#include "session/session.h"
#include "session/step_profile.h"

#include "sampling.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

namespace sa {

class Sequence {
public:
    // Takes ownership of smpl; n_logprobs: -1 none, else top alternatives per token.
    Sequence(sa_session & s, Slot & slot, const sa_run_params & p, common_sampler * smpl, int32_t n_logprobs,
             sa_event_cb cb, void * user);

    // Whether the request ended, and how (SA_OK once a terminal event was delivered).
    // Any thread: the caller waiting for it polls this while a step runs.
    bool ended() const { return ended_.load(std::memory_order_acquire); }
    sa_status status() const { return status_; }
    const Slot & slot() const { return slot_; }
    // The faults a test armed on the session before this run started, or null.
    TestHooks * test_hooks() const { return hooks_; }
    // Whether its prompt is in and it drafts and verifies.
    bool decoding() const { return phase_ == Phase::Decode; }
    // Whether its prompt is in and its first token not yet made.
    bool awaits_first_token() const { return phase_ == Phase::Decode && n_emitted_ == 0; }

    // Whether a step should visit it: not paused by its reader, or cancelled.
    bool runnable() const { return slot_.pauses.load() <= 0 || cancelled(); }

    // What the other sequences of the engine see of it (shared_prefix.h).
    bool started() const { return phase_ != Phase::Start; }
    bool prefilling() const { return phase_ == Phase::Prefill; }
    const llama_tokens & held() const { return prompt_tgt_; }  // tokens whose state its cells hold
    const int32_t * prefill_tokens() const { return p_.prompt; }
    int32_t n_prefill() const { return p_.n_prompt - (fused_ ? 0 : 1); }  // the prompt tokens it prefills
    int32_t prefill_left() const { return n_prefill() - (int32_t) prompt_tgt_.size(); }  // ... not yet in its cells
    // When it was admitted, and when it began decoding (Engine::order).
    void admit(uint64_t order) { admitted_at_ = order; }
    uint64_t admitted_at() const { return admitted_at_; }
    uint64_t decoding_since() const { return decoding_since_; }
    // Tokens it holds once this step's decode is done.
    int32_t reach() const { return std::max((int32_t) prompt_tgt_.size(), step_.i_chunk1); }

    // Clears the step's part of the batch; starts the request on its first
    // step (its prefix cache resumes); false when it ended or is cancelled
    // now (then it finishes). A prompt's step begins with it before plan();
    // draft_for_step() begins with it itself.
    bool begin_step();
    // A step of a prompt, before the decode and after begin_step() was true:
    // adds its tokens to batch (at most room of them: a prompt chunk, and/or
    // [last, drafts...] once the prompt is in). peers: the step's sequences
    // (this one among them), whose prompt cells it may share. Returns the
    // tokens added.
    int32_t plan(common_batch & batch, int32_t room, const std::vector<Sequence *> & peers);
    // A step whose decoding sequences' drafts are chosen together (engine.cpp):
    // draft_for_step drafts (at most room tokens in all, as plan() would);
    // false: it verifies nothing this step (ended, cancelled, or a
    // re-verification that waits for room). Then, optionally, the step cuts or
    // extends the draft along what offer() describes (resize_draft), and
    // add_verify puts [last, drafts...] into batch (false: the request ended).
    // defer: a draft of the shared common_speculative may stay pending
    // (draft_pending) until the engine's one draft call for every sequence
    // filled it; finish_draft completes it (t_us: this sequence's share of
    // the call; false: the request ended).
    bool draft_for_step(int32_t room, bool defer = false);
    bool draft_pending() const;
    bool finish_draft(int64_t t_us);
    bool offer(DraftOption & out) const;
    const StepCost * step_cost() const { return drafter_->step_cost(); }  // after offer() gave one
    void resize_draft(int32_t n);
    // [last, drafts...]'s tokens (a pending draft: at most)
    int32_t n_verify_tokens() const {
        return step_.verify != Verify::Nothing ? (draft_pending() ? step_.n_pending_max : (int32_t) draft_.size()) + 1 : 0;
    }
    bool add_verify(common_batch & batch);
    // After a decode that held this sequence's tokens; t_us: the decode's time;
    // priced: it held verifications only (StepOutcome::priced).
    void complete(const common_batch & batch, int64_t t_us, bool priced);
    // Before plan(): what the step's other decoding sequences put into its
    // decode, so that its draft is priced by the step it joins.
    void set_share(const BatchShare & share) { share_ = share; }
    // After plan(): the tokens this step is expected to make for it (0: it
    // verifies nothing this step).
    double expected_tokens() const;
    // Tokens it may still make (max_tokens less those emitted, at least 1), at most `horizon`.
    int32_t tokens_left(int32_t horizon) const { return std::clamp(p_.max_tokens - n_emitted_, 1, horizon); }
    // The decode failed (ret != 0) or a test injected a failure: ends the request.
    void decode_failed(int32_t ret, const std::string & what);
    // The draft context could not read the step's decoded batch: ends the request.
    void drafter_failed();
    // The shared cache is full and this sequence was chosen to make room
    // (docs/decisions/0113): ends the request with an error that says why and
    // frees its cells, its kept prefix and its checkpoints.
    void evict_for_room(const std::string & why);

private:
    enum class Phase { Start, Prefill, Decode, Ended };

    // A draft that a checkpointed target accepted only in part: the target rolls
    // back and re-verifies the accepted prefix (plus the token sampled after it)
    // as the next "draft". Its counts are recorded once, when its tokens commit.
    struct RolledBack {
        bool active = false;
        int32_t drafter = 0;     // sa_drafter id of the original draft
        int32_t n_drafted = 0;   // the original draft's length
        int32_t n_accepted = 0;  // its tokens accepted so far (re-verification may accept fewer)
    };

    sa_session & s_;
    Slot & slot_;
    const sa_run_params & p_;
    const llama_seq_id seq_;
    common_sampler_ptr smpl_;
    EventBatch events_;
    const llama_vocab * vocab_;
    llama_memory_t mem_tgt_;
    llama_memory_t mem_dft_;
    const int32_t n_ctx_;  // this sequence's context (positions 0 .. n_ctx_ - 1)
    const int32_t n_rs_;  // recurrent snapshots: rejections up to this deep are trimmed with seq_rm
    Drafter * const drafter_;  // the slot's; null: plain decoding
    Stats & stats_;
    PrefixCache & prefix_;
    const int32_t n_logprobs_;
    // token events carry the probabilities the sampler drew from, not the raw logits' (sa_run_params)
    const bool probs_after_sampling_;
    // ... and the sampler draws (temperature above 0), so its candidates are read after each draw
    const bool keeps_sampled_probs_;
    std::vector<SampledProbs> sampled_probs_;  // of the last verification's tokens, when keeps_sampled_probs_
    const bool argmax_;  // greedy with nothing that could change the pick: sample by argmax (sampler.h)
    TestHooks * const hooks_;  // the faults a test armed before the run started; null: none (session/test_hooks.h)
    StepProfiler prof_;        // each verified step's time by part, when a benchmark asked (step_profile.h)

    Phase phase_ = Phase::Start;
    std::atomic<bool> ended_{false};
    sa_status status_ = SA_OK;

    llama_tokens prompt_tgt_;  // tokens in the target's memory
    llama_token id_last_ = -1; // the newest token, not yet decoded
    int32_t n_past_ = 0;
    llama_tokens draft_;
    RollbackPoint & rb_;  // the slot's
    RolledBack rolled_back_;
    int64_t t_restore_us_ = 0;  // the last checkpoint restore, charged to the step that re-verifies
    int64_t t_start_ = 0;
    int64_t t_decode_start_ = 0;
    int32_t n_emitted_ = 0;
    int32_t next_stats_at_ = 0;
    bool fresh_ = false;  // keep nothing from earlier runs (forget() or memory 0)
    int32_t n_reused_ = 0;     // prompt tokens whose state the prefix cache kept
    int64_t t_prefill_us_ = 0;      // the decode time of this run's prompt chunks
    int32_t progress_sent_ = -1;    // the processed count of the last progress event; -1: none yet
    llama_tokens tail_;        // decoded past the terminal token (a stopped step's accepted drafts)
    llama_pos last_pos_ = -1;  // the last position the target decoded
    bool cut_ = false;         // a decode was cancelled midway: a recurrent state is not trusted
    bool errored_ = false;     // an Error event ended the run
    // The last prompt token is decoded with the prompt's last chunk and the
    // first token taken from its row, as llama-server does (decision 0080):
    // greedy by argmax, no logprobs, an attention target, no draft context,
    // and a first step that would draft nothing (plain or auto).
    bool fused_ = false;
    llama_token first_kept_ = -1;  // the first token the prefix cache kept for this very prompt
    llama_token first_ = -1;       // the first token, once made from the prompt's row or kept
    uint64_t admitted_at_ = 0, decoding_since_ = 0;  // Engine::order then

    // What a step verifies for it: nothing, a draft made in this step, or
    // the accepted part of a rolled-back draft again (RolledBack).
    enum class Verify { Nothing, Draft, Reverify };

    // Its part of the step under way, started anew by begin_step(): plan() or
    // draft_for_step() fill it, the decode reads the batch indexes, complete()
    // reads the rest.
    struct StepPart {
        int32_t i_chunk0 = 0, i_chunk1 = 0;  // prompt tokens [i_chunk0, i_chunk1) were added
        int32_t i_verify = -1;               // batch index of [last, drafts...]; -1: none this step
        int32_t i_first = -1;                // batch index of the last prompt token's row (fused_); -1: none
        Verify verify = Verify::Nothing;     // what [last, drafts...] in the batch holds
        int32_t n_pending_max = 0;           // the longest draft it asked for
        int64_t t_draft_us = 0;              // drafting time of this step
        int64_t t_checkpoint_us = 0;         // saving the target's state before verifying
    };
    StepPart step_;
    BatchShare share_;  // the other sequences' part of this step's decode (set before plan())
    common_batch committed_;               // feed_committed's view of the batch

    bool cancelled() const { return s_.cancelled() || slot_.cancel.load(std::memory_order_relaxed); }
    bool fuses_first_token() const;
    void start();
    void begin_decoding();
    // Adds the prompt's next chunk; true when the prompt is then all in.
    bool plan_prefill(common_batch & batch, int32_t room, const std::vector<Sequence *> & peers);
    // Copies what another slot holds of the prompt beyond prompt_tgt_;
    // false: it should wait for a sequence prefilling the same tokens.
    bool share_prefill(const std::vector<Sequence *> & peers, int32_t n);
    // The drafter's draft length in use goes to the statistics.
    void note_draft_in_use();
    // Drafts (or keeps a re-verification) for this step; true: it verifies.
    bool prepare_verify(int32_t room, bool defer = false);
    // Drafts into draft_ (and saves the rollback point); false: the request ended.
    bool draft_step(int32_t room, bool defer);
    // After the draft is complete: its time and length to the statistics, the
    // draft context back to the target's tokens; false: the request ended.
    bool end_draft();
    // n_others: tokens of other sequences in the decode.
    void verified(const common_batch & batch, int64_t t_us, int32_t n_others, bool priced);
    // A draft context of this sequence's own (not the engine's shared one) reads its batches here.
    bool feeds_draft_context() const;
    // Feeds that draft context the verification's committed entries, [last, accepted drafts...]:
    // a rejected draft never enters it, so a drafter that pairs each token with the target's
    // hidden state of the one before (MTP, EAGLE-3) pairs the next batch's first token with the
    // last accepted one, whether or not it drafted this step (docs/decisions/0075).
    bool feed_committed(const common_batch & batch, int32_t n_accepted);
    // What undoing a rejected draft costs this sequence's target (docs/decisions/0091).
    RollbackPrice rollback_price() const;
    bool needs_checkpoint(int32_t n) const { return s_.use_ckpt_tgt || (n_rs_ > 0 && n > n_rs_); }
    bool trim(llama_memory_t mem, llama_pos p0);
    // Trims the draft context from p0 on where it holds a position there: a step
    // whose drafter decoded nothing on it (a cheap or no draft, a dropped
    // model arm) has nothing to remove, and calls nothing.
    bool trim_draft(llama_pos p0);
    void rollback_failed(const char * what);
    bool roll_back(llama_tokens && ids, common_sampler_ptr && smpl_save);
    int emit(const llama_tokens & ids, int32_t i0, llama_token * eog_id);
    // The first token without a verification (fused_): sampled from the
    // prompt's last row at batch index idx, or kept (idx < 0).
    void take_first_token(llama_token id, int32_t idx, int64_t t_sample_us);
    // What token k of the last verification (id) was drawn from, when probs_after_sampling_.
    SampledProbs probs_sampled_from(size_t k, llama_token id) const;
    // After emit(): the context-full check, statistics, delivery, pause.
    void deliver(int terminal, llama_token eog_id);
    void emit_stats(int kind, llama_token eog_id = -1);
    // A progress event (SA_EV_PROGRESS) into the step's batch, when the run
    // asked for them and the prompt's processed count moved since the last one.
    void note_progress();
    // Hands the step's events over now; the reader may pause the sequence or
    // stop the run (then it finishes: false).
    bool flush_events();
    void end_with_error(int code, const std::string & msg);
    // Ends the request: keeps the prefix, closes the statistics.
    void finish(sa_status st);
    void keep_prefix(sa_status st);
};

}  // namespace sa
