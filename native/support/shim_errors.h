// Error reporting and log capture shared by the shim's translation units.
#pragma once

#include "abi/spec_actor.h"

#include <string>

namespace sa {

// Records msg as the calling thread's last error and returns status.
sa_status fail(sa_status status, const std::string & msg);

// The most recent error line llama.cpp / ggml logged (any thread), or "".
std::string last_native_log_error();

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
