#include "draft/text_lookup.h"

#include "llama.h"

#include <algorithm>

namespace sa {

namespace {

bool continues_char(char b) { return ((unsigned char) b & 0xC0) == 0x80; }

// The length of s's longest prefix of whole UTF-8 characters (a cut
// continuation may end inside one).
size_t whole_chars(const std::string & s) {
    size_t lead = s.size();
    while (lead > 0 && continues_char(s[lead - 1])) --lead;
    if (lead == 0) return 0;
    const auto b = (unsigned char) s[lead - 1];
    const size_t need = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
    return s.size() - (lead - 1) >= need ? s.size() : lead - 1;
}

}  // namespace

void read_token_piece(const llama_vocab * vocab, int32_t token, std::string & piece) {
    piece.resize(std::max<size_t>(piece.capacity(), 32));
    int32_t n = llama_token_to_piece(vocab, token, piece.data(), (int32_t) piece.size(), 0, false);
    if (n < 0) {
        piece.resize((size_t) -n);
        n = llama_token_to_piece(vocab, token, piece.data(), (int32_t) piece.size(), 0, false);
    }
    piece.resize(n > 0 ? (size_t) n : 0);
}

void TextLookup::begin(const int32_t * prompt, size_t n) {
    bytes_.begin_sequence();  // capacity 0: only this request's text is kept
    ids_.clear();
    starts_.clear();
    append(prompt, n);
}

void TextLookup::append(const int32_t * tokens, size_t n) {
    if (!enabled()) return;
    for (size_t i = 0; i < n; ++i) append_piece(tokens[i]);
}

void TextLookup::append_piece(int32_t token) {
    read_token_piece(vocab_, token, piece_);
    units_.assign(piece_.begin(), piece_.end());
    for (int32_t & b : units_) b = (unsigned char) b;
    ids_.push_back(token);
    starts_.push_back(bytes_.current_size());
    bytes_.append(units_.data(), units_.size());
}

bool TextLookup::propose_held(size_t from, size_t n_bytes, int32_t cap, std::vector<int32_t> & out) const {
    out.clear();
    size_t i = (size_t) (std::lower_bound(starts_.begin(), starts_.end(), from) - starts_.begin());
    if (i == starts_.size() || starts_[i] != from) return false;  // the match ends inside a token
    const size_t limit = from + n_bytes, n_text = bytes_.current_size();
    for (; i < ids_.size() && (int32_t) out.size() < cap; ++i) {
        const size_t end = i + 1 < starts_.size() ? starts_[i + 1] : n_text;
        if (end == starts_[i]) {  // a control token spells nothing: the text goes on past it
            if (out.empty()) continue;
            break;
        }
        if (end > limit) break;
        out.push_back(ids_[i]);
    }
    return !out.empty();
}

void TextLookup::propose(int32_t n_max, std::vector<int32_t> & out, int32_t * match_bytes, bool capped) {
    out.clear();
    *match_bytes = 0;
    if (!enabled() || n_max <= 0) return;
    const int32_t want = std::min(kMaxContinuation, n_max * kMaxTokenBytes);
    int32_t match = 0;
    size_t from = TokenMemory::kNowhere;
    bytes_.propose(want, units_, &match, kMaxContinuation, &from);
    if (units_.empty()) return;
    const int32_t cap = capped ? std::min(n_max, std::max(1, match / kBytesPerToken)) : n_max;
    // Where the match ends between two of the request's tokens, the tokens
    // that followed spell the continuation already: tokenizing it would cost
    // 0.1-0.3 ms a step on a 2-core Xeon (the tokenizer's tables are cold
    // after a decode), as much as a whole step on a GPU (decision 0084).
    if (from != TokenMemory::kNowhere && propose_held(from, units_.size(), cap, out)) {
        *match_bytes = match;
        return;
    }
    // shorter than asked: it reached the end of the text, so its last token is whole
    bool cut = (int32_t) units_.size() == want;
    // tokenized: what the most tokens it may propose need, and one more (the cut one)
    const size_t need = (size_t) (cap + 1) * kMaxTokenBytes;
    if (units_.size() > need) {
        units_.resize(need);
        cut = true;
    }
    text_.assign(units_.begin(), units_.end());
    if (continues_char(text_[0])) return;  // the match ends inside a character
    text_.resize(whole_chars(text_));
    if (text_.empty()) return;
    tokens_.resize(text_.size() + 2);
    const int32_t n = llama_tokenize(vocab_, text_.data(), (int32_t) text_.size(), tokens_.data(),
                                     (int32_t) tokens_.size(), /* add_special */ false, /* parse_special */ false);
    if (n <= 0) return;
    tokens_.resize((size_t) n);
    if (cut) tokens_.pop_back();
    // Whole tokens that spell the continuation from its start (a tokenizer
    // that adds a leading space would not), one per kBytesPerToken matched.
    size_t at = 0;
    for (const int32_t t : tokens_) {
        if ((int32_t) out.size() >= cap) break;
        read_token_piece(vocab_, t, piece_);
        if (piece_.empty() || text_.compare(at, piece_.size(), piece_) != 0) break;
        at += piece_.size();
        out.push_back(t);
    }
    if (!out.empty()) *match_bytes = match;
}

}  // namespace sa
