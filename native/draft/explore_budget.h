// How much time auto may lose to its exploring steps (docs/decisions/0115).
//
// When plain decoding wins a step, auto still verifies a cheap proposal now
// and then, so that the cost of drafting stays measured (decision 0024).
// Where a drafted step costs far more than a plain one (a hybrid target,
// whose recurrent layers take a verified batch token by token and whose
// rollbacks need a checkpoint), such a step loses time whatever it gets
// accepted. The budget measures what each exploring step lost against the
// plain steps it stood for, and lets the next one happen only while those
// losses stay within kShare of the time the steps took.
#pragma once

#include <algorithm>

namespace sa {

class ExploreBudget {
public:
    // The share of the steps' time that exploring steps may lose.
    static constexpr double kShare = 0.01;

    // Nothing spent, nothing lost.
    void reset() { spent_us_ = lost_us_ = 0; }
    // A verified step cost us (as the step cost prices it).
    void spent(double us) { spent_us_ += us; }
    // An exploring step lost us against plain decoding (negative: it gained);
    // what was lost before is paid back by gains, never more.
    void explored(double us) { lost_us_ = std::max(0.0, lost_us_ + us); }
    // Whether another exploring step may be verified.
    bool allows() const { return lost_us_ <= kShare * spent_us_; }

private:
    double spent_us_ = 0;
    double lost_us_ = 0;
};

}  // namespace sa
