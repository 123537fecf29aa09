// What auto's cheap drafts delivered of what they promised, by draft length
// (docs/decisions/0117).
//
// An arm's acceptance per position (adaptive.h) takes positions as
// independent and trusts a position twice as deep as any it has seen
// accepted. On text that runs in streaks, a match that held for a dozen
// tokens and then ends looks to it like one that goes on, and the chooser
// picks exactly the drafts it is most wrong about: a long one, verified at
// a step cost that grows with its length, which breaks off early. The
// record compares the accepted tokens each verified cheap draft was expected
// to bring (untempered) with those it brought, pooled over the arms (they
// all learn from the same verified tokens) and kept per band of lengths, and
// scales later drafts' expected gains in that band by the ratio (at most 1).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sa {

class PromiseRecord {
public:
    // Nothing recorded: every band keeps its promises.
    void reset();
    // expected (expected tokens by draft length, expected[0] = 1) with the
    // gain past the sampled token scaled at each length by its band's factor.
    void temper(std::vector<double> & expected) const;
    // A draft of n tokens was verified: tempered, the expected tokens it was
    // chosen at (after temper); accepted, the drafted tokens the target took.
    void settle(int32_t n, double tempered, int32_t accepted);
    // The factor of drafts of n tokens: what their band delivered of what it promised, at most 1.
    double factor(int32_t n) const;

private:
    static constexpr size_t kBands = 5;  // 1-2, 3-4, 5-8, 9-16, 17 and more tokens
    static size_t band(int32_t n);
    std::array<double, kBands> promised_{}, delivered_{};
};

}  // namespace sa
