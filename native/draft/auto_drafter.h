// Spec("auto"): for each step, choose the drafter and the draft length online
// (docs/decisions/0024).
//
// Arms: "no draft" (always), each n-gram kind through its own
// common_speculative, the cross-request memory (token_memory.h), the text
// lookup (text_lookup.h), the splice lookup (splice_lookup.h), and the model
// drafter when the session has one (MTP, a draft model, EAGLE-3).
// The cheap drafters (n-gram kinds, memory, text, splice) all propose every step; each
// proposal is scored with its drafter's acceptance per position and the
// measured cost of verifying that many tokens (adaptive.h), the best one is
// verified. The memory's acceptance is learned per length of the match its
// proposal follows (short, medium, long): a long match is strong evidence,
// whatever short matches did before; the text lookup's likewise. After verification the target's tokens are known, so every
// cheap proposal learns how much of it would have been accepted: the
// drafters that were not chosen keep being measured at no cost. The model
// drafter costs forward passes; it drafts only when its expected rate beats
// the best cheap proposal, and now and then to stay measured. One that reads
// every verified batch (MTP, EAGLE-3, DFlash) is dropped once it costs more
// than it earns (docs/decisions/0062).
#pragma once

#include "draft/adaptive.h"
#include "draft/drafter.h"
#include "draft/splice_lookup.h"
#include "draft/text_lookup.h"
#include "draft/token_memory.h"

#include "common.h"
#include "speculative.h"

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace sa {

class Stats;

class AutoDrafter final : public Drafter {
public:
    AutoDrafter() = default;
    AutoDrafter(const AutoDrafter &) = delete;
    AutoDrafter & operator=(const AutoDrafter &) = delete;
    ~AutoDrafter() override;

    // Creates the n-gram drafters from base (its types are replaced per kind;
    // draft.n_max is the ceiling). model: the session's model drafter or
    // null, with its drafter id (sa_spec_type) and the length it drafts;
    // vocab: the target's, for the text and splice lookups (null: neither).
    // seq: this drafter's sequence of it. shared: the model drafter's context
    // serves other sequences too, and the engine feeds it each batch once
    // (docs/decisions/0069): its arm is never dropped. Throws what
    // common_speculative_init throws.
    void init(common_params_speculative base, common_speculative * model, int32_t model_id,
              int32_t model_n_max, TokenMemory * memory, const llama_vocab * vocab = nullptr,
              llama_seq_id seq = 0, bool shared = false);

    // Start of a run. fresh: the n-gram drafters' tables (ngram-mod and
    // ngram-cache keep theirs across runs) and what was learned about each
    // drafter start over too. sampled: drafts are priced with
    // PositionAcceptance::kSampledFirstPrior until they are measured.
    void begin(const RunStart & start) override;

    // Every arm proposes; the best expected tokens per microsecond is verified.
    // With in.defer, a model draft stays pending for the engine's shared call.
    void draft(const DraftInput & in, llama_tokens & draft) override;
    bool pending() const override { return model_pending_; }
    // The model's draft, or the cheap choice when it drafted nothing.
    void finish_draft(llama_tokens & draft, int64_t t_us) override;

    // Sampling stops at the first rejected position: it costs per token made,
    // like plain decoding's, not per token drafted. Uncommitted tokens (a
    // rollback re-verifies them next step) are not yet part of the context.
    bool process(const common_batch & batch) override;
    void observe(const StepOutcome & out) override;
    // The request's tokens join the session's memory (unless it keeps nothing across requests).
    void end() override;

    // The chosen cheap arm's proposal, or, after a plain choice, the one whose
    // first token is likeliest accepted; none after a model or exploring draft.
    bool offer(DraftOption & out) const override;
    void resize(int32_t n, llama_tokens & draft) override;
    const StepCost * step_cost() const override { return &verify_; }
    StepCost * calibrated_cost() override { return &verify_; }

    int32_t last_drafter() const override { return chosen_; }
    int32_t n_draft_in_use() const override { return last_n_; }
    double expected_tokens() const override { return expected_; }
    // The draft context may lag: a lazy arm catches it up, a dropped one no longer reads it.
    bool catches_up() const override { return lazy_ || dropped_; }
    // The first token is due as soon as the prompt is in: its step drafts nothing.
    bool drafts_first_token() const override { return false; }

    // The model arm's state, for tests and print_stats: batches it processed
    // (this session) and whether it is dropped now.
    uint64_t model_batches() const { return model_batches_; }
    // Verified steps whose decode priced the step cost (StepOutcome::priced), this session.
    uint64_t priced_steps() const { return priced_steps_; }
    bool model_dropped() const { return dropped_; }


private:
    struct Arm {
        int32_t id = 0;                      // sa_drafter
        common_speculative * spec = nullptr; // n-gram arms own theirs; the model arm's is the session's
        PositionAcceptance accept;
        double cost_us = 0;                  // decayed mean draft time per call
        bool costed = false;
        llama_tokens proposal;
        std::vector<double> expected;        // expected tokens by draft length, this step
        bool proposed = false;               // proposal made this step (accept() owed)
        int32_t min_match = 0;               // memory and text arms: the shortest match they take
    };

    // A draft model (draft-simple) reads only tokens: its context is caught up
    // when its arm drafts (catch_up), not fed every verified batch, so a
    // drafter that auto seldom picks costs next to nothing. MTP, EAGLE-3 and
    // DFlash read the target's hidden states of each batch and are fed always.
    bool lazy_ = false;
    llama_seq_id seq_ = 0;              // the model drafter's sequence (the n-gram arms own theirs: 0)
    bool shared_ = false;               // the model drafter's context serves other sequences too
    bool warm_ = false;                 // the model arm drafted last: feed its context
    llama_context * ctx_dft_ = nullptr;
    common_batch catch_up_batch_;
    bool catch_up(const DraftInput & in);

    // An arm fed every batch pays its processing time each step; its drafts
    // earn the time the best choice without it would have needed for their
    // tokens. net_us_ is the decayed sum of the two (earned minus paid) since
    // the arm was admitted; negative after kJudgeAfter steps (or, after its
    // first draft, hopeless: never_pays), it is dropped:
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
    double alt_rate_ = 0;           // the model arm drafted: the best rate without it
    double model_step_us_ = 0;      // ... its step's predicted cost but for sampling
    double model_sample_us_ = 0;    // ... and sampling per token made
    uint64_t model_batches_ = 0;
    void admit();
    void judge(size_t n_made);
    // Its longest draft, every token accepted, would still make fewer tokens
    // per microsecond than a plain step, given what the arm's drafting and
    // this step's processing cost: it can never pay, and is dropped at once.
    bool never_pays(double process_us) const;
    bool in_step(const common_batch & batch) const;

    common_params_speculative base_;
    std::vector<Arm> cheap_;
    Arm model_arm_;
    common_speculative * model_ = nullptr;
    int32_t model_id_ = -1;
    int32_t model_n_max_ = 0;
    int32_t n_cap_ = 0;
    TokenMemory * memory_ = nullptr;  // the session's earlier requests, shared by its sequences
    TokenMemory own_;                  // this request's tokens: the tail every match starts from
    StepCost verify_;
    double sample_us_ = 0;  // decayed mean sampling time per token made
    bool sample_seen_ = false;  // sample_us_ holds a measurement (which may be 0)
    TextLookup text_;
    SpliceLookup splice_;
    llama_tokens proposal_;  // the memory's or a lookup's, before it goes to its arm
    llama_tokens earlier_;   // the earlier requests' proposal, beside the request's own
    uint64_t steps_ = 0;
    uint64_t priced_steps_ = 0;
    uint64_t last_model_step_ = 0;
    uint64_t model_explore_every_ = 32;  // kModelExploreEvery at first: steps between the model drafter's exploring drafts
    int32_t chosen_ = 0;
    Arm * offered_ = nullptr;  // the last draft's arm, as resize() cuts it (null: none)
    bool adjustable_ = false;  // offer() describes offered_ (not after a model or exploring draft)
    int32_t last_n_ = 0;  // length of the last draft
    double expected_ = 1.0;  // tokens the last draft's step is expected to make
    bool model_drafted_ = false;  // the model drafter has drafted once (it may accept)
    bool pending_ = false;  // draft() ran and observe() has not yet
    double first_prior_ = PositionAcceptance::kGreedyFirstPrior;

    // The cheap arms' best choice of this step, kept while a model draft is pending.
    struct CheapChoice {
        Arm * best = nullptr;        // null: plain
        int32_t n = 0;               // its length
        double rate = 0;             // its expected tokens per microsecond
        bool explores = false;       // an exploring step
        bool timed = false;          // costs are in microseconds
        double d_cheap = 0, s = 0;   // the cheap arms' draft time and sampling per token
        std::vector<Arm *> offered;  // the arms that proposed
    };
    CheapChoice choice_;
    bool model_pending_ = false;    // the model arm's draft waits for the engine's shared call
    int64_t model_wait_us_ = 0;     // ... and what it cost before that call (catching up)
    bool take_model_draft(llama_tokens & draft);
    void take_cheap_choice(llama_tokens & draft);

    void propose_from_matches(int32_t n_max);
    void route_match(int32_t id, int32_t match, int64_t t_us);
    void note_cost(Arm & arm, int64_t dt_us);
    void explore(Arm *& best, int32_t & best_n);
    void draft_with(Arm & arm, const DraftInput & in, int64_t extra_us = 0);
    double cheap_cost() const;
    // The arms afresh: nothing learned in earlier runs (each n-gram drafter
    // forgets in place where it can, decision 0092).
    void make_arms();
    void free_arms();
    static void free_specs(std::vector<Arm> && arms);
};

}  // namespace sa
