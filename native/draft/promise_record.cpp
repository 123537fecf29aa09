#include "draft/promise_record.h"

#include <algorithm>

namespace sa {

namespace {
constexpr double kPromiseDecay = 0.9;  // a band's record follows its last ~10 drafts
}

size_t PromiseRecord::band(int32_t n) {
    // 1-2 -> 0, 3-4 -> 1, 5-8 -> 2, 9-16 -> 3, 17 and more -> 4
    size_t b = 0;
    for (int32_t top = 2; n > top && b + 1 < kBands; top *= 2) ++b;
    return b;
}

double PromiseRecord::factor(int32_t n) const {
    const size_t b = band(n);
    return std::min(1.0, (delivered_[b] + kPseudoTokens) / (promised_[b] + kPseudoTokens));
}

bool PromiseRecord::kept() const {
    for (size_t b = 0; b < kBands; ++b) {
        if (delivered_[b] < promised_[b]) return false;
    }
    return true;
}

void PromiseRecord::settle(int32_t n, double promise, int32_t accepted) {
    if (n <= 0) return;
    const size_t b = band(n);
    promised_[b] = kPromiseDecay * promised_[b] + promise;
    delivered_[b] = kPromiseDecay * delivered_[b] + (double) accepted;
}

}  // namespace sa
