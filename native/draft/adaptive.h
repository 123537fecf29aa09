// Online choice of the draft length from acceptance per draft position and
// the measured cost of drafting and verifying longer drafts (StepCost,
// step_cost.h). The acceptance model (PositionAcceptance) and the one length
// chooser (best_length, choose_offer) also serve the drafter choice of
// "auto" (auto_drafter.h), which keeps one acceptance model per drafter.
#pragma once

#include "draft/step_cost.h"

#include <climits>
#include <cstdint>
#include <vector>

namespace sa {

// Decayed acceptance per draft position: p_i, the rate at which a draft that
// reached position i was accepted there. Positions seldom reached lean on a
// prior: up to twice the deepest position measured, the rate before them
// (once a draft is right it tends to stay right); past that, half of it per
// position, so a drafter's reach grows with what it got accepted.
class PositionAcceptance {
public:
    // later_floor: the least prior at positions past the first (the prior
    // there is max(p of the previous position, later_floor)).
    void reset(int32_t n_cap, double later_floor = 0.8);

    // Expected tokens gained by a step that drafts n tokens, for n = 0..n_cap:
    //   out[n] = 1 + sum_{i=1..n} p_1 * ... * p_i   (the sampled token plus accepted drafts)
    // first_prior: the acceptance assumed at position 1 before drafts were seen.
    void expected(std::vector<double> & out, double first_prior = kGreedyFirstPrior) const;

    // Prior acceptance at position 1 when decoding greedily, and when
    // sampling: a sampled step accepts a drafted token only as often as the
    // target gives it, so even a right continuation is accepted less.
    static constexpr double kGreedyFirstPrior = 0.6;
    static constexpr double kSampledFirstPrior = 0.3;

    // One checked draft: positions 1..n_checked were compared with what the
    // target produced and the first n_accepted of them matched (a miss at
    // n_accepted + 1 when n_accepted < n_checked). Every position forgets at
    // the same pace, reached or not, so a miss at a position seldom drafted
    // since fades back to the prior instead of holding lengths below it for good.
    void observe(int32_t n_checked, int32_t n_accepted);

    // Weight of the observations seen (decayed), a measure of how much is known.
    double seen() const { return reached_.empty() ? 0.0 : reached_[0]; }

private:
    std::vector<double> reached_, hit_;  // decayed counts per position
    double later_floor_ = 0.8;
};

// What the other sequences of a batched step put into its one decode
// (engine.h): a draft is priced by what it adds to that shared step, not as
// a lone step (docs/decisions/0052).
struct BatchShare {
    int32_t n_others = 0;  // their tokens in the decode
    double e_others = 0;   // the tokens they are expected to make
};

// How the target undoes a draft's rejected tokens (docs/decisions/0091). A
// draft of up to `free` tokens costs nothing to undo: the KV cache is
// trimmed, or llama.cpp's recurrent snapshots undo it. A longer one saves a
// checkpoint before it is verified (save_us); a rejection deeper than `free`
// restores it (restore_us) and decodes the accepted tokens again in the next
// step, which drafts nothing.
struct RollbackPrice {
    int32_t free = INT32_MAX;
    double save_us = 0;
    double restore_us = 0;
};

// What lengthening a draft from n - 1 to n tokens adds to its expected
// rollback price; the price of n tokens is the sum over 1..n. Nothing up to
// rb.free tokens. Beyond, the first token adds the checkpoint, and the n-th
// adds the case of exactly a = n - rb.free - 1 accepted tokens (more than
// rb.free rejected): its probability times the restore and what the next
// step, which verifies the a accepted tokens and the sampled one again,
// costs beyond a plain step. expected: the offer's expected tokens by length
// (expected[0] = 1), so that expected[j] - expected[j - 1] is the chance
// that j tokens are accepted.
double rollback_step_us(const std::vector<double> & expected, int32_t n, const StepCost & cost,
                        const RollbackPrice & rb, int32_t n_others = 0);

// A draft length and the expected tokens per microsecond of a step drafting it.
struct LengthChoice {
    int32_t n = 0;
    double rate = 0;
};

// A longer draft must beat a shorter one's rate by this factor (ties go to the shorter).
constexpr double kLongerMustBeat = 1.0001;

// The one draft-length chooser of every drafter: the length n in [n_lo, n_hi]
// with the most expected tokens per microsecond of the step,
//   e / (cost.at(share.n_others + n) + rollback(n) + extra_us + sample_us * e),
//   e = share.e_others + expected[n],
// where extra_us is the drafting time of the step, sample_us the sampling
// time per token made and rollback(n) the sum of rollback_step_us over 1..n.
// Alone in its step (share empty) that is the draft's own rate; in a batch, the batch's, so a draft is worth its tokens only
// where they outrun what they add to everyone's step. Lengths whose expected
// tokens are under min_expected are passed over; {n_lo - 1, 0} when none is left.
LengthChoice best_length(const std::vector<double> & expected, const StepCost & cost, int32_t n_lo, int32_t n_hi,
                         double extra_us = 0, double sample_us = 0, double min_expected = 0,
                         const BatchShare & share = {}, const RollbackPrice & rb = {});

// One drafter's proposal for a step: its expected tokens by draft length
// (PositionAcceptance::expected) and how many tokens it proposed.
struct Offer {
    const std::vector<double> * expected;
    int32_t n_max;
};

// Of plain decoding and every offer at every length it has, the best
// expected tokens per microsecond (best_length's rate, the step's drafting
// time draft_us added to every choice, plain included).
struct OfferChoice {
    int32_t offer = -1;  // index into the offers; -1: a plain step
    LengthChoice length;
};
OfferChoice choose_offer(const std::vector<Offer> & offers, const StepCost & cost, double draft_us, double sample_us,
                         const BatchShare & share = {}, const RollbackPrice & rb = {});

// Picks the draft length n that maximises expected tokens per unit of time:
//   expected(n) / step_cost(n)
// Every kExploreEvery-th step asks one token more than the best, so positions
// past the current choice keep being measured.
class AdaptiveDraft {
public:
    // n_cap: the ceiling; n_floor: the shortest draft ever asked for (0 allows
    // plain steps, which cost n-gram drafters nothing extra).
    void reset(int32_t n_cap, int32_t n_floor);

    // Draft length to ask for in the next step, rb: what undoing its rejection costs.
    int32_t choose(const RollbackPrice & rb = {});

    // Feed back one step: asked length (0: a plain step), produced draft
    // length, accepted count, and the step's draft and verify times; the
    // times price the cost line only when priced (StepOutcome::priced), at
    // n_others more tokens (the other sequences' in the same decode).
    void observe(int32_t n_asked, int32_t n_drafted, int32_t n_accepted, int64_t t_draft_us, int64_t t_verify_us,
                 int32_t n_others, bool priced);

private:
    int32_t n_cap_ = 0;
    int32_t n_floor_ = 0;
    uint64_t steps_ = 0;
    PositionAcceptance accept_;
    StepCost cost_;
    std::vector<double> expected_;
};

// Ask one token beyond the best every this many steps.
constexpr int kExploreEvery = 16;

}  // namespace sa
