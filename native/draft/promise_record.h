// What auto's cheap drafts delivered of what they promised, by draft length
// (docs/decisions/0117).
//
// An arm's acceptance per position (adaptive.h) takes positions as
// independent and trusts a position twice as deep as any it has seen
// accepted. On text that runs in streaks, a match that held for a dozen
// tokens and then ends looks to it like one that goes on, and the chooser
// picks exactly the drafts it is most wrong about: a long one, verified at
// a step cost that grows with its length, which breaks off early. A record
// compares the accepted tokens each verified draft was expected to bring
// (untempered) with those it brought, per band of lengths, and later drafts'
// expected gains in that band are scaled by the ratio (at most 1).
//
// The record is pooled over auto's cheap arms, which all learn acceptance
// from the same verified tokens: one arm's long drafts that broke off warn
// the others before their first. auto tempers only lengths whose tokens each
// cost kCostlyToken of a plain step or more to verify (auto_drafter.cpp):
// where verifying is cheap, as on attention models, a draft that breaks off
// costs little and a long one that holds is worth the gamble.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace sa {

class PromiseRecord {
public:
    // The factor of drafts of n tokens: what their band delivered of what it
    // promised, behind a pseudo-draft of kPseudoTokens that kept its promise;
    // at most 1.
    double factor(int32_t n) const;
    // Every band delivered what it promised (every factor is 1).
    bool kept() const;
    // A draft of n tokens was verified: promise, the accepted tokens its
    // untempered expected tokens promised; accepted, those the target took.
    void settle(int32_t n, double promise, int32_t accepted);

    static constexpr double kPseudoTokens = 2.0;

private:
    static constexpr size_t kBands = 5;  // 1-2, 3-4, 5-8, 9-16, 17 and more tokens
    static size_t band(int32_t n);
    std::array<double, kBands> promised_{}, delivered_{};
};

}  // namespace sa
