// Text lookup: a cheap drafter that matches characters instead of tokens.
// A request's prompt and output are kept as text; the longest earlier
// occurrence of the text's tail proposes what followed it, tokenized afresh
// from where the output stands (docs/decisions/0073), or, where the match
// ends between two of the request's tokens, the tokens that followed it
// (docs/decisions/0084). It drafts where the
// same words come back split into other tokens, which token n-grams cannot
// see: a name the prompt has after a space and the output writes after a
// quote (` Aiko` against `"A` `iko`), an identifier after "(" or at a line's
// start.
#pragma once

#include "draft/token_memory.h"

#include <cstdint>
#include <string>
#include <vector>

struct llama_vocab;

namespace sa {

// piece = the token's text (empty for a control token).
void read_token_piece(const llama_vocab * vocab, int32_t token, std::string & piece);

class TextLookup {
public:
    explicit TextLookup(const llama_vocab * vocab = nullptr) : vocab_(vocab) {}

    // Whether it has a vocabulary to read and write text with (else it proposes nothing).
    bool enabled() const { return vocab_ != nullptr; }

    // Starts a request: its text is the prompt's.
    void begin(const int32_t * prompt, size_t n);
    // Appends tokens the target verified.
    void append(const int32_t * tokens, size_t n);

    // Proposes up to n_max tokens; *match_bytes receives the length of the
    // match in bytes (0: no proposal). A proposal is whole tokens whose text
    // followed the match, at most one per kBytesPerToken matched bytes
    // unless not capped (the splice lookup reads how the text goes on).
    void propose(int32_t n_max, std::vector<int32_t> & out, int32_t * match_bytes, bool capped = true);

    static constexpr int32_t kBytesPerToken = 2;    // matched bytes per proposed token
    static constexpr int32_t kMaxTokenBytes = 8;    // continuation bytes read per token wanted
    static constexpr int32_t kMaxContinuation = 512;

private:
    const llama_vocab * vocab_;
    TokenMemory bytes_;       // the text, one unit per byte: its index finds the matches
    std::vector<int32_t> ids_;     // the request's tokens...
    std::vector<size_t> starts_;   // ...and where each one's piece starts in the text
    std::vector<int32_t> units_;  // scratch: a piece's bytes, or a proposal's continuation, one unit per byte
    std::string text_;        // scratch: the continuation to tokenize
    std::vector<int32_t> tokens_;
    std::string piece_;

    void append_piece(int32_t token);
    // The request's own tokens from text offset from, when one starts there:
    // at most cap whole tokens within the first n_bytes (no tokenizing).
    bool propose_held(size_t from, size_t n_bytes, int32_t cap, std::vector<int32_t> & out) const;
};

}  // namespace sa
