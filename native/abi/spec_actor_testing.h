/*
 * spec_actor's testing ABI: probes for the test suite and benchmarks, and
 * fault injection, over the sessions and models of spec_actor.h (whose rules
 * hold here too). Not for generation: spec_actor.nif.testing is its one
 * caller. The faults a session can be armed with live apart from it (the
 * session's TestHooks, native/session/test_hooks.h): a run looks for them
 * once, when it starts, and a run that none was armed for reads nothing of
 * them.
 *
 * Parsed by cffi like spec_actor.h (spec_actor/nif/_build.py): plain C
 * declarations between the CDEF markers.
 */
#ifndef SPEC_ACTOR_TESTING_H
#define SPEC_ACTOR_TESTING_H

#include "abi/spec_actor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF-BEGIN */
#define SA_STEP_PROFILE_FIELDS 15
/* sa_testing_top2 runs a plain forward pass over tokens (clearing the
 * session's memory before and after) and reports the two most likely next
 * tokens and logit(top1) - logit(top2). */
sa_status sa_testing_top2(sa_session * session, const int32_t * tokens, int32_t n,
                          int32_t * top1, int32_t * top2, float * margin);
/* Polls sequence 0's sa_session_seq_stats(which) in a tight loop, as fast as a native reader
 * can, until the session has finished until_requests runs or max_polls polls
 * were made. Stores each snapshot that differs from the one stored before, up
 * to cap, in out; *n_out: how many were stored, *n_polls: polls made. */
sa_status sa_testing_poll_stats(const sa_session * session, int32_t which, uint64_t until_requests,
                                int64_t max_polls, sa_stats * out, int32_t cap, int32_t * n_out,
                                int64_t * n_polls);
/* Spec "auto" only: fixes the chooser's step cost on every sequence for the rest
 * of the session (plain_us a plain step; intercept_us + per_token_us * n a step verifying n
 * drafted tokens) instead of measuring it, so that a test's outcome does not
 * depend on the machine's load. */
sa_status sa_testing_fix_step_cost(sa_session * session, double plain_us, double intercept_us,
                                   double per_token_us);
/* Spec "auto" only: as sa_testing_fix_step_cost, with the cost of a step by
 * the number of drafted tokens it verifies, us_by_length[0..n-1] (past the
 * end, its last 8 entries repeat, rising as they rose). bench/bench_auto.py --fixed-cost prices
 * every step with bench/bench_verify_cost.py's table this way. */
sa_status sa_testing_fix_step_cost_table(sa_session * session, const double * us_by_length, int32_t n);
/* The next llama_memory_seq_rm that a run of this session makes is refused,
 * as llama.cpp refuses a rollback deeper than a recurrent state can undo;
 * the run must end with an Error event and leave the session usable. */
sa_status sa_testing_refuse_next_seq_rm(sa_session * session);
/* The draft chooser of "auto" alone (choose_offer in native/draft/adaptive.h):
 * n_offers proposals, offer i with expected tokens by draft length
 * expected[i * stride + n] for n = 0..n_max[i] (n_max[i] < stride), priced
 * with the step cost us_by_length (as sa_testing_fix_step_cost_table), the
 * step's drafting time draft_us and sampling time per token sample_us, in a
 * batched step where other sequences put n_others tokens expected to make
 * e_others tokens (0, 0: alone), on a target whose drafts of up to
 * rollback_free tokens are undone for free and longer ones pay save_us for
 * a checkpoint and, when more than rollback_free are rejected, restore_us and
 * a re-verification (docs/decisions/0091; rollback_free < 0: always free).
 * *offer: the chosen offer (-1: a plain step), *n its length. */
sa_status sa_testing_choose_offer(const double * expected, const int32_t * n_max, int32_t n_offers, int32_t stride,
                                  const double * us_by_length, int32_t n_cost, double draft_us, double sample_us,
                                  int32_t n_others, double e_others, int32_t rollback_free, double save_us,
                                  double restore_us, int32_t * offer, int32_t * n);
/* A batched step's joint draft lengths alone (docs/decisions/0066): option
 * i's expected tokens by length are expected[i * stride + 0..n_max[i]]; the
 * step's cost is fixed as us_by_length (by drafted tokens: a decode of T
 * tokens costs entry T - 1, as sa_testing_fix_step_cost_table); n_fixed
 * tokens expected to make e_fixed do not depend on the choice (each
 * option's sampled token counts in n_fixed, its expected[0] apart from
 * e_fixed); at most n_total tokens in all. weights: each option's weight
 * in (0, 1] (NULL: all 1). Every option's target undoes drafts of up to
 * rollback_free tokens for free, as sa_testing_choose_offer's (< 0: all).
 * lengths[i]: option i's draft. */
sa_status sa_testing_allocate_drafts(const double * expected, const int32_t * n_max, int32_t n_options, int32_t stride,
                                     const double * us_by_length, int32_t n_cost, int32_t n_fixed, double e_fixed,
                                     int32_t n_total, const double * weights, int32_t rollback_free, double save_us,
                                     double restore_us, int32_t * lengths);
/* The first index of the largest of x[0..n) as greedy verification picks it
 * (the vectorised argmax over a row of logits). */
sa_status sa_testing_argmax(const float * x, int32_t n, int32_t * out);
/* Verified steps of slot 0's auto drafter whose decode's time fed its step
 * cost: decodes holding another sequence's prompt chunk do not. */
sa_status sa_testing_auto_priced_steps(const sa_session * s, uint64_t * out);
/* Tokens the session's draft context decoded since the last call: llama.cpp's
 * context counters of multi-token and one-token decodes, which this resets
 * (each reads 1 when it is 0); 0 without a draft context. */
sa_status sa_testing_take_draft_context_tokens(sa_session * s, uint64_t * out);
/* The session memory's lookup for a running request: n_seqs earlier
 * sequences (lengths[i] tokens each, one after another in tokens) are kept,
 * tail[0..n_tail) is the request's tokens so far; what is proposed after it,
 * at most n_max tokens into out (*n_out), and the match's length (0: none). */
sa_status sa_testing_memory_propose_after(const int32_t * tokens, const int32_t * lengths, int32_t n_seqs,
                                          const int32_t * tail, int32_t n_tail, int32_t n_max, int32_t * out,
                                          int32_t * n_out, int32_t * match_len);
/* Auto's text lookup over the text of tokens[0..n) on model m: what it
 * proposes next, at most n_max tokens into out (*n_out of them), and the
 * length in bytes of the match they follow (0: no proposal). */
sa_status sa_testing_text_lookup(const sa_model * m, const int32_t * tokens, int32_t n, int32_t n_max,
                                 int32_t * out, int32_t * n_out, int32_t * match_bytes);
/* Auto's splice lookup over tokens[0..n) (the request so far) on model m:
 * what it proposes next, at most n_max tokens into out (*n_out of them). */
sa_status sa_testing_splice_lookup(const sa_model * m, const int32_t * tokens, int32_t n, int32_t n_max,
                                   int32_t * out, int32_t * n_out);
/* Feeds a fresh step-cost model (what "auto" and n_draft="auto" price draft
 * lengths with) count observed steps, (n_verified[i] drafted tokens, us[i]
 * microseconds) in order, then stores its predicted cost of a step verifying
 * query[j] drafted tokens in out[j]. No session: a probe of the model alone. */
sa_status sa_testing_step_cost(const int32_t * n_verified, const int64_t * us, int32_t count,
                               const int32_t * query, int32_t n_query, double * out);
/* As sa_testing_step_cost, the model first calibrated with the table
 * us_by_length[0..n_table-1] (what auto's sessions get from their one
 * measurement, docs/decisions/0060): the steps then only scale it. */
sa_status sa_testing_calibrated_step_cost(const double * us_by_length, int32_t n_table, const int32_t * n_verified,
                                          const int64_t * us, int32_t count, const int32_t * query, int32_t n_query,
                                          double * out);
/* As sa_testing_calibrated_step_cost, through auto's StepPrice: the steps
 * have n_others[i] tokens of other sequences beside them, and a lone
 * one-token step right after a lone drafted one, where llama.cpp's graph
 * switches back (docs/decisions/0117), does not price the one-token cost. */
sa_status sa_testing_step_price(const double * us_by_length, int32_t n_table, const int32_t * n_verified,
                                const int32_t * n_others, const int64_t * us, int32_t count, const int32_t * query,
                                int32_t n_query, double * out);
/* auto's record of what its verified cheap drafts delivered of what they
 * promised (native/draft/promise_record.h), fresh, after count drafts in
 * order: draft i verified n[i] tokens, promised promise[i] accepted tokens
 * (untempered) and got accepted[i]. out[k]: the factor it then gives a
 * draft of k + 1 tokens' expected gain, for k < n_out. */
sa_status sa_testing_promise_factors(const int32_t * n, const double * promise, const int32_t * accepted,
                                     int32_t count, double * out, int32_t n_out);
/* Step-cost tables that auto sessions measured in this process so far (each
 * model and thread count is measured once; later sessions reuse its table). */
uint64_t sa_testing_step_cost_calibrations(void);
/* Spec "auto" only, between runs: the session's step cost now, out[n] for a
 * step verifying n = 0..n_out-1 drafted tokens; *calibrated: 1 when it is a
 * measured table (times *scale, its online factor), 0 when learned online or fixed. */
sa_status sa_testing_auto_step_cost(const sa_session * session, double * out, int32_t n_out, int32_t * calibrated,
                                    double * scale);
/* Spec "auto" only, between runs: the batches its model drafter's context
 * processed in this session, and whether the arm is dropped now (it cost
 * more than it earned: docs/decisions/0062). */
sa_status sa_testing_auto_model_arm(const sa_session * session, uint64_t * n_batches, int32_t * dropped);
/* Feeds a fresh acceptance model (per draft position, as "auto" keeps one per
 * drafter) count checked drafts, (n_checked[i] positions compared,
 * n_accepted[i] of them accepted) in order, then stores in out[0..n_cap] the
 * expected tokens of a step drafting 0..n_cap tokens. later_floor and
 * first_prior as in native/draft/adaptive.h. No session: a probe of the model alone. */
sa_status sa_testing_expected_tokens(const int32_t * n_checked, const int32_t * n_accepted, int32_t count,
                                     int32_t n_cap, double later_floor, double first_prior, double * out);
/* The compute threads the session's target context uses now for decode and
 * for prompt batches (set per run by the thread budget). Call it from the
 * run's own thread (its event callback) or between runs. */
sa_status sa_testing_threads_in_use(const sa_session * session, int32_t * n_threads, int32_t * n_threads_batch);
/* How many of the target context's decodes reused a graph built for an
 * earlier one (llama.cpp's performance counter, since the session's context
 * was made). */
sa_status sa_testing_graphs_reused(const sa_session * session, int64_t * out);
/* Fault injection: the n-th target decode of the runs that start from now on
 * (n >= 1; 0 cancels) succeeds in llama.cpp and then ends its runs with an
 * Error event, as a failed decode would, after the memory changed. */
sa_status sa_testing_fail_decode(sa_session * session, int32_t n);
/* Step profile, for benchmarks: with on = 1, the runs that start from now
 * on record each step that verified something, by part (native/session/
 * step_profile.h); 0 stops it for the runs that start later. */
sa_status sa_testing_profile_steps(sa_session * session, int32_t on);
/* Between runs: moves up to cap of the recorded steps, oldest first, into
 * out, SA_STEP_PROFILE_FIELDS int64 values each (tokens drafted beside the
 * verified one, 1 for a re-verification, drafted tokens accepted, the
 * drafter's sa_spec_type or sa_drafter id (0: none), then microseconds by part:
 * proposals, choice, checkpoint, decode, sample, feed, observe, trim, emit,
 * restore, whole step); *n: records moved. Those left stay for the next call. */
sa_status sa_testing_take_step_profile(sa_session * session, int64_t * out, int32_t cap, int32_t * n);
/* CDEF-END */

#ifdef __cplusplus
}
#endif

#endif
