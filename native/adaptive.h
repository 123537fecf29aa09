// Online choice of the draft length from acceptance per draft position and
// the measured cost of verifying (and drafting) longer batches.
#pragma once

#include <cstdint>
#include <vector>

namespace sa {

class AdaptiveDraft {
public:
    // n_cap: the ceiling; n_floor: the shortest draft ever asked for (0 allows
    // plain decoding steps, which n-gram drafters can take at no cost).
    void reset(int32_t n_cap, int32_t n_floor);

    // Draft length to ask for in the next step.
    int32_t choose();

    // Feed back one step: asked length, produced draft length, accepted count,
    // and the step's draft and verify times.
    void observe(int32_t n_asked, int32_t n_drafted, int32_t n_accepted, int64_t t_draft_us, int64_t t_verify_us);

private:
    int32_t n_cap_ = 0;
    int32_t n_floor_ = 0;
    uint64_t steps_ = 0;
    // Decayed counts: reached[i] drafts that got to position i, hit[i] accepted there.
    std::vector<double> reached_, hit_;
    // Decayed least-squares fit of verify time against batch size.
    double s_w_ = 0, s_x_ = 0, s_y_ = 0, s_xx_ = 0, s_xy_ = 0;
    double draft_us_per_token_ = 0;
    double draft_weight_ = 0;

    double verify_cost(int32_t n) const;
};

}  // namespace sa
