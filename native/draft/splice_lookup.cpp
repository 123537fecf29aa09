#include "draft/splice_lookup.h"

#include "llama.h"

#include <algorithm>

namespace sa {

bool SpliceLookup::is_punctuation(int32_t token) {
    if (token < 0) return true;
    if ((size_t) token >= punctuation_.size()) punctuation_.resize((size_t) token + 1, -1);
    int8_t & known = punctuation_[(size_t) token];
    if (known < 0) {
        read_token_piece(vocab_, token, piece_);
        known = std::none_of(piece_.begin(), piece_.end(), [](char c) {
            const auto b = (unsigned char) c;
            return b >= 0x80 || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z');
        });
    }
    return known != 0;
}

void SpliceLookup::propose(const int32_t * tokens, size_t n, TextLookup & text, int32_t n_max,
                           std::vector<int32_t> & out) {
    out.clear();
    if (!enabled() || n_max <= 0 || n == 0 || is_punctuation(tokens[n - 1])) return;
    size_t value = n;  // where the value being written starts
    while (value > 0 && !is_punctuation(tokens[value - 1])) --value;
    if (value < kKey) return;
    const int32_t * key = tokens + value - kKey;
    const size_t lowest = value > kMaxScan ? value - kMaxScan : 0;
    // the two most recent earlier values after the same key (each ended before
    // the next key): their seams must agree, or the key is no record's
    seams_[0].clear();
    seams_[1].clear();
    int found = 0;
    for (size_t j = value - kKey; found < 2 && j-- > lowest;) {
        if (!std::equal(key, key + kKey, tokens + j)) continue;
        size_t closed = j + kKey;
        while (closed < value - kKey && !is_punctuation(tokens[closed])) ++closed;
        if (closed == j + kKey || closed >= value - kKey) continue;
        append_seam(tokens, value - kKey, closed, n_max, seams_[found++]);
    }
    if (found < 2 || seams_[0] != seams_[1]) return;
    // only then the text lookup (it tokenizes its continuation): where the value ends
    int32_t match = 0;
    text.propose(n_max, continuation_, &match, /* capped */ false);
    const auto end = std::find_if(continuation_.begin(), continuation_.end(),
                                  [&](int32_t t) { return is_punctuation(t); });
    if (end == continuation_.end()) return;  // the value's end is not in sight
    out.assign(continuation_.begin(), end);
    out.insert(out.end(), seams_[0].begin(), seams_[0].end());
    if ((int32_t) out.size() > n_max) out.resize((size_t) n_max);
}

void SpliceLookup::append_seam(const int32_t * tokens, size_t n, size_t at, int32_t n_max,
                               std::vector<int32_t> & out) {
    // punctuation, a word run (the next key), punctuation: stop where the next value starts
    int32_t changes = 0;
    bool punct = true;
    for (size_t i = at; i < n && (int32_t) out.size() < n_max; ++i) {
        const bool p = is_punctuation(tokens[i]);
        if (p != punct) {
            punct = p;
            if (++changes == 3) break;
        }
        out.push_back(tokens[i]);
    }
}

}  // namespace sa
