// One arm of Spec("auto") (auto_drafter.h): a drafter whose proposal of each
// step is priced with its acceptance per position, and learns afterwards how
// much of it the target confirmed.
#pragma once

#include "draft/adaptive.h"
#include "draft/drafter.h"

#include "common.h"
#include "speculative.h"

#include <cstdint>
#include <vector>

namespace sa {

// Prior at a position past the first: the previous position's rate, with no
// floor. With several drafters and plain steps to fall back on, a drafter
// whose first tokens are seldom right should not be trusted for long drafts.
constexpr double kArmLaterFloor = 0.0;

struct DraftArm {
    int32_t id = 0;                      // sa_drafter
    common_speculative * spec = nullptr; // n-gram arms own theirs; the model arm's is the session's
    llama_seq_id seq = 0;                // its sequence of spec (an n-gram arm's own spec has one: 0)
    PositionAcceptance accept;
    double cost_us = 0;                  // decayed mean draft time per call
    bool costed = false;
    llama_tokens proposal;
    std::vector<double> expected;        // expected tokens by draft length, this step
    bool proposed = false;               // proposal made this step (learn() owed)
    int32_t min_match = 0;               // memory and text arms: the shortest match they take

    // One call's draft time joins the decayed mean.
    void note_cost(int64_t dt_us);
    // Drafts at most in.n_max tokens with spec (draft_call); extra_us: what
    // this arm's drafting cost before the call (catching its context up).
    void draft(const DraftInput & in, int64_t extra_us = 0);
    // After its step's verification, the target's tokens ids: how much of
    // the proposal they confirm (positions up to ids.size() are known, later
    // ones are not) goes to its acceptance. Returns that count; -1 when it
    // proposed nothing this step.
    int32_t learn(const llama_tokens & ids);
};

// Expected tokens of a step verifying n drafted tokens, from an arm's expected-by-length.
double expected_at(const std::vector<double> & expected, int32_t n);

}  // namespace sa
