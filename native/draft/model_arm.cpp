#include "draft/model_arm.h"

#include "abi/spec_actor.h"

#include "ggml.h"

#include <algorithm>
#include <limits>

// llama.cpp's own (src/llama-ext.h, exported but not installed): whether a
// context copies out the hidden rows an MTP head reads (nextn embeddings).
void llama_set_embeddings_nextn(struct llama_context * ctx, bool value, bool masked);

namespace sa {

namespace {
// The model drafter drafts at least every kModelExploreEvery steps to stay
// measured; each such draft that was not chosen on its merit doubles the
// interval (up to kModelExploreMax), so a drafter that does not pay costs
// less and less; one chosen on its merit resets it.
constexpr uint64_t kModelExploreEvery = 32;
constexpr uint64_t kModelExploreMax = 1024;
// A model arm fed every batch is judged on its net gain over about 32 steps,
// from its kJudgeAfter-th step since it was admitted (decision 0062).
constexpr double kNetDecay = 1.0 - 1.0 / 32.0;
constexpr uint64_t kJudgeAfter = 16;
// An arm priced before its first draft is priced after this many steps' feeds.
constexpr uint64_t kFeedsBeforePricing = 2;
}  // namespace

void ModelArm::init(common_speculative * model, int32_t model_id, int32_t n_max, llama_context * ctx_tgt,
                    llama_context * ctx_dft, llama_seq_id seq, bool shared) {
    ctx_tgt_ = ctx_tgt;
    ctx_dft_ = ctx_dft;
    dropped_ = false;
    // as llama.cpp's MTP drafter set it up: every row of every target decode
    reads_hidden_rows_ = model != nullptr && model_id == SA_SPEC_DRAFT_MTP && ctx_tgt != nullptr && !shared;
    shared_ = shared;
    lazy_ = model != nullptr && model_id == SA_SPEC_DRAFT_SIMPLE && ctx_dft_ != nullptr;
    dft_trimmable_ = ctx_dft_ != nullptr && common_context_can_seq_rm(ctx_dft_) == COMMON_CONTEXT_SEQ_RM_TYPE_PART;
    if (lazy_) catch_up_batch_ = common_batch(ctx_dft_);
    n_max_ = model ? n_max : 0;
    arm_ = DraftArm{};
    arm_.id = model ? model_id : -1;
    arm_.spec = model;
    arm_.seq = seq;
    arm_.accept.reset(n_max_, kArmLaterFloor);
    explore_every_ = kModelExploreEvery;
}

void ModelArm::begin(const RunStart & start) {
    if (start.fresh) {
        arm_.accept.reset(n_max_, kArmLaterFloor);
        explore_every_ = kModelExploreEvery;
        if (!dropped_) admit();  // judged afresh; a dropped arm waits for its context to start over
    }
    if (arm_.spec != nullptr && !dropped_) common_speculative_begin(arm_.spec, arm_.seq, start.prompt_tgt);
    if (dropped_) extract_hidden_rows(false);  // the prompt did not take it back
    process_us_ = 0;  // the prompt's batches (after a run that ended mid-step) are not a step's
}

void ModelArm::start_step(llama_pos n_past) {
    alt_rate_ = 0;
    step_pos_ = n_past;
}

bool ModelArm::asks(uint64_t step, int32_t n, const Alternative & alt, double first_prior, const StepPrice & price,
                    const BatchShare & share, const RollbackPrice & rb) {
    arm_.accept.expected(arm_.expected, first_prior);
    first_prior_ = first_prior;
    // one whose drafts judge() prices before it drafts waits for that (decision 0116)
    if (judged_drafts_ == 0 && priced_before_drafting() && judged_steps_ < kFeedsBeforePricing) return false;
    const double d_m = alt.timed && arm_.costed ? arm_.cost_us : 0.0;
    const double rate = best_length(arm_.expected, price.cost(), n, n, alt.draft_us + d_m, alt.sample_us, 0, share, rb).rate;
    const bool on_merit = rate > alt.rate * kLongerMustBeat;
    // an arm on trial drafts once as soon as steps are priced, so that
    // one that can never pay is dropped before it reads more batches
    const bool owed = !lazy_ && !shared_ && judged_drafts_ == 0 && alt.timed;
    if (!on_merit && !owed && step - last_step_ < explore_every_) return false;
    last_step_ = step;
    ++judged_drafts_;
    explore_every_ = on_merit ? kModelExploreEvery : std::min(2 * explore_every_, kModelExploreMax);
    return true;
}

bool ModelArm::draft(const DraftInput & in, bool defer) {
    const int64_t t0 = ggml_time_us();
    arm_.proposed = false;
    // catching up is part of what this arm costs
    if (!catch_up(in)) return false;
    if (defer && request_draft(arm_.spec, arm_.id, arm_.seq, in, arm_.proposal)) {
        pending_ = true;
        wait_us_ = ggml_time_us() - t0;
        return true;
    }
    arm_.draft(in, ggml_time_us() - t0);
    if (arm_.proposed) drafted_ = true;
    return false;
}

void ModelArm::finish(int64_t t_us) {
    pending_ = false;
    arm_.note_cost(wait_us_ + t_us);
    arm_.proposed = !arm_.proposal.empty();
    if (arm_.proposed) drafted_ = true;
}

bool ModelArm::take(const Alternative & alt, const StepPrice & price) {
    warm_ = arm_.proposed;
    if (!arm_.proposed) return false;
    if (alt.timed) {  // what judge() weighs its tokens against
        alt_rate_ = alt.rate;
        step_us_ = price.cost().at((int32_t) arm_.proposal.size()) + alt.draft_us + arm_.cost_us;
        sample_us_ = alt.sample_us;
    }
    return true;
}

bool ModelArm::process(const common_batch & batch, bool in_step_now) {
    if (arm_.spec == nullptr || (lazy_ && !warm_)) return true;
    if (dropped_) {
        if (!in_step(batch)) return true;
        admit();
    }
    const int64_t t0 = ggml_time_us();
    const bool ok = common_speculative_process(arm_.spec, batch);
    if (in_step_now) process_us_ += ggml_time_us() - t0;  // a verified step's batch, not the prompt's
    ++batches_;
    return ok;
}

void ModelArm::before_prompt() {
    if (dropped_) extract_hidden_rows(true);
}

void ModelArm::extract_hidden_rows(bool on) {
    if (reads_hidden_rows_) llama_set_embeddings_nextn(ctx_tgt_, on, /* masked = */ false);
}

void ModelArm::admit() {
    dropped_ = false;
    net_us_ = 0;
    judged_steps_ = 0;
    judged_drafts_ = 0;
    process_us_ = 0;
    min_feed_us_ = std::numeric_limits<double>::infinity();
}

// A batch that a dropped arm may read from: the target starts over (the
// prefix cache emptied the draft context with it), or a new run's prompt
// parts from what the arm read before it was dropped, and the prefix cache
// cut the draft context to the tokens the batch follows, as it cuts a
// context that never lagged. Within the run that dropped it, batches start
// at drop_pos_ or later.
bool ModelArm::in_step(const common_batch & batch) const {
    if (batch.size() == 0) return false;
    const llama_pos p0 = batch.tokens[0].pos[0];
    if (p0 == 0) return true;
    return dft_trimmable_ && p0 < drop_pos_ &&
           p0 == llama_memory_seq_pos_max(llama_get_memory(ctx_dft_), arm_.seq) + 1;
}

void ModelArm::learn(const llama_tokens & ids, const Alternative & alt, const StepPrice & price) {
    arm_.learn(ids);
    judge(ids.size(), alt, price);
}

void ModelArm::judge(size_t n_made, const Alternative & alt, const StepPrice & price) {
    if (arm_.spec == nullptr || lazy_ || dropped_ || shared_) return;
    // a draft of the model arm earned the time the best choice without it
    // would have needed for its tokens, less what its step cost
    const double made = (double) n_made;
    const double earned = alt_rate_ > 0 ? made / alt_rate_ - (step_us_ + sample_us_ * made) : 0.0;
    net_us_ = kNetDecay * net_us_ + earned - (double) process_us_;
    // after its first draft the arm is priced as the chooser prices it; one
    // that loses to plain even so would only pay for its feed until the ledger's window ends
    const bool drafted = judged_drafts_ > 0 && arm_.costed;
    if (drafted) arm_.accept.expected(arm_.expected, first_prior_);
    const double expected = drafted ? expected_at(arm_.expected, n_max_) : (double) (n_max_ + 1);
    bool hopeless = judged_drafts_ > 0 && loses_to_plain(expected, arm_.cost_us, (double) process_us_, alt, price);
    if (process_us_ > 0) min_feed_us_ = std::min(min_feed_us_, (double) process_us_);
    process_us_ = 0;
    ++judged_steps_;
    // before its first draft, one whose drafts can be priced from its feed
    // is priced as the chooser would price them, at the prior (decision 0116)
    if (judged_drafts_ == 0 && priced_before_drafting() && judged_steps_ >= kFeedsBeforePricing) {
        hopeless = prior_loses_to_plain(alt, price);
    }
    if (hopeless || (judged_drafts_ > 0 && judged_steps_ >= kJudgeAfter && net_us_ < 0)) {
        dropped_ = true;
        drop_pos_ = step_pos_;
        extract_hidden_rows(false);
    }
}

double ModelArm::rate_vs_plain(int32_t n, double tokens, double draft_us, double process_us, const Alternative & alt,
                               const StepPrice & price) {
    const StepCost & cost = price.cost();
    const double s = price.sample_us();
    const double fixed = alt.draft_us + s;  // what every step pays, the plain one too
    const double rate = tokens / (cost.at(n) + fixed + draft_us + process_us + s * (tokens - 1.0));
    return rate * (cost.at(0) + fixed);
}

bool ModelArm::loses_to_plain(double tokens, double draft_us, double process_us, const Alternative & alt,
                              const StepPrice & price) const {
    // a step's sampling can take under a microsecond (0 measured): seen is what counts
    if (!arm_.costed || !price.timed() || !price.sample_seen()) return false;
    return rate_vs_plain(n_max_, tokens, draft_us, process_us, alt, price) < 1.0;
}

bool ModelArm::priced_before_drafting() const {
    // a shared context is never judged (it serves the other sequences too)
    return !shared_ && (arm_.id == SA_SPEC_DRAFT_MTP || arm_.id == SA_SPEC_DRAFT_EAGLE3);
}

bool ModelArm::prior_loses_to_plain(const Alternative & alt, const StepPrice & price) {
    if (!price.timed() || !price.sample_seen()) return false;
    // each drafted position is one forward pass of the draft context, as
    // each step's feed is: a draft of n is priced at n feeds (the cheapest
    // seen: a feed after a draft reads several tokens, the first one after
    // the prompt may build its graph)
    arm_.accept.expected(arm_.expected, first_prior_);
    const double feed_us = min_feed_us_;
    for (int32_t n = 1; n <= n_max_; ++n) {
        const double tokens = expected_at(arm_.expected, n);
        if (rate_vs_plain(n, tokens, (double) n * feed_us, feed_us, alt, price) >= 1.0) return false;
    }
    return true;
}

bool ModelArm::catch_up(const DraftInput & in) {
    if (!lazy_) return true;
    // the target holds positions [0, n_past); the draft context what it was fed
    const llama_pos held = llama_memory_seq_pos_max(llama_get_memory(ctx_dft_), arm_.seq) + 1;
    const int32_t n_batch = (int32_t) llama_n_batch(ctx_dft_);
    for (llama_pos p0 = held; p0 < in.n_past; p0 += n_batch) {
        const llama_pos p1 = std::min<llama_pos>(in.n_past, p0 + n_batch);
        catch_up_batch_.clear();
        for (llama_pos p = p0; p < p1; ++p) catch_up_batch_.add(in.prompt_tgt[(size_t) p], p, arm_.seq, p == p1 - 1);
        if (!common_speculative_process(arm_.spec, catch_up_batch_)) return false;
    }
    return true;
}

void ModelArm::commit(const llama_tokens & ids) {
    // llama.cpp asserts that a drafter accepts only after it drafted once
    if (arm_.spec != nullptr && drafted_ && !dropped_) {
        common_speculative_accept(arm_.spec, arm_.seq, (uint16_t) std::max((int32_t) ids.size() - 1, 0));
    }
}

}  // namespace sa
