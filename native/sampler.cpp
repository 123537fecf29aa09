#include "sampler.h"

#include <string>

namespace sa {

common_sampler * make_sampler(const sa_model & m, const sa_sampling_params & sp, sa_status * st,
                              const std::string & prefill, const std::vector<common_grammar_trigger> * triggers) {
    common_params_sampling p;
    p.temp = sp.temp;
    p.top_k = sp.top_k;
    p.top_p = sp.top_p;
    p.min_p = sp.min_p;
    p.seed = sp.seed;
    p.penalty_last_n = sp.penalty_last_n;
    p.penalty_repeat = sp.penalty_repeat;
    p.penalty_freq = sp.penalty_freq;
    p.penalty_present = sp.penalty_present;
    p.no_perf = false;
    const bool has_grammar = sp.grammar != nullptr && sp.grammar[0] != '\0';
    if (has_grammar && (*st = sa_grammar_check(sp.grammar, nullptr)) != SA_OK) return nullptr;
    if (has_grammar) {
        std::string text = sp.grammar;
        const std::string root = sp.grammar_root && sp.grammar_root[0] ? sp.grammar_root : "root";
        if (root != "root") text = "root ::= " + root + "\n" + text;  // common_sampler always starts at "root"
        const bool tool_calls = !prefill.empty() || triggers != nullptr;
        p.grammar = common_grammar(tool_calls ? COMMON_GRAMMAR_TYPE_TOOL_CALLS : COMMON_GRAMMAR_TYPE_USER, text);
        p.generation_prompt = prefill;
        if (triggers != nullptr) {
            p.grammar_lazy = true;
            p.grammar_triggers = *triggers;
        }
    }
    const sa_status bad = has_grammar ? SA_ERR_GRAMMAR : SA_ERR_INVALID_ARG;
    try {
        common_sampler * smpl = common_sampler_init(m.model, p);
        if (smpl == nullptr) *st = fail(bad, "could not create the sampler");
        return smpl;
    } catch (const std::exception & e) {
        const std::string detail = last_native_log_error();
        *st = fail(bad, std::string(has_grammar ? "invalid GBNF grammar: " : "invalid sampling parameters: ") + e.what() +
                   (detail.empty() ? "" : " (" + detail + ")"));
        return nullptr;
    }
}

}  // namespace sa
