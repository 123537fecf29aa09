#include "draft/promise_record.h"

#include <algorithm>

namespace sa {

namespace {
constexpr double kKeptPromise = 2.0;    // a band's pseudo-draft, which got what it was expected to get
constexpr double kPromiseDecay = 0.9;   // a band's record follows its last ~10 drafts
}

void PromiseRecord::reset() {
    promised_.fill(kKeptPromise);
    delivered_.fill(kKeptPromise);
}

size_t PromiseRecord::band(int32_t n) {
    // 1-2 -> 0, 3-4 -> 1, 5-8 -> 2, 9-16 -> 3, 17 and more -> 4
    size_t b = 0;
    for (int32_t top = 2; n > top && b + 1 < kBands; top *= 2) ++b;
    return b;
}

double PromiseRecord::factor(int32_t n) const {
    const size_t b = band(n);
    return promised_[b] > 0 ? std::min(1.0, delivered_[b] / promised_[b]) : 1.0;
}

void PromiseRecord::temper(std::vector<double> & expected) const {
    for (size_t n = 1; n < expected.size(); ++n) expected[n] = 1.0 + factor((int32_t) n) * (expected[n] - 1.0);
}

void PromiseRecord::settle(int32_t n, double tempered, int32_t accepted) {
    if (n <= 0) return;
    const size_t b = band(n);
    const double promise = (tempered - 1.0) / factor(n);  // what the untempered acceptance expected
    promised_[b] = kPromiseDecay * promised_[b] + promise;
    delivered_[b] = kPromiseDecay * delivered_[b] + (double) accepted;
}

}  // namespace sa
