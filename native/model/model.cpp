// Process-wide setup (backend, logging), models, metadata and the tokenizer.
#include "support/shim_internal.h"
#include "model/abort_guard.h"
#include "model/gguf_check.h"
#include "draft/step_cost_calibration.h"

#include "common.h"
#include "log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

namespace sa {

static thread_local std::string g_last_error;
static std::mutex g_log_mutex;
static std::string g_last_log_error;
static std::atomic<int> g_log_level{1};

sa_status fail(sa_status status, const std::string & msg) {
    g_last_error = msg;
    return status;
}

std::string last_native_log_error() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    return g_last_log_error;
}

static int level_rank(ggml_log_level level) {
    switch (level) {
        case GGML_LOG_LEVEL_ERROR: return 1;
        case GGML_LOG_LEVEL_WARN:  return 2;
        case GGML_LOG_LEVEL_INFO:  return 3;
        case GGML_LOG_LEVEL_DEBUG: return 4;
        default:                   return 3;
    }
}

static void log_callback(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR && text != nullptr) {
        std::string line(text);
        while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
        if (!line.empty()) {
            std::lock_guard<std::mutex> lock(g_log_mutex);
            g_last_log_error = line;
        }
    }
    if (level_rank(level) <= g_log_level.load(std::memory_order_relaxed)) {
        std::fputs(text, stderr);
    }
}

static void apply_common_log_level(int level) {
    // common/ logs through its own worker; map our 0..4 onto its thresholds.
    common_log_set_verbosity_thold(level <= 0 ? -1 : level == 1 ? LOG_LEVEL_ERROR
                                   : level == 2 ? LOG_LEVEL_WARN : level == 3 ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG);
}

void print_with_log_level(int level, const std::function<void()> & fn) {
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    const int saved = g_log_level.load();
    apply_common_log_level(level);
    fn();
    common_log_flush(common_log_main());
    apply_common_log_level(saved);
}

const sa_model * model_retain(const sa_model * m) {
    if (m != nullptr) m->refs.fetch_add(1, std::memory_order_relaxed);
    return m;
}

void model_release(const sa_model * m) {
    if (m == nullptr || m->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    forget_step_cost_tables(m->model);
    llama_model_free(m->model);  // closes its RPC connections when it was the last model on them
    rpc_attach(*m, -1);
    delete m;
}

}  // namespace sa

using namespace sa;

extern "C" {

const char * sa_last_error(void) { return g_last_error.c_str(); }

int32_t sa_event_schema_version(void) { return SA_EVENT_SCHEMA_VERSION; }

void sa_backend_init(void) {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_set(log_callback, nullptr);
        apply_common_log_level(g_log_level.load());
        llama_backend_init();
    });
}

void sa_set_log_level(int32_t level) {
    g_log_level.store(level);
    apply_common_log_level(level);
}

const char * sa_system_info(void) { return llama_print_system_info(); }

static sa_status check_gguf_file(const char * path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return fail(SA_ERR_MODEL_LOAD, std::string("model file not found or not readable: ") + path);
    }
    char magic[4] = {0, 0, 0, 0};
    in.read(magic, 4);
    if (in.gcount() != 4 || std::memcmp(magic, "GGUF", 4) != 0) {
        return fail(SA_ERR_MODEL_LOAD, std::string(path) + " is not a GGUF file (bad magic); convert it with llama.cpp's convert_hf_to_gguf.py");
    }
    return SA_OK;
}

sa_status sa_model_load(const char * path, const sa_model_params * params, sa_model ** out) {
    if (path == nullptr || params == nullptr || out == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_model_load: null argument");
    }
    *out = nullptr;
    sa_status st = check_gguf_file(path);
    if (st == SA_OK) st = check_gguf_metadata(path);
    if (st != SA_OK) return st;
    return guarded("loading model", [&]() -> sa_status {
        sa_backend_init();
        llama_model_params mp = llama_model_default_params();
        std::vector<std::string> rpc;
        std::vector<ggml_backend_dev_t> devices;  // null-terminated; empty: every device of this process
        if (sa_status st2 = rpc_devices(params->rpc_servers, rpc, devices); st2 != SA_OK) return st2;
        if (!devices.empty()) mp.devices = devices.data();
        mp.n_gpu_layers = params->n_gpu_layers;
        const bool mmap = params->use_mmap != 0, mlock = params->use_mlock != 0;
        mp.load_mode = mmap ? (mlock ? LLAMA_LOAD_MODE_MMAP_MLOCK : LLAMA_LOAD_MODE_MMAP)
                            : (mlock ? LLAMA_LOAD_MODE_MLOCK : LLAMA_LOAD_MODE_NONE);
        mp.load_mtp = params->load_mtp != 0;
        mp.vocab_only = params->vocab_only != 0;
        llama_model * model = nullptr;
        {
            AbortsAsErrors guard;  // asserts of llama.cpp's loader we do not check above
            model = llama_model_load_from_file(path, mp);
        }
        if (model == nullptr) {
            std::string detail = last_native_log_error();
            return fail(SA_ERR_MODEL_LOAD, std::string("llama.cpp could not load ") + path +
                        (detail.empty() ? "" : ": " + detail));
        }
        auto * m = new sa_model{model, path, params->load_mtp != 0, params->vocab_only != 0};
        m->rpc = std::move(rpc);
        rpc_attach(*m, 1);
        if (const std::string why = rpc_failure(*m); !why.empty()) {  // a worker died while the weights went over
            model_release(m);
            return fail(SA_ERR_MODEL_LOAD, std::string("llama.cpp could not load ") + path + ": " + why);
        }
        *out = m;
        return SA_OK;
    });
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

static sa_status copy_out(const std::string & s, char * buf, int32_t cap, int32_t * n_out) {
    if (n_out) *n_out = (int32_t) s.size();
    if (buf == nullptr || cap < (int32_t) s.size() + 1) {
        return fail(SA_ERR_BUFFER, "buffer too small");
    }
    std::memcpy(buf, s.data(), s.size());
    buf[s.size()] = '\0';
    return SA_OK;
}

sa_status sa_model_chat_template(const sa_model * m, char * buf, int32_t cap, int32_t * n_out) {
    if (m == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_model_chat_template: null model");
    const char * tmpl = llama_model_chat_template(m->model, nullptr);
    return copy_out(tmpl ? tmpl : "", buf, cap, n_out);
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
