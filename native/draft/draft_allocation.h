// The draft lengths of a batched step, chosen together (docs/decisions/0066).
// Each decoding sequence's drafter proposes; one decode verifies every
// sequence's [last, drafts...]. Which draft tokens go in is one choice for
// the whole step: the ones expected to be accepted most, as many as make the
// step's expected tokens per microsecond highest. A step's cost is not
// linear in its tokens (some batch sizes cost less than smaller ones,
// decision 0065), which a sequence choosing alone cannot see.
#pragma once

#include "draft/adaptive.h"

#include <cstdint>
#include <vector>

namespace sa {

// A sequence's draft that the step may cut or extend along its drafter's
// proposal: expected tokens by draft length, (*expected)[0..n_max]
// ((*expected)[0] is its sampled token, 1).
struct DraftOption {
    const std::vector<double> * expected;
    int32_t n_max;
    // What one of its tokens is worth beside the others' (decision 0087):
    // its tokens left over the most any sequence of the step has left.
    double weight = 1.0;
    // What undoing its rejected tokens costs its target (decision 0091).
    RollbackPrice rollback{};
};

// The draft length of each option that maximises
//   (e_fixed + sum_i w_i expected_i[n_i]) / (cost.at(n_fixed + sum_i n_i - 1) + sum_i rollback_i(n_i)),
// the step's expected tokens per microsecond, where n_fixed counts the
// decode's tokens that do not depend on the choice (each option's sampled
// token and the other sequences' tokens) and e_fixed what those others are
// expected to make (weighted alike), w_i option i's weight, rollback_i(n_i)
// option i's rollback_step_us summed over 1..n_i (its re-verification joining
// a step of n_fixed - 1 other tokens). StepCost is indexed by drafted tokens, a lone step
// verifying n + 1: a decode of T tokens costs cost.at(T - 1). At most
// n_total tokens in all. Draft tokens go in by their marginal expected
// tokens, highest first, a sequence's in order; a longer choice must beat a
// shorter one by kLongerMustBeat.
std::vector<int32_t> allocate_drafts(const std::vector<DraftOption> & options, int32_t n_fixed, double e_fixed,
                                     const StepCost & cost, int32_t n_total);

}  // namespace sa
