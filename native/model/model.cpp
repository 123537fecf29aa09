// Models: loading a GGUF, and the references that keep a model alive.
#include "support/shim_internal.h"
#include "model/abort_guard.h"
#include "model/gguf_check.h"
#include "draft/step_cost_calibration.h"

#include <string>

namespace sa {

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

sa_status load_model(const char * path, const sa_model_params & params, sa_model ** out) {
    *out = nullptr;
    sa_status st = check_gguf_file(path);
    if (st == SA_OK) st = check_gguf_metadata(path);
    if (st != SA_OK) return st;
    return guarded("loading model", [&]() -> sa_status {
        backend_init();
        llama_model_params mp = llama_model_default_params();
        std::vector<std::string> rpc;
        std::vector<ggml_backend_dev_t> devices;  // null-terminated; empty: every device of this process
        if (sa_status st2 = rpc_devices(params.rpc_servers, params.rpc_timeout_ms, rpc, devices); st2 != SA_OK) return st2;
        if (!devices.empty()) mp.devices = devices.data();
        mp.n_gpu_layers = params.n_gpu_layers;
        const bool mmap = params.use_mmap != 0, mlock = params.use_mlock != 0;
        mp.load_mode = mmap ? (mlock ? LLAMA_LOAD_MODE_MMAP_MLOCK : LLAMA_LOAD_MODE_MMAP)
                            : (mlock ? LLAMA_LOAD_MODE_MLOCK : LLAMA_LOAD_MODE_NONE);
        mp.load_mtp = params.load_mtp != 0;
        mp.vocab_only = params.vocab_only != 0;
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
        auto * m = new sa_model{model, path, params.load_mtp != 0, params.vocab_only != 0};
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

}  // namespace sa
