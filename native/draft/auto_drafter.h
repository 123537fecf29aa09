// Spec("auto"): for each step, choose the drafter and the draft length online
// (docs/decisions/0024).
//
// Arms: "no draft" (always), each n-gram kind through its own
// common_speculative, the cross-request memory (token_memory.h), the text
// lookup (text_lookup.h), the splice lookup (splice_lookup.h), and the model
// drafter when the session has one (MTP, a draft model, EAGLE-3, DFlash).
// The cheap drafters (n-gram kinds, memory, text, splice) all propose every step; each
// proposal is scored with its drafter's acceptance per position and the
// step's price (StepPrice, step_cost.h), the best one is
// verified. The memory's acceptance is learned per length of the match its
// proposal follows (short, medium, long): a long match is strong evidence,
// whatever short matches did before; the text lookup's likewise. After verification the target's tokens are known, so every
// cheap proposal learns how much of it would have been accepted: the
// drafters that were not chosen keep being measured at no cost. The model
// drafter's arm (model_arm.h) costs forward passes; it drafts only when its
// expected rate beats the best cheap proposal, and now and then to stay
// measured, and keeps its draft context and its economics itself.
//
// AutoDrafter composes the three: the cheap arms' proposals and the choice
// among them are its own; the price is a StepPrice, the model arm a ModelArm
// (docs/decisions/0106).
#pragma once

#include "draft/adaptive.h"
#include "draft/draft_arm.h"
#include "draft/drafter.h"
#include "draft/explore_budget.h"
#include "draft/model_arm.h"
#include "draft/promise_record.h"
#include "draft/step_cost.h"
#include "draft/splice_lookup.h"
#include "draft/text_lookup.h"
#include "draft/token_memory.h"

#include "common.h"
#include "speculative.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace sa {

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
    bool pending() const override { return model_.pending(); }
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
    const StepCost * step_cost() const override { return &price_.cost(); }
    StepCost * calibrated_cost() override { return &price_.cost(); }

    int32_t last_drafter() const override { return chosen_; }
    int32_t n_draft_in_use() const override { return last_n_; }
    double expected_tokens() const override { return expected_; }
    // The draft context may lag: a lazy model arm catches it up, a dropped one no longer reads it.
    bool catches_up() const override { return model_.catches_up(); }
    // The first token is due as soon as the prompt is in: its step drafts nothing.
    bool drafts_first_token() const override { return false; }
    int64_t proposals_us() const override { return proposals_us_; }
    void before_prompt() override { model_.before_prompt(); }

    // The model arm's state, for tests and print_stats: batches it processed
    // (this session) and whether it is dropped now.
    uint64_t model_batches() const { return model_.batches(); }
    // Verified steps whose decode priced the step cost (StepOutcome::priced), this session.
    uint64_t priced_steps() const { return price_.priced_steps(); }
    bool model_dropped() const { return model_.dropped(); }


private:
    common_params_speculative base_;
    std::vector<DraftArm> cheap_;
    ModelArm model_;
    int32_t n_cap_ = 0;
    TokenMemory * memory_ = nullptr;  // the session's earlier requests, shared by its sequences
    TokenMemory own_;                  // this request's tokens: the tail every match starts from
    StepPrice price_;
    PromiseRecord promises_;  // what the verified cheap drafts delivered of their expected tokens
    std::vector<double> tempering_;  // this step's factor on their expected gain, by draft length
    TextLookup text_;
    SpliceLookup splice_;
    llama_tokens proposal_;  // the memory's or a lookup's, before it goes to its arm
    llama_tokens earlier_;   // the earlier requests' proposal, beside the request's own
    uint64_t steps_ = 0;
    int32_t chosen_ = 0;
    DraftArm * offered_ = nullptr;  // the last draft's arm, as resize() cuts it (null: none)
    bool adjustable_ = false;  // offer() describes offered_ (not after a model or exploring draft)
    int32_t last_n_ = 0;  // length of the last draft
    double expected_ = 1.0;  // tokens the last draft's step is expected to make
    bool pending_ = false;  // draft() ran and observe() has not yet
    int64_t proposals_us_ = 0;  // the last draft()'s cheap proposals
    double first_prior_ = PositionAcceptance::kGreedyFirstPrior;

    // The cheap arms' best choice of this step, kept while a model draft is pending.
    struct CheapChoice {
        DraftArm * best = nullptr;       // null: plain
        int32_t n = 0;                   // its length
        bool explores = false;           // an exploring step
        bool plain_won = false;          // it explores although plain won (the budget's kind)
        RollbackPrice rollback;          // what undoing its draft costs
        Alternative alt;                 // its rate and the step's price, as the model arm sees them
        std::vector<DraftArm *> offered; // the arms that proposed
    };
    CheapChoice choice_;
    ExploreBudget explore_budget_;
    bool exploring_ = false;  // the step being verified explores although plain won
    // What the exploring step just verified lost against plain decoding (us).
    double explore_loss(const StepOutcome & out) const;
    // This step's factor on a cheap arm's expected gain by draft length
    // (promise_record.h), for lengths up to n_max, and arm's expected so tempered.
    void price_promises(int32_t n_max);
    void temper(DraftArm & arm) const;
    // The verified cheap draft of n tokens (offered_'s) and the target's tokens ids: what it brought of its promise.
    void settle_promise(int32_t n, const llama_tokens & ids);
    bool take_model_draft(llama_tokens & draft);
    void take_cheap_choice(llama_tokens & draft);

    void propose_from_matches(int32_t n_max);
    void route_match(int32_t id, int32_t match, int64_t t_us);
    void explore(DraftArm *& best, int32_t & best_n);
    double cheap_cost() const;
    // The arms afresh: nothing learned in earlier runs (each n-gram drafter
    // forgets in place where it can, decision 0092).
    void make_arms();
    void free_arms();
    static void free_specs(std::vector<DraftArm> && arms);
};

}  // namespace sa
