// The target model's log-probabilities of an emitted token, for the token
// event's optional logprobs field (see the event schema in spec_actor.h).
#pragma once

#include "report/msgpack_writer.h"

#include "llama.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace sa {

// Most alternatives a token event carries (OpenAI's top_logprobs limit).
constexpr int32_t MAX_TOP_LOGPROBS = 20;

// Writes [logprob, [[id, logprob], ...]] for token id from the target's logits
// at output index idx of the last decode: the log-softmax of the raw logits
// (before any sampler or grammar), with the n_top most likely tokens, most
// likely first (n_top clamped to 0..MAX_TOP_LOGPROBS).
void write_logprobs(MsgpackWriter & w, llama_context * ctx, int32_t idx, llama_token id, int32_t n_top);

// A token's probability and the most likely tokens' in the distribution the
// sampler drew it from (after its samplers), most likely first.
struct SampledProbs {
    float p = 1.0f;
    std::vector<std::pair<llama_token, float>> top;
};

// Writes the same [logprob, [[id, logprob], ...]] from probabilities taken
// after sampling (log p; a token the sampler could not draw is left out).
void write_sampled_logprobs(MsgpackWriter & w, const SampledProbs & probs);

}  // namespace sa
