#include "adaptive.h"

#include <algorithm>

namespace sa {

namespace {
constexpr double kDecay = 0.97;        // memory of about 30 observations per position
constexpr double kPriorHits = 1.0;     // optimistic prior: 2 of 3 drafts accepted
constexpr double kPriorReached = 1.5;
constexpr int kExploreEvery = 16;      // try one step beyond the best now and then
}

void AdaptiveDraft::reset(int32_t n_cap, int32_t n_floor) {
    n_cap_ = n_cap;
    n_floor_ = std::min(n_floor, n_cap);
    steps_ = 0;
    reached_.assign((size_t) n_cap, 0.0);
    hit_.assign((size_t) n_cap, 0.0);
    s_w_ = s_x_ = s_y_ = s_xx_ = s_xy_ = 0;
    draft_us_per_token_ = 0;
    draft_weight_ = 0;
}

double AdaptiveDraft::verify_cost(int32_t n) const {
    // cost(batch = n + 1) = a + b * (n + 1); until fitted, assume b = 10% of a.
    const double x = n + 1.0;
    if (s_w_ < 2.0) {
        return 1.0 + 0.1 * (x - 1.0);
    }
    const double mean_x = s_x_ / s_w_, mean_y = s_y_ / s_w_;
    const double var = s_xx_ / s_w_ - mean_x * mean_x;
    double b = var > 1e-6 ? (s_xy_ / s_w_ - mean_x * mean_y) / var : 0.1 * mean_y / std::max(mean_x, 1.0);
    b = std::max(b, 0.0);
    const double a = std::max(mean_y - b * mean_x, 1.0);
    return a + b * x;
}

int32_t AdaptiveDraft::choose() {
    ++steps_;
    double best_rate = 0;
    int32_t best_n = n_floor_;
    double expected = 1.0;   // tokens gained per step: the sampled one plus accepted drafts
    double p_chain = 1.0;
    for (int32_t n = 0; n <= n_cap_; ++n) {
        if (n > 0) {
            const size_t i = (size_t) n - 1;
            const double p = (hit_[i] + kPriorHits) / (reached_[i] + kPriorReached);
            p_chain *= p;
            expected += p_chain;
        }
        if (n < n_floor_) continue;
        const double cost = verify_cost(n) + draft_us_per_token_ * n;
        const double rate = expected / cost;
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
    for (int32_t i = 0; i < n_drafted && i < n_cap_; ++i) {
        reached_[(size_t) i] = reached_[(size_t) i] * kDecay + 1.0;
        hit_[(size_t) i] = hit_[(size_t) i] * kDecay + (i < n_accepted ? 1.0 : 0.0);
        if (i >= n_accepted) break;   // later positions were not reached
    }
    const double x = n_drafted + 1.0, y = (double) t_verify_us;
    s_w_ = s_w_ * kDecay + 1.0;
    s_x_ = s_x_ * kDecay + x;
    s_y_ = s_y_ * kDecay + y;
    s_xx_ = s_xx_ * kDecay + x * x;
    s_xy_ = s_xy_ * kDecay + x * y;
    if (n_drafted > 0) {
        const double per_token = (double) t_draft_us / n_drafted;
        draft_weight_ = draft_weight_ * kDecay + 1.0;
        draft_us_per_token_ += (per_token - draft_us_per_token_) / draft_weight_;
    }
}

}  // namespace sa
