// The one drafting interface the generation loop talks to, in the shape of
// llama.cpp's common_speculative: begin a run, draft for a step, observe the
// verified outcome. Fixed, adaptive-length and auto drafting are its
// implementations. The engine (engine.cpp, generation.cpp, prefix_cache.cpp)
// and the step-cost calibration never ask which one they hold: where auto
// differs (an undrafted first step, a lagging draft context, a step cost to
// calibrate, drafts a batched step may resize), a virtual call below says so.
// Only what is auto's alone casts to AutoDrafter: its print_stats summary
// (auto_session.cpp) and the testing ABI's probes of its arms.
#pragma once

#include "draft/adaptive.h"
#include "draft/draft_allocation.h"

#include "common.h"
#include "speculative.h"

#include <cstdint>
#include <memory>

namespace sa {

// The start of a run.
struct RunStart {
    const llama_tokens & prompt_tgt;  // the prompt without its last token (what the target holds)
    const int32_t * prompt;           // the whole prompt
    int32_t n_prompt;
    bool fresh;    // keep nothing learned in earlier runs (forget() or a memory of 0 tokens)
    bool sampled;  // the run samples (temperature > 0)
};

// What one step may draft.
struct DraftInput {
    int32_t n_max;                     // at most this many tokens (the budget left; 0: a plain step)
    llama_pos n_past;                  // position of id_last
    llama_token id_last;               // the newest token, verified with the draft
    const llama_tokens & prompt_tgt;   // the tokens before id_last
    BatchShare share{};                // what the other sequences put into this step's decode
    // The engine drafts for every sequence of a shared common_speculative in
    // one call after all of them asked (docs/decisions/0070): a model draft
    // may stay pending (Drafter::pending) until finish_draft().
    bool defer = false;
    RollbackPrice rollback{};          // what undoing a rejected draft costs the target
};

// One verified step.
struct StepOutcome {
    const llama_tokens & ids;  // the target's tokens: the accepted drafts and the one sampled after them
    int32_t n_verified;        // drafted tokens verified (0: a plain step)
    int64_t t_draft_us;        // drafting time of this step (0 on a re-verification)
    int64_t t_verify_us;       // the verifying decode (a checkpoint saved or restored for it is not in it)
    int64_t t_sample_us;
    bool committed;            // false: a rollback re-verifies the accepted prefix next step
    int32_t n_others = 0;      // tokens of other sequences in the same decode (t_verify_us is all of it)
    // Every token of the decode had its logits computed (verifications
    // only, no prompt chunk), so its time prices a step of that many tokens.
    // A prompt token costs about half a verified one (no output row), and
    // the step-cost table has no place for it (docs/decisions/0074).
    bool priced = true;
};

class Drafter {
public:
    virtual ~Drafter() = default;
    virtual void begin(const RunStart & start) = 0;
    // Fills draft with at most in.n_max tokens (empty: a plain step); with
    // in.defer, a draft of the shared common_speculative may be left pending.
    virtual void draft(const DraftInput & in, llama_tokens & draft) = 0;
    // Whether the last draft() left its sequence flagged in the shared
    // common_speculative's draft parameters: once the engine's one
    // common_speculative_draft call filled it, finish_draft() completes the
    // draft (t_us: this sequence's share of that call's time).
    virtual bool pending() const { return false; }
    virtual void finish_draft(llama_tokens & draft, int64_t t_us) { (void) draft; (void) t_us; }
    // Feeds a batch the target decoded to the drafter's own context (a draft
    // model, EAGLE-3, MTP, DFlash read it). false: the drafter failed.
    virtual bool process(const common_batch & batch) = 0;
    // The outcome of the step that verified the last draft, or its re-verification.
    virtual void observe(const StepOutcome & out) = 0;
    // The request ended (done, stopped, cancelled or failed).
    virtual void end() {}
    // sa_drafter id of the last draft (SA_SPEC_NONE when it was empty), for the statistics.
    virtual int32_t last_drafter() const = 0;
    // The draft length to report as in use after draft() (-1: unchanged).
    virtual int32_t n_draft_in_use() const { return -1; }
    // The tokens the last draft's step is expected to make (1 + its expected
    // accepted): the share a batched step's later sequences are priced with.
    virtual double expected_tokens() const { return 1.0; }
    // The last draft as a batched step may cut or extend it (draft_allocation.h):
    // the proposal's expected tokens by length, out.expected[0..out.n_max].
    // false: its length stays as drafted (a fixed type, a model drafter, a
    // draft that explores). Valid until the next draft().
    virtual bool offer(DraftOption & out) const { (void) out; return false; }
    // Sets the last draft to the first n tokens of what offer() described.
    virtual void resize(int32_t n, llama_tokens & draft) { (void) n; (void) draft; }
    // The cost model its lengths are priced with (null: none; a drafter that offers has one).
    virtual const StepCost * step_cost() const { return nullptr; }
    // The step cost that takes the table measured once per model and thread
    // count, or a fixed one from the tests (step_cost_calibration.h); null:
    // the drafter prices without one (auto has one).
    virtual StepCost * calibrated_cost() { return nullptr; }
    // Whether the drafter brings its own context up to the target's before
    // it drafts, so that context may lag behind (auto's draft model).
    virtual bool catches_up() const { return false; }
    // Whether a request's first verification may carry a draft. false
    // (auto): the first token is due as soon as the prompt is in, so that
    // step drafts nothing (docs/decisions/0049), and a greedy request may
    // take it from the prompt's last row instead (docs/decisions/0080).
    virtual bool drafts_first_token() const { return true; }
    // Of the last draft()'s time, what its cheap proposals took (auto's
    // n-gram and lookup arms), for the step profile (step_profile.h); 0: none.
    virtual int64_t proposals_us() const { return 0; }
    // A run starts, before its prompt is decoded (auto: a dropped model arm
    // has the target keep the rows that may take it back, decision 0110).
    virtual void before_prompt() {}
};

// Flags sequence seq of a common_speculative to draft at most in.n_max
// tokens into draft at its next common_speculative_draft call, with its
// guard (ngram-cache needs 4 tokens of context). false: nothing to draft.
bool request_draft(common_speculative * spec, int32_t type, llama_seq_id seq, const DraftInput & in, llama_tokens & draft);

// One draft call for sequence seq alone (request_draft, then the call), with
// its timing. Returns the microseconds it took (0 when nothing was asked).
int64_t draft_call(common_speculative * spec, int32_t type, llama_seq_id seq, const DraftInput & in, llama_tokens & draft);

// A fixed speculative type with a fixed draft length (llama.cpp's loop), for
// sequence seq of spec (a draft context may serve several sequences).
std::unique_ptr<Drafter> make_fixed_drafter(common_speculative * spec, int32_t type, int32_t n_draft, llama_seq_id seq);

// A fixed type whose draft length is chosen per step from acceptance and
// cost (n_draft="auto"); n_floor: the shortest draft ever asked for.
std::unique_ptr<Drafter> make_adaptive_drafter(common_speculative * spec, int32_t type, int32_t n_cap,
                                               int32_t n_floor, llama_seq_id seq);

}  // namespace sa
