// Cross-request memory: a bounded index over the token sequences of earlier
// prompts and outputs (and the current request), proposing how the current
// context continues. The idea is SuffixDecoding's (NeurIPS 2025): find the
// longest earlier occurrence of the context's tail and speculate as far as
// the match justifies (docs/decisions/0023).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sa {

class TokenMemory {
public:
    // capacity: tokens kept from earlier requests (0: none; the current
    // request is always indexed, whatever its length).
    explicit TokenMemory(size_t capacity = 0);

    void set_capacity(size_t capacity);
    size_t capacity() const { return capacity_; }

    // Starts the sequence of a new request; earlier ones become evictable
    // (all of them when the capacity is 0).
    void begin_sequence();

    // Appends tokens to the current sequence.
    void append(const int32_t * tokens, size_t n);

    // Proposes up to n_max tokens that followed the longest earlier match of
    // the current sequence's tail (the most recent one on ties). *match_len
    // receives the length of that match (0: no proposal). The proposal is cut
    // to per_match tokens per matched token, so short, chance matches
    // propose little. from (optional) receives where in the current sequence
    // the proposal starts (kNowhere: none, or one from an earlier sequence).
    void propose(int32_t n_max, std::vector<int32_t> & out, int32_t * match_len,
                 int32_t per_match = kLengthPerMatch, size_t * from = nullptr) const;
    static constexpr size_t kNowhere = SIZE_MAX;

    // As propose, for the tail of another memory's current sequence, matched
    // against every sequence kept here: how an earlier request went on from
    // where a request running elsewhere stands.
    void propose_after(const TokenMemory & other, int32_t n_max, std::vector<int32_t> & out, int32_t * match_len,
                       int32_t per_match = kLengthPerMatch) const;

    // The tokens of the current sequence.
    const int32_t * current() const { return tokens_.data() + starts_.back(); }
    size_t current_size() const { return tokens_.size() - starts_.back(); }

    // Forgets every sequence, the current one included.
    void clear();

    size_t size_tokens() const { return tokens_.size(); }
    // Bytes held (token store, chain links, hash heads, sequence starts).
    size_t bytes() const;

    static constexpr int32_t kKey = 3;             // tokens hashed to find candidates
    static constexpr int32_t kMaxMatch = 64;       // longest tail compared
    static constexpr int32_t kLengthPerMatch = 2;  // proposal tokens per matched token
    static constexpr int32_t kMaxCandidates = 32;  // chain entries visited per proposal

private:
    size_t capacity_;
    std::vector<int32_t> tokens_;
    // prev_[i]: the previous position whose kKey tokens ending there hash
    // like those ending at i (-1: none); heads_: the latest such position.
    std::vector<int32_t> prev_;
    std::vector<int32_t> heads_;
    std::vector<size_t> starts_;  // where each kept sequence starts, ascending

    size_t head_slot(size_t end) const { return key_slot(tokens_.data() + end + 1 - (size_t) kKey); }
    // The hash slot of the kKey tokens at key.
    size_t key_slot(const int32_t * key) const;
    // Proposes what followed the longest match of tail[0..n_tail) among the
    // chain of candidate positions from first (-1: none; each one's own
    // sequence bounds it).
    // Returns the position of the proposal's first token (kNowhere: none).
    size_t propose_from(const int32_t * tail, size_t n_tail, int32_t first, int32_t n_max, std::vector<int32_t> & out,
                        int32_t * match_len, int32_t per_match) const;
    void index(size_t end);
    void evict();
    void rebuild();
    size_t sequence_end(size_t pos) const;
};

}  // namespace sa
