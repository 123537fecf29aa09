#include "report/logprobs.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace sa {

void write_logprobs(MsgpackWriter & w, llama_context * ctx, int32_t idx, llama_token id, int32_t n_top) {
    const float * logits = llama_get_logits_ith(ctx, idx);
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
    n_top = std::clamp(n_top, 0, std::min(MAX_TOP_LOGPROBS, n_vocab));
    // log p(t) = logit(t) - (max + log sum exp(logit - max)), summed in double
    float max = logits[0];
    for (int32_t t = 1; t < n_vocab; ++t) max = std::max(max, logits[t]);
    double sum = 0.0;
    for (int32_t t = 0; t < n_vocab; ++t) sum += std::exp((double) logits[t] - max);
    const double log_z = (double) max + std::log(sum);

    // the n_top best in a heap whose front is the worst kept; ties go to the lower id
    std::vector<std::pair<float, llama_token>> top;
    top.reserve((size_t) n_top + 1);
    auto better = [](const std::pair<float, llama_token> & a, const std::pair<float, llama_token> & b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    for (int32_t t = 0; n_top > 0 && t < n_vocab; ++t) {
        if ((int32_t) top.size() < n_top) {
            top.emplace_back(logits[t], t);
            std::push_heap(top.begin(), top.end(), better);
        } else if (better({logits[t], t}, top.front())) {
            std::pop_heap(top.begin(), top.end(), better);
            top.back() = {logits[t], t};
            std::push_heap(top.begin(), top.end(), better);
        }
    }
    std::sort_heap(top.begin(), top.end(), better);

    w.array(2);
    w.real((double) logits[id] - log_z);
    w.array((uint32_t) top.size());
    for (const auto & [logit, t] : top) {
        w.array(2);
        w.integer(t);
        w.real((double) logit - log_z);
    }
}

void write_sampled_logprobs(MsgpackWriter & w, const SampledProbs & probs) {
    w.array(2);
    w.real(std::log((double) probs.p));
    w.array((uint32_t) probs.top.size());
    for (const auto & [t, p] : probs.top) {
        w.array(2);
        w.integer(t);
        w.real(std::log((double) p));
    }
}

}  // namespace sa
