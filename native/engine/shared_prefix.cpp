#include "engine/shared_prefix.h"
#include "engine/engine.h"
#include "engine/generation.h"
#include "engine/prefix_cache.h"
#include "session/session.h"
#include "support/tokens.h"

namespace sa {

namespace {

// The tokens whose state slot's cells hold: its running sequence's, or the
// prefix the slot kept from its last request (null: none it vouches for).
const llama_tokens * held_by(const Slot & slot, const std::vector<Sequence *> & peers) {
    for (const Sequence * q : peers) {
        if (&q->slot() == &slot && q->started() && !q->ended()) return &q->held();
    }
    if (slot.forget.load()) return nullptr;  // its owner asked to drop them
    return slot.prefix->held();
}

}  // namespace

bool can_share_prefixes(const sa_session & s) {
    return s.n_seq > 1 && s.ctx_dft == nullptr && !needs_checkpoints(s);
}

int32_t take_shared_prefix(sa_session & s, const Sequence & self, const std::vector<Sequence *> & peers,
                           const int32_t * want, int32_t n_have, int32_t n_max) {
    if (n_have >= n_max) return 0;
    llama_memory_t mem = llama_get_memory(s.ctx_tgt);
    const Slot * best = nullptr;
    int32_t n_best = n_have;
    for (const auto & slot : s.engine->slots) {
        if (slot.get() == &self.slot()) continue;
        const llama_tokens * held = held_by(*slot, peers);
        if (held == nullptr || (int32_t) held->size() <= n_best) continue;
        const int32_t n = common_prefix(held->data(), held->size(), want, (size_t) n_max);
        // all of its cells from position 0 are there (a sliding window may have let some go)
        if (n > n_best && llama_memory_seq_pos_min(mem, slot->seq) == 0) {
            best = slot.get();
            n_best = n;
        }
    }
    if (best == nullptr) return 0;
    const llama_seq_id seq = self.slot().seq;
    llama_memory_seq_cp(mem, best->seq, seq, n_have, n_best);
    if (llama_memory_seq_pos_max(mem, seq) != n_best - 1) {
        llama_memory_seq_rm(mem, seq, n_have, -1);
        return 0;
    }
    return n_best - n_have;
}

bool waits_for_shared_prefill(const Sequence & self, const std::vector<Sequence *> & peers, const int32_t * want,
                              int32_t n_have, int32_t n_max) {
    for (const Sequence * q : peers) {
        if (q == &self || !q->prefilling() || !q->runnable()) continue;
        const int32_t n_common = common_prefix(q->prefill_tokens(), (size_t) q->n_prefill(), want, (size_t) n_max);
        if (n_common <= n_have) continue;
        const int32_t reach = q->reach();
        if (reach > n_have || (reach == n_have && q->slot().seq < self.slot().seq)) return true;
    }
    return false;
}

}  // namespace sa
