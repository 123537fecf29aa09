// Bounds that llama.cpp's load_hparams GGML_ASSERTs (llama-model.cpp): a file
// that breaks them aborted the interpreter (issue 11); here it gets an error.
#include "model/gguf_check.h"
#include "support/shim_errors.h"

#include "gguf.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

namespace sa {
namespace {

constexpr int64_t kMaxLayers = 512;    // LLAMA_MAX_LAYERS (src/llama-hparams.h)
constexpr int64_t kMaxExperts = 1024;  // LLAMA_MAX_EXPERTS
// The last llama_expert_gating_func_type (src/llama-hparams.h): the MoE graph
// aborts on any other value the first time it is built (llm_graph_context::build_moe_ffn).
constexpr int64_t kMaxGatingFunc = 4;  // LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS

using GgufPtr = std::unique_ptr<gguf_context, decltype(&gguf_free)>;

std::optional<int64_t> integer_at(gguf_type type, const void * data) {
    switch (type) {
        case GGUF_TYPE_UINT8:  return *static_cast<const uint8_t *>(data);
        case GGUF_TYPE_INT8:   return *static_cast<const int8_t *>(data);
        case GGUF_TYPE_UINT16: return *static_cast<const uint16_t *>(data);
        case GGUF_TYPE_INT16:  return *static_cast<const int16_t *>(data);
        case GGUF_TYPE_UINT32: return *static_cast<const uint32_t *>(data);
        case GGUF_TYPE_INT32:  return *static_cast<const int32_t *>(data);
        case GGUF_TYPE_UINT64: return (int64_t) std::min<uint64_t>(*static_cast<const uint64_t *>(data), INT64_MAX);
        case GGUF_TYPE_INT64:  return *static_cast<const int64_t *>(data);
        case GGUF_TYPE_BOOL:   return *static_cast<const int8_t *>(data) != 0;
        default:               return std::nullopt;
    }
}

size_t integer_size(gguf_type type) {
    switch (type) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
        case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: return 4;
        case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: return 8;
        default: return 0;
    }
}

class Meta {
public:
    Meta(const gguf_context * ctx, std::string arch) : ctx_(ctx), arch_(std::move(arch)) {}

    std::string key(const char * suffix) const { return arch_ + "." + suffix; }

    // The key's integer value (the largest element of an integer array); nullopt if absent or not integer.
    std::optional<int64_t> max_of(const char * suffix) const {
        const int64_t id = gguf_find_key(ctx_, key(suffix).c_str());
        if (id < 0) return std::nullopt;
        const gguf_type type = gguf_get_kv_type(ctx_, id);
        if (type != GGUF_TYPE_ARRAY) {  // gguf_get_val_data asserts on strings: ask for integers only
            return integer_size(type) ? integer_at(type, gguf_get_val_data(ctx_, id)) : std::nullopt;
        }
        const gguf_type elem = gguf_get_arr_type(ctx_, id);
        const size_t n = gguf_get_arr_n(ctx_, id), size = integer_size(elem);
        if (size == 0) return std::nullopt;
        const auto * data = static_cast<const uint8_t *>(gguf_get_arr_data(ctx_, id));
        std::optional<int64_t> best;
        for (size_t i = 0; i < n; ++i) {
            const auto v = integer_at(elem, data + i * size);
            if (v && (!best || *v > *best)) best = v;
        }
        return best;
    }

private:
    const gguf_context * ctx_;
    std::string arch_;
};

sa_status bad(const std::string & path, const std::string & what) {
    return fail(SA_ERR_MODEL_LOAD, path + " is damaged or not a model llama.cpp can load: " + what);
}

std::string value_of(const Meta & m, const char * suffix, int64_t v) {
    return m.key(suffix) + " is " + std::to_string(v);
}

sa_status check_counts(const Meta & m, const std::string & path) {
    const auto blocks = m.max_of("block_count");
    if (!blocks) return SA_OK;  // missing: llama.cpp says "key not found"
    if (*blocks < 1 || *blocks > kMaxLayers) {
        return bad(path, value_of(m, "block_count", *blocks) + "; a model has 1 to " + std::to_string(kMaxLayers) + " blocks");
    }
    const int64_t nextn = m.max_of("nextn_predict_layers").value_or(0);
    if (nextn < 0 || nextn > *blocks) {
        return bad(path, value_of(m, "nextn_predict_layers", nextn) + "; it must be between 0 and block_count (" +
                   std::to_string(*blocks) + ")");
    }
    const int64_t experts = m.max_of("expert_count").value_or(0);
    const int64_t used = m.max_of("expert_used_count").value_or(0);
    const int64_t groups = m.max_of("expert_group_count").value_or(0);
    const int64_t group_used = m.max_of("expert_group_used_count").value_or(0);
    if (experts < 0 || experts > kMaxExperts) {
        return bad(path, value_of(m, "expert_count", experts) + "; it must be between 0 and " + std::to_string(kMaxExperts));
    }
    if (experts == 0) {
        if (used != 0 || groups != 0) {
            return bad(path, m.key("expert_count") + " is 0 but " + m.key(used != 0 ? "expert_used_count" : "expert_group_count") +
                       " is " + std::to_string(used != 0 ? used : groups) + "; a model without experts uses none");
        }
        return SA_OK;
    }
    if (used < 1 || used > experts) {
        return bad(path, value_of(m, "expert_used_count", used) + "; it must be between 1 and expert_count (" +
                   std::to_string(experts) + ")");
    }
    if (groups < 0 || groups >= experts) {
        return bad(path, value_of(m, "expert_group_count", groups) + "; it must be below expert_count (" +
                   std::to_string(experts) + ")");
    }
    const int64_t gating = m.max_of("expert_gating_func").value_or(0);
    if (gating < 0 || gating > kMaxGatingFunc) {
        return bad(path, value_of(m, "expert_gating_func", gating) + "; llama.cpp knows gating functions 0 to " +
                   std::to_string(kMaxGatingFunc));
    }
    if (groups > 1 && (experts % groups != 0 || group_used < 1 || group_used >= groups)) {
        return bad(path, "expert groups do not divide the experts: expert_count " + std::to_string(experts) +
                   ", expert_group_count " + std::to_string(groups) + ", expert_group_used_count " +
                   std::to_string(group_used) + " (need count % groups == 0 and 0 < used < groups)");
    }
    return SA_OK;
}

// Rotary dimensions: some architectures (glm4moe, ...) rotate part of each
// head and never check the count; ggml_rope then asserts while the first
// graph is built, and 0 hung the loop.
sa_status check_rope(const Meta & m, const std::string & path) {
    const auto n_rot = m.max_of("rope.dimension_count");
    if (!n_rot) return SA_OK;
    const auto key_length = m.max_of("attention.key_length");
    const auto n_embd = m.max_of("embedding_length");
    const auto n_head = m.max_of("attention.head_count");
    const int64_t head_dim = key_length ? *key_length : (n_embd && n_head && *n_head > 0 ? *n_embd / *n_head : 0);
    if (head_dim <= 0) return SA_OK;  // llama.cpp reports missing or zero sizes itself
    if (*n_rot < 2 || *n_rot > head_dim || *n_rot % 2 != 0) {
        return bad(path, value_of(m, "rope.dimension_count", *n_rot) + "; it must be even and between 2 and the head size (" +
                   std::to_string(head_dim) + ")");
    }
    return SA_OK;
}

}  // namespace

sa_status check_gguf_file(const char * path) {
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

sa_status check_gguf_metadata(const char * path) {
    gguf_init_params params{};
    params.no_alloc = true;
    params.ctx = nullptr;
    GgufPtr ctx(gguf_init_from_file(path, params), &gguf_free);
    if (!ctx) return SA_OK;  // llama.cpp reports unreadable files with its own message
    const int64_t arch_id = gguf_find_key(ctx.get(), "general.architecture");
    if (arch_id < 0 || gguf_get_kv_type(ctx.get(), arch_id) != GGUF_TYPE_STRING) return SA_OK;
    const Meta meta(ctx.get(), gguf_get_val_str(ctx.get(), arch_id));
    sa_status st = check_counts(meta, path);
    return st != SA_OK ? st : check_rope(meta, path);
}

}  // namespace sa
