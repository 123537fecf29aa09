// A state checkpoint of one sequence (the recurrent part of a recurrent or
// hybrid context, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY), taken and restored
// with checked results: a failure is reported, never an abort (llama.cpp's
// common_prompt_checkpoint aborts the process on a size mismatch).
#pragma once

#include "draft/adaptive.h"
#include "llama.h"

#include <algorithm>
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
    // Sizes the buffer for ctx's state of seq as it is now and touches its
    // pages, so that the save before a draft does not allocate them.
    void reserve(llama_context * ctx, llama_seq_id seq);
    bool empty() const { return data_.empty(); }
    size_t bytes() const { return data_.size(); }
    void clear() { data_.clear(); }

private:
    std::vector<uint8_t> data_;
};

// The rollback point of one verify step: the tokens and positions the target
// held before the draft, and (when taken) the two contexts' states. A slot
// owns one, so its checkpoints' buffers outlive each request.
struct RollbackPoint {
    int64_t n_tokens = 0;     // tokens of the run's context before the draft
    llama_pos pos_max = -1;   // the target memory's last position then
    StateCheckpoint tgt, dft;
    bool has_tgt = false;     // tgt was saved for this draft
};

// The measured cost of a slot's checkpoints, kept across its requests: decayed
// means of the saves and the restores (a restore is priced as a save until
// one was measured), for the draft-length chooser (docs/decisions/0091).
class RollbackCost {
public:
    void saved(int64_t us) { mix(save_us_, us); }
    void restored(int64_t us) { mix(restore_us_, us); }
    // The price a draft faces when rejections up to `free` tokens deep are undone for free.
    RollbackPrice price(int32_t free) const {
        const double save = std::max(save_us_, 0.0);
        return {free, save, restore_us_ >= 0 ? restore_us_ : save};
    }

private:
    static void mix(double & mean, int64_t us) {
        mean = mean >= 0 ? kDecay * mean + (1.0 - kDecay) * (double) us : (double) us;
    }
    static constexpr double kDecay = 0.9;
    double save_us_ = -1;     // < 0: none measured yet (the first long draft is priced without it)
    double restore_us_ = -1;
};

}  // namespace sa
