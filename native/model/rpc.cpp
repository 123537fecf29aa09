// llama.cpp's RPC backend (ggml-rpc): a model's layers on other machines'
// devices, placed as llama.cpp's --rpc places them, and the worker that
// serves them (docs/decisions/0097).
//
// ggml-rpc's client aborted the process when a worker could not be reached or
// stopped answering; patch 0009 (native/llama/patches/) makes such a
// connection fail instead (its commands complete without I/O and its graph
// computations fail), and ggml_backend_rpc_server_failed says so. The shim
// checks that after a model loads, before a session is made and after every
// decode, so a dead worker ends the request with an Error event, and a model
// on it refuses further work with a message that says which worker it was.
// Patch 0010 bounds each send and receive (the model's rpc_timeout_ms), so a
// worker that is stopped or stuck fails the same way (docs/decisions/0105).
#include "support/shim_internal.h"

#include "ggml-backend.h"
#ifdef SA_HAVE_RPC
#include "ggml-rpc.h"
#endif

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

namespace sa {

namespace {

// "host:port" with a port in 1..65535 and a non-empty host.
bool well_formed(const std::string & endpoint) {
    const size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) return false;
    int port = 0;
    for (size_t i = colon + 1; i < endpoint.size(); ++i) {
        if (endpoint[i] < '0' || endpoint[i] > '9' || (port = port * 10 + (endpoint[i] - '0')) > 65535) return false;
    }
    return port > 0;
}

}  // namespace

sa_status rpc_devices(const char * servers, uint32_t timeout_ms, std::vector<std::string> & endpoints,
                      std::vector<ggml_backend_dev_t> & out) {
    endpoints.clear();
    out.clear();
    if (servers == nullptr || servers[0] == '\0') return SA_OK;
    std::string list(servers);
    for (size_t start = 0; start <= list.size();) {
        const size_t comma = std::min(list.find(',', start), list.size());
        const std::string endpoint = list.substr(start, comma - start);
        if (!well_formed(endpoint)) {
            return fail(SA_ERR_INVALID_ARG, "RPC worker \"" + endpoint + "\" is not host:port");
        }
        endpoints.push_back(endpoint);
        start = comma + 1;
    }
#ifndef SA_HAVE_RPC
    return fail(SA_ERR_INVALID_ARG, "this build of spec_actor has no RPC backend (llama.cpp built with GGML_RPC=OFF)");
#else
    if (endpoints.size() > GGML_RPC_MAX_SERVERS) {
        return fail(SA_ERR_INVALID_ARG, "at most " + std::to_string(GGML_RPC_MAX_SERVERS) + " RPC workers");
    }
    // the process's own accelerators first (as llama.cpp lists them), then the workers' devices
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const enum ggml_backend_dev_type type = ggml_backend_dev_type(dev);
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) out.push_back(dev);
    }
    for (const std::string & endpoint : endpoints) {
#ifdef GGML_RPC_HAS_SERVER_FAILED
        if (ggml_backend_rpc_server_failed(endpoint.c_str())) {
            return fail(SA_ERR_MODEL_LOAD, "RPC worker " + endpoint + " failed earlier and a model or session on "
                        "it is still open; close those, then load the model again");
        }
#endif
#ifdef GGML_RPC_HAS_TIMEOUT
        // patch 0010: a stuck worker fails its calls after timeout_ms (the live
        // connection's bound too, which every model on the worker shares)
        ggml_backend_rpc_set_timeout(endpoint.c_str(), timeout_ms);
#else
        (void) timeout_ms;
#endif
        // registered once per endpoint and process (not with ggml's registry:
        // models loaded without rpc stay on this machine)
        ggml_backend_reg_t reg = ggml_backend_rpc_add_server(endpoint.c_str());
        if (reg == nullptr || ggml_backend_reg_dev_count(reg) == 0) {
            return fail(SA_ERR_MODEL_LOAD, "RPC worker " + endpoint + " does not answer (is `spec-actor rpc-worker` "
                        "running there, and reachable?)");
        }
        for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) out.push_back(ggml_backend_reg_dev_get(reg, i));
    }
    out.push_back(nullptr);  // llama_model_params.devices ends with a null
    return SA_OK;
#endif
}

namespace {
std::mutex g_attached_mutex;
std::map<std::string, int> g_attached;  // endpoint -> live models on it
}  // namespace

void rpc_attach(const sa_model & m, int delta) {
    std::lock_guard<std::mutex> lock(g_attached_mutex);
    for (const std::string & endpoint : m.rpc) {
        if ((g_attached[endpoint] += delta) <= 0) g_attached.erase(endpoint);
    }
}

std::string rpc_failure(const sa_model & m) {
#if defined(SA_HAVE_RPC) && defined(GGML_RPC_HAS_SERVER_FAILED)
    for (const std::string & endpoint : m.rpc) {
        if (!ggml_backend_rpc_server_failed(endpoint.c_str())) continue;
        std::string what = "stopped answering (its process ended or the network failed)";
#ifdef GGML_RPC_HAS_TIMEOUT
        if (const uint32_t ms = ggml_backend_rpc_server_timed_out(endpoint.c_str()); ms > 0) {
            char seconds[32];
            std::snprintf(seconds, sizeof seconds, "%g", ms / 1000.0);
            what = std::string("did not answer within the RPC timeout of ") + seconds +
                   " s (its process is stopped or stuck, or the network drops its packets)";
        }
#endif
        return "RPC worker " + endpoint + " " + what + "; the model's layers there are lost: load it again "
               "once the worker is back";
    }
#else
    (void) m;
#endif
    return "";
}

int32_t rpc_models_on(const char * endpoint) {
    if (endpoint == nullptr) return 0;
    std::lock_guard<std::mutex> lock(g_attached_mutex);
    const auto it = g_attached.find(endpoint);
    return it == g_attached.end() ? 0 : it->second;
}

sa_status rpc_serve(const char * host, int32_t port, int32_t n_threads) {
    if (host == nullptr || inet_addr(host) == INADDR_NONE) {
        return fail(SA_ERR_INVALID_ARG, std::string("host ") + (host ? host : "(null)") +
                    " is not an IPv4 address (ggml's RPC server listens on one, e.g. 127.0.0.1 or 0.0.0.0)");
    }
    if (port < 1 || port > 65535) return fail(SA_ERR_INVALID_ARG, "port " + std::to_string(port) + " is not 1..65535");
    if (n_threads < 1) return fail(SA_ERR_INVALID_ARG, "threads must be at least 1");
#ifndef SA_HAVE_RPC
    return fail(SA_ERR_INVALID_ARG, "this build of spec_actor has no RPC backend (llama.cpp built with GGML_RPC=OFF)");
#else
    backend_init();
    // as llama.cpp's rpc-server: the accelerators, else the CPU
    std::vector<ggml_backend_dev_t> devices;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const enum ggml_backend_dev_type type = ggml_backend_dev_type(dev);
        if (type != GGML_BACKEND_DEVICE_TYPE_CPU && type != GGML_BACKEND_DEVICE_TYPE_ACCEL) devices.push_back(dev);
    }
    if (devices.empty()) {
        ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        if (cpu != nullptr) devices.push_back(cpu);
    }
    if (devices.empty()) return fail(SA_ERR_INTERNAL, "no device to serve");
    const std::string endpoint = std::string(host) + ":" + std::to_string(port);
    // returns only when it could not listen (it prints why)
    ggml_backend_rpc_start_server(endpoint.c_str(), nullptr, (size_t) n_threads, devices.size(), devices.data());
    return fail(SA_ERR_INVALID_ARG, "cannot listen on " + endpoint + " (address in use, or not this machine's)");
#endif
}

}  // namespace sa
