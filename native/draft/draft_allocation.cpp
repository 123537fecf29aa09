#include "draft/draft_allocation.h"

#include <algorithm>
#include <queue>
#include <utility>

namespace sa {

std::vector<int32_t> allocate_drafts(const std::vector<DraftOption> & options, int32_t n_fixed, double e_fixed,
                                     const StepCost & cost, int32_t n_total) {
    std::vector<int32_t> lengths(options.size(), 0);
    if (n_fixed <= 0 || n_fixed > n_total) return lengths;
    // next[i]: the length option i reaches with its next token
    std::vector<int32_t> next(options.size(), 1);
    auto gain = [&](size_t i) { return options[i].weight * ((*options[i].expected)[(size_t) next[i]] - (*options[i].expected)[(size_t) next[i] - 1]); };
    std::priority_queue<std::pair<double, size_t>> queue;  // (marginal expected tokens, option)
    for (size_t i = 0; i < options.size(); ++i) {
        if (options[i].n_max >= 1) queue.emplace(gain(i), i);
    }
    double e = e_fixed;
    for (const DraftOption & o : options) e += o.weight * (*o.expected)[0];
    int32_t t = n_fixed;
    double rollback = 0;  // the options' expected rollback price at their lengths so far (decision 0091)
    double best_rate = e / cost.at(t - 1);
    std::vector<size_t> order;  // options in the order their tokens went in
    size_t best_d = 0;
    while (!queue.empty() && t < n_total) {
        const auto [g, i] = queue.top();
        queue.pop();
        order.push_back(i);
        e += g;
        ++t;
        rollback += rollback_step_us(*options[i].expected, next[i], cost, options[i].rollback, n_fixed - 1);
        if (++next[i] <= options[i].n_max) queue.emplace(gain(i), i);
        const double rate = e / (cost.at(t - 1) + rollback);
        if (rate > best_rate * kLongerMustBeat) {
            best_rate = rate;
            best_d = order.size();
        }
    }
    for (size_t k = 0; k < best_d; ++k) ++lengths[order[k]];
    return lengths;
}

}  // namespace sa
