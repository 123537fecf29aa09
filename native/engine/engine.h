// The batched engine (docs/decisions/0050): one context, N sequences. Each
// slot is one sequence id of the session's context with what it keeps
// between the requests it runs; a request on a slot is a Sequence
// (generation.h). One step builds one batch from every running sequence
// (prompt chunks and [last, drafts...] under their own seq_id), decodes it
// once, and hands each sequence its outputs. A single-sequence session is the
// one-slot case of the same engine.
#pragma once

#include "engine/checkpoint.h"
#include "common.h"
#include "draft/drafter.h"
#include "engine/prefix_cache.h"
#include "report/stats.h"
#include "session/thread_budget.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

struct sa_session;

namespace sa {

class Sequence;

// One sequence id and what it keeps between requests: its statistics,
// prefix cache and drafter, alike in every slot.
struct Slot {
    llama_seq_id seq = 0;
    std::unique_ptr<Stats> stats;
    std::unique_ptr<PrefixCache> prefix;
    std::unique_ptr<Drafter> drafter;     // null: plain decoding
    common_speculative * spec = nullptr;  // what its drafter drafts with: the session's (slot 0's, or every
                                          // slot's where a draft context serves every sequence), or own_spec
    std::atomic<bool> cancel{false};   // sa_session_cancel_seq (every slot also honours the session's flag)
    std::atomic<bool> forget{false};   // drop the kept prefix when the next request starts
    std::atomic<int32_t> pauses{0};    // > 0: its reader is behind; the steps skip it
    // Positions its sequence holds in the target's memory (its cells of the
    // full attention cache), published by the thread that ran the last step
    // it took part in; 0 once forget() drops its kept prefix (any thread reads).
    std::atomic<int32_t> cells{0};
    bool busy = false;                 // under Engine::mu: a request runs on it
    RollbackCost rollback_cost;        // its checkpoints' measured cost (the thread running a step)
    RollbackPoint rollback;            // the rollback point of the request running on it
    common_speculative * own_spec = nullptr;  // the slot's own common_speculative (an n-gram type's tables are per sequence)

    Slot() = default;
    Slot(const Slot &) = delete;
    Slot & operator=(const Slot &) = delete;
    ~Slot();
};

// The step loop's shared state. The threads whose requests run take turns
// to run steps (whoever holds `stepping` runs one for every sequence), so no
// thread of the engine's own exists and each caller returns when its request
// has ended.
struct Engine {
    std::vector<std::unique_ptr<Slot>> slots;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Sequence *> active;  // under mu: admitted, not yet ended
    bool stepping = false;           // under mu: a thread is running a step
    uint64_t epoch = 0;              // under mu: steps started (each reads `active` as it was then)
    // Admissions and starts of decoding, numbered in the order they happened
    // (cuts_prompts: which came first, also within one step).
    std::atomic<uint64_t> order{0};
    // Below: only the thread running a step touches them.
    common_batch batch;
    std::optional<ThreadShare> threads;  // the CPU share while sequences run (docs/decisions/0027)
    std::atomic<int32_t> sole{-1};       // the slot alone in the decode under way: its cancel aborts it
    std::atomic<uint64_t> steps{0};      // decodes run (sa_session_steps)
    double us_per_token = 0;             // a large decode's time per token, measured (0: not yet)

    // Wakes the callers waiting for a step (a resume, a cancel, a new request).
    void wake() {
        std::lock_guard<std::mutex> lock(mu);
        cv.notify_all();
    }
};

// Makes the session's slots, each with its stats, prefix cache and drafter,
// and the step batch; at the end of create_session.
sa_status create_engine(sa_session & s, int32_t n_seq);

// Runs fn as the engine's step when no request runs (one that starts
// meanwhile waits for it), at the thread counts a step would get now;
// false, without calling it, while a request runs.
bool run_while_idle(sa_session & s, const std::function<void()> & fn);

// Runs one request on slot seq with validated parameters; takes ownership of
// smpl. The calling thread takes turns with the other slots' callers in
// running steps and returns when its request has ended: SA_OK once a
// terminal event was delivered, SA_CANCELLED or SA_STOPPED otherwise.
sa_status run_on_slot(sa_session & s, int32_t seq, const sa_run_params & p, common_sampler * smpl, int32_t n_logprobs,
                      sa_event_cb cb, void * user);

}  // namespace sa
