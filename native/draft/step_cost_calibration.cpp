#include "draft/step_cost_calibration.h"

#include "draft/drafter.h"
#include "engine/engine.h"
#include "session/session.h"

#include "common.h"
#include "ggml.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace sa {

namespace {

// Every draft length up to kMaxLength is timed once (the plain step, the
// longest, then the rest in order), then again while the budget lasts: the
// CPU kernels' block shape makes some batch sizes cheaper than smaller ones
// (a batch of 8 tokens cost 0.8x one of 7 on a 2-core EPYC, decision 0065),
// which no line through a few lengths shows. Longer drafts, and the batches
// of many sequences, repeat the table's last entries (StepCost, table_at).
constexpr int32_t kMaxLength = 15;
constexpr int kReps = 3;               // timings per length at most (the least is taken)
constexpr int64_t kBudgetUs = 400000;  // decoding time the repeats may take...
constexpr int64_t kBudgetSteps = 16;   // ...or this many plain steps, whichever is longer
constexpr int64_t kBudgetMaxUs = 3000000;  // the first pass stops here, however slow the steps
constexpr double kShapeClip = 1.5;     // a timed length's cost is at most this far above the line
constexpr size_t kMaxEntries = 64;     // tables kept (the oldest goes first)

struct Key {
    const llama_model * model;
    std::string path;
    int32_t n_threads, n_threads_batch, n_max;
    bool operator==(const Key & o) const {
        return model == o.model && path == o.path && n_threads == o.n_threads &&
               n_threads_batch == o.n_threads_batch && n_max == o.n_max;
    }
};

struct Entry {
    Key key;
    std::shared_ptr<const std::vector<double>> table;  // null while a session measures it
};

std::mutex g_mutex;
std::condition_variable g_measured;
std::vector<Entry> g_entries;
std::atomic<uint64_t> g_calibrations{0};

Entry * find(const Key & key) {
    for (Entry & e : g_entries) {
        if (e.key == key) return &e;
    }
    return nullptr;
}

// Drops the entries whose key matches; under g_mutex.
template <typename Match> void forget_if(Match match) {
    g_entries.erase(std::remove_if(g_entries.begin(), g_entries.end(), [&](const Entry & e) { return match(e.key); }),
                    g_entries.end());
}

// The value at half the total weight of (value, weight) pairs.
double weighted_median(std::vector<std::pair<double, double>> v) {
    std::sort(v.begin(), v.end());
    double total = 0, run = 0;
    for (const auto & p : v) total += p.second;
    for (const auto & p : v) {
        run += p.second;
        if (run >= 0.5 * total) return p.first;
    }
    return v.back().first;
}

// The table by length from the lengths timed. A length's cost is the least
// of its timings (load only ever adds, so a timing below the line is the
// kernels' shape, kept as it is). Drafted lengths follow a robust line
// (Theil-Sen: the median slope of all pairs, each weighted by how far apart
// its lengths are, so one slowed short length moves it little); a timing
// more than kShapeClip above it is held there (a busy machine slowed it).
// Lengths not timed (the first pass ran out of time) are priced by the line;
// the plain step (another kernel path) is its own timing, and bounds the
// rest: no entry exceeds n + 1 plain steps.
std::vector<double> fill_table(const std::vector<std::vector<int64_t>> & times) {
    std::vector<double> xs, ys;
    for (size_t n = 1; n < times.size(); ++n) {
        if (times[n].empty()) continue;
        xs.push_back((double) n);
        ys.push_back((double) *std::min_element(times[n].begin(), times[n].end()));
    }
    const double plain = (double) *std::min_element(times[0].begin(), times[0].end());
    if (xs.empty()) return std::vector<double>(times.size(), plain);  // only the plain step was timed
    std::vector<std::pair<double, double>> slopes, intercepts;
    for (size_t i = 0; i < xs.size(); ++i) {
        for (size_t j = i + 1; j < xs.size(); ++j) slopes.emplace_back((ys[j] - ys[i]) / (xs[j] - xs[i]), xs[j] - xs[i]);
    }
    // one drafted length timed: the line goes through it and the plain step
    const double b = std::max(slopes.empty() ? ys[0] - plain : weighted_median(slopes), 0.0);
    for (size_t i = 0; i < xs.size(); ++i) intercepts.emplace_back(ys[i] - b * xs[i], 1.0);
    const double a = std::max(weighted_median(intercepts), plain);
    std::vector<double> table(times.size(), plain);
    for (size_t n = 1; n < table.size(); ++n) table[n] = a + b * (double) n;
    for (size_t i = 0; i < xs.size(); ++i) {
        const size_t n = (size_t) xs[i];
        table[n] = std::min(ys[i], kShapeClip * table[n]);
    }
    // Verifying n drafted tokens in one batch costs no more than decoding
    // them one at a time: a dearer entry was slowed by load, and would price
    // drafting out for the whole process.
    for (size_t n = 1; n < table.size(); ++n) table[n] = std::min(table[n], (double) (n + 1) * plain);
    return table;
}

}  // namespace

std::vector<double> measure_step_cost(llama_context * ctx, int32_t n_max, int64_t budget_us,
                                      const std::atomic<bool> & cancel) {
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
    common_batch batch(ctx);
    // One batch verifying n drafted tokens at the start of the sequence, its
    // time in us; -1: cancelled or failed.
    auto time_step = [&](int32_t n) -> int64_t {
        batch.clear();
        for (int32_t i = 0; i <= n; ++i) batch.add((llama_token) ((1000 + 7919 * i) % n_vocab), i, 0, true);
        const int64_t t0 = ggml_time_us();
        const int32_t ret = llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch.get());
        llama_synchronize(ctx);
        const int64_t dt = ggml_time_us() - t0;
        clear_memory(ctx);
        return ret == 0 ? dt : -1;
    };
    std::vector<int32_t> order{0, n_max};
    for (int32_t n = 1; n < n_max; ++n) order.push_back(n);
    std::vector<std::vector<int64_t>> times((size_t) n_max + 1);
    std::vector<double> table;
    // warm-up: the context's first decodes allocate, and the first of the
    // longest batch costs up to 1.7x its later ones (its buffers grow)
    if (time_step(n_max) < 0 || time_step(0) < 0) return table;
    const int64_t t_start = ggml_time_us();
    for (int rep = 0; rep < kReps; ++rep) {
        for (int32_t n : order) {
            if (cancel.load(std::memory_order_relaxed)) return table;
            const double spent = (double) (ggml_time_us() - t_start);
            if (spent > (double) kBudgetMaxUs) break;
            if (times[(size_t) n].empty() != (rep == 0)) continue;  // a repeat of a length timed in the first pass
            if (rep > 0) {
                // a repeat only within the budget, guessed from its first timing
                const double t0 = (double) times[0].front();
                const double budget = std::clamp(t0 * kBudgetSteps, (double) budget_us, (double) kBudgetMaxUs);
                if (spent + (double) times[(size_t) n].front() > budget) continue;
            }
            const int64_t dt = time_step(n);
            if (dt < 0) return table;
            times[(size_t) n].push_back(dt);
        }
    }
    return fill_table(times);
}

void calibrate_step_cost(sa_session & s, Drafter * drafter) {
    StepCost * cost = drafter != nullptr ? drafter->calibrated_cost() : nullptr;
    if (cost == nullptr || cost->fixed()) return;
    const Key key{s.model->model, s.model->path, llama_n_threads(s.ctx_tgt), llama_n_threads_batch(s.ctx_tgt),
                  std::min(s.plan.n_verify, kMaxLength)};
    std::unique_lock<std::mutex> lock(g_mutex);
    Entry * e = find(key);
    while (e != nullptr && e->table == nullptr) {  // another session is measuring it
        if (s.cancelled()) return;
        g_measured.wait_for(lock, std::chrono::milliseconds(20));
        e = find(key);
    }
    if (e != nullptr) {
        if (cost->table() != e->table) cost->calibrate(e->table);
        return;
    }
    for (llama_seq_id seq = 0; seq < s.n_seq; ++seq) {  // measured only on an empty context: it is cleared after
        if (llama_memory_seq_pos_max(llama_get_memory(s.ctx_tgt), seq) >= 0) return;
    }
    if (g_entries.size() >= kMaxEntries) {  // the oldest measured table goes
        auto old = std::find_if(g_entries.begin(), g_entries.end(), [](const Entry & x) { return x.table != nullptr; });
        if (old != g_entries.end()) g_entries.erase(old);
    }
    g_entries.push_back({key, nullptr});
    lock.unlock();
    std::vector<double> table = measure_step_cost(s.ctx_tgt, key.n_max, kBudgetUs, s.cancel);
    clear_memory(s.ctx_tgt);
    lock.lock();
    if (table.empty()) {
        forget_if([&](const Key & k) { return k == key; });
    } else {
        auto shared = std::make_shared<const std::vector<double>>(std::move(table));
        if (Entry * mine = find(key)) mine->table = shared;
        g_calibrations.fetch_add(1);
        cost->calibrate(shared);
    }
    g_measured.notify_all();
}

void prepare_session(sa_session & s) {
    // a run under way measures (or finds) the table itself
    run_while_idle(s, [&] { calibrate_step_cost(s, s.slot0().drafter.get()); });
}

void forget_step_cost_tables(const llama_model * model) {
    std::lock_guard<std::mutex> lock(g_mutex);
    forget_if([&](const Key & k) { return k.model == model; });
}

uint64_t step_cost_calibrations() { return g_calibrations.load(); }

}  // namespace sa
