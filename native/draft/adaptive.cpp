#include "draft/adaptive.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace sa {

namespace {
constexpr double kDecay = 0.97;             // memory of about 30 observations
constexpr size_t kRampMin = 4;              // positions trusted at the previous one's rate before any was measured
constexpr double kRampSeen = 0.5;           // decayed reach that makes a position measured
constexpr double kBeyondRamp = 0.5;         // prior factor per position past the ramp
constexpr double kPriorWeight = 1.5;        // pseudo-observations behind each position's prior
constexpr double kPriorSlope = 0.2;         // cost per drafted token, relative to a plain step
constexpr double kSlopeWeight = 4.0;        // pseudo-observations (at unit spread) behind that slope
constexpr double kOutlier = 3.0;            // one step's cost counts at most this many times the prediction
constexpr double kSlowWeight = 0.25;        // weight of a step slower than predicted
constexpr double kShapeDecay = 0.95;        // a length's cost ratio follows its last ~20 steps
constexpr double kShapeWeight = 1.0;        // pseudo-observation of ratio 1 behind each length
constexpr double kScaleDecay = 0.95;        // the calibrated table's scale follows the last ~20 steps
constexpr double kScaleWeight = 1.0;        // pseudo-observation of scale 1 behind it
constexpr double kKindWeight = 1.0;         // pseudo-observations of the overall scale behind each kind's
constexpr double kKindForget = 0.99;        // a kind's decay at each step of the other kind

// How many of a table's last entries repeat past its end.
constexpr size_t kRepeatedTail = 8;

// us_by_length[n]; past its end, the table's last entries repeat, each time
// rising by what they rose over: the CPU kernels' block shape (some batch
// sizes cost less than smaller ones, decision 0065) goes on with the line,
// where one last difference could be a block edge's jump or drop.
double table_at(const std::vector<double> & table, int32_t n) {
    const size_t last = table.size() - 1;
    if ((size_t) n <= last) return table[(size_t) n];
    const size_t m = std::min(kRepeatedTail, last);
    if (m == 0) return table[last];
    const size_t past = (size_t) n - last;
    const size_t turns = (past + m - 1) / m;                 // whole repeats of the tail, the last one partial
    const size_t at = last - m * turns + past;              // the entry n repeats
    return table[at] + (table[last] - table[last - m]) * (double) turns;
}
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

void StepCost::reset() {
    s_w_ = s_x_ = s_y_ = s_xx_ = s_xy_ = 0;
    log_scale_ = scale_w_ = 0;
    one_token_ = batched_ = Kind{};
    shape_w_.clear();
    shape_r_.clear();
}

void StepCost::fix(std::vector<double> us_by_length) { fixed_ = std::move(us_by_length); }

void StepCost::calibrate(std::vector<double> us_by_length) {
    table_ = std::move(us_by_length);
    log_scale_ = scale_w_ = 0;
    one_token_ = batched_ = Kind{};
}

double StepCost::scale() const { return std::exp(log_scale_ / (scale_w_ + kScaleWeight)); }

double StepCost::kind_scale(int32_t n) const {
    const Kind & k = n == 0 ? one_token_ : batched_;
    const double overall = log_scale_ / (scale_w_ + kScaleWeight);
    return std::exp((k.log_sum + kKindWeight * overall) / (k.weight + kKindWeight));
}

double StepCost::line(int32_t n) const {
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

double StepCost::shape(int32_t n) const {
    // a length seldom verified leans on ratio 1 (the line)
    if ((size_t) n >= shape_w_.size()) return 1.0;
    return (shape_r_[(size_t) n] + kShapeWeight) / (shape_w_[(size_t) n] + kShapeWeight);
}

double StepCost::at(int32_t n) const {
    if (!fixed_.empty()) return table_at(fixed_, n);
    if (!table_.empty()) return kind_scale(n) * table_at(table_, n);
    return line(n) * shape(n);
}

void StepCost::observe(int32_t n_verified, int64_t us) {
    if (!fixed_.empty() || n_verified < 0) return;
    if (!table_.empty()) {
        // One factor for every length, its log a decayed mean (a step counts
        // at most kOutlier times off the table either way), so the table's
        // shape stays the measured one whatever the load does.
        const double r = std::clamp(std::log(std::max((double) us, 1.0) / table_at(table_, n_verified)),
                                    -std::log(kOutlier), std::log(kOutlier));
        log_scale_ = log_scale_ * kScaleDecay + r;
        scale_w_ = scale_w_ * kScaleDecay + 1.0;
        // A one-token decode and a batch each keep their own factor as well,
        // leaning on the overall one: on a GPU the one-token decode runs as
        // a CUDA graph and a batch does not, a difference of shape that the
        // calibration misses (decision 0083). A kind follows its own last
        // ~20 steps, and returns to the overall factor over ~100 steps of
        // the other kind (a batch priced high under a passing load is tried again).
        Kind & own = n_verified == 0 ? one_token_ : batched_;
        Kind & other = n_verified == 0 ? batched_ : one_token_;
        own.log_sum = own.log_sum * kScaleDecay + r;
        own.weight = own.weight * kScaleDecay + 1.0;
        other.log_sum *= kKindForget;
        other.weight *= kKindForget;
        return;
    }
    // Timing noise only ever adds (llama.cpp reserving buffers for a new
    // batch size, the OS taking the core): a step counts at most kOutlier
    // times its prediction. The line weighs a step slower than predicted
    // kSlowWeight, so one slow step at a length seldom verified does not set
    // the slope for long (the plain steps that follow never measure it
    // again); once the per-length ratio has priced that length, its steps
    // are no longer "slow" and count fully.
    const double x = n_verified;
    const bool first = s_w_ <= 0.0;
    const double line_n = line(n_verified), shape_n = shape(n_verified);
    const double predicted = line_n * shape_n;
    double y = (double) us, w = 1.0;
    if (!first && y > predicted) {
        y = std::min(y, kOutlier * predicted);
        w = kSlowWeight;
    }
    // The two parts share the step: the ratio is measured against the line
    // as it stood, and the line learns the step with that length's ratio
    // taken out (fitting the raw cost instead, both parts absorbed a change
    // of load and the prediction overshot it).
    const double ratio = first ? 1.0 : y / line_n;
    const double y_line = y / shape_n;
    s_w_ = s_w_ * kDecay + w;
    s_x_ = s_x_ * kDecay + w * x;
    s_y_ = s_y_ * kDecay + w * y_line;
    s_xx_ = s_xx_ * kDecay + w * x * x;
    s_xy_ = s_xy_ * kDecay + w * x * y_line;
    if ((size_t) n_verified >= shape_w_.size()) {
        shape_w_.resize((size_t) n_verified + 1, 0.0);
        shape_r_.resize((size_t) n_verified + 1, 0.0);
    }
    double & sw = shape_w_[(size_t) n_verified];
    double & sr = shape_r_[(size_t) n_verified];
    // full weight: a length's own steps are what its ratio is for (a slow one is still clipped)
    sw = sw * kShapeDecay + 1.0;
    sr = sr * kShapeDecay + ratio;
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
