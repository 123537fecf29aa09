#include "draft/token_memory.h"

#include <algorithm>

namespace sa {

namespace {
constexpr size_t kMinHeads = 1024;
}

TokenMemory::TokenMemory(size_t capacity) : capacity_(capacity) { clear(); }

void TokenMemory::set_capacity(size_t capacity) {
    capacity_ = capacity;
    evict();
}

void TokenMemory::clear() {
    tokens_.clear();
    prev_.clear();
    starts_.clear();
    heads_.assign(kMinHeads, -1);
    starts_.push_back(0);
}

size_t TokenMemory::bytes() const {
    return tokens_.capacity() * sizeof(int32_t) + prev_.capacity() * sizeof(int32_t) +
           heads_.capacity() * sizeof(int32_t) + starts_.capacity() * sizeof(size_t);
}

void TokenMemory::begin_sequence() {
    if (tokens_.size() != starts_.back()) starts_.push_back(tokens_.size());
    evict();
}

size_t TokenMemory::key_slot(const int32_t * key) const {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int32_t i = 0; i < kKey; ++i) {
        h ^= (uint32_t) key[i];
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return (size_t) h & (heads_.size() - 1);
}

void TokenMemory::index(size_t end) {
    prev_[end] = -1;
    // the key may not reach back into an earlier sequence
    const auto it = std::upper_bound(starts_.begin(), starts_.end(), end);
    const size_t start = *(it - 1);
    if (end + 1 - start < (size_t) kKey) return;
    const size_t slot = head_slot(end);
    prev_[end] = heads_[slot];
    heads_[slot] = (int32_t) end;
}

void TokenMemory::append(const int32_t * tokens, size_t n) {
    for (size_t k = 0; k < n; ++k) {
        tokens_.push_back(tokens[k]);
        prev_.push_back(-1);
        if (tokens_.size() * 2 > heads_.size()) {
            rebuild();  // grows the hash table; indexes the new token too
        } else {
            index(tokens_.size() - 1);
        }
    }
}

void TokenMemory::rebuild() {
    size_t n_heads = kMinHeads;
    while (n_heads < tokens_.size() * 2) n_heads *= 2;
    heads_.assign(n_heads, -1);
    prev_.assign(tokens_.size(), -1);
    for (size_t end = 0; end < tokens_.size(); ++end) index(end);
}

void TokenMemory::evict() {
    const size_t current = starts_.back();  // tokens of earlier sequences
    if (current <= capacity_) return;
    const size_t drop = current - capacity_;
    tokens_.erase(tokens_.begin(), tokens_.begin() + (std::ptrdiff_t) drop);
    std::vector<size_t> kept{0};
    for (size_t s : starts_) {
        if (s > drop) kept.push_back(s - drop);
    }
    starts_ = std::move(kept);
    rebuild();
    heads_.shrink_to_fit();
}

size_t TokenMemory::sequence_end(size_t pos) const {
    const auto it = std::upper_bound(starts_.begin(), starts_.end(), pos);
    return it == starts_.end() ? tokens_.size() : *it;
}

void TokenMemory::propose(int32_t n_max, std::vector<int32_t> & out, int32_t * match_len, int32_t per_match,
                          size_t * from) const {
    // the tail's own position heads its chain: candidates are the ones before it
    const size_t n_tail = current_size();
    const int32_t first = n_tail >= (size_t) kKey ? prev_[tokens_.size() - 1] : -1;
    const size_t at = propose_from(current(), n_tail, first, n_max, out, match_len, per_match);
    if (from != nullptr) *from = at != kNowhere && at >= starts_.back() ? at - starts_.back() : kNowhere;
}

void TokenMemory::propose_after(const TokenMemory & other, int32_t n_max, std::vector<int32_t> & out,
                                int32_t * match_len, int32_t per_match) const {
    const size_t n_tail = other.current_size();
    const int32_t first = n_tail >= (size_t) kKey ? heads_[key_slot(other.current() + n_tail - kKey)] : -1;
    propose_from(other.current(), n_tail, first, n_max, out, match_len, per_match);
}

size_t TokenMemory::propose_from(const int32_t * tail, size_t n_tail, int32_t first, int32_t n_max,
                                 std::vector<int32_t> & out, int32_t * match_len, int32_t per_match) const {
    out.clear();
    *match_len = 0;
    if (n_max <= 0) return kNowhere;
    int32_t best_len = 0;
    size_t best_end = 0;
    int32_t visited = 0;
    for (int32_t c = first; c >= 0 && visited < kMaxCandidates; c = prev_[(size_t) c], ++visited) {
        const size_t cand = (size_t) c;
        const auto it = std::upper_bound(starts_.begin(), starts_.end(), cand);
        const size_t cand_start = *(it - 1);
        const size_t cand_end = it == starts_.end() ? tokens_.size() : *it;
        if (cand + 1 >= cand_end) continue;  // nothing follows it
        int32_t len = 0;
        while (len < kMaxMatch && cand >= cand_start + (size_t) len && (size_t) len < n_tail &&
               tokens_[cand - (size_t) len] == tail[n_tail - 1 - (size_t) len]) {
            ++len;
        }
        if (len > best_len) {
            best_len = len;
            best_end = cand;
            if (len == kMaxMatch) break;
        }
    }
    if (best_len < kKey) return kNowhere;  // a hash collision, not a match
    const size_t avail = sequence_end(best_end) - (best_end + 1);
    const size_t want = std::min({(size_t) n_max, (size_t) best_len * (size_t) per_match, avail});
    out.assign(tokens_.begin() + (std::ptrdiff_t) (best_end + 1), tokens_.begin() + (std::ptrdiff_t) (best_end + 1 + want));
    *match_len = best_len;
    return best_end + 1;
}

}  // namespace sa
