// The most likely token of a row of logits, fast: greedy verification takes
// the argmax of one 262k-float row per verified position, and std::max_element
// (scalar, one compare-and-branch per float) took 0.6-0.8 ms of it on a 2-core
// Xeon, 10% of a batched step at eight sequences.
#pragma once

#include <cstdint>

namespace sa {

// The first index of the largest of x[0..n) (std::max_element's answer):
// the row's maximum in blocks with the CPU's widest max instruction (chosen
// at load time: AVX-512, AVX2 or the baseline), then the first index in the first
// block that holds it. A NaN is never the maximum; a row of NaNs gives 0,
// as does n < 1.
int32_t first_argmax(const float * x, int32_t n);

}  // namespace sa
