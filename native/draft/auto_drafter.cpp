#include "draft/auto_drafter.h"

#include "session/checks.h"
#include "support/tokens.h"
#include "abi/spec_actor.h"

#include "ggml.h"

#include <algorithm>
#include <iterator>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdexcept>
#include <string>
#include <utility>

namespace sa {

namespace {

struct CheapKind {
    int32_t id;
    const char * name;  // llama.cpp's name
};
constexpr CheapKind kNgramKinds[] = {
    {SA_SPEC_NGRAM_SIMPLE, "ngram-simple"}, {SA_SPEC_NGRAM_MAP_K, "ngram-map-k"},
    {SA_SPEC_NGRAM_MAP_K4V, "ngram-map-k4v"}, {SA_SPEC_NGRAM_MOD, "ngram-mod"},
    {SA_SPEC_NGRAM_CACHE, "ngram-cache"},
};
constexpr double kCostDecay = 0.9;             // draft-time means follow about 10 calls
// The model drafter drafts at least every kModelExploreEvery steps to stay
// measured; each such draft that was not chosen on its merit doubles the
// interval (up to kModelExploreMax), so a drafter that does not pay costs
// less and less; one chosen on its merit resets it.
constexpr uint64_t kModelExploreEvery = 32;
constexpr uint64_t kModelExploreMax = 1024;
constexpr int32_t kExploreLength = 4;          // draft length of an exploring step when plain won
// A model arm fed every batch is judged on its net gain over about 32 steps,
// from its kJudgeAfter-th step since it was admitted (decision 0062).
constexpr double kNetDecay = 1.0 - 1.0 / 32.0;
constexpr uint64_t kJudgeAfter = 16;
// Prior at a position past the first: the previous position's rate, with no
// floor. With several drafters and plain steps to fall back on, a drafter
// whose first tokens are seldom right should not be trusted for long drafts.
constexpr double kLaterFloor = 0.0;
// The memory's arms by match length: the shortest match each takes, and its
// prior past the first position (a long verbatim match tends to go on).
struct MemoryBucket {
    int32_t min_match;
    double later_floor;
};
constexpr MemoryBucket kMemoryBuckets[] = {{0, 0.0}, {8, 0.5}, {24, 0.8}};
// The text lookup's, by matched bytes: a few characters (a word the prompt
// split otherwise), or a phrase.
constexpr MemoryBucket kTextBuckets[] = {{0, 0.0}, {16, 0.5}};
// The splice lookup's: one arm; past the value's rest it copies a seam that
// two records agreed on.
constexpr MemoryBucket kSpliceBuckets[] = {{0, 0.5}};

// Expected tokens of a step verifying n drafted tokens, from an arm's expected-by-length.
double expected_at(const std::vector<double> & expected, int32_t n) {
    return expected.empty() ? 1.0 : expected[(size_t) std::min<int32_t>(n, (int32_t) expected.size() - 1)];
}

}  // namespace

AutoDrafter::~AutoDrafter() { free_arms(); }

// Drops what spec learned from earlier runs, in place; false: it cannot
// (llama.cpp without spec_actor's edits, or a drafter that has no way to),
// and a new one is made instead (decision 0092).
static bool forget_in_place(common_speculative * spec) {
#ifdef COMMON_HAS_SPECULATIVE_FORGET
    return common_speculative_forget(spec);
#else
    (void) spec;
    return false;
#endif
}

void AutoDrafter::free_arms() { free_specs(std::move(cheap_)); }

void AutoDrafter::free_specs(std::vector<Arm> && arms) {
    bool big = false;
    for (Arm & arm : arms) {
        if (arm.spec == nullptr) continue;  // the memory and text arms, or a drafter taken over
        big = big || arm.id == SA_SPEC_NGRAM_MOD;
        common_speculative_free(arm.spec);
    }
    arms.clear();
#ifdef __GLIBC__
    // ngram-mod's 16 MiB table, freed on a worker thread's arena, would stay
    // resident there: glibc serves the next one from that arena, not mmap
    // (its threshold rose at the first free), and a fresh run per request
    // (memory=0) on N threads grew a pool by 800 MB.
    if (big) malloc_trim(0);
#endif
}

void AutoDrafter::make_arms() {
    // a fresh run keeps each n-gram drafter that can forget what it learned
    // (ngram-mod's table costs 16 MiB of page faults to make anew)
    std::vector<Arm> old = std::move(cheap_);
    cheap_.clear();
    common_params_speculative p = base_;
    for (size_t k = 0; k < std::size(kNgramKinds); ++k) {
        const CheapKind & kind = kNgramKinds[k];
        Arm arm;
        arm.id = kind.id;
        if (k < old.size() && old[k].id == kind.id && forget_in_place(old[k].spec)) {
            arm.spec = std::exchange(old[k].spec, nullptr);
        } else {
            p.types = {common_speculative_type_from_name(kind.name)};
            arm.spec = common_speculative_init(p, 1);
        }
        if (arm.spec == nullptr) throw std::runtime_error(std::string("could not initialise ") + kind.name);
        arm.accept.reset(n_cap_, kLaterFloor);
        cheap_.push_back(std::move(arm));
    }
    free_specs(std::move(old));
    auto add_buckets = [&](int32_t id, const auto & buckets) {
        for (const MemoryBucket & bucket : buckets) {
            Arm arm;
            arm.id = id;
            arm.min_match = bucket.min_match;
            arm.accept.reset(n_cap_, bucket.later_floor);
            cheap_.push_back(std::move(arm));
        }
    };
    add_buckets(SA_DRAFTER_MEMORY, kMemoryBuckets);
    if (text_.enabled()) {
        add_buckets(SA_DRAFTER_TEXT, kTextBuckets);
        add_buckets(SA_DRAFTER_SPLICE, kSpliceBuckets);
    }
}

void AutoDrafter::init(common_params_speculative base, common_speculative * model, int32_t model_id,
                       int32_t model_n_max, TokenMemory * memory, const llama_vocab * vocab, llama_seq_id seq,
                       bool shared) {
    n_cap_ = base.draft.n_max;
    ctx_dft_ = base.draft.ctx_dft;
    seq_ = seq;
    shared_ = shared;
    lazy_ = model != nullptr && model_id == SA_SPEC_DRAFT_SIMPLE && ctx_dft_ != nullptr;
    dft_trimmable_ = ctx_dft_ != nullptr && common_context_can_seq_rm(ctx_dft_) == COMMON_CONTEXT_SEQ_RM_TYPE_PART;
    if (lazy_) catch_up_batch_ = common_batch(ctx_dft_);
    base.draft.ctx_dft = nullptr;
    base_ = base;
    memory_ = memory;
    text_ = TextLookup(vocab);
    splice_ = SpliceLookup(vocab);
    make_arms();
    model_ = model;
    model_id_ = model ? model_id : -1;
    model_n_max_ = model ? std::min(model_n_max, n_cap_) : 0;
    model_arm_ = Arm{};
    model_arm_.id = model_id_;
    model_arm_.spec = model;
    model_arm_.accept.reset(model_n_max_, kLaterFloor);
    verify_.reset();
}

void AutoDrafter::begin(const RunStart & start) {
    first_prior_ = start.sampled ? PositionAcceptance::kSampledFirstPrior : PositionAcceptance::kGreedyFirstPrior;
    if (start.fresh) {
        make_arms();
        model_arm_.accept.reset(model_n_max_, kLaterFloor);
        model_explore_every_ = kModelExploreEvery;
        verify_.reset();
        if (!dropped_) admit();  // judged afresh; a dropped arm waits for its context to start over
    }
    for (Arm & arm : cheap_) {
        if (arm.spec) common_speculative_begin(arm.spec, 0, start.prompt_tgt);
        arm.proposed = false;
    }
    if (model_ != nullptr && !dropped_) common_speculative_begin(model_, seq_, start.prompt_tgt);
    own_.clear();
    own_.append(start.prompt, (size_t) start.n_prompt);
    text_.begin(start.prompt, (size_t) start.n_prompt);
    pending_ = false;
    process_us_ = 0;  // the prompt's batches (after a run that ended mid-step) are not a step's
    chosen_ = 0;
    offered_ = nullptr;  // make_arms() may have replaced the arms
    adjustable_ = false;
    last_n_ = 0;
}

double AutoDrafter::cheap_cost() const {
    double sum = 0;
    for (const Arm & arm : cheap_) sum += arm.cost_us;
    return sum;
}

void AutoDrafter::note_cost(Arm & arm, int64_t dt_us) {
    const double dt = (double) dt_us;
    arm.cost_us = arm.costed ? kCostDecay * arm.cost_us + (1.0 - kCostDecay) * dt : dt;
    arm.costed = true;
}

void AutoDrafter::draft_with(Arm & arm, const DraftInput & in, int64_t extra_us) {
    arm.proposal.clear();
    note_cost(arm, extra_us + draft_call(arm.spec, arm.id, arm.spec == model_ ? seq_ : 0, in, arm.proposal));
    arm.proposed = !arm.proposal.empty();
    if (arm.proposed && arm.spec == model_) model_drafted_ = true;
}

void AutoDrafter::propose_from_matches(int32_t n_max) {
    // The request's own tokens and the session's earlier requests: the
    // longer match wins, the request's own on a tie (the more recent). The
    // earlier requests are matched against this request's tail, whatever
    // the other sequences of the session did since (docs/decisions/0076).
    int64_t t0 = ggml_time_us();
    int32_t match = 0, earlier = 0;
    own_.propose(n_max, proposal_, &match);
    memory_->propose_after(own_, n_max, earlier_, &earlier);
    if (earlier > match) {
        proposal_.swap(earlier_);
        match = earlier;
    }
    route_match(SA_DRAFTER_MEMORY, match, ggml_time_us() - t0);
    if (!text_.enabled()) return;
    t0 = ggml_time_us();
    text_.propose(n_max, proposal_, &match);
    route_match(SA_DRAFTER_TEXT, match, ggml_time_us() - t0);
    t0 = ggml_time_us();
    splice_.propose(own_.current(), own_.current_size(), text_, n_max, proposal_);
    route_match(SA_DRAFTER_SPLICE, 0, ggml_time_us() - t0);
}

void AutoDrafter::route_match(int32_t id, int32_t match, int64_t t_us) {
    // one lookup (proposal_); it goes to the arm of its match length
    Arm * last = nullptr;
    Arm * target = nullptr;
    for (Arm & arm : cheap_) {
        if (arm.id != id) continue;
        arm.proposal.clear();
        arm.proposed = false;
        last = &arm;
        if (match >= arm.min_match) target = &arm;
    }
    note_cost(*last, t_us);  // the lookup's cost, counted once
    if (target == nullptr || proposal_.empty()) return;
    target->proposal.swap(proposal_);
    target->proposed = true;
}

void AutoDrafter::draft(const DraftInput & in, llama_tokens & draft) {
    draft.clear();
    chosen_ = 0;
    offered_ = nullptr;
    adjustable_ = false;
    last_n_ = 0;
    expected_ = 1.0;
    alt_rate_ = 0;
    step_pos_ = in.n_past;
    pending_ = true;
    ++steps_;
    choice_ = CheapChoice{};
    const int32_t n_max = std::min(in.n_max, n_cap_);
    if (n_max <= 0) return;
    const DraftInput capped{n_max, in.n_past, in.id_last, in.prompt_tgt};
    for (Arm & arm : cheap_) {
        if (arm.spec != nullptr) draft_with(arm, capped);
    }
    propose_from_matches(n_max);

    // Until a step was timed, costs are in the cost line's relative units:
    // leave draft times out of them.
    choice_.timed = verify_.measured();
    choice_.d_cheap = choice_.timed ? cheap_cost() : 0.0;
    choice_.s = choice_.timed ? sample_us_ : 0.0;
    std::vector<Offer> offers;
    for (Arm & arm : cheap_) {
        if (!arm.proposed) continue;
        arm.accept.expected(arm.expected, first_prior_);
        offers.push_back({&arm.expected, (int32_t) arm.proposal.size()});
        choice_.offered.push_back(&arm);
    }
    const OfferChoice choice = choose_offer(offers, verify_, choice_.d_cheap, choice_.s, in.share, in.rollback);
    choice_.rate = choice.length.rate;
    choice_.best = choice.offer >= 0 ? choice_.offered[(size_t) choice.offer] : nullptr;
    choice_.n = choice.length.n;
    choice_.explores = steps_ % kExploreEvery == 0;
    if (choice_.explores) explore(choice_.best, choice_.n);

    if (model_ != nullptr && !dropped_) {
        const int32_t n_m = std::min(model_n_max_, n_max);
        model_arm_.accept.expected(model_arm_.expected, first_prior_);
        const double d_m = choice_.timed && model_arm_.costed ? model_arm_.cost_us : 0.0;
        const double rate_m =
            best_length(model_arm_.expected, verify_, n_m, n_m, choice_.d_cheap + d_m, choice_.s, 0, in.share,
                        in.rollback).rate;
        const bool on_merit = rate_m > choice_.rate * kLongerMustBeat;
        // an arm on trial drafts once as soon as steps are priced, so that
        // one that can never pay is dropped before it reads more batches
        const bool owed = !lazy_ && !shared_ && judged_drafts_ == 0 && choice_.timed;
        if (on_merit || owed || steps_ - last_model_step_ >= model_explore_every_) {
            last_model_step_ = steps_;
            ++judged_drafts_;
            model_explore_every_ = on_merit ? kModelExploreEvery : std::min(2 * model_explore_every_, kModelExploreMax);
            const DraftInput model_in{n_m, in.n_past, in.id_last, in.prompt_tgt};
            const int64_t t0 = ggml_time_us();
            model_arm_.proposed = false;
            // catching up is part of what this arm costs
            if (catch_up(model_in)) {
                if (in.defer && request_draft(model_, model_id_, seq_, model_in, model_arm_.proposal)) {
                    model_pending_ = true;
                    model_wait_us_ = ggml_time_us() - t0;
                    return;
                }
                draft_with(model_arm_, model_in, ggml_time_us() - t0);
            }
            if (take_model_draft(draft)) return;
        }
    }
    take_cheap_choice(draft);
}

void AutoDrafter::finish_draft(llama_tokens & draft, int64_t t_us) {
    model_pending_ = false;
    note_cost(model_arm_, model_wait_us_ + t_us);
    model_arm_.proposed = !model_arm_.proposal.empty();
    if (model_arm_.proposed) model_drafted_ = true;
    if (!take_model_draft(draft)) take_cheap_choice(draft);
}

bool AutoDrafter::take_model_draft(llama_tokens & draft) {
    warm_ = model_arm_.proposed;
    if (!model_arm_.proposed) return false;
    draft = model_arm_.proposal;
    chosen_ = model_id_;
    last_n_ = (int32_t) draft.size();
    expected_ = expected_at(model_arm_.expected, last_n_);
    if (choice_.timed) {  // what judge() weighs its tokens against
        alt_rate_ = choice_.rate;
        model_step_us_ = verify_.at(last_n_) + choice_.d_cheap + model_arm_.cost_us;
        model_sample_us_ = choice_.s;
    }
    return true;
}

void AutoDrafter::take_cheap_choice(llama_tokens & draft) {
    warm_ = false;
    offered_ = choice_.best;
    if (choice_.best != nullptr) resize(choice_.n, draft);
    adjustable_ = !choice_.explores;
    // after a plain choice, the proposal whose first token is likeliest accepted
    for (size_t i = 0; adjustable_ && choice_.best == nullptr && i < choice_.offered.size(); ++i) {
        Arm * arm = choice_.offered[i];
        if (offered_ == nullptr || arm->expected[1] > offered_->expected[1]) offered_ = arm;
    }
}

bool AutoDrafter::offer(DraftOption & out) const {
    if (!adjustable_ || offered_ == nullptr) return false;
    out = {&offered_->expected, (int32_t) offered_->proposal.size()};
    return true;
}
void AutoDrafter::resize(int32_t n, llama_tokens & draft) {
    n = offered_ == nullptr ? 0 : std::clamp(n, 0, (int32_t) offered_->proposal.size());
    draft.clear();
    if (n > 0) draft.assign(offered_->proposal.begin(), offered_->proposal.begin() + n);
    chosen_ = n > 0 ? offered_->id : 0;
    last_n_ = n;
    expected_ = n > 0 ? expected_at(offered_->expected, n) : 1.0;
}
void AutoDrafter::explore(Arm *& best, int32_t & best_n) {
    if (best != nullptr) {
        // a token past the best length, so later positions keep being measured
        if (best_n < (int32_t) best->proposal.size()) ++best_n;
        return;
    }
    // Plain won, but a proposal expected to pay twice over stands: verify up
    // to kExploreLength tokens of it, so the cost of drafting stays measured
    // (a cost line that plain steps alone feed never learns that drafting
    // got cheaper). Of those lengths, the one with the best expected rate:
    // verification cost is not linear in the length (decision 0029).
    double best_rate = 0;
    for (Arm & arm : cheap_) {
        if (!arm.proposed) continue;
        const int32_t n_hi = std::min(kExploreLength, (int32_t) arm.proposal.size());
        const LengthChoice c = best_length(arm.expected, verify_, 1, n_hi, 0.0, 0.0, /* min_expected = */ 2.0);
        if (c.n >= 1 && c.rate > best_rate) {
            best_rate = c.rate;
            best = &arm;
            best_n = c.n;
        }
    }
}

bool AutoDrafter::process(const common_batch & batch) {
    if (model_ == nullptr || (lazy_ && !warm_)) return true;
    if (dropped_) {
        if (!in_step(batch)) return true;
        admit();
    }
    const int64_t t0 = ggml_time_us();
    const bool ok = common_speculative_process(model_, batch);
    if (pending_) process_us_ += ggml_time_us() - t0;  // a verified step's batch, not the prompt's
    ++model_batches_;
    return ok;
}

void AutoDrafter::admit() {
    dropped_ = false;
    net_us_ = 0;
    judged_steps_ = 0;
    judged_drafts_ = 0;
    process_us_ = 0;
}

// A batch that a dropped arm may read from: the target starts over (the
// prefix cache emptied the draft context with it), or a new run's prompt
// parts from what the arm read before it was dropped, and the prefix cache
// cut the draft context to the tokens the batch follows, as it cuts a
// context that never lagged. Within the run that dropped it, batches start
// at drop_pos_ or later.
bool AutoDrafter::in_step(const common_batch & batch) const {
    if (batch.size() == 0) return false;
    const llama_pos p0 = batch.tokens[0].pos[0];
    if (p0 == 0) return true;
    return dft_trimmable_ && p0 < drop_pos_ && p0 == llama_memory_seq_pos_max(llama_get_memory(ctx_dft_), seq_) + 1;
}

void AutoDrafter::judge(size_t n_made) {
    if (model_ == nullptr || lazy_ || dropped_ || shared_) return;
    // a draft of the model arm earned the time the best choice without it
    // would have needed for its tokens, less what its step cost
    const double made = (double) n_made;
    const double earned = alt_rate_ > 0 ? made / alt_rate_ - (model_step_us_ + model_sample_us_ * made) : 0.0;
    net_us_ = kNetDecay * net_us_ + earned - (double) process_us_;
    const bool hopeless = never_pays((double) process_us_);
    process_us_ = 0;
    ++judged_steps_;
    if (judged_drafts_ > 0 && (hopeless || (judged_steps_ >= kJudgeAfter && net_us_ < 0))) {
        dropped_ = true;
        drop_pos_ = step_pos_;
    }
}

bool AutoDrafter::never_pays(double process_us) const {
    // a step's sampling can take under a microsecond (0 measured): seen is what counts
    if (!model_arm_.costed || !verify_.measured() || !sample_seen_) return false;
    const int32_t n = model_n_max_;
    const double fixed = choice_.d_cheap + sample_us_;  // what every step pays, the plain one too
    const double best = (double) (n + 1) /
                        (verify_.at(n) + fixed + model_arm_.cost_us + process_us + sample_us_ * (double) n);
    return best < 1.0 / (verify_.at(0) + fixed);
}

bool AutoDrafter::catch_up(const DraftInput & in) {
    if (!lazy_) return true;
    // the target holds positions [0, n_past); the draft context what it was fed
    const llama_pos held = llama_memory_seq_pos_max(llama_get_memory(ctx_dft_), seq_) + 1;
    const int32_t n_batch = (int32_t) llama_n_batch(ctx_dft_);
    for (llama_pos p0 = held; p0 < in.n_past; p0 += n_batch) {
        const llama_pos p1 = std::min<llama_pos>(in.n_past, p0 + n_batch);
        catch_up_batch_.clear();
        for (llama_pos p = p0; p < p1; ++p) catch_up_batch_.add(in.prompt_tgt[(size_t) p], p, seq_, p == p1 - 1);
        if (!common_speculative_process(model_, catch_up_batch_)) return false;
    }
    return true;
}

void AutoDrafter::observe(const StepOutcome & out) {
    const llama_tokens & ids = out.ids;
    if (pending_) {
        pending_ = false;
        if (out.priced) {  // the decode's cost, all its tokens
            verify_.observe(out.n_verified + out.n_others, out.t_verify_us);
            ++priced_steps_;
        }
        const double per_token = (double) out.t_sample_us / (double) std::max<size_t>(ids.size(), 1);
        sample_us_ = verify_.measured() && sample_seen_ ? kCostDecay * sample_us_ + (1.0 - kCostDecay) * per_token
                                                        : per_token;
        sample_seen_ = true;
        // Every proposal learns how much of it the target's tokens confirm:
        // positions up to ids.size() are known, later ones are not.
        auto learn = [&](Arm & arm) {
            if (!arm.proposed) return;
            arm.proposed = false;
            const int32_t m = common_prefix(arm.proposal.data(), arm.proposal.size(), ids.data(), ids.size());
            arm.accept.observe(std::min((int32_t) arm.proposal.size(), (int32_t) ids.size()), m);
            if (arm.spec != nullptr && arm.spec != model_) common_speculative_accept(arm.spec, 0, (uint16_t) m);
        };
        for (Arm & arm : cheap_) learn(arm);
        learn(model_arm_);
        judge(ids.size());
    }
    if (!out.committed) return;
    // The model drafter picks its next hidden state from the verified batch
    // by the accepted count, whoever drafted (llama.cpp asserts that a
    // drafter accepts only after it drafted once).
    if (model_ != nullptr && model_drafted_ && !dropped_) {
        common_speculative_accept(model_, seq_, (uint16_t) std::max((int32_t) ids.size() - 1, 0));
    }
    own_.append(ids.data(), ids.size());
    text_.append(ids.data(), ids.size());
}

void AutoDrafter::end() {
    if (memory_->capacity() > 0 && own_.current_size() > 0) {
        memory_->begin_sequence();
        memory_->append(own_.current(), own_.current_size());
    }
    own_.clear();
}

}  // namespace sa
