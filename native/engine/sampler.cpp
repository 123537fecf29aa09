#include "engine/sampler.h"
#include "engine/vec_argmax.h"

#include <algorithm>
#include <string>
#include <utility>

namespace sa {

common_sampler * make_sampler(const sa_model & m, const sa_sampling_params & sp, sa_status * st,
                              const std::string & prefill) {
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
    for (int32_t i = 0; i < sp.n_logit_bias; ++i) p.logit_bias.push_back({sp.logit_bias_tokens[i], sp.logit_bias_values[i]});
    const bool has_grammar = sp.grammar != nullptr && sp.grammar[0] != '\0';
    if (has_grammar && (*st = sa_grammar_check(sp.grammar, nullptr)) != SA_OK) return nullptr;
    const bool lazy = has_grammar && sp.grammar_triggers != nullptr && sp.grammar_triggers[0] != '\0';
    std::vector<common_grammar_trigger> triggers;
    if (lazy) {
        try {
            triggers = grammar_triggers_from_json(m.model, sp.grammar_triggers);
        } catch (const std::exception & e) {
            *st = fail(SA_ERR_INVALID_ARG, std::string("invalid grammar triggers: ") + e.what());
            return nullptr;
        }
    }
    if (has_grammar) {
        std::string text = sp.grammar;
        const std::string root = sp.grammar_root && sp.grammar_root[0] ? sp.grammar_root : "root";
        if (root != "root") text = "root ::= " + root + "\n" + text;  // common_sampler always starts at "root"
        const bool tool_calls = !prefill.empty() || lazy;
        p.grammar = common_grammar(tool_calls ? COMMON_GRAMMAR_TYPE_TOOL_CALLS : COMMON_GRAMMAR_TYPE_USER, text);
        p.generation_prompt = prefill;
        if (lazy) {
            p.grammar_lazy = true;
            p.grammar_triggers = std::move(triggers);
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

bool picks_argmax(const llama_vocab * vocab, const sa_sampling_params & sp) {
    int32_t n_suppress = 0;
    llama_vocab_get_suppress_tokens(vocab, &n_suppress);
    const bool grammar = sp.grammar != nullptr && sp.grammar[0] != '\0';
    const bool penalties = sp.penalty_last_n != 0 &&
                           (sp.penalty_repeat != 1.0f || sp.penalty_freq != 0.0f || sp.penalty_present != 0.0f);
    return sp.temp <= 0.0f && !grammar && !penalties && n_suppress == 0 && sp.n_logit_bias == 0;
}

llama_tokens argmax_sample_and_accept_n(llama_context * ctx, const std::vector<int> & idxs, const llama_tokens & draft) {
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
    llama_tokens ids;
    for (size_t i = 0; i < idxs.size(); ++i) {
        const float * logits = llama_get_logits_ith(ctx, idxs[i]);
        const llama_token id = first_argmax(logits, n_vocab);
        ids.push_back(id);
        if (i == draft.size() || draft[i] != id) break;
    }
    return ids;
}

namespace {

// The distribution smpl drew id from in its last sample, as SampledProbs.
SampledProbs candidates_after_sampling(common_sampler * smpl, llama_token id, int32_t n_top) {
    const llama_token_data_array * cur = common_sampler_get_candidates(smpl, true);  // by probability, highest first
    SampledProbs probs;
    probs.p = 0.0f;
    for (size_t i = 0; i < cur->size; ++i) {
        const llama_token_data & c = cur->data[i];
        if (c.id == id) probs.p = c.p;
        if ((int32_t) probs.top.size() < n_top && c.p > 0.0f) probs.top.emplace_back(c.id, c.p);
    }
    return probs;
}

}  // namespace

llama_tokens sample_and_accept_n_keeping_probs(common_sampler * smpl, llama_context * ctx, const std::vector<int> & idxs,
                                               const llama_tokens & draft, int32_t n_top, std::vector<SampledProbs> & out) {
    // the loop of common_sampler_sample_and_accept_n, reading the candidates after each sample
    const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(ctx));
    n_top = std::clamp(n_top, 0, MAX_TOP_LOGPROBS);
    llama_tokens ids;
    out.clear();
    for (size_t i = 0; i < idxs.size(); ++i) {
        const llama_token id = common_sampler_sample(smpl, ctx, idxs[i], false);
        out.push_back(candidates_after_sampling(smpl, id, n_top));
        common_sampler_accept(smpl, id, true);
        ids.push_back(id);
        // a rejected draft token ends it, and so does an end of generation inside the draft
        if (i == draft.size() || draft[i] != id || (llama_vocab_is_eog(vocab, id) && i + 1 < draft.size())) break;
    }
    return ids;
}

}  // namespace sa
