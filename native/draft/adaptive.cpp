#include "draft/adaptive.h"

#include <algorithm>

namespace sa {

namespace {
constexpr double kDecay = 0.97;             // memory of about 30 observations
constexpr size_t kRampMin = 4;              // positions trusted at the previous one's rate before any was measured
constexpr double kRampSeen = 0.5;           // decayed reach that makes a position measured
constexpr double kBeyondRamp = 0.5;         // prior factor per position past the ramp
constexpr double kPriorWeight = 1.5;        // pseudo-observations behind each position's prior
}

void PositionAcceptance::reset(int32_t n_cap, double later_floor) {
    later_floor_ = later_floor;
    reached_.assign((size_t) std::max(n_cap, 0), 0.0);
    hit_.assign((size_t) std::max(n_cap, 0), 0.0);
}

void PositionAcceptance::expected(std::vector<double> & out, double first_prior) const {
    out.assign(reached_.size() + 1, 1.0);
    // Positions up to twice the deepest one measured lean on the rate before
    // them; past that the prior halves at each position (down to the floor),
    // so a drafter's reach grows as its drafts are accepted instead of
    // trusting its first few tokens for the whole ceiling.
    size_t ramp = kRampMin;
    for (size_t i = 0; i < reached_.size(); ++i) {
        if (reached_[i] >= kRampSeen) ramp = std::max(ramp, 2 * (i + 1));
    }
    double p_chain = 1.0, p_prev = 0.0;
    for (size_t i = 0; i < reached_.size(); ++i) {
        const double prior = i == 0      ? first_prior
                             : i < ramp ? std::max(p_prev, later_floor_)
                                        : std::max(p_prev * kBeyondRamp, later_floor_);
        const double p = (hit_[i] + kPriorWeight * prior) / (reached_[i] + kPriorWeight);
        p_prev = p;
        p_chain *= p;
        out[i + 1] = out[i] + p_chain;
    }
}

void PositionAcceptance::observe(int32_t n_checked, int32_t n_accepted) {
    for (size_t i = 0; i < reached_.size(); ++i) {
        reached_[i] *= kDecay;
        hit_[i] *= kDecay;
    }
    const int32_t n_cap = (int32_t) reached_.size();
    for (int32_t i = 0; i < n_checked && i < n_cap; ++i) {
        reached_[(size_t) i] += 1.0;
        hit_[(size_t) i] += i < n_accepted ? 1.0 : 0.0;
        if (i >= n_accepted) break;   // later positions were not reached
    }
}

void AdaptiveDraft::reset(int32_t n_cap, int32_t n_floor) {
    n_cap_ = n_cap;
    n_floor_ = std::min(n_floor, n_cap);
    steps_ = 0;
    accept_.reset(n_cap);
    cost_.reset();
}

double rollback_step_us(const std::vector<double> & expected, int32_t n, const StepCost & cost,
                        const RollbackPrice & rb, int32_t n_others) {
    if (n <= rb.free || n >= (int32_t) expected.size()) return 0.0;
    // expected[j] - expected[j - 1]: the chance that the first j tokens are accepted
    auto reach = [&](int32_t j) { return j == 0 ? 1.0 : expected[(size_t) j] - expected[(size_t) j - 1]; };
    // the n-th token adds the case of exactly a = n - free - 1 accepted: a
    // restore, then a step verifying the a accepted tokens and the sampled
    // one where a plain step verifies none; the first token past free adds
    // the checkpoint too
    const int32_t a = n - rb.free - 1;
    const double p = std::max(reach(a) - reach(a + 1), 0.0);
    return (a == 0 ? rb.save_us : 0.0) + p * (rb.restore_us + cost.at(n_others + a + 1) - cost.at(n_others));
}

LengthChoice best_length(const std::vector<double> & expected, const StepCost & cost, int32_t n_lo, int32_t n_hi,
                         double extra_us, double sample_us, double min_expected, const BatchShare & share,
                         const RollbackPrice & rb) {
    LengthChoice best{n_lo - 1, 0.0};
    n_hi = std::min(n_hi, (int32_t) expected.size() - 1);
    double rollback = 0;  // the expected rollback price of a draft of n tokens, built up length by length
    for (int32_t n = 1; n < n_lo; ++n) rollback += rollback_step_us(expected, n, cost, rb, share.n_others);
    for (int32_t n = std::max(n_lo, 0); n <= n_hi; ++n) {
        rollback += rollback_step_us(expected, n, cost, rb, share.n_others);
        if (expected[(size_t) n] < min_expected) continue;
        const double e = share.e_others + expected[(size_t) n];
        const double rate = e / (cost.at(share.n_others + n) + rollback + extra_us + sample_us * e);
        if (rate > best.rate * kLongerMustBeat) best = {n, rate};
    }
    return best;
}

OfferChoice choose_offer(const std::vector<Offer> & offers, const StepCost & cost, double draft_us, double sample_us,
                         const BatchShare & share, const RollbackPrice & rb) {
    static const std::vector<double> kPlainStep{1.0};  // a plain step makes one token
    OfferChoice best{-1, best_length(kPlainStep, cost, 0, 0, draft_us, sample_us, 0, share)};
    for (size_t i = 0; i < offers.size(); ++i) {
        const LengthChoice c = best_length(*offers[i].expected, cost, 1, offers[i].n_max, draft_us, sample_us, 0, share, rb);
        if (c.n >= 1 && c.rate > best.length.rate * kLongerMustBeat) best = {(int32_t) i, c};
    }
    return best;
}

int32_t AdaptiveDraft::choose(const RollbackPrice & rb) {
    ++steps_;
    accept_.expected(expected_);
    int32_t best_n = std::max(best_length(expected_, cost_, n_floor_, n_cap_, 0, 0, 0, {}, rb).n, n_floor_);
    if (steps_ % kExploreEvery == 0 && best_n < n_cap_) {
        ++best_n;
    }
    return best_n;
}

void AdaptiveDraft::observe(int32_t n_asked, int32_t n_drafted, int32_t n_accepted,
                            int64_t t_draft_us, int64_t t_verify_us, int32_t n_others, bool priced) {
    (void) n_asked;
    accept_.observe(n_drafted, n_accepted);
    if (priced) cost_.observe(n_drafted + n_others, t_draft_us + t_verify_us);
}

}  // namespace sa
