#include "draft/step_cost.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace sa {

namespace {
constexpr double kLineDecay = 0.97;         // the line remembers about 30 steps
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
constexpr double kSampleDecay = 0.9;        // the sampling time per token follows about 10 steps

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
}  // namespace

double LearnedCost::line(int32_t n) const {
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

double LearnedCost::shape(int32_t n) const {
    // a length seldom verified leans on ratio 1 (the line)
    if ((size_t) n >= shape_w_.size()) return 1.0;
    return (shape_r_[(size_t) n] + kShapeWeight) / (shape_w_[(size_t) n] + kShapeWeight);
}

double LearnedCost::at(int32_t n) const { return line(n) * shape(n); }

void LearnedCost::observe(int32_t n_verified, int64_t us) {
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
    s_w_ = s_w_ * kLineDecay + w;
    s_x_ = s_x_ * kLineDecay + w * x;
    s_y_ = s_y_ * kLineDecay + w * y_line;
    s_xx_ = s_xx_ * kLineDecay + w * x * x;
    s_xy_ = s_xy_ * kLineDecay + w * x * y_line;
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

double ScaledTable::scale() const { return std::exp(log_scale_ / (scale_w_ + kScaleWeight)); }

double ScaledTable::kind_scale(int32_t n) const {
    const Kind & k = n == 0 ? one_token_ : batched_;
    const double overall = log_scale_ / (scale_w_ + kScaleWeight);
    return std::exp((k.log_sum + kKindWeight * overall) / (k.weight + kKindWeight));
}

double ScaledTable::at(int32_t n) const { return kind_scale(n) * table_at(*table_, n); }

void ScaledTable::observe(int32_t n_verified, int64_t us) {
    // One factor for every length, its log a decayed mean (a step counts
    // at most kOutlier times off the table either way), so the table's
    // shape stays the measured one whatever the load does.
    const double r = std::clamp(std::log(std::max((double) us, 1.0) / table_at(*table_, n_verified)),
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
}

double FixedTable::at(int32_t n) const { return table_at(table_, n); }

void StepCost::reset() {
    if (auto * t = std::get_if<ScaledTable>(&model_)) {
        *t = ScaledTable(t->table());  // the table stays, its scale starts over
    } else if (std::holds_alternative<LearnedCost>(model_)) {
        model_ = LearnedCost{};
    }
}

double StepCost::at(int32_t n) const {
    return std::visit([n](const auto & m) { return m.at(n); }, model_);
}

void StepCost::observe(int32_t n_verified, int64_t us) {
    if (n_verified < 0) return;
    if (auto * t = std::get_if<ScaledTable>(&model_)) t->observe(n_verified, us);
    if (auto * l = std::get_if<LearnedCost>(&model_)) l->observe(n_verified, us);
}

bool StepCost::measured() const {
    const auto * l = std::get_if<LearnedCost>(&model_);
    return l == nullptr || l->measured();
}

void StepCost::fix(std::vector<double> us_by_length) { model_ = FixedTable(std::move(us_by_length)); }

void StepCost::calibrate(std::shared_ptr<const std::vector<double>> table) {
    if (!fixed()) model_ = ScaledTable(std::move(table));
}

std::shared_ptr<const std::vector<double>> StepCost::table() const {
    const auto * t = std::get_if<ScaledTable>(&model_);
    return t ? t->table() : nullptr;
}

double StepCost::scale() const {
    const auto * t = std::get_if<ScaledTable>(&model_);
    return t ? t->scale() : 1.0;
}

void StepPrice::begin(bool fresh) {
    after_draft_ = false;
    if (fresh) cost_.reset();
}

void StepPrice::observe(int32_t n_verified, int32_t n_others, int64_t t_verify_us, bool priced, size_t n_made,
                        int64_t t_sample_us) {
    const bool lone = n_others == 0;
    // the decode's cost, all its tokens; the switch back to one token after a draft is no plain step's
    if (priced && !(lone && n_verified == 0 && after_draft_)) cost_.observe(n_verified + n_others, t_verify_us);
    if (priced) ++priced_steps_;
    after_draft_ = priced && lone && n_verified > 0;
    const double per_token = (double) t_sample_us / (double) std::max<size_t>(n_made, 1);
    sample_us_ = timed() && sample_seen_ ? kSampleDecay * sample_us_ + (1.0 - kSampleDecay) * per_token : per_token;
    sample_seen_ = true;
}

}  // namespace sa
