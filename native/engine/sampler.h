// The target's sampler for one run: llama.cpp's common_sampler with our
// sampling parameters and optional GBNF grammar.
#pragma once

#include "report/logprobs.h"
#include "support/shim_internal.h"

#include "sampling.h"

#include <string>
#include <vector>

namespace sa {

// A new sampler, or null with *st set to a failed status (a grammar that does
// not parse gives SA_ERR_GRAMMAR, bad triggers SA_ERR_INVALID_ARG) and the
// message recorded. A non-empty prefill makes the grammar a tool-call grammar
// that has already read that text (the chat's generation prompt, as
// llama-server primes it). sp.grammar_triggers make the grammar lazy: it
// applies from the first trigger on (a tool call's opening under tool_choice
// "auto"), and the prefill is unused.
common_sampler * make_sampler(const sa_model & m, const sa_sampling_params & sp, sa_status * st,
                              const std::string & prefill = "");

// Whether sp makes the sampler pick the most likely token and nothing else
// can change which one: greedy, no grammar, neutral penalties, no logit
// biases, and a vocabulary without suppressed tokens. Then argmax_sample_and_accept_n
// gives the sampler's tokens without its pass over the whole vocabulary.
bool picks_argmax(const llama_vocab * vocab, const sa_sampling_params & sp);

// common_sampler_sample_and_accept_n for a picks_argmax sampler: the most
// likely token at each of idxs while it equals the draft's token there.
llama_tokens argmax_sample_and_accept_n(llama_context * ctx, const std::vector<int> & idxs, const llama_tokens & draft);

// common_sampler_sample_and_accept_n that also keeps, for each token it
// samples, the distribution it drew the token from (the sampler's candidates
// after its samplers): the token's probability and the n_top most likely
// tokens' with a probability above 0. out gets one entry per returned token.
llama_tokens sample_and_accept_n_keeping_probs(common_sampler * smpl, llama_context * ctx, const std::vector<int> & idxs,
                                               const llama_tokens & draft, int32_t n_top, std::vector<SampledProbs> & out);

// The triggers of a lazy grammar from their JSON text (sa_sampling_params),
// checked so that common_sampler_init cannot assert: throws naming a bad one
// (chat_jinja.cpp).
std::vector<common_grammar_trigger> grammar_triggers_from_json(const llama_model * model, const char * json);

}  // namespace sa
