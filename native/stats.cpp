#include "stats.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace sa {

static constexpr auto relaxed = std::memory_order_relaxed;

void Counters::reset() {
    for (auto * a : {&iters, &drafts_generated, &drafts_accepted, &tokens_emitted, &prompt_tokens, &requests}) {
        a->store(0, relaxed);
    }
    for (auto * a : {&t_prefill_us, &t_draft_us, &t_verify_us, &t_sample_us, &t_total_us, &t_decode_us, &ttft_us}) {
        a->store(0, relaxed);
    }
    for (int i = 0; i < SA_MAX_DRAFT_POS; ++i) {
        accepted_per_pos[i].store(0, relaxed);
        drafted_per_pos[i].store(0, relaxed);
    }
    for (int i = 0; i < SA_N_DRAFTERS; ++i) {
        drafter_steps[i].store(0, relaxed);
        drafter_drafted[i].store(0, relaxed);
        drafter_accepted[i].store(0, relaxed);
    }
}

void Counters::read(sa_stats * out) const {
    out->iters = iters.load(relaxed);
    out->drafts_generated = drafts_generated.load(relaxed);
    out->drafts_accepted = drafts_accepted.load(relaxed);
    out->tokens_emitted = tokens_emitted.load(relaxed);
    out->prompt_tokens = prompt_tokens.load(relaxed);
    out->requests = requests.load(relaxed);
    out->t_prefill_us = t_prefill_us.load(relaxed);
    out->t_draft_us = t_draft_us.load(relaxed);
    out->t_verify_us = t_verify_us.load(relaxed);
    out->t_sample_us = t_sample_us.load(relaxed);
    out->t_total_us = t_total_us.load(relaxed);
    out->t_decode_us = t_decode_us.load(relaxed);
    out->ttft_us = ttft_us.load(relaxed);
    for (int i = 0; i < SA_MAX_DRAFT_POS; ++i) {
        out->accepted_per_pos[i] = accepted_per_pos[i].load(relaxed);
        out->drafted_per_pos[i] = drafted_per_pos[i].load(relaxed);
    }
    for (int i = 0; i < SA_N_DRAFTERS; ++i) {
        out->drafter_steps[i] = drafter_steps[i].load(relaxed);
        out->drafter_drafted[i] = drafter_drafted[i].load(relaxed);
        out->drafter_accepted[i] = drafter_accepted[i].load(relaxed);
    }
    out->tokens_per_sec = out->t_decode_us > 0 ? 1e6 * (double) out->tokens_emitted / (double) out->t_decode_us : 0.0;
    out->acceptance_rate = out->drafts_generated > 0 ? (double) out->drafts_accepted / (double) out->drafts_generated : 0.0;
}

void Stats::add_step(int32_t drafter_id, int32_t n_drafted, int32_t n_accepted) {
    add(&Counters::iters, (uint64_t) 1);
    if (drafter_id >= 0 && drafter_id < SA_N_DRAFTERS) {
        for (Counters * c : {&total, &last}) {
            bump(c->drafter_steps[drafter_id], (uint64_t) 1);
            bump(c->drafter_drafted[drafter_id], (uint64_t) n_drafted);
            bump(c->drafter_accepted[drafter_id], (uint64_t) n_accepted);
        }
        drafter.store(drafter_id, relaxed);
    }
    add(&Counters::drafts_generated, (uint64_t) n_drafted);
    add(&Counters::drafts_accepted, (uint64_t) n_accepted);
    for (int32_t i = 0; i < std::min(n_drafted, (int32_t) SA_MAX_DRAFT_POS); ++i) {
        bump(total.drafted_per_pos[i], (uint64_t) 1);
        bump(last.drafted_per_pos[i], (uint64_t) 1);
    }
    for (int32_t i = 0; i < std::min(n_accepted, (int32_t) SA_MAX_DRAFT_POS); ++i) {
        bump(total.accepted_per_pos[i], (uint64_t) 1);
        bump(last.accepted_per_pos[i], (uint64_t) 1);
    }
    touched();
}

void Stats::begin_run(int64_t now_us, uint64_t n_prompt) {
    last.reset();
    run_start_us_ = now_us;
    base_total_us_ = total.t_total_us.load(relaxed);
    base_decode_us_ = total.t_decode_us.load(relaxed);
    add(&Counters::requests, (uint64_t) 1);
    add(&Counters::prompt_tokens, n_prompt);
    running.store(1, relaxed);
    touched();
}

void Stats::set_ttft(int64_t us) {
    last.ttft_us.store(us, relaxed);
    total.ttft_us.store(us, relaxed);
    touched();
}

void Stats::set_elapsed(int64_t now_us, int64_t decode_start_us) {
    const int64_t run_us = now_us - run_start_us_;
    const int64_t dec_us = decode_start_us > 0 ? now_us - decode_start_us : 0;
    last.t_total_us.store(run_us, relaxed);
    total.t_total_us.store(base_total_us_ + run_us, relaxed);
    last.t_decode_us.store(dec_us, relaxed);
    total.t_decode_us.store(base_decode_us_ + dec_us, relaxed);
    touched();
}

void Stats::end_run() {
    running.store(0, relaxed);
    touched();
}

void Stats::set_n_draft(int32_t n) {
    n_draft.store(n, relaxed);
    touched();
}

void Stats::read(int32_t which, sa_stats * out) const {
    std::memset(out, 0, sizeof *out);
    (which == 1 ? last : total).read(out);
    out->running = running.load(relaxed);
    out->n_draft = n_draft.load(relaxed);
    out->drafter = drafter.load(relaxed);
    int32_t used = SA_MAX_DRAFT_POS;
    while (used > 0 && out->drafted_per_pos[used - 1] == 0 && out->accepted_per_pos[used - 1] == 0) --used;
    out->n_pos = std::max(std::clamp(out->n_draft, 0, SA_MAX_DRAFT_POS), used);
}

void write_stats_map(MsgpackWriter & w, const sa_stats & s) {
    // n_draft positions, or more where a later position has counts: under
    // adaptive drafting n_draft is the current length, which may have shrunk.
    int n_pos = std::clamp(s.n_draft, 0, SA_MAX_DRAFT_POS);
    for (int i = n_pos; i < SA_MAX_DRAFT_POS; ++i) {
        if (s.drafted_per_pos[i] != 0) n_pos = i + 1;
    }
    w.map(20);
    w.key("iters"); w.integer((int64_t) s.iters);
    w.key("drafts_generated"); w.integer((int64_t) s.drafts_generated);
    w.key("drafts_accepted"); w.integer((int64_t) s.drafts_accepted);
    w.key("tokens_emitted"); w.integer((int64_t) s.tokens_emitted);
    w.key("prompt_tokens"); w.integer((int64_t) s.prompt_tokens);
    w.key("n_draft"); w.integer(s.n_draft);
    w.key("t_prefill_us"); w.integer(s.t_prefill_us);
    w.key("t_draft_us"); w.integer(s.t_draft_us);
    w.key("t_verify_us"); w.integer(s.t_verify_us);
    w.key("t_sample_us"); w.integer(s.t_sample_us);
    w.key("t_total_us"); w.integer(s.t_total_us);
    w.key("ttft_us"); w.integer(s.ttft_us);
    w.key("tokens_per_sec"); w.real(s.tokens_per_sec);
    w.key("acceptance_rate"); w.real(s.acceptance_rate);
    w.key("accepted_per_pos");
    w.array((uint32_t) n_pos);
    for (int i = 0; i < n_pos; ++i) w.integer((int64_t) s.accepted_per_pos[i]);
    w.key("drafted_per_pos");
    w.array((uint32_t) n_pos);
    for (int i = 0; i < n_pos; ++i) w.integer((int64_t) s.drafted_per_pos[i]);
    w.key("drafter"); w.integer(s.drafter);
    const std::pair<const char *, const uint64_t *> per_drafter[] = {
        {"drafter_steps", s.drafter_steps}, {"drafter_drafted", s.drafter_drafted}, {"drafter_accepted", s.drafter_accepted}};
    for (const auto & [key, values] : per_drafter) {
        w.key(key);
        w.array((uint32_t) SA_N_DRAFTERS);
        for (int i = 0; i < SA_N_DRAFTERS; ++i) w.integer((int64_t) values[i]);
    }
}

}  // namespace sa
