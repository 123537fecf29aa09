// The testing ABI (abi/spec_actor_testing.h): probes that the test suite and
// benchmarks use to inspect a session, and the faults they arm on one. Not
// part of generation.
#include "abi/spec_actor_testing.h"
#include "draft/adaptive.h"
#include "draft/auto_drafter.h"
#include "session/checks.h"
#include "draft/draft_allocation.h"
#include "draft/promise_record.h"
#include "draft/splice_lookup.h"
#include "draft/text_lookup.h"
#include "draft/token_memory.h"
#include "engine/vec_argmax.h"
#include "session/session.h"
#include "draft/step_cost_calibration.h"

#include "common.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <utility>

using namespace sa;

namespace {

// The session's TestHooks, made the first time a test arms one.
TestHooks & armed_hooks(sa_session & s) {
    TestHooks * hooks = s.test_hooks.load(std::memory_order_acquire);
    if (hooks == nullptr) {
        auto made = std::make_unique<TestHooks>();
        if (s.test_hooks.compare_exchange_strong(hooks, made.get(), std::memory_order_acq_rel)) hooks = made.release();
    }
    return *hooks;
}

}  // namespace

extern "C" {

sa_status sa_testing_top2(sa_session * s, const int32_t * tokens, int32_t n, int32_t * top1, int32_t * top2, float * margin) {
    if (s == nullptr || tokens == nullptr || top1 == nullptr || top2 == nullptr || margin == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_top2: null argument");
    }
    if (n < 1 || (uint32_t) n >= llama_n_ctx(s->ctx_tgt) || n > (int32_t) llama_n_batch(s->ctx_tgt)) {
        return fail(SA_ERR_PROMPT, "sa_testing_top2: need 1..min(n_ctx-1, n_batch) tokens");
    }
    if (sa_status st = check_in_vocab(s->model->model, tokens, n, "sa_testing_top2"); st != SA_OK) return st;
    return guarded("top-2 probe", [&]() -> sa_status {
        s->slot0().prefix->invalidate();
        clear_memory(s->ctx_tgt);
        common_batch batch(s->ctx_tgt);
        for (int32_t i = 0; i < n; ++i) batch.add(tokens[i], i, 0, i == n - 1);
        const int32_t ret = llama_process(s->ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, batch.get());
        if (ret != 0) return fail(SA_ERR_DECODE, "top-2 probe decode failed: " + std::to_string(ret));
        const float * logits = llama_get_logits_ith(s->ctx_tgt, -1);
        const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(s->model->model));
        int32_t a = 0, b = 1;
        if (logits[b] > logits[a]) std::swap(a, b);
        for (int32_t i = 2; i < n_vocab; ++i) {
            if (logits[i] > logits[a]) { b = a; a = i; }
            else if (logits[i] > logits[b]) { b = i; }
        }
        *top1 = a;
        *top2 = b;
        *margin = logits[a] - logits[b];
        clear_memory(s->ctx_tgt);
        return SA_OK;
    });
}

}  // extern "C"

extern "C" sa_status sa_testing_poll_stats(const sa_session * s, int32_t which, uint64_t until_requests, int64_t max_polls,
                                           sa_stats * out, int32_t cap, int32_t * n_out, int64_t * n_polls) {
    if (s == nullptr || out == nullptr || n_out == nullptr || n_polls == nullptr || cap < 1 || (which != 0 && which != 1)) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_poll_stats: null argument, cap < 1 or which not 0/1");
    }
    int32_t n = 0;
    int64_t polls = 0;
    sa_stats snap, total;
    while (polls < max_polls) {
        s->slot0().stats->read(which, &snap);
        ++polls;
        if (n < cap && (n == 0 || std::memcmp(&snap, &out[n - 1], sizeof snap) != 0)) out[n++] = snap;
        if (polls % 256 == 0) {
            s->slot0().stats->read(0, &total);
            if (total.requests >= until_requests && !total.running) break;
        }
    }
    *n_out = n;
    *n_polls = polls;
    return SA_OK;
}

namespace {

// Whether every slot drafts with auto, whose step cost a test may fix.
bool every_slot_is_auto(const sa_session & s) {
    for (const auto & slot : s.engine->slots) {
        if (slot->drafter == nullptr || slot->drafter->calibrated_cost() == nullptr) return false;
    }
    return true;
}

// Fixes the step cost of every slot's auto drafter to table (a pool's
// sequences each price their own drafts).
void fix_every_slot(sa_session & s, const std::vector<double> & table) {
    for (const auto & slot : s.engine->slots) slot->drafter->calibrated_cost()->fix(table);
}

}  // namespace

extern "C" sa_status sa_testing_fix_step_cost(sa_session * s, double plain_us, double intercept_us, double per_token_us) {
    if (s == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_testing_fix_step_cost: null session");
    if (!every_slot_is_auto(*s)) return fail(SA_ERR_INVALID_ARG, "sa_testing_fix_step_cost: the session's spec is not auto");
    if (!(plain_us > 0) || !(intercept_us > 0) || !(per_token_us >= 0)) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_fix_step_cost: costs must be positive");
    }
    std::vector<double> table(SA_MAX_DRAFT_POS + 1);
    for (size_t n = 0; n < table.size(); ++n) table[n] = n == 0 ? plain_us : intercept_us + per_token_us * (double) n;
    fix_every_slot(*s, table);
    return SA_OK;
}

extern "C" sa_status sa_testing_fix_step_cost_table(sa_session * s, const double * us_by_length, int32_t n) {
    if (s == nullptr || us_by_length == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_testing_fix_step_cost_table: null argument");
    if (!every_slot_is_auto(*s)) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_fix_step_cost_table: the session's spec is not auto");
    }
    if (n < 1 || n > SA_MAX_DRAFT_POS + 1) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_fix_step_cost_table: need 1..SA_MAX_DRAFT_POS+1 costs");
    }
    for (int32_t i = 0; i < n; ++i) {
        if (!(us_by_length[i] > 0)) return fail(SA_ERR_INVALID_ARG, "sa_testing_fix_step_cost_table: costs must be positive");
    }
    fix_every_slot(*s, std::vector<double>(us_by_length, us_by_length + n));
    return SA_OK;
}

extern "C" sa_status sa_testing_refuse_next_seq_rm(sa_session * s) {
    if (s == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_testing_refuse_next_seq_rm: null session");
    armed_hooks(*s).refuse_next_seq_rm.store(true);
    return SA_OK;
}

namespace {

// The rows of a flat count x stride table, row i its first n_max[i] + 1
// entries; false when an n_max is outside [lo, stride).
bool table_rows(const double * flat, const int32_t * n_max, int32_t count, int32_t stride, int32_t lo,
                std::vector<std::vector<double>> & rows) {
    rows.assign((size_t) count, {});
    for (int32_t i = 0; i < count; ++i) {
        if (n_max[i] < lo || n_max[i] >= stride) return false;
        rows[(size_t) i].assign(flat + (size_t) i * stride, flat + (size_t) i * stride + n_max[i] + 1);
    }
    return true;
}

// The testing ABI's rollback price: rollback_free < 0 undoes every draft for free.
RollbackPrice testing_rollback(int32_t rollback_free, double save_us, double restore_us) {
    return {rollback_free < 0 ? INT32_MAX : rollback_free, save_us, restore_us};
}

}  // namespace

extern "C" sa_status sa_testing_choose_offer(const double * expected, const int32_t * n_max, int32_t n_offers,
                                             int32_t stride, const double * us_by_length, int32_t n_cost,
                                             double draft_us, double sample_us, int32_t n_others, double e_others,
                                             int32_t rollback_free, double save_us, double restore_us,
                                             int32_t * offer, int32_t * n) {
    if (expected == nullptr || n_max == nullptr || us_by_length == nullptr || offer == nullptr || n == nullptr ||
        n_offers < 0 || n_offers > 64 || stride < 1 || stride > SA_MAX_DRAFT_POS + 1 || n_cost < 1 ||
        n_cost > SA_MAX_DRAFT_POS + 1 || n_others < 0 || n_others > 1 << 20 || !(e_others >= 0) ||
        !(save_us >= 0) || !(restore_us >= 0)) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_choose_offer: null argument or a size out of range");
    }
    std::vector<std::vector<double>> tables;
    if (!table_rows(expected, n_max, n_offers, stride, 1, tables)) return fail(SA_ERR_INVALID_ARG, "sa_testing_choose_offer: n_max out of range");
    std::vector<Offer> offers;
    for (int32_t i = 0; i < n_offers; ++i) offers.push_back({&tables[(size_t) i], n_max[i]});
    StepCost cost;
    cost.fix(std::vector<double>(us_by_length, us_by_length + n_cost));
    const OfferChoice choice = choose_offer(offers, cost, draft_us, sample_us, BatchShare{n_others, e_others},
                                            testing_rollback(rollback_free, save_us, restore_us));
    *offer = choice.offer;
    *n = choice.length.n;
    return SA_OK;
}

extern "C" sa_status sa_testing_allocate_drafts(const double * expected, const int32_t * n_max, int32_t n_options,
                                                int32_t stride, const double * us_by_length, int32_t n_cost,
                                                int32_t n_fixed, double e_fixed, int32_t n_total, const double * weights,
                                                int32_t rollback_free, double save_us, double restore_us,
                                                int32_t * lengths) {
    if (expected == nullptr || n_max == nullptr || us_by_length == nullptr || lengths == nullptr || n_options < 0 ||
        n_options > 64 || stride < 1 || stride > SA_MAX_DRAFT_POS + 1 || n_cost < 1 || n_cost > 4096 ||
        n_fixed < 0 || n_total < 0 || n_total > 1 << 20 || !(e_fixed >= 0) || !(save_us >= 0) || !(restore_us >= 0)) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_allocate_drafts: null argument or a size out of range");
    }
    for (int32_t i = 0; i < n_cost; ++i) {
        if (!(us_by_length[i] > 0)) return fail(SA_ERR_INVALID_ARG, "sa_testing_allocate_drafts: costs must be positive");
    }
    std::vector<std::vector<double>> tables;
    if (!table_rows(expected, n_max, n_options, stride, 0, tables)) return fail(SA_ERR_INVALID_ARG, "sa_testing_allocate_drafts: n_max out of range");
    std::vector<DraftOption> options;
    for (int32_t i = 0; i < n_options; ++i) {
        if (weights != nullptr && !(weights[i] > 0 && weights[i] <= 1)) {
            return fail(SA_ERR_INVALID_ARG, "sa_testing_allocate_drafts: weights must be in (0, 1]");
        }
        options.push_back({&tables[(size_t) i], n_max[i], weights ? weights[i] : 1.0,
                           testing_rollback(rollback_free, save_us, restore_us)});
    }
    StepCost cost;
    cost.fix(std::vector<double>(us_by_length, us_by_length + n_cost));
    const std::vector<int32_t> out = allocate_drafts(options, n_fixed, e_fixed, cost, n_total);
    std::copy(out.begin(), out.end(), lengths);
    return SA_OK;
}

extern "C" sa_status sa_testing_argmax(const float * x, int32_t n, int32_t * out) {
    if (x == nullptr || out == nullptr || n < 1) return fail(SA_ERR_INVALID_ARG, "sa_testing_argmax: null argument or n < 1");
    *out = first_argmax(x, n);
    return SA_OK;
}

extern "C" sa_status sa_testing_auto_priced_steps(const sa_session * s, uint64_t * out) {
    if (s == nullptr || out == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_testing_auto_priced_steps: null argument");
    const auto * autod = dynamic_cast<const AutoDrafter *>(s->slot0().drafter.get());
    if (autod == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_testing_auto_priced_steps: the session's spec is not auto");
    *out = autod->priced_steps();
    return SA_OK;
}

extern "C" sa_status sa_testing_take_draft_context_tokens(sa_session * s, uint64_t * out) {
    if (s == nullptr || out == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_testing_take_draft_context_tokens: null argument");
    if (s->ctx_dft == nullptr) {
        *out = 0;
        return SA_OK;
    }
    llama_synchronize(s->ctx_dft);  // llama.cpp counts a decode's tokens when it waits for it
    const llama_perf_context_data perf = llama_perf_context(s->ctx_dft);
    *out = (uint64_t) perf.n_p_eval + (uint64_t) perf.n_eval;  // llama.cpp reports a count of 0 as 1
    llama_perf_context_reset(s->ctx_dft);
    return SA_OK;
}

extern "C" sa_status sa_testing_text_lookup(const sa_model * m, const int32_t * tokens, int32_t n, int32_t n_max,
                                           int32_t * out, int32_t * n_out, int32_t * match_bytes) {
    if (m == nullptr || tokens == nullptr || out == nullptr || n_out == nullptr || match_bytes == nullptr || n < 0 ||
        n_max < 0) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_text_lookup: null argument or negative length");
    }
    if (sa_status st = check_in_vocab(m->model, tokens, n, "sa_testing_text_lookup"); st != SA_OK) return st;
    TextLookup lookup(llama_model_get_vocab(m->model));
    lookup.begin(tokens, (size_t) n);
    std::vector<int32_t> proposal;
    lookup.propose(n_max, proposal, match_bytes);
    std::copy(proposal.begin(), proposal.end(), out);
    *n_out = (int32_t) proposal.size();
    return SA_OK;
}

extern "C" sa_status sa_testing_splice_lookup(const sa_model * m, const int32_t * tokens, int32_t n, int32_t n_max,
                                             int32_t * out, int32_t * n_out) {
    if (m == nullptr || tokens == nullptr || out == nullptr || n_out == nullptr || n < 0 || n_max < 0) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_splice_lookup: null argument or negative length");
    }
    if (sa_status st = check_in_vocab(m->model, tokens, n, "sa_testing_splice_lookup"); st != SA_OK) return st;
    const llama_vocab * vocab = llama_model_get_vocab(m->model);
    TextLookup text(vocab);
    text.begin(tokens, (size_t) n);
    SpliceLookup splice(vocab);
    std::vector<int32_t> proposal;
    splice.propose(tokens, (size_t) n, text, n_max, proposal);
    std::copy(proposal.begin(), proposal.end(), out);
    *n_out = (int32_t) proposal.size();
    return SA_OK;
}

extern "C" sa_status sa_testing_memory_propose_after(const int32_t * tokens, const int32_t * lengths, int32_t n_seqs,
                                                   const int32_t * tail, int32_t n_tail, int32_t n_max, int32_t * out,
                                                   int32_t * n_out, int32_t * match_len) {
    if (tokens == nullptr || lengths == nullptr || tail == nullptr || out == nullptr || n_out == nullptr ||
        match_len == nullptr || n_seqs < 0 || n_tail < 0 || n_max < 0) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_memory_propose_after: null argument or negative length");
    }
    TokenMemory kept(SIZE_MAX), running;
    size_t at = 0;
    for (int32_t i = 0; i < n_seqs; ++i) {
        if (lengths[i] < 0) return fail(SA_ERR_INVALID_ARG, "sa_testing_memory_propose_after: negative length");
        kept.begin_sequence();
        kept.append(tokens + at, (size_t) lengths[i]);
        at += (size_t) lengths[i];
    }
    running.append(tail, (size_t) n_tail);
    std::vector<int32_t> proposal;
    kept.propose_after(running, n_max, proposal, match_len);
    std::copy(proposal.begin(), proposal.end(), out);
    *n_out = (int32_t) proposal.size();
    return SA_OK;
}

extern "C" sa_status sa_testing_step_cost(const int32_t * n_verified, const int64_t * us, int32_t count,
                                          const int32_t * query, int32_t n_query, double * out) {
    return sa_testing_calibrated_step_cost(nullptr, 0, n_verified, us, count, query, n_query, out);
}

// The arguments of the step-cost probes: a calibration table (n_table 0:
// none), steps observed and lengths queried; null when they are valid, else
// what is wrong.
static const char * step_cost_args_error(const double * us_by_length, int32_t n_table, const int32_t * n_verified,
                                         const int64_t * us, int32_t count, const int32_t * query, int32_t n_query,
                                         const double * out) {
    if (n_table < 0 || n_table > SA_MAX_DRAFT_POS + 1 || (n_table > 0 && us_by_length == nullptr)) {
        return "sa_testing_step_cost: the table needs 0..SA_MAX_DRAFT_POS+1 costs";
    }
    for (int32_t i = 0; i < n_table; ++i) {
        if (!(us_by_length[i] > 0)) return "sa_testing_step_cost: costs must be positive";
    }
    if (count < 0 || n_query < 0 || (count > 0 && (n_verified == nullptr || us == nullptr)) ||
        (n_query > 0 && (query == nullptr || out == nullptr))) {
        return "sa_testing_step_cost: null argument or negative count";
    }
    for (int32_t i = 0; i < count; ++i) {
        if (n_verified[i] < 0 || n_verified[i] > SA_MAX_DRAFT_POS || us[i] < 0) {
            return "sa_testing_step_cost: lengths must be 0..SA_MAX_DRAFT_POS, times >= 0";
        }
    }
    for (int32_t j = 0; j < n_query; ++j) {
        if (query[j] < 0 || query[j] > SA_MAX_DRAFT_POS) return "sa_testing_step_cost: query lengths must be 0..SA_MAX_DRAFT_POS";
    }
    return nullptr;
}

extern "C" sa_status sa_testing_calibrated_step_cost(const double * us_by_length, int32_t n_table,
                                                     const int32_t * n_verified, const int64_t * us, int32_t count,
                                                     const int32_t * query, int32_t n_query, double * out) {
    if (const char * e = step_cost_args_error(us_by_length, n_table, n_verified, us, count, query, n_query, out)) {
        return fail(SA_ERR_INVALID_ARG, e);
    }
    sa::StepCost cost;
    if (n_table > 0) cost.calibrate(std::make_shared<const std::vector<double>>(us_by_length, us_by_length + n_table));
    for (int32_t i = 0; i < count; ++i) cost.observe(n_verified[i], us[i]);
    for (int32_t j = 0; j < n_query; ++j) out[j] = cost.at(query[j]);
    return SA_OK;
}

extern "C" sa_status sa_testing_step_price(const double * us_by_length, int32_t n_table, const int32_t * n_verified,
                                           const int32_t * n_others, const int64_t * us, int32_t count,
                                           const int32_t * query, int32_t n_query, double * out) {
    if (const char * e = step_cost_args_error(us_by_length, n_table, n_verified, us, count, query, n_query, out)) {
        return fail(SA_ERR_INVALID_ARG, e);
    }
    if (count > 0 && n_others == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_step_price: null argument");
    }
    sa::StepPrice price;
    if (n_table > 0) {
        price.cost().calibrate(std::make_shared<const std::vector<double>>(us_by_length, us_by_length + n_table));
    }
    for (int32_t i = 0; i < count; ++i) {
        if (n_others[i] < 0) return fail(SA_ERR_INVALID_ARG, "sa_testing_step_price: n_others must be >= 0");
        price.observe(n_verified[i], n_others[i], us[i], true, 1, 0);
    }
    for (int32_t j = 0; j < n_query; ++j) out[j] = price.cost().at(query[j]);
    return SA_OK;
}

extern "C" sa_status sa_testing_promise_factors(const int32_t * n, const double * promise, const int32_t * accepted,
                                                int32_t count, double * out, int32_t n_out) {
    if (count < 0 || n_out < 0 || (n_out > 0 && out == nullptr) ||
        (count > 0 && (n == nullptr || promise == nullptr || accepted == nullptr))) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_promise_factors: null argument or negative count");
    }
    for (int32_t i = 0; i < count; ++i) {
        if (n[i] < 1 || n[i] > SA_MAX_DRAFT_POS || accepted[i] < 0 || accepted[i] > n[i] || !(promise[i] >= 0)) {
            return fail(SA_ERR_INVALID_ARG, "sa_testing_promise_factors: need 1 <= n <= SA_MAX_DRAFT_POS, "
                                            "0 <= accepted <= n, promise >= 0");
        }
    }
    sa::PromiseRecord record;
    for (int32_t i = 0; i < count; ++i) record.settle(n[i], promise[i], accepted[i]);
    for (int32_t k = 0; k < n_out; ++k) out[k] = record.factor(k + 1);
    return SA_OK;
}

extern "C" sa_status sa_testing_expected_tokens(const int32_t * n_checked, const int32_t * n_accepted, int32_t count,
                                                int32_t n_cap, double later_floor, double first_prior, double * out) {
    if (count < 0 || (count > 0 && (n_checked == nullptr || n_accepted == nullptr)) || out == nullptr ||
        n_cap < 0 || n_cap > SA_MAX_DRAFT_POS || !(later_floor >= 0 && later_floor <= 1) ||
        !(first_prior >= 0 && first_prior <= 1)) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_expected_tokens: null argument, n_cap outside 0..SA_MAX_DRAFT_POS "
                                        "or a prior outside 0..1");
    }
    sa::PositionAcceptance accept;
    accept.reset(n_cap, later_floor);
    for (int32_t i = 0; i < count; ++i) {
        if (n_accepted[i] < 0 || n_checked[i] < n_accepted[i]) {
            return fail(SA_ERR_INVALID_ARG, "sa_testing_expected_tokens: need 0 <= n_accepted <= n_checked");
        }
        accept.observe(n_checked[i], n_accepted[i]);
    }
    std::vector<double> expected;
    accept.expected(expected, first_prior);
    std::copy(expected.begin(), expected.end(), out);
    return SA_OK;
}

extern "C" sa_status sa_testing_threads_in_use(const sa_session * s, int32_t * n_threads, int32_t * n_threads_batch) {
    if (s == nullptr || n_threads == nullptr || n_threads_batch == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_threads_in_use: null argument");
    }
    *n_threads = llama_n_threads(s->ctx_tgt);
    *n_threads_batch = llama_n_threads_batch(s->ctx_tgt);
    return SA_OK;
}

extern "C" sa_status sa_testing_graphs_reused(const sa_session * s, int64_t * out) {
    if (s == nullptr || out == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_testing_graphs_reused: null argument");
    *out = llama_perf_context(s->ctx_tgt).n_reused;
    return SA_OK;
}

extern "C" sa_status sa_testing_fail_decode(sa_session * s, int32_t n) {
    if (s == nullptr || n < 0) return fail(SA_ERR_INVALID_ARG, "sa_testing_fail_decode: null session or n < 0");
    armed_hooks(*s).fail_decode_at.store(n);
    return SA_OK;
}

extern "C" uint64_t sa_testing_step_cost_calibrations(void) { return sa::step_cost_calibrations(); }

extern "C" sa_status sa_testing_auto_model_arm(const sa_session * s, uint64_t * n_batches, int32_t * dropped) {
    if (s == nullptr || n_batches == nullptr || dropped == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_auto_model_arm: null argument");
    }
    const auto * autod = dynamic_cast<const AutoDrafter *>(s->slot0().drafter.get());
    if (autod == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_testing_auto_model_arm: the session's spec is not auto");
    *n_batches = autod->model_batches();
    *dropped = autod->model_dropped() ? 1 : 0;
    return SA_OK;
}

extern "C" sa_status sa_testing_auto_step_cost(const sa_session * s, double * out, int32_t n_out, int32_t * calibrated,
                                               double * scale) {
    if (s == nullptr || out == nullptr || calibrated == nullptr || scale == nullptr || n_out < 1) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_auto_step_cost: null argument or n_out < 1");
    }
    const auto * autod = dynamic_cast<const AutoDrafter *>(s->slot0().drafter.get());
    if (autod == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_testing_auto_step_cost: the session's spec is not auto");
    const StepCost & cost = *autod->step_cost();
    for (int32_t n = 0; n < n_out; ++n) out[n] = cost.at(n);
    *calibrated = cost.calibrated() && !cost.fixed() ? 1 : 0;
    *scale = cost.scale();
    return SA_OK;
}

extern "C" sa_status sa_testing_profile_steps(sa_session * s, int32_t on) {
    if (s == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_testing_profile_steps: null session");
    armed_hooks(*s).profile.on.store(on != 0);
    return SA_OK;
}

extern "C" sa_status sa_testing_take_step_profile(sa_session * s, int64_t * out, int32_t cap, int32_t * n) {
    static_assert(SA_STEP_PROFILE_FIELDS == 4 + kStepParts, "the ABI's record width is the profile's");
    if (s == nullptr || out == nullptr || n == nullptr || cap < 0) {
        return fail(SA_ERR_INVALID_ARG, "sa_testing_take_step_profile: null argument or cap < 0");
    }
    *n = 0;
    TestHooks * hooks = s->test_hooks.load(std::memory_order_acquire);
    if (hooks == nullptr) return SA_OK;
    StepProfileSink & sink = hooks->profile;
    std::lock_guard<std::mutex> lock(sink.mu);
    const int32_t k = std::min(cap, (int32_t) sink.records.size());
    for (int32_t i = 0; i < k; ++i) {
        const StepRecord & r = sink.records[(size_t) i];
        int64_t * row = out + (size_t) i * SA_STEP_PROFILE_FIELDS;
        row[0] = r.n_draft;
        row[1] = r.reverify;
        row[2] = r.accepted;
        row[3] = r.drafter;
        std::copy(std::begin(r.us), std::end(r.us), row + 4);
    }
    sink.records.erase(sink.records.begin(), sink.records.begin() + k);
    *n = k;
    return SA_OK;
}
