// Each verified step's time by part, for benchmarks (sa_testing_profile_steps,
// abi/spec_actor_testing.h). A run keeps it only when the session's TestHooks
// asked for it when the run started; otherwise every probe is one test of a
// null pointer and reads no clock (docs/decisions/0099, 0110).
#pragma once

#include "ggml.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace sa {

// The parts of a step, in the order the testing ABI reports them.
enum StepPartId : int32_t {
    kPartArms = 0,    // auto's cheap arms proposing (n-gram kinds, memory, text and splice lookups)
    kPartChoose,      // the rest of drafting: auto's choice, the model arm's draft; a fixed drafter's draft
    kPartCheckpoint,  // saving the target's state before verifying
    kPartDecode,      // the target's decode
    kPartSample,      // sampling the verified rows
    kPartFeed,        // the draft context reading the committed tokens
    kPartObserve,     // the drafter learning from the step
    kPartTrim,        // removing rejected positions from the memories
    kPartEmit,        // events, statistics and their delivery
    kPartRestore,     // a checkpoint restore after a deep rejection
    kPartCycle,       // the whole step, from its start to the next step's start (or the run's end)
    kStepParts
};

struct StepRecord {
    int32_t n_draft = 0;    // tokens drafted (or re-verified) beside the verified one
    int32_t reverify = 0;   // 1: the accepted part of a rolled-back draft, verified again
    int32_t accepted = 0;   // drafted tokens the target confirmed
    int32_t drafter = 0;    // who drafted them (sa_spec_type or sa_drafter id; 0: none)
    int64_t us[kStepParts] = {};
};

// What the session's hooks keep: the records of the runs that started with profiling on.
struct StepProfileSink {
    std::atomic<bool> on{false};
    std::mutex mu;
    std::vector<StepRecord> records;
};

// One run's probes. start(): the sink when profiling is on for this run, else null.
class StepProfiler {
public:
    void start(StepProfileSink * sink) { sink_ = sink != nullptr && sink->on.load() ? sink : nullptr; }
    // A clock reading, or 0 when the run is not profiled.
    int64_t now() const { return sink_ != nullptr ? ggml_time_us() : 0; }
    // Time since t0 (a now()) goes to part p of the step under way.
    void add(StepPartId p, int64_t t0) {
        if (sink_ != nullptr) rec_.us[p] += ggml_time_us() - t0;
    }
    // A duration measured already.
    void add_us(StepPartId p, int64_t us) {
        if (sink_ != nullptr) rec_.us[p] += us;
    }
    // A step starts: the previous one, if it verified, is closed and kept.
    void begin_step() {
        if (sink_ == nullptr) return;
        const int64_t t = ggml_time_us();
        close(t);
        rec_ = StepRecord{};
        t_begin_ = t;
    }
    // The step verified n_draft tokens beside its first, drafted by drafter, and
    // n_accepted of them were confirmed: it is kept when it closes.
    void verified(int32_t n_draft, bool reverify, int32_t n_accepted, int32_t drafter) {
        if (sink_ == nullptr) return;
        rec_.n_draft = n_draft;
        rec_.reverify = reverify ? 1 : 0;
        rec_.accepted = n_accepted;
        rec_.drafter = drafter;
        open_ = true;
    }
    // The run ends: the last step closes.
    void end() {
        if (sink_ != nullptr) close(ggml_time_us());
    }

private:
    StepProfileSink * sink_ = nullptr;
    StepRecord rec_;
    int64_t t_begin_ = 0;
    bool open_ = false;

    void close(int64_t t) {
        if (!open_) return;
        open_ = false;
        rec_.us[kPartCycle] = t - t_begin_;
        std::lock_guard<std::mutex> lock(sink_->mu);
        sink_->records.push_back(rec_);
    }
};

}  // namespace sa
