// Checks made before anything reaches llama.cpp, whose GGML_ASSERTs would end
// the process: parameter ranges, prompts, and whether the models can draft.
#pragma once

#include "abi/spec_actor.h"

struct llama_model;
struct sa_session;
struct sa_model;

namespace sa {

sa_status validate_context_params(const sa_context_params & c);
sa_status validate_spec_params(const sa_spec_params & s, const sa_context_params & c);

// Whether the target and draft models can run the speculative type
// (MTP layers loaded, a compatible draft vocabulary, an EAGLE-3/DFlash drafter
// made for this target). draft may be null.
sa_status check_spec_models(int32_t type, const sa_model & target, const sa_model * draft);

// n_ubatch against min_ubatch (spec_types.h): an error names the smallest that works.
sa_status check_ubatch(int32_t type, int32_t n_draft, const sa_model & target, const sa_context_params & c);

// An error naming the first of tokens[0, n) outside the model's vocabulary
// ("<what> token T at position i is outside the vocabulary (0..n_vocab-1)"), or SA_OK.
sa_status check_in_vocab(const llama_model * model, const int32_t * tokens, int32_t n, const char * what);

// The prompt, budget and sampling parameters of one run on a session.
sa_status validate_run(const sa_session & s, const sa_run_params & p);

// The logit biases of sp: each token in the model's vocabulary, each bias finite or -infinity.
sa_status check_logit_bias(const llama_model * model, const sa_sampling_params & sp);

// Whether llama.cpp's ngram-cache drafter may run on a context of n_context
// tokens (the tokens in memory plus the newest one). Its lookup reads the
// last LLAMA_NGRAM_MAX (4) tokens, but common_ngram_cache_draft
// (common/ngram-cache.cpp) only returns early below LLAMA_NGRAM_STATIC (2):
// on a context of 2 or 3 tokens it reads before the start of its draft
// vector (AddressSanitizer: heap-buffer-overflow in get_token). Shorter
// contexts draft nothing with any n-gram drafter anyway.
bool ngram_cache_can_draft(size_t n_context);

}  // namespace sa
