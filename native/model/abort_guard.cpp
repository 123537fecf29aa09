// See abort_guard.h. ggml calls the abort callback and then abort(); a throw
// from the callback unwinds out of ggml_abort (which holds no resources) into
// llama.cpp's C++ caller, whose try/catch reports "error loading model".
#include "model/abort_guard.h"

#include "ggml.h"

#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>

namespace sa {
namespace {

thread_local int t_depth = 0;

void on_ggml_abort(const char * message) {
    if (t_depth > 0) throw std::runtime_error(std::string("llama.cpp refused the file: ") + message);
    std::fprintf(stderr, "%s\n", message);  // ggml's default, then it aborts
}

}  // namespace

AbortsAsErrors::AbortsAsErrors() {
    static std::once_flag once;
    std::call_once(once, [] { ggml_set_abort_callback(on_ggml_abort); });
    ++t_depth;
}

AbortsAsErrors::~AbortsAsErrors() { --t_depth; }

}  // namespace sa
