// The prompt prefix kept between runs (docs/decisions/0035): which tokens'
// state the session's contexts hold, and, for memories that cannot drop the
// end of a sequence (recurrent and hybrid models), state checkpoints to
// resume from. One run at a time uses it (the thread running the loop);
// the settings and the usage counters are atomics, any thread.
#pragma once

#include "engine/checkpoint.h"
#include "abi/spec_actor.h"

#include "common.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

struct sa_session;

namespace sa {

class PrefixCache {
public:
    // Settings: the next run applies them.
    std::atomic<bool> enabled{true};
    std::atomic<int64_t> checkpoint_budget{SA_DEFAULT_CHECKPOINT_BYTES};
    llama_seq_id seq = 0;  // the sequence of the contexts it keeps (its engine slot's)

    // Run start: makes the contexts hold the longest prefix of prompt that
    // they can keep and the run may reuse, drops the rest (with forget or
    // when disabled: everything), and returns its length in tokens.
    // first: non-null when the run takes its first token from the prompt's
    // own decode (docs/decisions/0080); if the previous run's prompt was this
    // very prompt, the whole of it is kept and *first is the greedy token it
    // made after it (else -1).
    int32_t resume(sa_session & s, const int32_t * prompt, int32_t n_prompt, bool forget, llama_token * first = nullptr);

    // Saves the state after tokens [0, n_tokens) as a checkpoint, when the
    // session's contexts need them and the budget allows (oldest evicted first).
    void checkpoint(sa_session & s, int32_t n_tokens);

    // Run end: the contexts hold the state after tokens (a trimmable memory
    // drops what lies past them). live: a recurrent state is that after
    // tokens (false when a decode was cancelled midway: only checkpoints are
    // trusted then). save: also checkpoint that state. first_n, first: the
    // run's prompt was tokens' first first_n and its greedy first token came
    // from that prompt's own decode (first_n 0: it did not).
    void keep(sa_session & s, llama_tokens && tokens, bool live, bool save, int32_t first_n = 0,
              llama_token first = -1);

    // An error: the next run starts from empty contexts and no checkpoints.
    void drop(sa_session & s);

    // The tokens whose state the contexts hold for this slot between its
    // requests (null while a request runs on it, or when they are not known).
    const llama_tokens * held() const { return valid_ ? &tokens_ : nullptr; }

    // Someone else used the contexts (a test probe): clear them before the next run.
    void invalidate() { valid_ = false; }

    // Usage as of the last run's end (any thread).
    void usage(sa_prefix_usage * out) const;

private:
    struct Checkpoint {
        int32_t n_tokens = 0;  // the state after tokens [0, n_tokens)
        StateCheckpoint tgt, dft;
        size_t bytes() const { return tgt.bytes() + dft.bytes(); }
    };

    llama_tokens tokens_;
    bool valid_ = false;  // tokens_ describe the contexts (false: clear them first)
    bool live_ = false;   // a recurrent state is that after tokens_
    std::vector<Checkpoint> ckpts_;  // oldest first
    // The previous run's prompt length and the greedy token its own decode
    // made after it (0, -1: none): a repeat of that prompt takes both.
    int32_t first_n_ = 0;
    llama_token first_ = -1;

    std::atomic<int64_t> u_tokens_{0}, u_checkpoints_{0}, u_bytes_{0};
    std::atomic<int64_t> u_saves_{0}, u_save_us_{0}, u_restores_{0}, u_restore_us_{0};

    void reset(sa_session & s);
    int32_t restore(sa_session & s, int32_t n_max);
    bool trim(sa_session & s, int32_t n) const;
    void publish();

    template <typename Pred>
    void drop_checkpoints(Pred pred) {
        ckpts_.erase(std::remove_if(ckpts_.begin(), ckpts_.end(), pred), ckpts_.end());
    }
};

// Whether the session's contexts need state checkpoints to go back to an
// earlier prefix (a recurrent or hybrid target, or a recurrent draft context).
bool needs_checkpoints(const sa_session & s);

}  // namespace sa
