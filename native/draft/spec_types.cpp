#include "draft/spec_types.h"

#include <algorithm>
#include <iterator>

namespace sa {

namespace {

constexpr SpecTypeFacts kFacts[] = {
    // type                   draft ctx  full length  n_draft  rollback               non-causal block
    {SA_SPEC_NONE,            false,     false,       0,       Rollback::kCheckpoint, false},
    {SA_SPEC_DRAFT_SIMPLE,    true,      false,       3,       Rollback::kCheckpoint, false},
    {SA_SPEC_DRAFT_EAGLE3,    true,      true,        3,       Rollback::kSnapshots,  false},
    {SA_SPEC_DRAFT_MTP,       true,      true,        3,       Rollback::kSnapshots,  false},
    {SA_SPEC_DRAFT_DFLASH,    true,      true,        3,       Rollback::kSnapshots,  true},
    {SA_SPEC_NGRAM_SIMPLE,    false,     false,       8,       Rollback::kCheckpoint, false},
    {SA_SPEC_NGRAM_MAP_K,     false,     false,       8,       Rollback::kCheckpoint, false},
    {SA_SPEC_NGRAM_MAP_K4V,   false,     false,       8,       Rollback::kCheckpoint, false},
    {SA_SPEC_NGRAM_MOD,       false,     false,       8,       Rollback::kCheckpoint, false},
    {SA_SPEC_NGRAM_CACHE,     false,     false,       8,       Rollback::kCheckpoint, false},
    {SA_SPEC_AUTO,            false,     false,       32,      Rollback::kCheckpoint, false},
};
static_assert(std::size(kFacts) == SA_SPEC_AUTO + 1, "one row per sa_spec_type");

}  // namespace

const SpecTypeFacts & spec_facts(int32_t type) {
    return type >= SA_SPEC_NONE && type <= SA_SPEC_AUTO ? kFacts[type] : kFacts[SA_SPEC_NONE];
}

bool is_recurrent_target(const sa_model & model) {
    return llama_model_is_recurrent(model.model) || llama_model_is_hybrid(model.model);
}

int32_t min_ubatch(int32_t type, int32_t n_draft, const sa_model & target) {
    const SpecTypeFacts & f = spec_facts(type);
    int32_t need = 1;
    if (f.rollback == Rollback::kSnapshots && is_recurrent_target(target)) need = n_draft + 2;
    if (f.noncausal_block) need = std::max(need, n_draft + 1);
    return need;
}

}  // namespace sa
