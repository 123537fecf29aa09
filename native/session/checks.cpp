#include "session/checks.h"
#include "session/session.h"

#include "ngram-cache.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

// llama.cpp's own (src/llama-ext.h, exported but not installed): the target
// layers an EAGLE-3 / DFlash drafter reads.
const int32_t * llama_model_target_layer_ids(const struct llama_model * model);
uint32_t llama_model_target_layer_ids_n(const struct llama_model * model);

namespace sa {

bool ngram_cache_can_draft(size_t n_context) { return n_context >= LLAMA_NGRAM_MAX; }

namespace {

std::string range_msg(const char * name, double value, const char * range) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s=%g is out of range: %s", name, value, range);
    return buf;
}

// Target architectures whose graphs export per-layer hidden states (the
// src/models/*.cpp of the pinned llama.cpp that set res->t_layer_inp, and the
// architectures built by those classes). EAGLE-3 and DFlash drafters read
// them; on any other target llama.cpp aborts (GGML_ASSERT "layer input
// tensor is null") when it builds the first graph.
const char * const kLayerFeatureArchs[] = {
    "llama", "llama-embed", "nanbeige", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe", "qwen4exp",
    "gemma4", "muse-glimmer", "deepseek4", "nemotron_h", "nemotron_h_moe", "bailingmoe3", "hunyuan_vl",
    "hunyuan-dense", "gpt-oss", "lfm2", "minimax-01", "minimax-m2", "mimo2",
};

std::string model_meta(const llama_model * m, const char * key) {
    char buf[256] = {0};
    return llama_model_meta_val_str(m, key, buf, sizeof buf) >= 0 ? std::string(buf) : std::string();
}

sa_status check_mtp_layers(const sa_model & target) {
    if (llama_model_n_layer_nextn(target.model) <= 0) {
        char desc[128] = {0};
        llama_model_desc(target.model, desc, sizeof desc);
        return fail(SA_ERR_SPEC, "model " + target.path + " (" + desc +
                    ") has no MTP/NextN layers; use a GGUF with NextN layers or another speculative type (e.g. ngram-mod)");
    }
    if (!target.load_mtp) {
        return fail(SA_ERR_SPEC, "model " + target.path + " has MTP/NextN layers but was loaded without them; load it with load_mtp=True");
    }
    return SA_OK;
}

// EAGLE-3 / DFlash: checks that llama.cpp makes with GGML_ASSERT/GGML_ABORT
// (which would end the process), made here first.
sa_status check_feature_drafter(int32_t type, const sa_model & target, const sa_model & draft) {
    const std::string kind = type == SA_SPEC_DRAFT_EAGLE3 ? "EAGLE-3" : "DFlash";
    const std::string a_kind = (type == SA_SPEC_DRAFT_EAGLE3 ? "an " : "a ") + kind;
    const std::string arch_dft = model_meta(draft.model, "general.architecture");
    const uint32_t n_ids = llama_model_target_layer_ids_n(draft.model);
    if (n_ids == 0 || (type == SA_SPEC_DRAFT_EAGLE3 && n_ids != 3)) {
        return fail(SA_ERR_SPEC, "draft model " + draft.path + " (architecture " + arch_dft + ") is not " + a_kind +
                    " drafter: it names no target layers to read; use " + a_kind + " GGUF made for this target");
    }
    const std::string arch_tgt = model_meta(target.model, "general.architecture");
    const bool supported = std::any_of(std::begin(kLayerFeatureArchs), std::end(kLayerFeatureArchs),
                                       [&](const char * a) { return arch_tgt == a; });
    if (!supported) {
        std::string list;
        for (const char * a : kLayerFeatureArchs) list += (list.empty() ? "" : ", ") + std::string(a);
        return fail(SA_ERR_SPEC, kind + " cannot draft for target " + target.path + ": llama.cpp's " + arch_tgt +
                    " graph does not export the layer hidden states the drafter reads (supported targets: " + list + ")");
    }
    const int32_t n_layer = llama_model_n_layer(target.model);
    const int32_t * ids = llama_model_target_layer_ids(draft.model);
    for (uint32_t k = 0; k < n_ids; ++k) {
        if (ids[k] < 0 || ids[k] > n_layer) {
            return fail(SA_ERR_SPEC, kind + " drafter " + draft.path + " reads target layer " + std::to_string(ids[k]) +
                        " but target " + target.path + " has " + std::to_string(n_layer) + " layers; use the drafter made for this target");
        }
    }
    if (type == SA_SPEC_DRAFT_DFLASH && llama_vocab_mask(llama_model_get_vocab(draft.model)) < 0) {
        // llama.cpp fills the drafted block with the mask token; without one it aborts while drafting
        return fail(SA_ERR_SPEC, "DFlash drafter " + draft.path + " has no mask token (tokenizer.ggml.mask_token_id); "
                    "use a DFlash GGUF converted with its mask token");
    }
    const std::string hidden = model_meta(draft.model, (arch_dft + ".target_hidden_size").c_str());
    const int32_t n_embd = llama_model_n_embd(target.model);
    if (!hidden.empty() && std::atoi(hidden.c_str()) != n_embd) {
        return fail(SA_ERR_SPEC, kind + " drafter " + draft.path + " expects target hidden size " + hidden +
                    " but target " + target.path + " has " + std::to_string(n_embd) + "; use the drafter made for this target");
    }
    return SA_OK;
}

// draft-simple: the draft model must tokenize exactly like the target.
sa_status check_draft_vocab(const sa_model & target, const sa_model & draft) {
    const llama_vocab * vt = llama_model_get_vocab(target.model);
    const llama_vocab * vd = llama_model_get_vocab(draft.model);
    const std::string who = "draft model " + draft.path + " is incompatible with target " + target.path + ": ";
    if (llama_vocab_type(vt) != llama_vocab_type(vd)) {
        return fail(SA_ERR_SPEC, who + "different tokenizer types; use a draft from the same model family");
    }
    if (llama_vocab_get_add_bos(vt) != llama_vocab_get_add_bos(vd) ||
        (llama_vocab_get_add_bos(vt) && llama_vocab_bos(vt) != llama_vocab_bos(vd)) ||
        llama_vocab_get_add_eos(vt) != llama_vocab_get_add_eos(vd) ||
        (llama_vocab_get_add_eos(vt) && llama_vocab_eos(vt) != llama_vocab_eos(vd))) {
        return fail(SA_ERR_SPEC, who + "BOS/EOS tokens differ");
    }
    const int nt = llama_vocab_n_tokens(vt), nd = llama_vocab_n_tokens(vd);
    if (std::abs(nt - nd) > 128) {
        return fail(SA_ERR_SPEC, who + "vocabulary sizes " + std::to_string(nt) + " and " + std::to_string(nd) + " differ by more than 128");
    }
    for (int i = 5; i < std::min(nt, nd); ++i) {
        if (std::strcmp(llama_vocab_get_text(vt, i), llama_vocab_get_text(vd, i)) != 0) {
            return fail(SA_ERR_SPEC, who + "token " + std::to_string(i) + " differs ('" + llama_vocab_get_text(vt, i) +
                        "' vs '" + llama_vocab_get_text(vd, i) + "')");
        }
    }
    return SA_OK;
}

}  // namespace

sa_status validate_context_params(const sa_context_params & c) {
    // common_context_can_seq_rm probes the context with a 2-token batch
    if (c.n_batch < 2) return fail(SA_ERR_INVALID_ARG, range_msg("n_batch", c.n_batch, "must be at least 2"));
    if (c.n_ubatch < 1 || c.n_ubatch > c.n_batch) {
        return fail(SA_ERR_INVALID_ARG, range_msg("n_ubatch", c.n_ubatch, "must be between 1 and n_batch"));
    }
    if (c.n_ctx != 0 && c.n_ctx < 16) return fail(SA_ERR_INVALID_ARG, range_msg("n_ctx", c.n_ctx, "must be 0 (model default) or >= 16"));
    if (c.n_seq < 0 || c.n_seq > 64) return fail(SA_ERR_INVALID_ARG, range_msg("n_seq", c.n_seq, "must be between 1 and 64"));
    if (c.prefill_step_ms < 0 || c.prefill_step_ms > 600000) {
        return fail(SA_ERR_INVALID_ARG, range_msg("prefill_step_ms", c.prefill_step_ms, "must be between 0 (no cut) and 600000"));
    }
    if (c.kv_unified < 0 || c.kv_unified > 1) return fail(SA_ERR_INVALID_ARG, range_msg("kv_unified", c.kv_unified, "must be 0 or 1"));
    if (c.n_ctx_seq_max < 0 || (c.n_ctx_seq_max > 0 && c.n_ctx_seq_max < 16)) {
        return fail(SA_ERR_INVALID_ARG, range_msg("n_ctx_seq_max", c.n_ctx_seq_max, "must be 0 (the whole cache) or >= 16"));
    }
    if (c.n_ctx_seq_max > 0 && c.kv_unified == 0) {
        return fail(SA_ERR_INVALID_ARG, "n_ctx_seq_max caps a sequence of a shared cache; it needs kv_unified=1");
    }
    const uint64_t n_seq_cache = c.kv_unified ? 1 : (uint64_t) std::max(c.n_seq, 1);  // one shared cache of n_ctx
    if ((uint64_t) c.n_ctx * n_seq_cache > ((uint64_t) 1 << 24)) {
        return fail(SA_ERR_INVALID_ARG, "n_ctx=" + std::to_string(c.n_ctx) + " times n_seq=" + std::to_string(c.n_seq) +
                    " is over 2^24 tokens of cache; use fewer sequences or a smaller n_ctx");
    }
    if (c.n_threads < 1 || c.n_threads_batch < 1) {
        return fail(SA_ERR_INVALID_ARG, "n_threads and n_threads_batch must be >= 1");
    }
    if (c.type_k < -1 || c.type_k >= GGML_TYPE_COUNT || c.type_v < -1 || c.type_v >= GGML_TYPE_COUNT) {
        return fail(SA_ERR_INVALID_ARG, "type_k / type_v is not a ggml type id");
    }
    if (c.flash_attn < -1 || c.flash_attn > 1) {
        return fail(SA_ERR_INVALID_ARG, range_msg("flash_attn", c.flash_attn, "-1 (auto), 0 or 1"));
    }
    return SA_OK;
}

sa_status validate_spec_params(const sa_spec_params & s, const sa_context_params & c) {
    if (s.type < SA_SPEC_NONE || s.type > SA_SPEC_AUTO) {
        return fail(SA_ERR_INVALID_ARG, range_msg("spec type", s.type, "0..10"));
    }
    if (s.type == SA_SPEC_NONE) return SA_OK;
    if (s.n_draft < 1 || s.n_draft > SA_MAX_DRAFT_POS) {
        return fail(SA_ERR_INVALID_ARG, range_msg("n_draft", s.n_draft, "1..64"));
    }
    if (s.n_min < 0 || s.n_min > s.n_draft) return fail(SA_ERR_INVALID_ARG, range_msg("n_min", s.n_min, "0..n_draft"));
    if (!(s.p_min >= 0.0f && s.p_min <= 1.0f)) return fail(SA_ERR_INVALID_ARG, range_msg("p_min", s.p_min, "0..1"));
    if (!(s.p_split >= 0.0f && s.p_split <= 1.0f)) return fail(SA_ERR_INVALID_ARG, range_msg("p_split", s.p_split, "0..1"));
    // auto's ceiling follows n_batch (resolve_auto); a fixed type's draft must fit one batch
    if (s.type != SA_SPEC_AUTO && (int64_t) c.n_batch < (int64_t) s.n_draft + 1) {
        return fail(SA_ERR_INVALID_ARG, "n_batch must be at least n_draft + 1 to verify a whole draft in one batch");
    }
    if (s.ngram_size_n < 1 || s.ngram_size_n > 1024 || s.ngram_size_m < 1 || s.ngram_size_m > 1024 ||
        s.ngram_min_hits < 1 || s.ngram_min_hits > 65535) {
        return fail(SA_ERR_INVALID_ARG, "ngram_size_n / ngram_size_m must be 1..1024 and ngram_min_hits 1..65535");
    }
    if (s.ngram_mod_n_match < 1 || s.ngram_mod_n_match > 1024 || s.ngram_mod_n_min < 0 || s.ngram_mod_n_max < 1) {
        return fail(SA_ERR_INVALID_ARG, "ngram_mod_n_match must be 1..1024, ngram_mod_n_min >= 0, ngram_mod_n_max >= 1");
    }
    return SA_OK;
}

sa_status check_ubatch(int32_t type, int32_t n_draft, const sa_model & target, const sa_context_params & c) {
    const int32_t need = min_ubatch(type, n_draft, target);
    if ((int64_t) c.n_ubatch >= need) return SA_OK;
    const std::string why = spec_facts(type).noncausal_block
        ? "its drafter decodes the n_draft + 1 block in one non-causal micro-batch"
        : "on a recurrent or hybrid target the last n_draft + 1 tokens of a verify batch share one micro-batch so "
          "the recurrent state can roll back";
    return fail(SA_ERR_INVALID_ARG, "n_ubatch is " + std::to_string(c.n_ubatch) + " but " + spec_type_name(type) +
                " with n_draft=" + std::to_string(n_draft) + " needs n_ubatch >= " + std::to_string(need) + " (" + why +
                "); raise n_ubatch (and n_batch) to " + std::to_string(need) + " or lower n_draft");
}

sa_status check_spec_models(int32_t type, const sa_model & target, const sa_model * draft) {
    if (type == SA_SPEC_DRAFT_MTP) return check_mtp_layers(target);
    if (type != SA_SPEC_DRAFT_SIMPLE && type != SA_SPEC_DRAFT_EAGLE3 && type != SA_SPEC_DRAFT_DFLASH) return SA_OK;
    if (draft == nullptr) {
        return fail(SA_ERR_INVALID_ARG, spec_type_name(type) + " needs a draft model (draft_model=...)");
    }
    if (draft->vocab_only) {
        return fail(SA_ERR_SPEC, "the draft model was loaded with vocab_only=True; load its weights");
    }
    return type == SA_SPEC_DRAFT_SIMPLE ? check_draft_vocab(target, *draft) : check_feature_drafter(type, target, *draft);
}

sa_status check_in_vocab(const llama_model * model, const int32_t * tokens, int32_t n, const char * what) {
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int32_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            return fail(SA_ERR_PROMPT, std::string(what) + " token " + std::to_string(tokens[i]) + " at position " +
                                           std::to_string(i) + " is outside the vocabulary (0.." +
                                           std::to_string(n_vocab - 1) + ")");
        }
    }
    return SA_OK;
}

sa_status validate_run(const sa_session & s, const sa_run_params & p) {
    if (p.prompt == nullptr || p.n_prompt < 1) {
        return fail(SA_ERR_PROMPT, "the prompt is empty; pass at least one token");
    }
    const uint32_t n_ctx = (uint32_t) s.n_ctx_seq;
    if ((uint32_t) p.n_prompt >= n_ctx) {
        return fail(SA_ERR_PROMPT, "the prompt has " + std::to_string(p.n_prompt) + " tokens but the context holds " +
                    std::to_string(n_ctx) + "; shorten the prompt or raise n_ctx");
    }
    if (sa_status st = check_in_vocab(s.model->model, p.prompt, p.n_prompt, "prompt"); st != SA_OK) return st;
    if (p.max_tokens < 1) return fail(SA_ERR_INVALID_ARG, range_msg("max_tokens", p.max_tokens, "must be >= 1"));
    if (p.emit_stats_every < 0) return fail(SA_ERR_INVALID_ARG, range_msg("emit_stats_every", p.emit_stats_every, "must be >= 0"));
    const sa_sampling_params & sp = p.sampling;
    if (!std::isfinite(sp.temp) || !std::isfinite(sp.top_p) || !std::isfinite(sp.min_p) || sp.top_p <= 0.0f ||
        sp.top_p > 1.0f || sp.min_p < 0.0f || sp.min_p > 1.0f || sp.top_k < 0 || sp.penalty_last_n < -1 ||
        !std::isfinite(sp.penalty_repeat) || sp.penalty_repeat <= 0.0f || !std::isfinite(sp.penalty_freq) ||
        !std::isfinite(sp.penalty_present)) {
        return fail(SA_ERR_INVALID_ARG, "sampling parameters out of range (temp finite, 0<top_p<=1, 0<=min_p<=1, top_k>=0, repeat_penalty>0)");
    }
    return check_logit_bias(s.model->model, sp);
}

sa_status check_logit_bias(const llama_model * model, const sa_sampling_params & sp) {
    if (sp.n_logit_bias < 0 || (sp.n_logit_bias > 0 && (sp.logit_bias_tokens == nullptr || sp.logit_bias_values == nullptr))) {
        return fail(SA_ERR_INVALID_ARG, range_msg("n_logit_bias", sp.n_logit_bias, "must be >= 0, with both arrays"));
    }
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int32_t i = 0; i < sp.n_logit_bias; ++i) {
        const int32_t token = sp.logit_bias_tokens[i];
        const float bias = sp.logit_bias_values[i];
        if (token < 0 || token >= n_vocab) {
            return fail(SA_ERR_INVALID_ARG, "logit_bias token " + std::to_string(token) + " is outside the vocabulary (0.." +
                                                std::to_string(n_vocab - 1) + ")");
        }
        if (std::isnan(bias) || bias == INFINITY) {
            return fail(SA_ERR_INVALID_ARG, "logit_bias of token " + std::to_string(token) +
                                                " must be a finite number or -infinity");
        }
    }
    return SA_OK;
}

}  // namespace sa
