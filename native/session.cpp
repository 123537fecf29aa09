// Speculative sessions: contexts, common_speculative, and the generation loop.
#include "shim_internal.h"
#include "adaptive.h"
#include "auto_drafter.h"
#include "msgpack_writer.h"
#include "stats.h"

#include "common.h"
#include "ggml-cpu.h"
#include "sampling.h"
#include "speculative.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

// llama.cpp's own (src/llama-ext.h, exported but not installed): the target
// layers an EAGLE-3 / DFlash drafter reads.
const int32_t * llama_model_target_layer_ids(const struct llama_model * model);
uint32_t llama_model_target_layer_ids_n(const struct llama_model * model);

using namespace sa;

struct sa_session {
    sa_model * model = nullptr;
    const sa_model * draft_model = nullptr;
    llama_context * ctx_tgt = nullptr;
    llama_context * ctx_dft = nullptr;
    // The session's own compute threads (docs/decisions/0006): decode, and
    // prompt batches when n_threads_batch differs (else null: decode's).
    ggml_threadpool * pool = nullptr;
    ggml_threadpool * pool_batch = nullptr;
    common_speculative * spec = nullptr;
    sa_spec_params sparams{};
    bool use_ckpt_tgt = false;
    bool use_ckpt_dft = false;
    std::atomic<bool> cancel{false};
    Stats stats;
    AdaptiveDraft adaptive;
    // Spec("auto") (sparams.type then names the model drafter, if any).
    std::unique_ptr<AutoDrafter> autod;
    int32_t auto_n_cap = 0;
    TokenMemory memory;
    std::atomic<int64_t> memory_capacity{0};
    std::atomic<bool> forget{false};
    std::atomic<int64_t> memory_tokens{0}, memory_bytes{0};
    MsgpackWriter body;    // events of the current step
    MsgpackWriter batch;   // array header + body, handed to the callback
    uint32_t n_events = 0;

    ~sa_session() {
        autod.reset();
        common_speculative_free(spec);  // refers to both contexts: free it first
        if (ctx_dft) llama_free(ctx_dft);
        if (ctx_tgt) llama_free(ctx_tgt);
        if (pool_batch) ggml_threadpool_free(pool_batch);  // after the contexts that use them
        if (pool) ggml_threadpool_free(pool);
    }
};

namespace {

bool abort_callback(void * data) {
    return static_cast<std::atomic<bool> *>(data)->load(std::memory_order_relaxed);
}

const char * spec_type_name(int32_t type) {
    static const char * names[] = {"none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash",
                                   "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
                                   "auto", "memory"};
    return type >= 0 && type < SA_N_DRAFTERS ? names[type] : "unknown";
}

common_speculative_type to_common_type(int32_t type) {
    switch (type) {
        case SA_SPEC_DRAFT_SIMPLE:  return COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE;
        case SA_SPEC_DRAFT_EAGLE3:  return COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3;
        case SA_SPEC_DRAFT_MTP:     return COMMON_SPECULATIVE_TYPE_DRAFT_MTP;
        case SA_SPEC_DRAFT_DFLASH:  return COMMON_SPECULATIVE_TYPE_DRAFT_DFLASH;
        case SA_SPEC_NGRAM_SIMPLE:  return COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE;
        case SA_SPEC_NGRAM_MAP_K:   return COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K;
        case SA_SPEC_NGRAM_MAP_K4V: return COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V;
        case SA_SPEC_NGRAM_MOD:     return COMMON_SPECULATIVE_TYPE_NGRAM_MOD;
        case SA_SPEC_NGRAM_CACHE:   return COMMON_SPECULATIVE_TYPE_NGRAM_CACHE;
        default:                    return COMMON_SPECULATIVE_TYPE_NONE;
    }
}

bool uses_draft_context(int32_t type) {
    return type == SA_SPEC_DRAFT_SIMPLE || type == SA_SPEC_DRAFT_EAGLE3 || type == SA_SPEC_DRAFT_MTP ||
           type == SA_SPEC_DRAFT_DFLASH;
}

bool needs_rollback_snapshots(int32_t type) {
    return type == SA_SPEC_DRAFT_EAGLE3 || type == SA_SPEC_DRAFT_MTP || type == SA_SPEC_DRAFT_DFLASH;
}

std::string range_msg(const char * name, double value, const char * range) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s=%g is out of range: %s", name, value, range);
    return buf;
}

sa_status validate_context_params(const sa_context_params & c) {
    if (c.n_batch < 1) return fail(SA_ERR_INVALID_ARG, range_msg("n_batch", c.n_batch, "must be >= 1"));
    if (c.n_ubatch < 1 || c.n_ubatch > c.n_batch) {
        return fail(SA_ERR_INVALID_ARG, range_msg("n_ubatch", c.n_ubatch, "must be between 1 and n_batch"));
    }
    if (c.n_ctx != 0 && c.n_ctx < 16) return fail(SA_ERR_INVALID_ARG, range_msg("n_ctx", c.n_ctx, "must be 0 (model default) or >= 16"));
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
    if ((int64_t) c.n_batch < (int64_t) s.n_draft + 1) {
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

// n_verify: the longest draft a step verifies (auto's ceiling may exceed the model drafter's n_draft).
llama_context_params make_context_params(const sa_context_params & c, const sa_spec_params & s, int32_t n_verify,
                                         std::atomic<bool> * cancel) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = c.n_ctx;
    cp.n_batch = c.n_batch;
    cp.n_ubatch = c.n_ubatch;
    cp.n_seq_max = 1;
    cp.n_threads = c.n_threads;
    cp.n_threads_batch = c.n_threads_batch;
    if (c.type_k >= 0) cp.type_k = (ggml_type) c.type_k;
    if (c.type_v >= 0) cp.type_v = (ggml_type) c.type_v;
    cp.flash_attn_type = c.flash_attn < 0 ? LLAMA_FLASH_ATTN_TYPE_AUTO
                       : c.flash_attn == 0 ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_ENABLED;
    const int32_t n_draft = s.type == SA_SPEC_NONE ? 0 : s.n_draft;
    const auto limits = common_speculative_get_output_limits((int32_t) c.n_batch, 1, std::max(n_draft, n_verify));
    cp.n_outputs_max = (uint32_t) limits.total;
    cp.n_outputs_max_per_seq = (uint32_t) limits.per_seq;
    cp.n_rs_seq = needs_rollback_snapshots(s.type) ? (uint32_t) n_draft : 0;
    cp.abort_callback = abort_callback;
    cp.abort_callback_data = cancel;
    cp.no_perf = false;
    return cp;
}

sa_status check_draft_vocab(const sa_model * target, const sa_model * draft);
sa_status check_feature_drafter(int32_t type, const sa_model * target, const sa_model * draft);

sa_status check_spec_models(const sa_session & s) {
    const int32_t type = s.sparams.type;
    if (type == SA_SPEC_DRAFT_MTP) {
        char desc[128] = {0};
        llama_model_desc(s.model->model, desc, sizeof desc);
        if (llama_model_n_layer_nextn(s.model->model) <= 0) {
            return fail(SA_ERR_SPEC, "model " + s.model->path + " (" + desc +
                        ") has no MTP/NextN layers; use a GGUF with NextN layers or another speculative type (e.g. ngram-mod)");
        }
        if (!s.model->load_mtp) {
            return fail(SA_ERR_SPEC, "model " + s.model->path + " has MTP/NextN layers but was loaded without them; load it with load_mtp=True");
        }
        return SA_OK;
    }
    if (type == SA_SPEC_DRAFT_SIMPLE || type == SA_SPEC_DRAFT_EAGLE3 || type == SA_SPEC_DRAFT_DFLASH) {
        if (s.draft_model == nullptr) {
            return fail(SA_ERR_INVALID_ARG, std::string(spec_type_name(type)) + " needs a draft model (draft_model=...)");
        }
        if (s.draft_model->vocab_only) {
            return fail(SA_ERR_SPEC, "the draft model was loaded with vocab_only=True; load its weights");
        }
        if (type == SA_SPEC_DRAFT_SIMPLE) {
            return check_draft_vocab(s.model, s.draft_model);
        }
        return check_feature_drafter(type, s.model, s.draft_model);
    }
    return SA_OK;
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

// EAGLE-3 / DFlash: checks that llama.cpp makes with GGML_ASSERT/GGML_ABORT
// (which would end the process), made here first.
sa_status check_feature_drafter(int32_t type, const sa_model * target, const sa_model * draft) {
    const std::string kind = type == SA_SPEC_DRAFT_EAGLE3 ? "EAGLE-3" : "DFlash";
    const std::string a_kind = (type == SA_SPEC_DRAFT_EAGLE3 ? "an " : "a ") + kind;
    const std::string arch_dft = model_meta(draft->model, "general.architecture");
    const uint32_t n_ids = llama_model_target_layer_ids_n(draft->model);
    if (n_ids == 0 || (type == SA_SPEC_DRAFT_EAGLE3 && n_ids != 3)) {
        return fail(SA_ERR_SPEC, "draft model " + draft->path + " (architecture " + arch_dft + ") is not " + a_kind +
                    " drafter: it names no target layers to read; use " + a_kind + " GGUF made for this target");
    }
    const std::string arch_tgt = model_meta(target->model, "general.architecture");
    const bool supported = std::any_of(std::begin(kLayerFeatureArchs), std::end(kLayerFeatureArchs),
                                       [&](const char * a) { return arch_tgt == a; });
    if (!supported) {
        std::string list;
        for (const char * a : kLayerFeatureArchs) list += (list.empty() ? "" : ", ") + std::string(a);
        return fail(SA_ERR_SPEC, kind + " cannot draft for target " + target->path + ": llama.cpp's " + arch_tgt +
                    " graph does not export the layer hidden states the drafter reads (supported targets: " + list + ")");
    }
    const int32_t n_layer = llama_model_n_layer(target->model);
    const int32_t * ids = llama_model_target_layer_ids(draft->model);
    for (uint32_t k = 0; k < n_ids; ++k) {
        if (ids[k] < 0 || ids[k] > n_layer) {
            return fail(SA_ERR_SPEC, kind + " drafter " + draft->path + " reads target layer " + std::to_string(ids[k]) +
                        " but target " + target->path + " has " + std::to_string(n_layer) + " layers; use the drafter made for this target");
        }
    }
    const std::string hidden = model_meta(draft->model, (arch_dft + ".target_hidden_size").c_str());
    const int32_t n_embd = llama_model_n_embd(target->model);
    if (!hidden.empty() && std::atoi(hidden.c_str()) != n_embd) {
        return fail(SA_ERR_SPEC, kind + " drafter " + draft->path + " expects target hidden size " + hidden +
                    " but target " + target->path + " has " + std::to_string(n_embd) + "; use the drafter made for this target");
    }
    return SA_OK;
}

sa_status check_draft_vocab(const sa_model * target, const sa_model * draft) {
    const llama_vocab * vt = llama_model_get_vocab(target->model);
    const llama_vocab * vd = llama_model_get_vocab(draft->model);
    const std::string who = "draft model " + draft->path + " is incompatible with target " + target->path + ": ";
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

// Spec("auto"): the model drafter it may use, as a fixed type (SA_SPEC_NONE: none).
int32_t auto_model_drafter(const sa_session & s) {
    if (s.draft_model != nullptr) {
        const uint32_t n_ids = llama_model_target_layer_ids_n(s.draft_model->model);
        return n_ids == 3 ? SA_SPEC_DRAFT_EAGLE3 : n_ids > 0 ? SA_SPEC_DRAFT_DFLASH : SA_SPEC_DRAFT_SIMPLE;
    }
    if (s.model->load_mtp && llama_model_n_layer_nextn(s.model->model) > 0) return SA_SPEC_DRAFT_MTP;
    return SA_SPEC_NONE;
}

// Tokens auto's model drafter drafts per step (a forward pass of the drafter each).
constexpr int32_t kAutoModelDraft = 3;

common_params_speculative make_spec_params(const sa_session & s) {
    const sa_spec_params & p = s.sparams;
    common_params_speculative ps;
    ps.types = {to_common_type(p.type)};
    ps.draft.n_max = p.n_draft;
    ps.draft.n_min = p.n_min;
    ps.draft.p_min = p.p_min;
    ps.draft.p_split = p.p_split;
    ps.draft.ctx_tgt = s.ctx_tgt;
    ps.draft.ctx_dft = s.ctx_dft;
    const common_params_speculative_ngram_map map{(uint16_t) p.ngram_size_n, (uint16_t) p.ngram_size_m, (uint16_t) p.ngram_min_hits};
    ps.ngram_simple = map;
    ps.ngram_map_k = map;
    ps.ngram_map_k4v = map;
    ps.ngram_mod.n_match = p.ngram_mod_n_match;
    ps.ngram_mod.n_max = std::min(p.ngram_mod_n_max, p.n_draft);
    ps.ngram_mod.n_min = std::min(p.ngram_mod_n_min, ps.ngram_mod.n_max);
    return ps;
}

ggml_threadpool * new_pool(int32_t n_threads) {
    ggml_threadpool_params tp = ggml_threadpool_params_default(n_threads);
    // Sleep as soon as a graph is done. ggml's default (poll 50) spins
    // ~6.5 million pause rounds first, a core for a few hundred ms after every
    // request, which slowed the next session to start by 2x (decision 0006).
    tp.poll = 0;
    return ggml_threadpool_new(&tp);
}

// Every context of the session computes on the session's pools, whichever
// thread calls into it.
sa_status create_pools(sa_session & s, const sa_context_params & c) {
    const bool own_batch_pool = c.n_threads_batch != c.n_threads;
    s.pool = new_pool(c.n_threads);
    if (own_batch_pool) s.pool_batch = new_pool(c.n_threads_batch);
    if (s.pool == nullptr || (own_batch_pool && s.pool_batch == nullptr)) {
        return fail(SA_ERR_CONTEXT, "could not start " + std::to_string(std::max(c.n_threads, c.n_threads_batch)) +
                    " compute threads; pass a smaller n_threads / n_threads_batch");
    }
    return SA_OK;
}

sa_status create_session(sa_session & s, const sa_context_params & c) {
    if (sa_status st = create_pools(s, c); st != SA_OK) return st;
    llama_context_params cp = make_context_params(c, s.sparams, s.auto_n_cap, &s.cancel);
    s.ctx_tgt = llama_init_from_model(s.model->model, cp);
    if (s.ctx_tgt == nullptr) {
        const std::string detail = last_native_log_error();
        return fail(SA_ERR_CONTEXT, "could not create a context (n_ctx=" + std::to_string(c.n_ctx) +
                    "); try a smaller n_ctx or n_batch" + (detail.empty() ? "" : ": " + detail));
    }
    const int32_t type = s.sparams.type;
    if (uses_draft_context(type)) {
        llama_context_params dp = cp;
        dp.ctx_type = type == SA_SPEC_DRAFT_MTP ? LLAMA_CONTEXT_TYPE_MTP : LLAMA_CONTEXT_TYPE_DEFAULT;
        dp.n_ctx = llama_n_ctx(s.ctx_tgt);
        dp.n_rs_seq = 0;
        dp.ctx_other = s.ctx_tgt;
        dp.type_k = GGML_TYPE_F16;
        dp.type_v = GGML_TYPE_F16;
        const uint32_t per_seq = type == SA_SPEC_DRAFT_DFLASH ? (uint32_t) s.sparams.n_draft + 1 : 1;
        dp.n_outputs_max = per_seq;
        dp.n_outputs_max_per_seq = per_seq;
        const llama_model * dm = type == SA_SPEC_DRAFT_MTP ? s.model->model : s.draft_model->model;
        s.ctx_dft = llama_init_from_model(const_cast<llama_model *>(dm), dp);
        if (s.ctx_dft == nullptr) {
            const std::string detail = last_native_log_error();
            return fail(SA_ERR_SPEC, std::string("could not create the ") + spec_type_name(type) + " draft context" +
                        (detail.empty() ? "" : ": " + detail));
        }
    }
    for (llama_context * ctx : {s.ctx_tgt, s.ctx_dft}) {
        if (ctx) llama_attach_threadpool(ctx, s.pool, s.pool_batch);
    }
    s.use_ckpt_tgt = common_context_can_seq_rm(s.ctx_tgt) == COMMON_CONTEXT_SEQ_RM_TYPE_FULL;
    s.use_ckpt_dft = s.ctx_dft && common_context_can_seq_rm(s.ctx_dft) == COMMON_CONTEXT_SEQ_RM_TYPE_FULL;
    if (type != SA_SPEC_NONE) {
        common_params_speculative ps = make_spec_params(s);
        try {
            s.spec = common_speculative_init(ps, 1);
        } catch (const std::exception & e) {
            return fail(SA_ERR_SPEC, std::string(spec_type_name(type)) + " setup failed: " + e.what());
        }
        if (s.spec == nullptr) {
            return fail(SA_ERR_SPEC, std::string(spec_type_name(type)) + " could not be initialised for this model");
        }
    }
    if (s.auto_n_cap > 0) {
        common_params_speculative ps = make_spec_params(s);
        ps.draft.n_max = s.auto_n_cap;
        ps.ngram_mod.n_max = std::min(s.sparams.ngram_mod_n_max, s.auto_n_cap);
        ps.ngram_mod.n_min = std::min(s.sparams.ngram_mod_n_min, ps.ngram_mod.n_max);
        s.autod = std::make_unique<AutoDrafter>();
        try {
            s.autod->init(ps, s.spec, type, s.sparams.n_draft, &s.memory);
        } catch (const std::exception & e) {
            return fail(SA_ERR_SPEC, std::string("auto drafting setup failed: ") + e.what());
        }
    }
    s.stats.set_n_draft(s.auto_n_cap > 0 ? s.auto_n_cap : type == SA_SPEC_NONE ? 0 : s.sparams.n_draft);
    return SA_OK;
}

void clear_memory(llama_context * ctx) {
    if (ctx == nullptr) return;
    llama_memory_t mem = llama_get_memory(ctx);
    if (mem != nullptr) llama_memory_clear(mem, true);
}

common_sampler * make_sampler(const sa_model & m, const sa_sampling_params & sp, sa_status * st) {
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
    if (has_grammar) {
        std::string text = sp.grammar;
        const std::string root = sp.grammar_root && sp.grammar_root[0] ? sp.grammar_root : "root";
        if (root != "root") text = "root ::= " + root + "\n" + text;  // common_sampler always starts at "root"
        p.grammar = common_grammar(COMMON_GRAMMAR_TYPE_USER, text);
    }
    try {
        common_sampler * smpl = common_sampler_init(m.model, p);
        if (smpl == nullptr) {
            *st = fail(has_grammar ? SA_ERR_GRAMMAR : SA_ERR_INVALID_ARG, "could not create the sampler");
        }
        return smpl;
    } catch (const std::exception & e) {
        const std::string detail = last_native_log_error();
        *st = fail(has_grammar ? SA_ERR_GRAMMAR : SA_ERR_INVALID_ARG,
                   std::string(has_grammar ? "invalid GBNF grammar: " : "invalid sampling parameters: ") + e.what() +
                   (detail.empty() ? "" : " (" + detail + ")"));
        return nullptr;
    }
}

sa_status validate_run(const sa_session & s, const sa_run_params & p) {
    if (p.prompt == nullptr || p.n_prompt < 1) {
        return fail(SA_ERR_PROMPT, "the prompt is empty; pass at least one token");
    }
    const uint32_t n_ctx = llama_n_ctx(s.ctx_tgt);
    if ((uint32_t) p.n_prompt >= n_ctx) {
        return fail(SA_ERR_PROMPT, "the prompt has " + std::to_string(p.n_prompt) + " tokens but the context holds " +
                    std::to_string(n_ctx) + "; shorten the prompt or raise n_ctx");
    }
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(s.model->model));
    for (int32_t i = 0; i < p.n_prompt; ++i) {
        if (p.prompt[i] < 0 || p.prompt[i] >= n_vocab) {
            return fail(SA_ERR_PROMPT, "prompt token " + std::to_string(p.prompt[i]) + " at position " + std::to_string(i) +
                        " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");
        }
    }
    if (p.max_tokens < 1) return fail(SA_ERR_INVALID_ARG, range_msg("max_tokens", p.max_tokens, "must be >= 1"));
    if (p.emit_stats_every < 0) return fail(SA_ERR_INVALID_ARG, range_msg("emit_stats_every", p.emit_stats_every, "must be >= 0"));
    const sa_sampling_params & sp = p.sampling;
    if (!std::isfinite(sp.temp) || !std::isfinite(sp.top_p) || !std::isfinite(sp.min_p) || sp.top_p <= 0.0f ||
        sp.top_p > 1.0f || sp.min_p < 0.0f || sp.min_p > 1.0f || sp.top_k < 0 || sp.penalty_last_n < -1 ||
        !std::isfinite(sp.penalty_repeat) || sp.penalty_repeat <= 0.0f || !std::isfinite(sp.penalty_freq) ||
        !std::isfinite(sp.penalty_present)) {
        return fail(SA_ERR_INVALID_ARG, "sampling parameters out of range (temp finite, 0<top_p<=1, 0<=min_p<=1, top_k>=0, repeat_penalty>0)");
    }
    return SA_OK;
}

// One generation: prefill, then draft -> verify -> accept until a terminal event.
class Run {
public:
    Run(sa_session & s, const sa_run_params & p, common_sampler * smpl, sa_event_cb cb, void * user)
        : s_(s), p_(p), smpl_(smpl), cb_(cb), user_(user),
          vocab_(llama_model_get_vocab(s.model->model)) {}

    sa_status execute();

private:
    sa_session & s_;
    const sa_run_params & p_;
    common_sampler_ptr smpl_;
    sa_event_cb cb_;
    void * user_;
    const llama_vocab * vocab_;
    int64_t t_start_ = 0;
    int64_t t_decode_start_ = 0;
    int32_t n_emitted_ = 0;
    int32_t next_stats_at_ = 0;
    bool fresh_ = false;  // keep nothing from earlier runs (forget() or memory 0)

    bool cancelled() const { return s_.cancel.load(std::memory_order_relaxed); }

    // nullopt: the prompt is in; otherwise the run ends with that status.
    std::optional<sa_status> prefill(llama_tokens & prompt_tgt);
    sa_status loop(llama_tokens & prompt_tgt, llama_token id_last);

    void ev_token(llama_token id);
    // A Stats, Done or Eog event (Eog also carries the end-of-generation token).
    void ev_stats(int kind, llama_token eog_id = -1);
    void ev_error(int code, const std::string & msg);
    // Hands the step's events to the callback; false if the consumer asked to stop.
    bool flush();
    sa_status decode_failure(int32_t ret, const char * what);
};

void Run::ev_token(llama_token id) {
    const std::string piece = common_token_to_piece(vocab_, id, false);
    s_.body.array(3);
    s_.body.integer(SA_EV_TOKEN);
    s_.body.integer(id);
    s_.body.bin(piece.data(), piece.size());
    ++s_.n_events;
}

void Run::ev_stats(int kind, llama_token eog_id) {
    sa_stats snap;
    s_.stats.set_elapsed(ggml_time_us(), t_decode_start_);
    s_.stats.read(1, &snap);
    s_.body.array(kind == SA_EV_EOG ? 3 : 2);
    s_.body.integer(kind);
    write_stats_map(s_.body, snap);
    if (kind == SA_EV_EOG) s_.body.integer(eog_id);
    ++s_.n_events;
}

void Run::ev_error(int code, const std::string & msg) {
    s_.body.array(3);
    s_.body.integer(SA_EV_ERROR);
    s_.body.integer(code);
    s_.body.str(msg);
    ++s_.n_events;
}

bool Run::flush() {
    if (s_.n_events == 0) return true;
    s_.batch.clear();
    s_.batch.array(s_.n_events);
    s_.batch.append(s_.body);
    s_.body.clear();
    s_.n_events = 0;
    return cb_ == nullptr || cb_(user_, s_.batch.data(), s_.batch.size()) == 0;
}

sa_status Run::decode_failure(int32_t ret, const char * what) {
    if (ret == 2 && cancelled()) return SA_CANCELLED;
    const std::string detail = last_native_log_error();
    const std::string msg = std::string(what) + " failed (llama_decode returned " + std::to_string(ret) + ")" +
                            (ret == 1 ? ": the context is full; raise n_ctx" : detail.empty() ? "" : ": " + detail);
    ev_error(SA_ERR_DECODE, msg);
    flush();
    return SA_OK;  // the terminal Error event was delivered
}

std::optional<sa_status> Run::prefill(llama_tokens & prompt_tgt) {
    const int64_t t0 = ggml_time_us();
    const int32_t n_batch = (int32_t) llama_n_batch(s_.ctx_tgt);
    common_batch batch(s_.ctx_tgt);
    const int32_t n = p_.n_prompt - 1;  // the last prompt token is decoded with the first draft
    for (int32_t i0 = 0; i0 < n; i0 += n_batch) {
        if (cancelled()) return SA_CANCELLED;
        batch.clear();
        const int32_t i1 = std::min(n, i0 + n_batch);
        for (int32_t i = i0; i < i1; ++i) batch.add(p_.prompt[i], i, 0, false);
        const int32_t ret = llama_process(s_.ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, batch.get());
        if (ret != 0) return decode_failure(ret, "prompt prefill");
        if (s_.spec && !common_speculative_process(s_.spec, batch)) {
            if (cancelled()) return SA_CANCELLED;
            ev_error(SA_ERR_DECODE, "the speculative drafter failed to process the prompt");
            flush();
            return SA_OK;
        }
    }
    prompt_tgt.assign(p_.prompt, p_.prompt + n);
    s_.stats.add(&Counters::t_prefill_us, ggml_time_us() - t0);
    return std::nullopt;
}

sa_status Run::execute() {
    t_start_ = ggml_time_us();
    s_.stats.begin_run(t_start_, (uint64_t) p_.n_prompt);
    s_.body.clear();
    s_.n_events = 0;
    next_stats_at_ = p_.emit_stats_every;
    clear_memory(s_.ctx_tgt);
    clear_memory(s_.ctx_dft);
    const bool forget = s_.forget.exchange(false);
    if (forget) s_.memory.clear();
    s_.memory.set_capacity((size_t) s_.memory_capacity.load());
    fresh_ = forget || s_.memory.capacity() == 0;
    llama_tokens prompt_tgt;
    prompt_tgt.reserve(llama_n_ctx(s_.ctx_tgt));
    const std::optional<sa_status> ended = prefill(prompt_tgt);
    const sa_status st = ended ? *ended : loop(prompt_tgt, p_.prompt[p_.n_prompt - 1]);
    s_.stats.set_elapsed(ggml_time_us(), t_decode_start_);
    s_.stats.end_run();
    s_.memory_tokens.store((int64_t) s_.memory.size_tokens());
    s_.memory_bytes.store((int64_t) s_.memory.bytes());
    return st;
}

sa_status Run::loop(llama_tokens & prompt_tgt, llama_token id_last) {
    sa_session & s = s_;
    llama_memory_t mem_tgt = llama_get_memory(s.ctx_tgt);
    llama_memory_t mem_dft = s.ctx_dft ? llama_get_memory(s.ctx_dft) : nullptr;
    const int32_t n_ctx = (int32_t) llama_n_ctx(s.ctx_tgt);
    const bool adaptive = s.spec != nullptr && s.sparams.adaptive != 0 && !s.autod;
    const int32_t n_cap = s.spec ? s.sparams.n_draft : 0;
    if (adaptive) s.adaptive.reset(n_cap, uses_draft_context(s.sparams.type) ? 1 : 0);

    int32_t n_past = (int32_t) prompt_tgt.size();
    common_speculative_begin(s.spec, 0, prompt_tgt);
    if (s.autod) s.autod->begin(prompt_tgt, p_.prompt, p_.n_prompt, fresh_);
    common_batch batch(s.ctx_tgt);
    llama_tokens draft;
    common_prompt_checkpoint ckpt;
    t_decode_start_ = ggml_time_us();

    while (true) {
        if (cancelled()) return SA_CANCELLED;
        int64_t t_draft = 0;
        int32_t n_asked = 0;
        bool drafted_now = false;
        if (draft.empty()) {
            if (s.spec || s.autod) {
                ckpt.update_pos((int64_t) prompt_tgt.size(), llama_memory_seq_pos_min(mem_tgt, 0), llama_memory_seq_pos_max(mem_tgt, 0));
                if (s.use_ckpt_dft) ckpt.update_dft(s.ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
                const int32_t n_budget = std::max(std::min(n_ctx - n_past - 2, p_.max_tokens - n_emitted_ - 1), 0);
                n_asked = s.autod ? n_budget : std::min(n_budget, adaptive ? s.adaptive.choose() : n_cap);
                if (adaptive) s.stats.set_n_draft(n_asked);
                if (s.autod) {
                    const int64_t t0 = ggml_time_us();
                    s.autod->draft(n_asked, n_past, id_last, prompt_tgt, draft);
                    t_draft = ggml_time_us() - t0;
                    s.stats.add(&Counters::t_draft_us, t_draft);
                    s.stats.set_n_draft((int32_t) draft.size());
                } else if (n_asked > 0) {
                    const int64_t t0 = ggml_time_us();
                    common_speculative_get_draft_params(s.spec, 0) = {
                        /* .drafting = */ true,
                        /* .n_max    = */ n_asked,
                        /* .pos0     = */ n_past,
                        /* .id_last  = */ id_last,
                        /* .prompt   = */ &prompt_tgt,
                        /* .result   = */ &draft,
                    };
                    common_speculative_draft(s.spec);
                    drafted_now = true;
                    t_draft = ggml_time_us() - t0;
                    s.stats.add(&Counters::t_draft_us, t_draft);
                }
                if (!draft.empty() && s.use_ckpt_tgt) ckpt.update_tgt(s.ctx_tgt, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
                if (s.ctx_dft) {
                    if (s.use_ckpt_dft) ckpt.load_dft(s.ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
                    if (mem_dft) llama_memory_seq_rm(mem_dft, 0, ckpt.pos_max + 1, -1);
                }
            }
        }

        // verify [id_last, draft...] on the target
        const int64_t t_v0 = ggml_time_us();
        batch.clear();
        batch.add(id_last, n_past++, 0, true);
        for (size_t i = 0; i < draft.size(); ++i) batch.add(draft[i], n_past + (int32_t) i, 0, true);
        const int32_t ret = llama_process(s.ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, batch.get());
        if (ret != 0) return decode_failure(ret, "decoding");
        if (s.spec && !common_speculative_process(s.spec, batch)) {
            if (cancelled()) return SA_CANCELLED;
            ev_error(SA_ERR_DECODE, "the speculative drafter failed to process a batch");
            flush();
            return SA_OK;
        }
        const int64_t t_verify = ggml_time_us() - t_v0;
        s.stats.add(&Counters::t_verify_us, t_verify);

        common_sampler_ptr smpl_save;
        if (s.use_ckpt_tgt) smpl_save.reset(common_sampler_clone(smpl_.get()));
        const int32_t n_draft = (int32_t) draft.size();
        const int64_t t_s0 = ggml_time_us();
        llama_tokens ids = common_sampler_sample_and_accept_n(smpl_.get(), s.ctx_tgt, draft);
        const int64_t t_sample = ggml_time_us() - t_s0;
        s.stats.add(&Counters::t_sample_us, t_sample);
        if (ids.empty()) {
            ev_error(SA_ERR_INTERNAL, "the sampler returned no token");
            flush();
            return SA_OK;
        }
        const int32_t n_accepted = (int32_t) ids.size() - 1;
        const bool rollback = s.use_ckpt_tgt && n_accepted < n_draft;
        if (s.autod) s.autod->observe(ids, n_draft, t_verify, t_sample, !rollback);
        const int32_t drafter = n_draft == 0 ? SA_SPEC_NONE : s.autod ? s.autod->active() : s.sparams.type;

        if (rollback) {
            // the target cannot drop a partial sequence: restore and re-verify the accepted prefix
            draft = std::move(ids);
            ckpt.load_tgt(s.ctx_tgt, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            llama_memory_seq_rm(mem_tgt, 0, ckpt.pos_max + 1, -1);
            if (s.ctx_dft) {
                ckpt.load_dft(s.ctx_dft, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
                if (mem_dft) llama_memory_seq_rm(mem_dft, 0, ckpt.pos_max + 1, -1);
            }
            prompt_tgt.resize((size_t) ckpt.n_tokens);
            smpl_ = std::move(smpl_save);
            n_past = (int32_t) prompt_tgt.size();
            s.stats.add_step(drafter, n_draft, n_accepted);
            continue;
        }

        if (s.spec && !s.autod && (drafted_now || n_accepted > 0)) common_speculative_accept(s.spec, 0, (uint16_t) n_accepted);
        // plain steps (nothing drafted) feed the step-cost line too
        if (adaptive && (drafted_now || n_draft == 0)) s.adaptive.observe(n_asked, n_draft, n_accepted, t_draft, t_verify);
        s.stats.add_step(drafter, n_draft, n_accepted);
        n_past += n_accepted;

        int terminal = -1;
        llama_token eog_id = -1;
        for (size_t i = 0; i < ids.size(); ++i) {
            prompt_tgt.push_back(id_last);
            id_last = ids[i];
            if (llama_vocab_is_eog(vocab_, id_last)) {
                terminal = SA_EV_EOG;
                eog_id = id_last;
                break;
            }
            ev_token(id_last);
            ++n_emitted_;
            s.stats.add(&Counters::tokens_emitted, (uint64_t) 1);
            if (n_emitted_ == 1) s.stats.set_ttft(ggml_time_us() - t_start_);
            if (n_emitted_ >= p_.max_tokens) {
                terminal = SA_EV_DONE;
                break;
            }
        }
        draft.clear();
        llama_memory_seq_rm(mem_tgt, 0, n_past, -1);
        if (mem_dft) llama_memory_seq_rm(mem_dft, 0, n_past, -1);
        if (terminal < 0 && n_past + 1 >= n_ctx) terminal = SA_EV_DONE;  // context full

        if (terminal == SA_EV_EOG) {
            ev_stats(SA_EV_EOG, eog_id);
        } else if (terminal == SA_EV_DONE) {
            ev_stats(SA_EV_DONE);
        } else if (p_.emit_stats_every > 0 && n_emitted_ >= next_stats_at_) {
            ev_stats(SA_EV_STATS);
            while (next_stats_at_ <= n_emitted_) next_stats_at_ += p_.emit_stats_every;
        } else {
            s.stats.set_elapsed(ggml_time_us(), t_decode_start_);
        }
        if (!flush()) return terminal >= 0 ? SA_OK : SA_STOPPED;
        if (terminal >= 0) return SA_OK;
    }
}

}  // namespace

extern "C" {

sa_status sa_vocab_compatible(const sa_model * target, const sa_model * draft) {
    if (target == nullptr || draft == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_vocab_compatible: null model");
    return check_draft_vocab(target, draft);
}

sa_status sa_session_new(sa_model * model, const sa_context_params * cparams, const sa_spec_params * sparams, sa_session ** out) {
    if (model == nullptr || cparams == nullptr || sparams == nullptr || out == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_session_new: null argument");
    }
    *out = nullptr;
    if (model->vocab_only) return fail(SA_ERR_INVALID_ARG, "the model was loaded with vocab_only=True; it can tokenize but not generate");
    sa_status st = validate_context_params(*cparams);
    if (st == SA_OK) st = validate_spec_params(*sparams, *cparams);
    if (st != SA_OK) return st;
    return guarded("creating session", [&]() -> sa_status {
        auto s = std::make_unique<sa_session>();
        s->model = model;
        s->draft_model = sparams->draft_model;
        s->sparams = *sparams;
        s->sparams.draft_model = nullptr;
        if (sparams->type == SA_SPEC_AUTO) {
            s->auto_n_cap = sparams->n_draft;
            s->sparams.type = auto_model_drafter(*s);
            s->sparams.n_draft = std::min(kAutoModelDraft, sparams->n_draft);
            s->sparams.n_min = 0;
            s->sparams.adaptive = 0;
        }
        sa_status st2 = check_spec_models(*s);
        if (st2 == SA_OK) st2 = create_session(*s, *cparams);
        if (st2 != SA_OK) return st2;
        *out = s.release();
        return SA_OK;
    });
}

void sa_session_free(sa_session * session) { delete session; }

sa_status sa_session_run(sa_session * s, const sa_run_params * params, sa_event_cb cb, void * user) {
    if (s == nullptr || params == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_session_run: null argument");
    sa_status st = validate_run(*s, *params);
    if (st != SA_OK) return st;
    if (s->cancel.load()) return SA_CANCELLED;
    return guarded("generation", [&]() -> sa_status {
        sa_status sst = SA_OK;
        common_sampler * smpl = make_sampler(*s->model, params->sampling, &sst);
        if (smpl == nullptr) return sst;
        Run run(*s, *params, smpl, cb, user);
        return run.execute();
    });
}

void sa_session_cancel(sa_session * s) {
    if (s) s->cancel.store(true, std::memory_order_relaxed);
}

void sa_session_clear_cancel(sa_session * s) {
    if (s) s->cancel.store(false, std::memory_order_relaxed);
}

int32_t sa_session_cancel_requested(const sa_session * s) {
    return s && s->cancel.load(std::memory_order_relaxed) ? 1 : 0;
}

void sa_session_stats(const sa_session * s, int32_t which, sa_stats * out) {
    if (s == nullptr || out == nullptr) return;
    s->stats.read(which, out);
}

uint64_t sa_session_stats_version(const sa_session * s) { return s ? s->stats.version() : 0; }

uint32_t sa_session_n_ctx(const sa_session * s) { return s ? llama_n_ctx(s->ctx_tgt) : 0; }

uint32_t sa_session_n_batch(const sa_session * s) { return s ? llama_n_batch(s->ctx_tgt) : 0; }

sa_status sa_session_top2(sa_session * s, const int32_t * tokens, int32_t n, int32_t * top1, int32_t * top2, float * margin) {
    if (s == nullptr || tokens == nullptr || top1 == nullptr || top2 == nullptr || margin == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_session_top2: null argument");
    }
    if (n < 1 || (uint32_t) n >= llama_n_ctx(s->ctx_tgt) || n > (int32_t) llama_n_batch(s->ctx_tgt)) {
        return fail(SA_ERR_PROMPT, "sa_session_top2: need 1..min(n_ctx-1, n_batch) tokens");
    }
    return guarded("top-2 probe", [&]() -> sa_status {
        clear_memory(s->ctx_tgt);
        common_batch batch(s->ctx_tgt);
        for (int32_t i = 0; i < n; ++i) batch.add(tokens[i], i, 0, i == n - 1);
        const int32_t ret = llama_process(s->ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, batch.get());
        if (ret != 0) return fail(SA_ERR_DECODE, "top-2 probe decode failed: " + std::to_string(ret));
        const float * logits = llama_get_logits_ith(s->ctx_tgt, -1);
        const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(s->model->model));
        int32_t a = 0, b = 1;
        if (logits[b] > logits[a]) std::swap(a, b);
        for (int32_t i = 2; i < n_vocab; ++i) {
            if (logits[i] > logits[a]) { b = a; a = i; }
            else if (logits[i] > logits[b]) { b = i; }
        }
        *top1 = a;
        *top2 = b;
        *margin = logits[a] - logits[b];
        clear_memory(s->ctx_tgt);
        return SA_OK;
    });
}

sa_status sa_session_set_memory(sa_session * s, int64_t capacity_tokens) {
    if (s == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_session_set_memory: null session");
    if (capacity_tokens < 0 || capacity_tokens > ((int64_t) 1 << 30)) {
        return fail(SA_ERR_INVALID_ARG, range_msg("memory", (double) capacity_tokens, "0..2^30 tokens"));
    }
    s->memory_capacity.store(capacity_tokens);
    return SA_OK;
}

void sa_session_forget(sa_session * s) {
    if (s) s->forget.store(true);
}

void sa_session_memory_usage(const sa_session * s, int64_t * tokens, int64_t * bytes) {
    if (s == nullptr) return;
    if (tokens) *tokens = s->memory_tokens.load();
    if (bytes) *bytes = s->memory_bytes.load();
}

const char * sa_drafter_name(int32_t drafter) {
    return drafter >= 0 && drafter < SA_N_DRAFTERS && drafter != SA_SPEC_AUTO ? spec_type_name(drafter) : "";
}

void sa_session_print_stats(const sa_session * s) {
    if (s == nullptr) return;
    print_with_log_level(3, [&] {
        if (s->autod) {
            sa_stats snap;
            s->stats.read(0, &snap);
            std::fprintf(stderr, "speculative decoding: auto (drafter: steps, drafted, accepted)\n");
            for (int32_t d = 0; d < SA_N_DRAFTERS; ++d) {
                if (snap.drafter_steps[d] == 0) continue;
                std::fprintf(stderr, "  %-14s %8llu %8llu %8llu\n", spec_type_name(d), (unsigned long long) snap.drafter_steps[d],
                             (unsigned long long) snap.drafter_drafted[d], (unsigned long long) snap.drafter_accepted[d]);
            }
            if (s->spec) common_speculative_print_stats(s->spec);
        } else if (s->spec) {
            common_speculative_print_stats(s->spec);
        } else {
            std::fprintf(stderr, "speculative decoding: none (plain decoding)\n");
        }
        common_perf_print(s->ctx_tgt, nullptr);
    });
}

}  // extern "C"
