// The C ABI of RPC workers (model/rpc.cpp): how many loaded models use a
// worker, and serving this process's devices to others as a worker.
#include "support/shim_internal.h"

using namespace sa;

extern "C" {

int32_t sa_rpc_models_on(const char * endpoint) { return rpc_models_on(endpoint); }

sa_status sa_rpc_serve(const char * host, int32_t port, int32_t n_threads) { return rpc_serve(host, port, n_threads); }

}  // extern "C"
