#include "report/stats.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <type_traits>

namespace sa {

static constexpr auto relaxed = std::memory_order_relaxed;

#define SA_CHECK_FIELD_TYPE(type, name)                                                         \
    static_assert(std::is_same_v<decltype(sa_stats::name), type>, "sa_stats::" #name " is not " #type);
SA_STATS_MAP_FIELDS(SA_CHECK_FIELD_TYPE)
#undef SA_CHECK_FIELD_TYPE

void Counters::reset() {
#define SA_RESET(type, name) name.store(0, relaxed);
    SA_STATS_COUNTERS(SA_RESET)
#undef SA_RESET
#define SA_RESET_ARRAY(type, name) for (auto & a : name) a.store(0, relaxed);
    SA_STATS_ARRAYS(SA_RESET_ARRAY)
#undef SA_RESET_ARRAY
}

void Counters::read(sa_stats * out) const {
#define SA_COPY(type, name) out->name = name.load(relaxed);
    SA_STATS_COUNTERS(SA_COPY)
#undef SA_COPY
#define SA_COPY_ARRAY(type, name) for (size_t i = 0; i < std::extent_v<type>; ++i) out->name[i] = name[i].load(relaxed);
    SA_STATS_ARRAYS(SA_COPY_ARRAY)
#undef SA_COPY_ARRAY
}

// Seqlock writer (single thread): the counter is odd while the section runs;
// the release fence orders that odd value before the section's stores.
void Stats::begin_write() {
    seq_.store(seq_.load(relaxed) + 1, relaxed);
    std::atomic_thread_fence(std::memory_order_release);
}

void Stats::end_write() { seq_.store(seq_.load(relaxed) + 1, std::memory_order_release); }

void Stats::add_step(int32_t drafter, int32_t n_drafted, int32_t n_accepted) {
    const bool known = drafter >= 0 && drafter < SA_N_DRAFTERS;
    begin_write();
    if (known) drafter_.store(drafter, relaxed);
    for (Counters * c : {&total, &last}) {
        if (known) {
            bump(c->drafter_steps[drafter], (uint64_t) 1);
            bump(c->drafter_drafted[drafter], (uint64_t) n_drafted);
            bump(c->drafter_accepted[drafter], (uint64_t) n_accepted);
        }
        bump(c->iters, (uint64_t) 1);
        bump(c->drafts_generated, (uint64_t) n_drafted);
        bump(c->drafts_accepted, (uint64_t) n_accepted);
        for (int32_t i = 0; i < std::min(n_drafted, (int32_t) SA_MAX_DRAFT_POS); ++i) bump(c->drafted_per_pos[i], (uint64_t) 1);
        for (int32_t i = 0; i < std::min(n_accepted, (int32_t) SA_MAX_DRAFT_POS); ++i) bump(c->accepted_per_pos[i], (uint64_t) 1);
    }
    end_write();
}

void Stats::begin_run(int64_t now_us, uint64_t n_prompt, uint64_t n_reused) {
    begin_write();
    last.reset();
    run_start_us_ = now_us;
    base_total_us_ = total.t_total_us.load(relaxed);
    base_decode_us_ = total.t_decode_us.load(relaxed);
    for (Counters * c : {&total, &last}) {
        bump(c->requests, (uint64_t) 1);
        bump(c->prompt_tokens, n_prompt);
        bump(c->prompt_reused, n_reused);
        bump(c->prompt_prefilled, n_prompt - n_reused);
    }
    running_.store(1, relaxed);
    end_write();
}

void Stats::share_prompt(uint64_t n) {
    begin_write();
    for (Counters * c : {&total, &last}) {
        bump(c->prompt_reused, n);
        bump(c->prompt_prefilled, (uint64_t) 0 - n);
    }
    end_write();
}

void Stats::set_ttft(int64_t us) {
    begin_write();
    last.ttft_us.store(us, relaxed);
    total.ttft_us.store(us, relaxed);
    end_write();
}

void Stats::set_elapsed(int64_t now_us, int64_t decode_start_us) {
    const int64_t run_us = now_us - run_start_us_;
    const int64_t dec_us = decode_start_us > 0 ? now_us - decode_start_us : 0;
    begin_write();
    last.t_total_us.store(run_us, relaxed);
    total.t_total_us.store(base_total_us_ + run_us, relaxed);
    last.t_decode_us.store(dec_us, relaxed);
    total.t_decode_us.store(base_decode_us_ + dec_us, relaxed);
    end_write();
}

void Stats::end_run() {
    begin_write();
    running_.store(0, relaxed);
    end_write();
}

void Stats::set_n_draft(int32_t n) {
    begin_write();
    n_draft_.store(n, relaxed);
    end_write();
}

void Stats::read(int32_t which, sa_stats * out) const {
    std::memset(out, 0, sizeof *out);
    const Counters & c = which == 1 ? last : total;
    // Seqlock reader: copy, then keep the copy only if no write section
    // started or ran meanwhile (the acquire fence orders the copy before the
    // second look at the counter).
    for (int attempt = 0;; ++attempt) {
        const uint64_t v1 = seq_.load(std::memory_order_acquire);
        if ((v1 & 1) == 0) {
            c.read(out);
            out->running = running_.load(relaxed);
            out->n_draft = n_draft_.load(relaxed);
            out->drafter = drafter_.load(relaxed);
            std::atomic_thread_fence(std::memory_order_acquire);
            if (seq_.load(relaxed) == v1) break;
        }
        if (attempt >= 16) std::this_thread::yield();  // the writer may be descheduled mid-section
    }
    int32_t used = SA_MAX_DRAFT_POS;
    while (used > 0 && out->drafted_per_pos[used - 1] == 0 && out->accepted_per_pos[used - 1] == 0) --used;
    out->n_pos = std::max(std::clamp(out->n_draft, 0, SA_MAX_DRAFT_POS), used);
    out->tokens_per_sec = out->t_decode_us > 0 ? 1e6 * (double) out->tokens_emitted / (double) out->t_decode_us : 0.0;
    out->acceptance_rate = out->drafts_generated > 0 ? (double) out->drafts_accepted / (double) out->drafts_generated : 0.0;
}

namespace {

void put(MsgpackWriter & w, uint64_t v, int) { w.integer((int64_t) v); }
void put(MsgpackWriter & w, int64_t v, int) { w.integer(v); }
void put(MsgpackWriter & w, int32_t v, int) { w.integer(v); }
void put(MsgpackWriter & w, double v, int) { w.real(v); }
void put(MsgpackWriter & w, const PerPos & values, int n_pos) {
    w.array((uint32_t) n_pos);
    for (int i = 0; i < n_pos; ++i) w.integer((int64_t) values[i]);
}
void put(MsgpackWriter & w, const PerDrafter & values, int) {
    w.array((uint32_t) SA_N_DRAFTERS);
    for (uint64_t v : values) w.integer((int64_t) v);
}

#define SA_KEY(type, name) #name,
const char * const kStatsMapKeys[] = {SA_STATS_MAP_FIELDS(SA_KEY)};
#undef SA_KEY
constexpr int32_t kNumStatsMapKeys = (int32_t) (sizeof kStatsMapKeys / sizeof kStatsMapKeys[0]);

}  // namespace

const char * stats_map_key(int32_t i) { return i >= 0 && i < kNumStatsMapKeys ? kStatsMapKeys[i] : nullptr; }

void write_stats_map(MsgpackWriter & w, const sa_stats & s) {
    const int n_pos = std::clamp(s.n_pos, 0, SA_MAX_DRAFT_POS);
    w.map((uint32_t) kNumStatsMapKeys);
#define SA_PUT(type, name) w.key(#name); put(w, s.name, n_pos);
    SA_STATS_MAP_FIELDS(SA_PUT)
#undef SA_PUT
}

}  // namespace sa
