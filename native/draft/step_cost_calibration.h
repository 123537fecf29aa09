// Spec("auto")'s step-cost table, measured once per model and thread count in
// a process (docs/decisions/0060): a run whose target context is empty times
// verification batches of 1..n+1 tokens on it, the table goes to a
// process-wide registry, and every auto session of that model and thread
// count prices draft lengths with it, scaled online (StepCost::calibrate).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

struct llama_context;
struct llama_model;

struct sa_session;

namespace sa {

class Drafter;

// At a run's start, before its prefill: hands the run's drafter, when it is
// auto's (a slot's own), the calibrated table for the thread counts its target uses now, measuring it
// first when no session of this process has (the contexts are left empty as
// they were). Does nothing without an auto drafter, with a fixed step cost
// (the testing probes), when the drafter has this table already, or when
// the table is missing and any sequence of the target holds tokens (a later
// run measures it). A cancel stops the measuring; nothing is cached then.
void calibrate_step_cost(sa_session & s, Drafter * drafter);

// Before the session's first run (an actor or pool opening it): what that
// run's calibrate_step_cost would do, at the thread counts a run would use
// now, so the first request's time to first token does not include it
// (docs/decisions/0079). Takes the engine's step (no run steps meanwhile);
// nothing when a run is under way. sa_session_cancel stops it.
void prepare_session(sa_session & s);

// Times verification batches on ctx (empty on entry and on return): the
// cost in us of a step verifying n drafted tokens for n = 0..n_max, each
// length timed once (at most 3 s), then again within about budget_us (or 16
// plain steps); lengths not timed are priced by a line through the others. Empty when cancelled or a
// decode failed.
std::vector<double> measure_step_cost(llama_context * ctx, int32_t n_max, int64_t budget_us,
                                      const std::atomic<bool> & cancel);

// Drops the tables of a model being freed: another model loaded later at
// the same address is not the same model.
void forget_step_cost_tables(const llama_model * model);

// Tables measured in this process so far (testing: counts measurements, not lookups).
uint64_t step_cost_calibrations();

}  // namespace sa
