// Checks of GBNF text that llama.cpp's grammar parser does not make and that
// it cannot survive: run before any grammar reaches llama_sampler_init_grammar.
//
// llama.cpp expands S{m,n} into n - m optional copies of S with an unsigned
// count, so {5,2} loops ~2^64 times (a hang that no cancel flag can stop:
// issue 11). This scanner follows the parser's lexical rules (comments,
// string literals, character classes and token references, with their
// escapes) so that braces inside them are not mistaken for repetitions.
//
// It also bounds what llama.cpp cannot bound itself: the parser recurses once
// per ( ) nesting level, so "(" * 20000 overflows the stack (issue 23), and
// the grammar's cost per generated token grows with its alternatives. The
// limits come from the caller (sa_grammar_limits); the depth never exceeds
// SA_GRAMMAR_DEPTH_CEILING, whatever they say.
#include "model/text.h"
#include "support/shim_internal.h"

#include <cstdint>
#include <string>

using namespace sa;

namespace {

struct Scanner {
    const char * text;
    const char * pos;
    sa_grammar_limits limits;
    int32_t depth = 0;
    int32_t rules = 0;
    int32_t alternatives = 0;

    std::string where(const char * at) const {
        int line = 1, col = 1;
        for (const char * p = text; p < at; ++p) {
            if (*p == '\n') ++line, col = 1; else ++col;
        }
        return "line " + std::to_string(line) + ", column " + std::to_string(col);
    }

    // Skips a quoted run ("...", [...], <...>) that starts at pos; false if unterminated.
    bool skip_quoted(char close) {
        for (++pos; *pos != close; ++pos) {
            if (*pos == '\0') return false;
            if (*pos == '\\' && pos[1] != '\0') ++pos;
        }
        ++pos;
        return true;
    }

    void skip_space() {
        while (*pos == ' ' || *pos == '\t' || *pos == '\r' || *pos == '\n') ++pos;
    }

    // Reads decimal digits at pos, saturating (the parser rejects huge counts itself).
    bool read_count(uint64_t & out) {
        if (*pos < '0' || *pos > '9') return false;
        out = 0;
        for (; *pos >= '0' && *pos <= '9'; ++pos) {
            out = out > (UINT64_MAX - 9) / 10 ? UINT64_MAX : out * 10 + (uint64_t) (*pos - '0');
        }
        return true;
    }

    // At a '{': rejects {m,n} with m > n; anything else is left to the parser.
    sa_status check_repetition() {
        const char * start = pos;
        ++pos;
        skip_space();
        uint64_t lo = 0, hi = 0;
        if (!read_count(lo)) return SA_OK;
        if (lo > (uint64_t) limits.max_repetition) return too_many_repeats(start, lo);
        skip_space();
        if (*pos != ',') return SA_OK;
        ++pos;
        skip_space();
        if (!read_count(hi)) return SA_OK;  // {m,}: no maximum
        if (hi > (uint64_t) limits.max_repetition) return too_many_repeats(start, hi);
        skip_space();
        if (*pos == '}' && lo > hi) {
            return fail(SA_ERR_GRAMMAR, "invalid GBNF grammar: the repetition " + std::string(start, pos + 1) +
                        " at " + where(start) + " has a minimum larger than its maximum; write {" +
                        std::to_string(hi) + "," + std::to_string(lo) + "} or {" + std::to_string(lo) + "}");
        }
        return SA_OK;
    }

    sa_status too_many_repeats(const char * at, uint64_t count) {
        return fail(SA_ERR_GRAMMAR, "the repetition count " + std::to_string(count) + " at " +
                    where(at) + " exceeds the limit of " + std::to_string(limits.max_repetition) +
                    " (max_repetition); use * or + for an unbounded repeat");
    }

    sa_status over(const char * at, const char * what, int32_t limit, const char * setting) {
        return fail(SA_ERR_GRAMMAR, std::string("more than ") + std::to_string(limit) + " " +
                    what + " at " + where(at) + " (" + setting + "); simplify the grammar or raise " + setting);
    }

    sa_status run() {
        while (*pos != '\0') {
            const char * start = pos;
            switch (*pos) {
                case '(':
                    if (++depth > limits.max_depth) return over(start, "nested groups", limits.max_depth, "max_depth");
                    ++pos;
                    break;
                case ')':
                    if (depth > 0) --depth;  // an unbalanced one is the parser's error to report
                    ++pos;
                    break;
                case '|':
                    if (++alternatives > limits.max_alternatives) {
                        return over(start, "alternatives (|)", limits.max_alternatives, "max_alternatives");
                    }
                    ++pos;
                    break;
                case ':':
                    if (pos[1] == ':' && pos[2] == '=') {
                        if (++rules > limits.max_rules) return over(start, "rules", limits.max_rules, "max_rules");
                        pos += 3;
                    } else {
                        ++pos;
                    }
                    break;
                case '#':
                    while (*pos != '\0' && *pos != '\n' && *pos != '\r') ++pos;
                    break;
                case '"': case '[': case '<':
                    if (!skip_quoted(*pos == '"' ? '"' : *pos == '[' ? ']' : '>')) {
                        return fail(SA_ERR_GRAMMAR, std::string("invalid GBNF grammar: the ") +
                                    (*start == '"' ? "string literal" : *start == '[' ? "character class" : "token reference") +
                                    " opened at " + where(start) + " is never closed");
                    }
                    break;
                case '{': {
                    sa_status st = check_repetition();
                    if (st != SA_OK) return st;
                    pos = start + 1;
                    break;
                }
                default:
                    ++pos;
            }
        }
        return SA_OK;
    }
};

}  // namespace

sa_status sa::check_grammar(const char * grammar, const sa_grammar_limits & bounds) {
    return guarded("checking the grammar", [&] { return Scanner{grammar, grammar, bounds}.run(); });
}
