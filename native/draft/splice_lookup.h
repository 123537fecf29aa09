// Splice lookup: a cheap drafter for output that repeats a record around
// changing values (JSON objects, "key: value" lines, table rows), where the
// values are copied from the prompt (docs/decisions/0078).
//
// Inside a value (the output ends in a word token: one with a letter, a
// digit or a non-ASCII byte), the text lookup finds where the value is being
// copied from. Its continuation there, up to the first punctuation token,
// is the rest of the value; where that continuation reaches no punctuation,
// the value's end is not in sight and nothing is proposed. After the rest
// comes what followed the previous value that came after the same kKey
// tokens in the request (the key before it: `name": "`): the punctuation
// that closed it, the next key and the punctuation that opens the next
// value. The value before that, after the same key, must have been followed
// by the same seam: a key that two records use alike, not a phrase of prose
// that happened to come back. Neither the text lookup (the prompt has
// ` Becker,` where the output writes ` Becker",`) nor a token n-gram (its key
// would hold the value's tokens) drafts across that seam.
#pragma once

#include "draft/text_lookup.h"

#include <cstdint>
#include <string>
#include <vector>

struct llama_vocab;

namespace sa {

class SpliceLookup {
public:
    explicit SpliceLookup(const llama_vocab * vocab = nullptr) : vocab_(vocab) {}

    bool enabled() const { return vocab_ != nullptr; }

    // Proposes up to n_max tokens after tokens[0, n) (the request's prompt
    // and output, the text lookup's text), or none.
    void propose(const int32_t * tokens, size_t n, TextLookup & text, int32_t n_max, std::vector<int32_t> & out);

    // Whether the token has no letter, digit or non-ASCII byte (punctuation,
    // spaces, line breaks, a control token).
    bool is_punctuation(int32_t token);

    static constexpr size_t kKey = 3;          // tokens before a value that name it
    static constexpr size_t kMaxScan = 8192;   // tokens searched back for the previous value

private:
    const llama_vocab * vocab_;
    std::vector<int8_t> punctuation_;  // per token id: -1 not yet read, 0 word, 1 punctuation
    std::string piece_;
    std::vector<int32_t> continuation_;
    std::vector<int32_t> seams_[2];

    // The previous value's closing punctuation, next key and opening punctuation, from tokens[at, n).
    void append_seam(const int32_t * tokens, size_t n, size_t at, int32_t n_max, std::vector<int32_t> & out);
};

}  // namespace sa
