// The C ABI of the library's own tables, which the Python side reads rather
// than repeats: the speculative types' names and facts, the drafters' names,
// the stats map's keys (see spec_actor.h).
#include "draft/spec_types.h"
#include "report/stats.h"
#include "session/session.h"

#include <string>
#include <vector>

using namespace sa;

extern "C" {

const char * sa_spec_type_name(int32_t type) {
    // llama.cpp returns std::string: keep one copy per type for the caller.
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (int32_t t = SA_SPEC_NONE; t <= SA_SPEC_NGRAM_CACHE; ++t) v.push_back(spec_type_name(t));
        v.emplace_back("auto");  // SA_SPEC_AUTO: ours, not llama.cpp's
        return v;
    }();
    return type >= SA_SPEC_NONE && type <= SA_SPEC_AUTO ? names[(size_t) type].c_str() : nullptr;
}

sa_status sa_spec_type_facts(int32_t type, sa_spec_facts * out) {
    if (out == nullptr || type < SA_SPEC_NONE || type > SA_SPEC_AUTO) {
        return fail(SA_ERR_INVALID_ARG, "sa_spec_type_facts: null argument or unknown type");
    }
    const SpecTypeFacts & f = spec_facts(type);
    *out = {f.draft_context, f.drafts_full_length, f.default_n_draft, f.rollback == Rollback::kSnapshots};
    return SA_OK;
}

const char * sa_drafter_name(int32_t drafter) {
    // built once: the names of the spec types that draft, and the memory
    static const std::vector<std::string> names = [] {
        std::vector<std::string> n(SA_N_DRAFTERS);
        for (int32_t d = SA_SPEC_NONE; d <= SA_SPEC_NGRAM_CACHE; ++d) n[(size_t) d] = spec_type_name(d);
        n[SA_DRAFTER_MEMORY] = "memory";
        n[SA_DRAFTER_TEXT] = "text";
        n[SA_DRAFTER_SPLICE] = "splice";
        return n;
    }();
    return drafter >= 0 && drafter < SA_N_DRAFTERS ? names[(size_t) drafter].c_str() : "";
}

const char * sa_stats_map_key(int32_t i) { return stats_map_key(i); }

}  // extern "C"
