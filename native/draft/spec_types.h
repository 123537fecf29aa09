// One row of facts per speculative type: what the session setup, the checks
// and the drafting loop need to know about a type, in one place. A new
// drafter is a new row here and its class; nothing else asks which type it is.
#pragma once

#include "support/shim_internal.h"

#include <cstdint>

namespace sa {

// What a rejected draft needs on a recurrent or hybrid target.
enum class Rollback {
    kCheckpoint,  // the loop saves the state before a long draft and restores it
    kSnapshots,   // llama.cpp keeps n_draft recurrent snapshots (n_rs_seq) and trims from them
};

struct SpecTypeFacts {
    int32_t type;             // sa_spec_type
    bool draft_context;       // drafts with a second context (a draft model, EAGLE-3, MTP, DFlash)
    bool drafts_full_length;  // every draft has its full n_draft tokens (the model drafters)
    int32_t default_n_draft;  // when the caller gives none
    Rollback rollback;
    bool noncausal_block;     // the drafter decodes its n_draft + 1 block at once, non-causally (DFlash)
};

// The row of type (SA_SPEC_NONE's for an unknown type).
const SpecTypeFacts & spec_facts(int32_t type);

// Whether the type drafts with a second context.
inline bool uses_draft_context(int32_t type) { return spec_facts(type).draft_context; }

// Whether the type needs llama.cpp's rollback snapshots (n_rs_seq) on the target.
inline bool needs_rollback_snapshots(int32_t type) { return spec_facts(type).rollback == Rollback::kSnapshots; }

// Whether the model keeps a recurrent state (recurrent or hybrid).
bool is_recurrent_target(const sa_model & model);

// The smallest n_ubatch that a type drafting n_draft tokens works with on
// target (llama.cpp asserts it): a recurrent target rolling back from
// snapshots needs the verify batch's last n_draft + 1 tokens in one
// micro-batch, a non-causal draft block all its n_draft + 1 tokens.
int32_t min_ubatch(int32_t type, int32_t n_draft, const sa_model & target);

}  // namespace sa
