// Small helpers over token sequences, shared by the drafters and the prefix cache.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sa {

// How many leading tokens a[0..na) and b[0..nb) share.
inline int32_t common_prefix(const int32_t * a, size_t na, const int32_t * b, size_t nb) {
    const size_t n = na < nb ? na : nb;
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return (int32_t) i;
}

}  // namespace sa
