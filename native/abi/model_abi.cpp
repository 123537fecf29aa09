// The C ABI of the process and of models: errors, logs, loading, metadata, tokens (see spec_actor.h).
#include "support/shim_internal.h"

#include "build-info.h"

#include <cstdio>
#include <cstring>
#include <string>

using namespace sa;

extern "C" {

const char * sa_last_error(void) { return last_error(); }

int32_t sa_event_schema_version(void) { return SA_EVENT_SCHEMA_VERSION; }

void sa_backend_init(void) { backend_init(); }

void sa_set_log_level(int32_t level) { set_log_level(level); }

const char * sa_system_info(void) { return llama_print_system_info(); }

const char * sa_llama_build_info(void) { return llama_build_info(); }

sa_status sa_model_load(const char * path, const sa_model_params * params, sa_model ** out) {
    if (path == nullptr || params == nullptr || out == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_model_load: null argument");
    }
    return load_model(path, *params, out);
}

void sa_model_free(sa_model * model) { model_release(model); }

static void copy_cstr(char * dst, size_t cap, const char * src) {
    std::snprintf(dst, cap, "%s", src ? src : "");
}

sa_status sa_model_get_info(const sa_model * m, sa_model_info * out) {
    if (m == nullptr || out == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_model_get_info: null argument");
    std::memset(out, 0, sizeof *out);
    char arch[64] = {0};
    llama_model_meta_val_str(m->model, "general.architecture", arch, sizeof arch);
    copy_cstr(out->arch, sizeof out->arch, arch);
    llama_model_desc(m->model, out->description, sizeof out->description);
    const llama_vocab * vocab = llama_model_get_vocab(m->model);
    out->n_params = llama_model_n_params(m->model);
    out->size_bytes = llama_model_size(m->model);
    out->n_vocab = llama_vocab_n_tokens(vocab);
    out->n_ctx_train = llama_model_n_ctx_train(m->model);
    out->n_layer = llama_model_n_layer(m->model);
    out->n_embd = llama_model_n_embd(m->model);
    out->n_layer_nextn = llama_model_n_layer_nextn(m->model);
    out->is_recurrent = llama_model_is_recurrent(m->model) || llama_model_is_hybrid(m->model);
    out->token_bos = llama_vocab_bos(vocab);
    out->token_eos = llama_vocab_eos(vocab);
    out->vocab_type = llama_vocab_type(vocab);
    out->add_bos = llama_vocab_get_add_bos(vocab);
    return SA_OK;
}

sa_status sa_model_fim_tokens(const sa_model * m, int32_t * out) {
    if (m == nullptr || out == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_model_fim_tokens: null argument");
    const llama_vocab * vocab = llama_model_get_vocab(m->model);
    const llama_token ids[] = {llama_vocab_fim_pre(vocab), llama_vocab_fim_suf(vocab), llama_vocab_fim_mid(vocab),
                               llama_vocab_fim_pad(vocab), llama_vocab_fim_rep(vocab), llama_vocab_fim_sep(vocab)};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; ++i) out[i] = ids[i] == LLAMA_TOKEN_NULL ? -1 : ids[i];
    return SA_OK;
}

sa_status sa_model_chat_template(const sa_model * m, char * buf, int32_t cap, int32_t * n_out) {
    if (m == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_model_chat_template: null model");
    const char * tmpl = llama_model_chat_template(m->model, nullptr);
    return copy_out(tmpl ? tmpl : "", buf, cap, n_out);
}

sa_status sa_model_rpc_failure(const sa_model * m, char * buf, int32_t cap, int32_t * n_out) {
    if (m == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_model_rpc_failure: null model");
    return copy_out(rpc_failure(*m), buf, cap, n_out);
}

sa_status sa_model_meta(const sa_model * m, const char * key, char * buf, int32_t cap, int32_t * n_out) {
    if (m == nullptr || key == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_model_meta: null argument");
    const int32_t n = llama_model_meta_val_str(m->model, key, nullptr, 0);
    if (n < 0) return fail(SA_ERR_INVALID_ARG, std::string("model has no metadata key ") + key);
    std::string value((size_t) n + 1, '\0');
    llama_model_meta_val_str(m->model, key, value.data(), value.size());
    value.resize((size_t) n);
    return copy_out(value, buf, cap, n_out);
}

sa_status sa_tokenize(const sa_model * m, const char * text, int32_t len, int32_t add_special,
                      int32_t parse_special, int32_t * out, int32_t cap, int32_t * n_out) {
    if (m == nullptr || text == nullptr || len < 0 || n_out == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_tokenize: null argument or negative length");
    }
    const llama_vocab * vocab = llama_model_get_vocab(m->model);
    const int32_t n = llama_tokenize(vocab, text, len, out, out ? cap : 0, add_special != 0, parse_special != 0);
    if (n == INT32_MIN) return fail(SA_ERR_INVALID_ARG, "text too long to tokenize");
    if (n < 0) {
        *n_out = -n;
        return fail(SA_ERR_BUFFER, "token buffer too small");
    }
    *n_out = n;
    return SA_OK;
}

sa_status sa_token_piece(const sa_model * m, int32_t token, int32_t special, char * buf, int32_t cap, int32_t * n_out) {
    if (m == nullptr || n_out == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_token_piece: null argument");
    const llama_vocab * vocab = llama_model_get_vocab(m->model);
    if (token < 0 || token >= llama_vocab_n_tokens(vocab)) {
        return fail(SA_ERR_INVALID_ARG, "token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                    std::to_string(llama_vocab_n_tokens(vocab) - 1) + ")");
    }
    const int32_t n = llama_token_to_piece(vocab, token, buf, buf ? cap : 0, 0, special != 0);
    if (n < 0) {
        *n_out = -n;
        return fail(SA_ERR_BUFFER, "piece buffer too small");
    }
    *n_out = n;
    return SA_OK;
}

int32_t sa_token_is_eog(const sa_model * m, int32_t token) {
    if (m == nullptr) return 0;
    const llama_vocab * vocab = llama_model_get_vocab(m->model);
    if (token < 0 || token >= llama_vocab_n_tokens(vocab)) return 0;
    return llama_vocab_is_eog(vocab, token) ? 1 : 0;
}

}  // extern "C"
