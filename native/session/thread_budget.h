// The process-wide compute-thread budget (docs/decisions/0027): sessions
// whose thread counts were not given explicitly share the CPUs available to
// the process while they generate, so concurrent sessions do not run more
// spinning ggml compute threads than there are cores.
#pragma once

#include <cstdint>

struct llama_context;

namespace sa {

// A session's thread settings: the pool sizes it was created with and
// whether they are the default (then the budget may lower them per run).
struct ThreadLimits {
    bool budgeted = false;        // n_threads was not given: share the CPUs
    int32_t n_threads = 1;        // decode pool size (the most a run uses)
    int32_t n_threads_batch = 1;  // prompt-batch pool size
};

// CPUs this process may run on (its affinity mask, else the hardware count).
int32_t available_cpus();

// One run's claim on the budget, held for the run's lifetime. refresh()
// (cheap: one atomic load when nothing changed) sets the contexts' thread
// counts to this run's current share; call it before each decode.
class ThreadShare {
public:
    ThreadShare(const ThreadLimits & limits, llama_context * ctx_tgt, llama_context * ctx_dft);
    ~ThreadShare();
    ThreadShare(const ThreadShare &) = delete;
    ThreadShare & operator=(const ThreadShare &) = delete;

    void refresh();

private:
    const ThreadLimits limits_;
    llama_context * const ctx_tgt_;
    llama_context * const ctx_dft_;
    uint64_t seen_ = 0;  // the budget generation last applied (0: none yet)
};

}  // namespace sa
