// Definitions shared by the shim's translation units (not part of the ABI).
#pragma once

#include "abi/spec_actor.h"
#include "support/shim_errors.h"

#include "llama.h"

#include <atomic>
#include <functional>
#include <string>
#include <vector>

// Reference counted: the caller's handle is one reference (sa_model_free
// drops it) and every session holds one on its target and draft model, so a
// model freed while a session uses it lives until that session is freed.
struct sa_model {
    llama_model * model;
    std::string path;
    bool load_mtp;
    bool vocab_only;
    mutable std::atomic<int> refs{1};
    std::vector<std::string> rpc;  // the RPC workers holding some of its layers (rpc.cpp)
};

namespace sa {
// Takes one more reference on m (null: no-op) and returns it.
const sa_model * model_retain(const sa_model * m);
// Drops one reference; the last one frees the llama.cpp model (null: no-op).
void model_release(const sa_model * m);

// Loads the GGUF at path after checking what llama.cpp would assert on
// (model/model.cpp); *out is the caller's reference, null on an error.
sa_status load_model(const char * path, const sa_model_params & params, sa_model ** out);

// A reference held for an object's lifetime (a session's on its models).
class ModelRef {
public:
    ModelRef() = default;
    explicit ModelRef(const sa_model * m) : m_(model_retain(m)) {}
    ModelRef(const ModelRef &) = delete;
    ModelRef & operator=(const ModelRef &) = delete;
    ~ModelRef() { model_release(m_); }
    // Holds m instead of what it held.
    void reset(const sa_model * m) { model_release(m_), m_ = model_retain(m); }
private:
    const sa_model * m_ = nullptr;
};

// Runs fn (which prints through llama.cpp/common logging) at the given level.
void print_with_log_level(int level, const std::function<void()> & fn);

// The devices of a model placed on the RPC workers of servers ("host:port"
// comma-separated; null or "" for none): this process's accelerators, then
// each worker's devices, null-terminated (empty for none), and the workers'
// endpoints. Each worker's sends and receives that move nothing for
// timeout_ms fail its connection (0: no bound). Fails when a worker does not
// answer (rpc.cpp).
sa_status rpc_devices(const char * servers, uint32_t timeout_ms, std::vector<std::string> & endpoints,
                      std::vector<ggml_backend_dev_t> & out);

// Counts m as a live model on each of its RPC workers (delta 1, once loaded)
// or no longer (-1, once freed): sa_rpc_models_on reads the counts.
void rpc_attach(const sa_model & m, int delta);

// Why the model cannot compute: one of its RPC workers stopped answering or timed out; "" when none did.
std::string rpc_failure(const sa_model & m);
// Loaded models that use the worker at endpoint ("host:port").
int32_t rpc_models_on(const char * endpoint);
// Serves this process's devices to RPC clients on host:port; returns only
// when it cannot listen (or the arguments are bad).
sa_status rpc_serve(const char * host, int32_t port, int32_t n_threads);
}
