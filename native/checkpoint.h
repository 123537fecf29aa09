// A state checkpoint of one sequence (the recurrent part of a recurrent or
// hybrid context, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY), taken and restored
// with checked results: a failure is reported, never an abort (llama.cpp's
// common_prompt_checkpoint aborts the process on a size mismatch).
#pragma once

#include "llama.h"

#include <cstdint>
#include <vector>

namespace sa {

class StateCheckpoint {
public:
    // Saves ctx's state of seq. false: llama.cpp wrote less than it sized
    // (the checkpoint is then empty).
    bool save(llama_context * ctx, llama_seq_id seq);
    // Restores the saved state into ctx's seq. false: nothing saved, or
    // llama.cpp refused the data.
    bool restore(llama_context * ctx, llama_seq_id seq) const;
    bool empty() const { return data_.empty(); }
    size_t bytes() const { return data_.size(); }
    void clear() { data_.clear(); }

private:
    std::vector<uint8_t> data_;
};

// The rollback point of one verify step: the tokens and positions the target
// held before the draft, and (when taken) the two contexts' states.
struct RollbackPoint {
    int64_t n_tokens = 0;     // tokens of the run's context before the draft
    llama_pos pos_max = -1;   // the target memory's last position then
    StateCheckpoint tgt, dft;
    bool has_tgt = false;     // tgt was saved for this draft
};

}  // namespace sa
