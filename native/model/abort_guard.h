// ggml aborts (GGML_ASSERT / GGML_ABORT) turned into C++ exceptions, on the
// calling thread only and only around calls where unwinding is sound.
#pragma once

namespace sa {

// While alive, a ggml abort on this thread throws std::runtime_error with
// ggml's message instead of killing the process. Use it only around
// llama.cpp calls that catch exceptions and clean up after them (model
// loading); elsewhere, and on other threads, ggml aborts as before.
class AbortsAsErrors {
public:
    AbortsAsErrors();
    ~AbortsAsErrors();
    AbortsAsErrors(const AbortsAsErrors &) = delete;
    AbortsAsErrors & operator=(const AbortsAsErrors &) = delete;
};

}  // namespace sa
