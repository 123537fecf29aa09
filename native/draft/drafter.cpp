#include "draft/drafter.h"

#include "session/checks.h"
#include "abi/spec_actor.h"

#include "ggml.h"

#include <algorithm>

namespace sa {

bool request_draft(common_speculative * spec, int32_t type, llama_seq_id seq, const DraftInput & in, llama_tokens & draft) {
    draft.clear();
    if (in.n_max <= 0) return false;
    if (type == SA_SPEC_NGRAM_CACHE && !ngram_cache_can_draft(in.prompt_tgt.size() + 1)) return false;
    common_speculative_get_draft_params(spec, seq) = {
        /* .drafting = */ true,
        /* .n_max    = */ in.n_max,
        /* .pos0     = */ in.n_past,
        /* .id_last  = */ in.id_last,
        /* .prompt   = */ &in.prompt_tgt,
        /* .result   = */ &draft,
    };
    return true;
}

int64_t draft_call(common_speculative * spec, int32_t type, llama_seq_id seq, const DraftInput & in, llama_tokens & draft) {
    if (!request_draft(spec, type, seq, in, draft)) return 0;
    const int64_t t0 = ggml_time_us();
    common_speculative_draft(spec);
    if ((int32_t) draft.size() > in.n_max) draft.resize((size_t) in.n_max);
    return ggml_time_us() - t0;
}

namespace {

// llama.cpp's loop: the type's common_speculative drafts up to n tokens a step.
class FixedDrafter : public Drafter {
public:
    FixedDrafter(common_speculative * spec, int32_t type, int32_t n_draft, llama_seq_id seq)
        : spec_(spec), type_(type), n_(n_draft), seq_(seq) {}

    void begin(const RunStart & start) override {
        common_speculative_begin(spec_, seq_, start.prompt_tgt);
        called_ = false;
        last_ = SA_SPEC_NONE;
    }

    void draft(const DraftInput & in, llama_tokens & draft) override {
        DraftInput capped{std::min(in.n_max, n_), in.n_past, in.id_last, in.prompt_tgt};
        called_ = capped.n_max > 0;
        if (in.defer) {
            pending_draft_ = request_draft(spec_, type_, seq_, capped, draft);
        } else {
            draft_call(spec_, type_, seq_, capped, draft);
        }
        last_ = draft.empty() ? SA_SPEC_NONE : type_;
    }

    bool pending() const override { return pending_draft_; }

    void finish_draft(llama_tokens & draft, int64_t /*t_us*/) override {
        pending_draft_ = false;
        last_ = draft.empty() ? SA_SPEC_NONE : type_;
    }

    bool process(const common_batch & batch) override { return common_speculative_process(spec_, batch); }

    void observe(const StepOutcome & out) override {
        const int32_t n_accepted = (int32_t) out.ids.size() - 1;
        // llama.cpp's drafter accepts only after it drafted (it asserts so)
        if (out.committed && (called_ || n_accepted > 0)) {
            common_speculative_accept(spec_, seq_, (uint16_t) n_accepted);
        }
        if (out.committed) called_ = false;
    }

    int32_t last_drafter() const override { return last_; }

private:
    common_speculative * spec_;
    int32_t type_;
    int32_t n_;
    llama_seq_id seq_;
    bool called_ = false;  // the drafter ran for the step being verified
    bool pending_draft_ = false;  // flagged for the engine's shared draft call
    int32_t last_ = SA_SPEC_NONE;
};

// FixedDrafter whose length per step comes from AdaptiveDraft.
class AdaptiveDrafter final : public FixedDrafter {
public:
    AdaptiveDrafter(common_speculative * spec, int32_t type, int32_t n_cap, int32_t n_floor, llama_seq_id seq)
        : FixedDrafter(spec, type, n_cap, seq), n_cap_(n_cap), n_floor_(n_floor) {}

    void begin(const RunStart & start) override {
        adaptive_.reset(n_cap_, n_floor_);  // each run learns its own prompt's acceptance
        pending_ = false;
        FixedDrafter::begin(start);
    }

    void draft(const DraftInput & in, llama_tokens & draft) override {
        asked_ = std::min(in.n_max, adaptive_.choose(in.rollback));
        pending_ = true;
        DraftInput asked{asked_, in.n_past, in.id_last, in.prompt_tgt};
        asked.defer = in.defer;
        FixedDrafter::draft(asked, draft);
    }

    void observe(const StepOutcome & out) override {
        // once per draft, at its first verification (a re-verification after a
        // rollback is not a new draft); plain steps feed the step cost too
        if (pending_) {
            pending_ = false;
            const int32_t n_accepted = std::min((int32_t) out.ids.size() - 1, out.n_verified);
            adaptive_.observe(asked_, out.n_verified, n_accepted, out.t_draft_us, out.t_verify_us, out.n_others,
                              out.priced);
        }
        FixedDrafter::observe(out);
    }

    int32_t n_draft_in_use() const override { return asked_; }

private:
    AdaptiveDraft adaptive_;
    const int32_t n_cap_, n_floor_;
    int32_t asked_ = 0;
    bool pending_ = false;
};

}  // namespace

std::unique_ptr<Drafter> make_fixed_drafter(common_speculative * spec, int32_t type, int32_t n_draft, llama_seq_id seq) {
    return std::make_unique<FixedDrafter>(spec, type, n_draft, seq);
}

std::unique_ptr<Drafter> make_adaptive_drafter(common_speculative * spec, int32_t type, int32_t n_cap,
                                               int32_t n_floor, llama_seq_id seq) {
    return std::make_unique<AdaptiveDrafter>(spec, type, n_cap, n_floor, seq);
}

}  // namespace sa
