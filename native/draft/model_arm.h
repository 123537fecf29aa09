// The model drafter's arm of Spec("auto") (auto_drafter.h): MTP, a draft
// model, EAGLE-3 or DFlash. Its drafts cost forward passes, so it drafts only
// when its expected rate beats the cheap arms' best choice, and now and then
// to stay measured. Its own jobs beside drafting:
// - the draft context's catch-up: a draft model (draft-simple) reads only
//   tokens, so its context is caught up when its arm drafts, not fed every
//   verified batch, and a drafter that auto seldom picks costs next to
//   nothing. MTP, EAGLE-3 and DFlash read the target's hidden states of each
//   batch and are fed always.
// - its economics: an arm fed every batch pays its processing time each
//   step, and is dropped once it costs more than it earns (docs/decisions/0062),
//   or right after a draft when even its best case, or the rate its
//   acceptance model expects, is slower than a plain step (docs/decisions/0077,
//   0110), until a run's prompt finds its context in step again. Dropped, it
//   costs nothing per step: the target no longer copies out the hidden rows
//   MTP reads, except while a prompt that may take it back is decoded.
#pragma once

#include "draft/draft_arm.h"
#include "draft/drafter.h"
#include "draft/step_cost.h"

#include "common.h"
#include "speculative.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace sa {

// The step's best choice without the model arm (the cheap arms' or plain),
// as the model arm is weighed against it.
struct Alternative {
    double rate = 0;       // its expected tokens per microsecond
    bool timed = false;    // costs are in microseconds (StepPrice::timed)
    double draft_us = 0;   // the cheap arms' drafting time, which every step pays
    double sample_us = 0;  // sampling per token made
};

class ModelArm {
public:
    // model: the session's model drafter (null: none) with its drafter id
    // (sa_spec_type) and the length it drafts (at most auto's ceiling);
    // ctx_tgt: the target, ctx_dft: its draft context (null: none), seq:
    // this drafter's sequence there; shared: that context serves other
    // sequences too, and the engine feeds it each batch once
    // (docs/decisions/0069): the arm is never dropped.
    void init(common_speculative * model, int32_t model_id, int32_t n_max, llama_context * ctx_tgt,
              llama_context * ctx_dft, llama_seq_id seq, bool shared);
    // A run's prompt is about to be decoded: a dropped arm that reads the
    // target's hidden rows has the target extract them again, so that a
    // prompt batch that finds its context in step can take it back.
    void before_prompt();
    // Start of a run: fresh forgets what was learned of it (and a dropped
    // arm waits for its context to start over); its drafter begins unless dropped.
    void begin(const RunStart & start);
    // A step at position n_past starts.
    void start_step(llama_pos n_past);

    // Whether it may draft at all: a model drafter, not dropped.
    bool active() const { return arm_.spec != nullptr && !dropped_; }
    // The length it drafts within a step's budget n_max.
    int32_t n_for(int32_t n_max) const { return std::min(n_max_, n_max); }
    // Whether it drafts n tokens at this step (auto's step-th): when its
    // rate beats alt's, when an arm on trial owes its first draft, or to
    // stay measured; an ask is counted.
    bool asks(uint64_t step, int32_t n, const Alternative & alt, double first_prior, const StepPrice & price,
              const BatchShare & share, const RollbackPrice & rb);
    // Drafts in.n_max tokens, its context caught up first. defer: the draft
    // may be left flagged for the engine's shared call, true then (pending()).
    bool draft(const DraftInput & in, bool defer);
    bool pending() const { return pending_; }
    // The engine's shared call filled the pending draft in t_us.
    void finish(int64_t t_us);

    // Whether its draft is the step's: it proposed (else the cheap choice
    // stands). What judging it needs of the step is kept.
    bool take(const Alternative & alt, const StepPrice & price);
    // The step verifies another arm's draft or none: a lazy context is not fed.
    void pass() { warm_ = false; }
    int32_t id() const { return arm_.id; }
    const llama_tokens & proposal() const { return arm_.proposal; }
    double expected_tokens(int32_t n) const { return expected_at(arm_.expected, n); }

    // A batch the target decoded, for the drafter's context; in_step: a
    // verified step's (its time is what the arm pays), not the prompt's.
    // false: the drafter failed.
    bool process(const common_batch & batch, bool in_step);
    // The step's verification made ids: the proposal learns, and the arm is
    // judged against alt (the choice it was weighed against).
    void learn(const llama_tokens & ids, const Alternative & alt, const StepPrice & price);
    // The step's tokens ids committed: the drafter picks its next hidden
    // state by the accepted count, whoever drafted.
    void commit(const llama_tokens & ids);

    // Its context may lag behind the target's: a lazy arm catches it up, a dropped one no longer reads it.
    bool catches_up() const { return lazy_ || dropped_; }
    // Batches it processed (this session), and whether it is dropped now.
    uint64_t batches() const { return batches_; }
    bool dropped() const { return dropped_; }

private:
    DraftArm arm_;
    int32_t n_max_ = 0;
    bool lazy_ = false;                 // a draft model: caught up when it drafts (catch_up)
    bool shared_ = false;               // its context serves other sequences too
    bool warm_ = false;                 // it drafted last: feed its context
    bool drafted_ = false;              // it has drafted once (it may accept)
    llama_context * ctx_tgt_ = nullptr;
    llama_context * ctx_dft_ = nullptr;
    // MTP reads the target's hidden rows of every batch (llama.cpp's nextn
    // embeddings), which the target extracts for it on each decode: a dropped
    // arm turns that off until a prompt may take it back (decision 0110).
    bool reads_hidden_rows_ = false;
    void extract_hidden_rows(bool on);
    common_batch catch_up_batch_;
    bool catch_up(const DraftInput & in);

    // The steps between its exploring drafts (kModelExploreEvery at first).
    uint64_t explore_every_ = 0;
    uint64_t last_step_ = 0;            // auto's step it last drafted at
    bool pending_ = false;              // its draft waits for the engine's shared call
    int64_t wait_us_ = 0;               // ... and what it cost before that call (catching up)

    // An arm fed every batch pays its processing time each step; its drafts
    // earn the time the best choice without it would have needed for their
    // tokens. net_us_ is the decayed sum of the two (earned minus paid) since
    // the arm was admitted; negative after kJudgeAfter steps (or, after its
    // first draft, hopeless: loses_to_plain), it is dropped:
    // it neither drafts nor reads batches until a run's prompt batch finds
    // its context in step (in_step), which re-admits it.
    bool dropped_ = false;
    bool dft_trimmable_ = false;    // the draft context drops a sequence's end (not recurrent)
    llama_pos step_pos_ = 0;        // where this step's batch starts
    llama_pos drop_pos_ = 0;        // ... and the step's that dropped the arm
    double net_us_ = 0;
    uint64_t judged_steps_ = 0;
    uint64_t judged_drafts_ = 0;    // times the arm was asked to draft since admitted (one at least before a drop)
    int64_t process_us_ = 0;        // the arm's processing time in this step
    double min_feed_us_ = std::numeric_limits<double>::infinity();  // the cheapest step's processing time since admitted
    double alt_rate_ = 0;           // it drafted: the best rate without it
    double step_us_ = 0;            // ... its step's predicted cost but for sampling
    double sample_us_ = 0;          // ... and sampling per token made
    uint64_t batches_ = 0;
    void admit();
    void judge(size_t n_made, const Alternative & alt, const StepPrice & price);
    // Its longest draft making `tokens` tokens would make fewer tokens per
    // microsecond than a plain step, given what the arm's drafting and this
    // step's processing cost. With every token accepted (n + 1), it can never
    // pay (decision 0077); with the tokens its acceptance model expects (what
    // the chooser itself would price it at), it does not pay on what it has
    // shown: either drops it at once, before the ledger's window of feeding
    // (decision 0110).
    bool loses_to_plain(double tokens, double draft_us, double process_us, const Alternative & alt,
                        const StepPrice & price) const;
    // Before its first draft: no length of its drafts, priced with the
    // acceptance prior and at one feed per drafted position, would make as
    // many tokens per microsecond as a plain step (decision 0116).
    bool prior_loses_to_plain(const Alternative & alt, const StepPrice & price);
    // A draft of n making `tokens` tokens: its rate over a plain step's.
    static double rate_vs_plain(int32_t n, double tokens, double draft_us, double process_us, const Alternative & alt,
                                const StepPrice & price);
    // Its drafts are forward passes of the context it is fed with, one per
    // drafted position (MTP, EAGLE-3): they can be priced from its feed before it
    // drafts. DFlash drafts its block in one pass; a shared context is never judged.
    bool priced_before_drafting() const;
    double first_prior_ = 0;        // the acceptance prior its drafts are priced with (asks())
    bool in_step(const common_batch & batch) const;
};

}  // namespace sa
