#include "draft/auto_drafter.h"

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
constexpr int32_t kExploreLength = 4;          // draft length of an exploring step when plain won
// Drafts whose tokens each cost this share of a plain step or more to verify
// are held to what their band delivered (promise_record.h): 0.66 on the
// 16-block tiny hybrid, 0.05-0.25 on Gemma 3 270M.
constexpr double kCostlyToken = 0.3;
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

void AutoDrafter::free_specs(std::vector<DraftArm> && arms) {
    bool big = false;
    for (DraftArm & arm : arms) {
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
    std::vector<DraftArm> old = std::move(cheap_);
    cheap_.clear();
    common_params_speculative p = base_;
    for (size_t k = 0; k < std::size(kNgramKinds); ++k) {
        const CheapKind & kind = kNgramKinds[k];
        DraftArm arm;
        arm.id = kind.id;
        if (k < old.size() && old[k].id == kind.id && forget_in_place(old[k].spec)) {
            arm.spec = std::exchange(old[k].spec, nullptr);
        } else {
            p.types = {common_speculative_type_from_name(kind.name)};
            arm.spec = common_speculative_init(p, 1);
        }
        if (arm.spec == nullptr) throw std::runtime_error(std::string("could not initialise ") + kind.name);
        arm.accept.reset(n_cap_, kArmLaterFloor);
        cheap_.push_back(std::move(arm));
    }
    free_specs(std::move(old));
    auto add_buckets = [&](int32_t id, const auto & buckets) {
        for (const MemoryBucket & bucket : buckets) {
            DraftArm arm;
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
    model_.init(model, model_id, std::min(model_n_max, n_cap_), base.draft.ctx_tgt, base.draft.ctx_dft, seq, shared);
    base.draft.ctx_dft = nullptr;
    base_ = base;
    memory_ = memory;
    text_ = TextLookup(vocab);
    splice_ = SpliceLookup(vocab);
    make_arms();
    price_.begin(true);
    promises_ = PromiseRecord{};
}

void AutoDrafter::begin(const RunStart & start) {
    first_prior_ = start.sampled ? PositionAcceptance::kSampledFirstPrior : PositionAcceptance::kGreedyFirstPrior;
    price_.begin(start.fresh);
    if (start.fresh) {
        make_arms();
        explore_budget_.reset();
        promises_ = PromiseRecord{};
    }
    exploring_ = false;
    for (DraftArm & arm : cheap_) {
        if (arm.spec) common_speculative_begin(arm.spec, 0, start.prompt_tgt);
        arm.proposed = false;
    }
    model_.begin(start);
    own_.clear();
    own_.append(start.prompt, (size_t) start.n_prompt);
    text_.begin(start.prompt, (size_t) start.n_prompt);
    pending_ = false;
    chosen_ = 0;
    offered_ = nullptr;  // make_arms() may have replaced the arms
    adjustable_ = false;
    last_n_ = 0;
}

double AutoDrafter::cheap_cost() const {
    double sum = 0;
    for (const DraftArm & arm : cheap_) sum += arm.cost_us;
    return sum;
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
    DraftArm * last = nullptr;
    DraftArm * target = nullptr;
    for (DraftArm & arm : cheap_) {
        if (arm.id != id) continue;
        arm.proposal.clear();
        arm.proposed = false;
        last = &arm;
        if (match >= arm.min_match) target = &arm;
    }
    last->note_cost(t_us);  // the lookup's cost, counted once
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
    model_.start_step(in.n_past);
    pending_ = true;
    ++steps_;
    choice_ = CheapChoice{};
    proposals_us_ = 0;
    const int32_t n_max = std::min(in.n_max, n_cap_);
    if (n_max <= 0) return;
    const int64_t t_proposals = ggml_time_us();
    const DraftInput capped{n_max, in.n_past, in.id_last, in.prompt_tgt};
    for (DraftArm & arm : cheap_) {
        if (arm.spec != nullptr) arm.draft(capped);
    }
    propose_from_matches(n_max);
    proposals_us_ = ggml_time_us() - t_proposals;

    // Until a step was timed, costs are in the cost line's relative units:
    // leave draft times out of them.
    Alternative & alt = choice_.alt;
    alt.timed = price_.timed();
    alt.draft_us = alt.timed ? cheap_cost() : 0.0;
    alt.sample_us = alt.timed ? price_.sample_us() : 0.0;
    std::vector<Offer> offers;
    int32_t longest = 0;  // the longest proposal: the lengths this step's promise factors are needed for
    for (const DraftArm & arm : cheap_) {
        if (arm.proposed) longest = std::max(longest, (int32_t) arm.proposal.size());
    }
    price_promises(longest);
    for (DraftArm & arm : cheap_) {
        if (!arm.proposed) continue;
        arm.accept.expected(arm.expected, first_prior_);
        temper(arm);
        offers.push_back({&arm.expected, (int32_t) arm.proposal.size()});
        choice_.offered.push_back(&arm);
    }
    const OfferChoice choice = choose_offer(offers, price_.cost(), alt.draft_us, alt.sample_us, in.share, in.rollback);
    alt.rate = choice.length.rate;
    choice_.best = choice.offer >= 0 ? choice_.offered[(size_t) choice.offer] : nullptr;
    choice_.n = choice.length.n;
    // an exploring step where plain won must fit the budget of time it may lose (decision 0115)
    choice_.plain_won = choice_.best == nullptr;
    choice_.explores = steps_ % kExploreEvery == 0 && (!choice_.plain_won || explore_budget_.allows());
    choice_.rollback = in.rollback;
    if (choice_.explores) explore(choice_.best, choice_.n);

    if (model_.active()) {
        const int32_t n_m = model_.n_for(n_max);
        if (model_.asks(steps_, n_m, alt, first_prior_, price_, in.share, in.rollback)) {
            if (model_.draft(DraftInput{n_m, in.n_past, in.id_last, in.prompt_tgt}, in.defer)) return;  // pending
            if (take_model_draft(draft)) return;
        }
    }
    take_cheap_choice(draft);
}

void AutoDrafter::finish_draft(llama_tokens & draft, int64_t t_us) {
    model_.finish(t_us);
    if (!take_model_draft(draft)) take_cheap_choice(draft);
}

bool AutoDrafter::take_model_draft(llama_tokens & draft) {
    if (!model_.take(choice_.alt, price_)) return false;
    exploring_ = false;
    draft = model_.proposal();
    chosen_ = model_.id();
    last_n_ = (int32_t) draft.size();
    expected_ = model_.expected_tokens(last_n_);
    return true;
}

void AutoDrafter::take_cheap_choice(llama_tokens & draft) {
    model_.pass();
    offered_ = choice_.best;
    if (choice_.best != nullptr) resize(choice_.n, draft);
    exploring_ = choice_.explores && choice_.plain_won && !draft.empty();
    adjustable_ = !choice_.explores;
    // after a plain choice, the proposal whose first token is likeliest accepted
    for (size_t i = 0; adjustable_ && choice_.best == nullptr && i < choice_.offered.size(); ++i) {
        DraftArm * arm = choice_.offered[i];
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
void AutoDrafter::explore(DraftArm *& best, int32_t & best_n) {
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
    for (DraftArm & arm : cheap_) {
        if (!arm.proposed) continue;
        const int32_t n_hi = std::min(kExploreLength, (int32_t) arm.proposal.size());
        const LengthChoice c = best_length(arm.expected, price_.cost(), 1, n_hi, 0.0, 0.0, /* min_expected = */ 2.0);
        if (c.n >= 1 && c.rate > best_rate) {
            best_rate = c.rate;
            best = &arm;
            best_n = c.n;
        }
    }
}

double AutoDrafter::explore_loss(const StepOutcome & out) const {
    // What the draft added to the decode, its checkpoint, and after a
    // rollback the restore and the wider re-verification, against the plain
    // steps saved by the tokens it got accepted; priced by the step cost.
    const StepCost & cost = price_.cost();
    const RollbackPrice & rb = choice_.rollback;
    const int32_t n_accepted = (int32_t) out.ids.size() - 1;
    double added = cost.at(out.n_others + out.n_verified) - cost.at(out.n_others);
    if (out.n_verified > rb.free) added += rb.save_us;
    if (!out.committed) added += rb.restore_us + cost.at(out.n_others + n_accepted) - cost.at(out.n_others);
    return added - n_accepted * cost.at(0);
}

void AutoDrafter::price_promises(int32_t n_max) {
    // a draft whose tokens each cost under kCostlyToken of a plain step to verify is left alone
    tempering_.assign((size_t) n_max + 1, 1.0);
    if (!price_.timed() || promises_.kept()) return;
    const StepCost & cost = price_.cost();
    const double plain = cost.at(0);
    for (int32_t n = 1; n <= n_max; ++n) {
        if (cost.at(n) - plain >= kCostlyToken * n * plain) tempering_[(size_t) n] = promises_.factor(n);
    }
}

void AutoDrafter::temper(DraftArm & arm) const {
    const size_t n_hi = std::min(arm.expected.size(), tempering_.size());
    for (size_t n = 1; n < n_hi; ++n) arm.expected[n] = 1.0 + tempering_[n] * (arm.expected[n] - 1.0);
}

void AutoDrafter::settle_promise(int32_t n, const llama_tokens & ids) {
    // the draft was chosen at expected tokens this step's factor tempered: what it promised untempered
    const double factor = n < (int32_t) tempering_.size() ? tempering_[(size_t) n] : 1.0;
    const double promise = (expected_at(offered_->expected, n) - 1.0) / factor;
    promises_.settle(n, promise, (int32_t) ids.size() - 1);
}

bool AutoDrafter::process(const common_batch & batch) { return model_.process(batch, pending_); }

void AutoDrafter::observe(const StepOutcome & out) {
    const llama_tokens & ids = out.ids;
    if (pending_) {
        pending_ = false;
        // the verified cheap draft: what it brought of what it was expected to bring (priced as it was chosen)
        if (offered_ != nullptr && chosen_ == offered_->id && out.n_verified > 0) settle_promise(out.n_verified, ids);
        price_.observe(out.n_verified, out.n_others, out.t_verify_us, out.priced, ids.size(), out.t_sample_us);
        if (price_.timed()) {  // priced as the chooser prices: a fixed table's choices stay the machine's load's own
            explore_budget_.spent(price_.cost().at(out.n_verified + out.n_others));
            if (exploring_) explore_budget_.explored(explore_loss(out));
        }
        exploring_ = false;
        // Every proposal learns how much of it the target's tokens confirm.
        for (DraftArm & arm : cheap_) {
            const int32_t m = arm.learn(ids);
            if (m >= 0 && arm.spec != nullptr) common_speculative_accept(arm.spec, 0, (uint16_t) m);
        }
        model_.learn(ids, choice_.alt, price_);
    }
    if (!out.committed) return;
    // The model drafter picks its next hidden state from the verified batch
    // by the accepted count, whoever drafted.
    model_.commit(ids);
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
