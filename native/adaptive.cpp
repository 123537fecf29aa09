#include "adaptive.h"

#include <algorithm>

namespace sa {

namespace {
constexpr double kDecay = 0.97;             // memory of about 30 observations
constexpr double kPriorAccept = 0.6;        // acceptance at position 1 before any draft was seen
constexpr double kPriorAcceptLater = 0.8;   // at later positions, given the previous one was accepted
constexpr double kPriorWeight = 1.5;        // pseudo-observations behind each position's prior
constexpr double kPriorSlope = 0.2;         // cost per drafted token, relative to a plain step
constexpr double kSlopeWeight = 4.0;        // pseudo-observations (at unit spread) behind that slope
constexpr int kExploreEvery = 16;           // ask one token beyond the best now and then
}

void AdaptiveDraft::reset(int32_t n_cap, int32_t n_floor) {
    n_cap_ = n_cap;
    n_floor_ = std::min(n_floor, n_cap);
    steps_ = 0;
    reached_.assign((size_t) n_cap, 0.0);
    hit_.assign((size_t) n_cap, 0.0);
    s_w_ = s_x_ = s_y_ = s_xx_ = s_xy_ = 0;
}

double AdaptiveDraft::step_cost(int32_t n) const {
    if (s_w_ <= 0.0) {
        return 1.0 + kPriorSlope * n;  // nothing measured yet: relative units
    }
    // Line through the decayed means; its slope is the least-squares one,
    // shrunk towards the prior slope while the draft lengths seen vary little
    // (a drafter always asked the same length cannot measure a slope).
    const double mean_x = s_x_ / s_w_, mean_y = s_y_ / s_w_;
    const double sxx = std::max(s_xx_ - s_x_ * mean_x, 0.0);
    const double sxy = s_xy_ - s_x_ * mean_y;
    const double b_prior = kPriorSlope * mean_y / (1.0 + kPriorSlope * mean_x);
    const double b = std::clamp((sxy + kSlopeWeight * b_prior) / (sxx + kSlopeWeight), 0.0,
                                mean_x > 0 ? mean_y / mean_x : mean_y);
    return std::max(mean_y + b * (n - mean_x), 1.0);
}

int32_t AdaptiveDraft::choose() {
    ++steps_;
    double best_rate = 0;
    int32_t best_n = n_floor_;
    double expected = 1.0;   // tokens gained per step: the sampled one plus accepted drafts
    double p_chain = 1.0;
    double p_prev = 0.0;
    for (int32_t n = 0; n <= n_cap_; ++n) {
        if (n > 0) {
            const size_t i = (size_t) n - 1;
            const double prior = n == 1 ? kPriorAccept : std::max(p_prev, kPriorAcceptLater);
            const double p = (hit_[i] + kPriorWeight * prior) / (reached_[i] + kPriorWeight);
            p_prev = p;
            p_chain *= p;
            expected += p_chain;
        }
        if (n < n_floor_) continue;
        const double rate = expected / step_cost(n);
        if (rate > best_rate * 1.0001) {
            best_rate = rate;
            best_n = n;
        }
    }
    if (steps_ % kExploreEvery == 0 && best_n < n_cap_) {
        ++best_n;
    }
    return best_n;
}

void AdaptiveDraft::observe(int32_t n_asked, int32_t n_drafted, int32_t n_accepted,
                            int64_t t_draft_us, int64_t t_verify_us) {
    (void) n_asked;
    // Every position forgets at the same pace, reached or not, so a miss at a
    // position seldom drafted since fades back to the prior instead of
    // holding the draft length below it for good.
    for (size_t i = 0; i < reached_.size(); ++i) {
        reached_[i] *= kDecay;
        hit_[i] *= kDecay;
    }
    for (int32_t i = 0; i < n_drafted && i < n_cap_; ++i) {
        reached_[(size_t) i] += 1.0;
        hit_[(size_t) i] += i < n_accepted ? 1.0 : 0.0;
        if (i >= n_accepted) break;   // later positions were not reached
    }
    const double x = n_drafted, y = (double) (t_draft_us + t_verify_us);
    s_w_ = s_w_ * kDecay + 1.0;
    s_x_ = s_x_ * kDecay + x;
    s_y_ = s_y_ * kDecay + y;
    s_xx_ = s_xx_ * kDecay + x * x;
    s_xy_ = s_xy_ * kDecay + x * y;
}

}  // namespace sa
