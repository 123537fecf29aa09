#include "draft/draft_arm.h"

#include "support/tokens.h"

#include <algorithm>

namespace sa {

namespace {
constexpr double kCostDecay = 0.9;  // draft-time means follow about 10 calls
}

void DraftArm::note_cost(int64_t dt_us) {
    const double dt = (double) dt_us;
    cost_us = costed ? kCostDecay * cost_us + (1.0 - kCostDecay) * dt : dt;
    costed = true;
}

void DraftArm::draft(const DraftInput & in, int64_t extra_us) {
    proposal.clear();
    note_cost(extra_us + draft_call(spec, id, seq, in, proposal));
    proposed = !proposal.empty();
}

int32_t DraftArm::learn(const llama_tokens & ids) {
    if (!proposed) return -1;
    proposed = false;
    const int32_t m = common_prefix(proposal.data(), proposal.size(), ids.data(), ids.size());
    accept.observe(std::min((int32_t) proposal.size(), (int32_t) ids.size()), m);
    return m;
}

double expected_at(const std::vector<double> & expected, int32_t n) {
    return expected.empty() ? 1.0 : expected[(size_t) std::min<int32_t>(n, (int32_t) expected.size() - 1)];
}

}  // namespace sa
