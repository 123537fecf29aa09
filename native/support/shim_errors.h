// Error reporting and log capture shared by the shim's translation units.
#pragma once

#include "abi/spec_actor.h"

#include <string>

namespace sa {

// Records msg as the calling thread's last error and returns status.
sa_status fail(sa_status status, const std::string & msg);

// The calling thread's last error (sa_last_error).
const char * last_error();

// The most recent error line llama.cpp / ggml logged (any thread), or "".
std::string last_native_log_error();

// Once per process: llama.cpp's log goes through ours, and its backends start (sa_backend_init).
void backend_init();

// What llama.cpp's and common's logs print, 0 (nothing) .. 4 (debug) (sa_set_log_level).
void set_log_level(int32_t level);

// text into buf (NUL-terminated) and its length into n_out (when not null):
// SA_ERR_BUFFER when cap cannot hold it, with n_out still set.
sa_status copy_out(const std::string & text, char * buf, int32_t cap, int32_t * n_out);

// Runs fn, turning any C++ exception into an sa_status with its message.
template <typename Fn>
sa_status guarded(const char * what, Fn && fn) {
    try {
        return fn();
    } catch (const std::bad_alloc &) {
        return fail(SA_ERR_INTERNAL, std::string(what) + ": out of memory");
    } catch (const std::exception & e) {
        return fail(SA_ERR_INTERNAL, std::string(what) + ": " + e.what());
    } catch (...) {
        return fail(SA_ERR_INTERNAL, std::string(what) + ": unknown native exception");
    }
}

}  // namespace sa
