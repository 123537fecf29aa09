// Lock-free generation statistics: relaxed atomics with a single writer (the
// thread running the loop) and any number of readers on any thread.
#pragma once

#include "spec_actor.h"
#include "msgpack_writer.h"

#include <atomic>
#include <cstdint>

namespace sa {

struct Counters {
    std::atomic<uint64_t> iters{0}, drafts_generated{0}, drafts_accepted{0}, tokens_emitted{0};
    std::atomic<uint64_t> prompt_tokens{0}, requests{0};
    std::atomic<int64_t> t_prefill_us{0}, t_draft_us{0}, t_verify_us{0}, t_sample_us{0};
    std::atomic<int64_t> t_total_us{0}, t_decode_us{0}, ttft_us{0};
    std::atomic<uint64_t> accepted_per_pos[SA_MAX_DRAFT_POS] = {};
    std::atomic<uint64_t> drafted_per_pos[SA_MAX_DRAFT_POS] = {};
    std::atomic<uint64_t> drafter_steps[SA_N_DRAFTERS] = {};
    std::atomic<uint64_t> drafter_drafted[SA_N_DRAFTERS] = {};
    std::atomic<uint64_t> drafter_accepted[SA_N_DRAFTERS] = {};

    void reset();
    void read(sa_stats * out) const;
};

// Cumulative (per session) and per-run counters, updated together.
class Stats {
public:
    Counters total;
    Counters last;
    std::atomic<int32_t> running{0};
    std::atomic<int32_t> n_draft{0};
    std::atomic<int32_t> drafter{0};

    template <typename T>
    void add(std::atomic<T> Counters::*field, T v) {
        bump(total.*field, v);
        bump(last.*field, v);
        touched();
    }

    // Draft length in use (the current one under adaptive drafting).
    void set_n_draft(int32_t n);

    // Record one verification step: the drafter (sa_drafter id; SA_SPEC_NONE
    // for a plain step), draft length and accepted count.
    void add_step(int32_t drafter, int32_t n_drafted, int32_t n_accepted);

    // Start of a run: clears `last`, remembers the cumulative bases.
    void begin_run(int64_t now_us, uint64_t n_prompt);
    void set_ttft(int64_t us);
    // Live wall-clock timings, called every loop step and at the end.
    void set_elapsed(int64_t now_us, int64_t decode_start_us);
    void end_run();

    void read(int32_t which, sa_stats * out) const;

    // Changes with every update: a reader that saw the same version twice
    // may reuse what it read the first time. Read it before the counters.
    uint64_t version() const { return version_.load(std::memory_order_acquire); }

private:
    std::atomic<uint64_t> version_{0};

    int64_t run_start_us_ = 0;
    int64_t base_total_us_ = 0;
    int64_t base_decode_us_ = 0;

    // Publish the updates made so far (release: a reader that sees the new
    // version also sees them).
    void touched() { version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

    template <typename T>
    static void bump(std::atomic<T> & a, T v) {
        a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
    }
};

// Writes the stats map of the event schema (see spec_actor.h).
void write_stats_map(MsgpackWriter & w, const sa_stats & s);

}  // namespace sa
