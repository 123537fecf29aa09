#include "session/thread_budget.h"

#include "llama.h"

#include <algorithm>
#include <atomic>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace sa {

namespace {

// Running sessions: how many are budgeted, and the threads the explicit ones
// use. Every change bumps g_generation (starting at 1, so 0 means "never
// applied") and the runs re-read their share at their next decode.
std::atomic<int32_t> g_budgeted{0};
std::atomic<int32_t> g_explicit_threads{0};
std::atomic<uint64_t> g_generation{1};

}  // namespace

int32_t available_cpus() {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    return (int32_t) std::max(1u, std::thread::hardware_concurrency());
}

ThreadShare::ThreadShare(const ThreadLimits & limits, llama_context * ctx_tgt, llama_context * ctx_dft)
    : limits_(limits), ctx_tgt_(ctx_tgt), ctx_dft_(ctx_dft) {
    if (limits_.budgeted) g_budgeted.fetch_add(1);
    else g_explicit_threads.fetch_add(limits_.n_threads);
    g_generation.fetch_add(1);
}

ThreadShare::~ThreadShare() {
    if (limits_.budgeted) g_budgeted.fetch_sub(1);
    else g_explicit_threads.fetch_sub(limits_.n_threads);
    g_generation.fetch_add(1);
}

void ThreadShare::refresh() {
    if (!limits_.budgeted) return;
    const uint64_t gen = g_generation.load(std::memory_order_acquire);
    if (gen == seen_) return;
    seen_ = gen;
    const int32_t k = std::max(1, g_budgeted.load());
    const int32_t free_cpus = available_cpus() - g_explicit_threads.load();
    const int32_t share = std::max(1, free_cpus / k);
    const int32_t n = std::min(share, limits_.n_threads);
    const int32_t n_batch = std::min(share, limits_.n_threads_batch);
    for (llama_context * ctx : {ctx_tgt_, ctx_dft_}) {
        if (ctx) llama_set_n_threads(ctx, n, n_batch);
    }
}

}  // namespace sa
