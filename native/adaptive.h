// Online choice of the draft length from acceptance per draft position and
// the measured cost of drafting and verifying longer drafts.
#pragma once

#include <cstdint>
#include <vector>

namespace sa {

// Picks the draft length n that maximises expected tokens per unit of time:
//   (1 + sum_{i=1..n} p_1 * ... * p_i) / step_cost(n)
// p_i: the decayed rate at which a draft that reached position i was accepted
// there; positions seldom reached lean on a prior (optimistic past the first
// position: once a draft is right it tends to stay right).
// step_cost(n): draft + verify time of a step, a decayed least-squares line
// against the length of the draft verified (plain steps are length 0; a fixed
// per-step draft cost, as with drafters that always draft their full length,
// lands in the intercept).
// Every kExploreEvery-th step asks one token more than the best, so positions
// past the current choice keep being measured.
class AdaptiveDraft {
public:
    // n_cap: the ceiling; n_floor: the shortest draft ever asked for (0 allows
    // plain steps, which cost n-gram drafters nothing extra).
    void reset(int32_t n_cap, int32_t n_floor);

    // Draft length to ask for in the next step.
    int32_t choose();

    // Feed back one step: asked length (0: a plain step), produced draft
    // length, accepted count, and the step's draft and verify times.
    void observe(int32_t n_asked, int32_t n_drafted, int32_t n_accepted, int64_t t_draft_us, int64_t t_verify_us);

private:
    int32_t n_cap_ = 0;
    int32_t n_floor_ = 0;
    uint64_t steps_ = 0;
    // Decayed counts: reached[i] drafts that got to position i, hit[i] accepted there.
    std::vector<double> reached_, hit_;
    // Decayed least-squares sums of step time (y, us) against draft length (x).
    double s_w_ = 0, s_x_ = 0, s_y_ = 0, s_xx_ = 0, s_xy_ = 0;

    double step_cost(int32_t n) const;
};

}  // namespace sa
