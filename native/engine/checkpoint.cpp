#include "engine/checkpoint.h"

namespace sa {

bool StateCheckpoint::save(llama_context * ctx, llama_seq_id seq) {
    const size_t size = llama_state_seq_get_size_ext(ctx, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    data_.resize(size);
    if (size == 0 || llama_state_seq_get_data_ext(ctx, data_.data(), size, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) != size) {
        data_.clear();
        return false;
    }
    return true;
}

void StateCheckpoint::reserve(llama_context * ctx, llama_seq_id seq) {
    const size_t size = llama_state_seq_get_size_ext(ctx, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    if (size > data_.size()) data_.resize(size);  // value-initialised: its pages are written now
}

bool StateCheckpoint::restore(llama_context * ctx, llama_seq_id seq) const {
    if (data_.empty()) return false;
    return llama_state_seq_set_data_ext(ctx, data_.data(), data_.size(), seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) ==
           data_.size();
}

}  // namespace sa
