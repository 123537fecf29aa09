// Faults that the testing ABI (abi/spec_actor_testing.h) arms on a session
// (and the step profile that benchmarks ask of it),
// kept apart from the session's own state: a session holds them only once a
// test armed one (sa_session::test_hooks, null until then), and a run looks
// for them once, when it starts (Sequence's constructor). A run that none
// was armed for reads nothing of them on its steps (docs/decisions/0099).
#pragma once

#include "session/step_profile.h"

#include <atomic>
#include <cstdint>

namespace sa {

struct TestHooks {
    // sa_testing_fail_decode: the n-th target decode from now ends its runs with an Error (0: none).
    std::atomic<int32_t> fail_decode_at{0};
    // sa_testing_refuse_next_seq_rm: the next llama_memory_seq_rm of a run is refused.
    std::atomic<bool> refuse_next_seq_rm{false};
    // sa_testing_profile_steps: each verified step's time by part, from the runs that start with it on.
    StepProfileSink profile;

    // Whether this decode is the one to fail (counts the decodes down).
    bool take_decode_failure() { return fail_decode_at.load() > 0 && fail_decode_at.fetch_sub(1) == 1; }
    // Whether this llama_memory_seq_rm is the one to refuse (once).
    bool take_seq_rm_refusal() { return refuse_next_seq_rm.exchange(false); }
};

}  // namespace sa
