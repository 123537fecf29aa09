// Generation statistics: one writer (the thread running the loop), any number
// of readers on any thread, no lock. Updates are grouped into write sections
// under a sequence counter (a seqlock), so a reader always copies a
// consistent snapshot: never accepted > drafted, never per-position counts
// that disagree with the totals.
#pragma once

#include "abi/spec_actor.h"
#include "report/msgpack_writer.h"

#include <atomic>
#include <cstdint>
#include <type_traits>

namespace sa {

using PerPos = uint64_t[SA_MAX_DRAFT_POS];
using PerDrafter = uint64_t[SA_N_DRAFTERS];

// The counters of sa_stats, as X(type, name): the one list that declares,
// resets and copies them.
#define SA_STATS_COUNTERS(X)                                                                    \
    X(uint64_t, iters) X(uint64_t, drafts_generated) X(uint64_t, drafts_accepted)               \
    X(uint64_t, tokens_emitted) X(uint64_t, prompt_tokens) X(uint64_t, requests)                \
    X(uint64_t, prompt_reused) X(uint64_t, prompt_prefilled)                                    \
    X(int64_t, t_prefill_us) X(int64_t, t_draft_us) X(int64_t, t_verify_us)                     \
    X(int64_t, t_sample_us) X(int64_t, t_total_us) X(int64_t, t_decode_us) X(int64_t, ttft_us)

// The arrays of sa_stats, as X(type, name): per draft position (cut to n_pos
// in the stats map) and per drafter id (sa_drafter; id 0 counts plain steps).
#define SA_STATS_ARRAYS(X)                                                                      \
    X(PerPos, accepted_per_pos) X(PerPos, drafted_per_pos)                                      \
    X(PerDrafter, drafter_steps) X(PerDrafter, drafter_drafted) X(PerDrafter, drafter_accepted)

// The stats map of the event schema (spec_actor.h), in the order written:
// every sa_stats field but n_pos and running. sa_stats_map_key lists it.
#define SA_STATS_MAP_FIELDS(X)                                                                  \
    SA_STATS_COUNTERS(X) X(int32_t, n_draft) X(double, tokens_per_sec) X(double, acceptance_rate) \
    X(int32_t, drafter) SA_STATS_ARRAYS(X)

struct Counters {
#define SA_DECLARE_COUNTER(type, name) std::atomic<type> name{0};
    SA_STATS_COUNTERS(SA_DECLARE_COUNTER)
#undef SA_DECLARE_COUNTER
#define SA_DECLARE_ARRAY(type, name) std::atomic<uint64_t> name[std::extent_v<type>] = {};
    SA_STATS_ARRAYS(SA_DECLARE_ARRAY)
#undef SA_DECLARE_ARRAY

    void reset();
    void read(sa_stats * out) const;
};

// Cumulative (per session) and per-run counters, updated together.
class Stats {
public:
    Counters total;
    Counters last;

    template <typename T>
    void add(std::atomic<T> Counters::*field, T v) {
        begin_write();
        bump(total.*field, v);
        bump(last.*field, v);
        end_write();
    }

    // Draft length in use (the current one under adaptive drafting).
    void set_n_draft(int32_t n);

    // Record one verification step: the drafter (sa_drafter id; SA_SPEC_NONE
    // for a plain step), draft length and accepted count.
    void add_step(int32_t drafter, int32_t n_drafted, int32_t n_accepted);

    // Start of a run: clears `last`, remembers the cumulative bases; of the
    // n_prompt tokens, n_reused come from the prefix cache.
    void begin_run(int64_t now_us, uint64_t n_prompt, uint64_t n_reused);
    // n more prompt tokens of the run came from another sequence's cells.
    void share_prompt(uint64_t n);
    void set_ttft(int64_t us);
    // Live wall-clock timings, called every loop step and at the end.
    void set_elapsed(int64_t now_us, int64_t decode_start_us);
    void end_run();

    // A consistent snapshot (which: 0 cumulative, 1 the last run); any thread.
    void read(int32_t which, sa_stats * out) const;

    // Changes with every update: a reader that saw the same version twice
    // may reuse what it read the first time. Odd while an update is under way.
    uint64_t version() const { return seq_.load(std::memory_order_acquire); }

private:
    std::atomic<uint64_t> seq_{0};  // odd inside a write section
    std::atomic<int32_t> running_{0};
    std::atomic<int32_t> n_draft_{0};
    std::atomic<int32_t> drafter_{0};  // sa_drafter id of the latest step

    int64_t run_start_us_ = 0;
    int64_t base_total_us_ = 0;
    int64_t base_decode_us_ = 0;

    void begin_write();
    void end_write();

    template <typename T>
    static void bump(std::atomic<T> & a, T v) {
        a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
    }
};

// Writes the stats map of the event schema (see spec_actor.h).
void write_stats_map(MsgpackWriter & w, const sa_stats & s);

// The stats map's i-th key (sa_stats_map_key), or null past the last.
const char * stats_map_key(int32_t i);

}  // namespace sa
