// Errors and logs: the calling thread's last error, llama.cpp's log captured, its level.
#include "support/shim_internal.h"

#include "common.h"
#include "log.h"

#include <atomic>
#include <cstdio>
#include <cstring>
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

const char * last_error() { return g_last_error.c_str(); }

void backend_init() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_set(log_callback, nullptr);
        apply_common_log_level(g_log_level.load());
        llama_backend_init();
    });
}

void set_log_level(int32_t level) {
    g_log_level.store(level);
    apply_common_log_level(level);
}

sa_status copy_out(const std::string & text, char * buf, int32_t cap, int32_t * n_out) {
    if (text.size() > (size_t) INT32_MAX - 1) return fail(SA_ERR_INVALID_ARG, "result too large");
    if (n_out) *n_out = (int32_t) text.size();
    if (buf == nullptr || cap < (int32_t) text.size() + 1) return fail(SA_ERR_BUFFER, "buffer too small");
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return SA_OK;
}

}  // namespace sa
