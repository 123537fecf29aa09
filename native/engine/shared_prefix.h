// Prompt prefixes shared across the sequences of one engine (issue 21): a
// prompt that starts with tokens another slot's cells already hold (a
// running sequence, or an idle slot's kept prefix) takes them by copy
// (llama_memory_seq_cp: in the unified cache, the cells gain a sequence id)
// instead of prefilling them, and a prompt that another sequence is
// prefilling right now waits for it rather than computing the same tokens
// twice. A token's state depends only on the tokens before it, so a copy
// holds nothing that the prompt itself does not say.
#pragma once

#include "common.h"

#include <vector>

struct sa_session;

namespace sa {

class Sequence;

// Whether the session's sequences can share prompt cells: several slots, a
// memory that can drop a sequence's tail (no recurrent state), no draft
// context.
bool can_share_prefixes(const sa_session & s);

// Where can_share_prefixes(s): copies into self's sequence the longest run of want[n_have, n_max) that
// another slot holds after the same tokens [0, n_have); returns how many
// tokens it copied (0: none, or the copy was refused and undone).
int32_t take_shared_prefix(sa_session & s, const Sequence & self, const std::vector<Sequence *> & peers,
                           const int32_t * want, int32_t n_have, int32_t n_max);

// Whether another sequence is prefilling want[n_have, ...) this step or is
// ahead of self in doing so (ties go to the lower sequence id), so self
// should wait and copy it afterwards.
bool waits_for_shared_prefill(const Sequence & self, const std::vector<Sequence *> & peers, const int32_t * want,
                              int32_t n_have, int32_t n_max);

}  // namespace sa
