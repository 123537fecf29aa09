// The cost (us) of a step by the length of the draft it verifies (plain
// steps are length 0), which every draft length is priced by (adaptive.h).
// StepCost is the one interface; behind it, one of three models at a time:
// - LearnedCost (docs/decisions/0029): learned from the steps alone. The
//   adaptive-length drafter's (n_draft="auto"), and auto's until a table is
//   measured (a run whose context was not empty at its start measures none).
// - ScaledTable (docs/decisions/0060, 0065, 0083): auto's table, measured
//   once per model and thread count (step_cost_calibration.h), which the
//   steps only scale.
// - a fixed table (tests and benchmarks): what the chooser does no longer
//   depends on the machine's load.
#pragma once

#include <cstdint>
#include <memory>
#include <variant>
#include <vector>

namespace sa {

// Learned from the steps alone. Two parts:
// - a decayed least-squares line over all steps, which follows the machine's
//   load and predicts lengths never verified;
// - per length, the decayed mean ratio of the measured cost to the line. CPU
//   matrix kernels work on blocks of rows, so cost is not linear in the batch:
//   on a 2-core EPYC, verifying 2 drafted tokens (a batch of 3) took longer
//   than verifying 3 (docs/decisions/0029). The ratio learns that shape.
// A fixed per-step draft cost, as with drafters that always draft their full
// length, lands in the line's intercept.
class LearnedCost {
public:
    // Relative units until a step was observed.
    double at(int32_t n) const;
    void observe(int32_t n_verified, int64_t us);
    bool measured() const { return s_w_ > 0.0; }

private:
    double s_w_ = 0, s_x_ = 0, s_y_ = 0, s_xx_ = 0, s_xy_ = 0;
    std::vector<double> shape_w_, shape_r_;  // per length: decayed weight and weighted ratio sum

    double line(int32_t n) const;
    double shape(int32_t n) const;
};

// A measured table by draft length (us_by_length[n]; past its end, its last
// 8 entries repeat, docs/decisions/0065), scaled by a decayed factor that
// follows the machine's load: one for one-token decodes and one for batches,
// each leaning on the factor of all steps (docs/decisions/0083).
class ScaledTable {
public:
    explicit ScaledTable(std::shared_ptr<const std::vector<double>> table) : table_(std::move(table)) {}
    double at(int32_t n) const;
    void observe(int32_t n_verified, int64_t us);
    // The factor of all steps so far (1 while nothing was seen).
    double scale() const;
    const std::shared_ptr<const std::vector<double>> & table() const { return table_; }

private:
    std::shared_ptr<const std::vector<double>> table_;
    double log_scale_ = 0, scale_w_ = 0;   // decayed sum of log(measured / table) and its weight
    struct Kind {
        double log_sum = 0, weight = 0;    // the same, over one kind of step
    };
    Kind one_token_, batched_;

    // The factor the table is priced at now for a step verifying n drafted
    // tokens: a one-token decode's (n = 0) or a batch's.
    double kind_scale(int32_t n) const;
};

// A table that no step changes (past its end, its last 8 entries repeat).
class FixedTable {
public:
    explicit FixedTable(std::vector<double> us_by_length) : table_(std::move(us_by_length)) {}
    double at(int32_t n) const;

private:
    std::vector<double> table_;
};

// The step cost a drafter prices with. It starts learned; calibrate() turns
// it to a measured table for good, fix() to a fixed one (which calibrate()
// no longer replaces).
class StepCost {
public:
    // Forgets what was learned online (the learned model, the table's scale);
    // a calibrated or fixed table stays.
    void reset();
    // Cost of a step verifying n draft tokens; relative units until measured.
    double at(int32_t n) const;
    void observe(int32_t n_verified, int64_t us);
    bool measured() const;
    // Tests and benchmarks: a fixed cost, us_by_length[n] for a step verifying
    // n drafted tokens, so that what the chooser does no longer depends on
    // the machine's load.
    void fix(std::vector<double> us_by_length);
    bool fixed() const { return std::holds_alternative<FixedTable>(model_); }
    // The measured cost by draft length (as fix's table), from now on only
    // scaled by the steps observed; scale 1 until a step was observed.
    // Nothing while the cost is fixed.
    void calibrate(std::shared_ptr<const std::vector<double>> table);
    bool calibrated() const { return std::holds_alternative<ScaledTable>(model_); }
    // The table it was calibrated with (null: none).
    std::shared_ptr<const std::vector<double>> table() const;
    // The calibrated table's factor of all steps so far (1 when not calibrated or nothing seen).
    double scale() const;

private:
    std::variant<LearnedCost, ScaledTable, FixedTable> model_;
};

// What a step costs auto's chooser beyond its drafting: its decode by draft
// length (StepCost) and its sampling per token made, both measured from the
// verified steps. Every arm of auto is priced with it (auto_drafter.h,
// model_arm.h).
class StepPrice {
public:
    StepCost & cost() { return cost_; }
    const StepCost & cost() const { return cost_; }
    // Costs are in microseconds (a step was timed, or the table is measured
    // or fixed); until then in the cost line's relative units, which leave
    // drafting and sampling times out.
    bool timed() const { return cost_.measured(); }
    // Sampling time per token made, a decayed mean; seen: it holds a
    // measurement (a step's sampling may take under a microsecond: 0).
    double sample_us() const { return sample_us_; }
    bool sample_seen() const { return sample_seen_; }
    // A run starts: its first step follows the prompt, not a draft. fresh:
    // what was learned online goes too (StepCost::reset).
    void begin(bool fresh);
    // One verified step: n_verified drafted tokens and n_others of other
    // sequences decoded in t_verify_us (the cost learns it only when priced,
    // StepOutcome::priced, and not from a lone one-token decode right after a
    // lone draft, where llama.cpp's graph switches back: docs/decisions/0117),
    // n_made tokens made and sampled in t_sample_us.
    void observe(int32_t n_verified, int32_t n_others, int64_t t_verify_us, bool priced, size_t n_made,
                 int64_t t_sample_us);
    // Verified steps that priced the cost, this session.
    uint64_t priced_steps() const { return priced_steps_; }

private:
    StepCost cost_;
    double sample_us_ = 0;
    bool sample_seen_ = false;
    uint64_t priced_steps_ = 0;
    bool after_draft_ = false;  // the last step verified a draft, alone in its decode
};

}  // namespace sa
