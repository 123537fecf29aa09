// Decision 0092: common_speculative_forget drops what an ngram-mod drafter
// learned from earlier sequences in place, so that it drafts exactly what a
// new one drafts; a drafter with no way to forget says so (false).
//
// Run: speculative_forget_check. Prints one line per case:
//   case <name> forgot <0|1> draft <n> new_draft <n> equal <0|1>
#include "common.h"
#include "speculative.h"

#include <cstdio>

namespace {

common_speculative * make(common_speculative_type type) {
    common_params_speculative p;
    p.types = {type};
    p.ngram_mod.n_match = 4;
    p.ngram_mod.n_min = 1;
    p.ngram_mod.n_max = 8;
    return common_speculative_init(p, 1);
}

llama_tokens draft(common_speculative * spec, const llama_tokens & context, llama_token last) {
    llama_tokens out;
    common_speculative_get_draft_params(spec, 0) = {true, 8, (llama_pos) context.size(), last, &context, &out};
    common_speculative_draft(spec);
    return out;
}

// tokens 100.. (distinct) after `start` tokens of 10..49 repeated: a context
// whose last n-grams an earlier sequence taught, but this one never saw
llama_tokens sequence(int first, int n) {
    llama_tokens t;
    for (int i = 0; i < n; ++i) t.push_back(first + i % 40);
    return t;
}

void check(const char * name, common_speculative_type type) {
    common_speculative * used = make(type);
    common_speculative * fresh = make(type);
    const llama_tokens taught = sequence(10, 120);  // 10..49 three times
    common_speculative_begin(used, 0, taught);
    // the new request: distinct tokens, then four of the taught ones
    llama_tokens context;
    for (int i = 0; i < 60; ++i) context.push_back(1000 + i);
    for (int i = 0; i < 3; ++i) context.push_back(10 + i);
    const llama_token last = 13;
    const size_t before = draft(used, context, last).size();
    const bool forgot = common_speculative_forget(used);
    common_speculative_begin(used, 0, context);
    common_speculative_begin(fresh, 0, context);
    const llama_tokens after = draft(used, context, last);
    const llama_tokens anew = draft(fresh, context, last);
    std::printf("case %s learned %zu forgot %d draft %zu new_draft %zu equal %d\n", name, before, forgot ? 1 : 0,
                after.size(), anew.size(), after == anew ? 1 : 0);
    common_speculative_free(used);
    common_speculative_free(fresh);
}

}  // namespace

int main() {
    check("ngram-mod", COMMON_SPECULATIVE_TYPE_NGRAM_MOD);
    check("ngram-simple", COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE);
    return 0;
}
