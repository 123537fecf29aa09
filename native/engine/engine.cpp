#include "engine/engine.h"
#include "draft/auto_drafter.h"
#include "draft/draft_allocation.h"
#include "engine/generation.h"
#include "session/session.h"

#include <algorithm>
#include <string>

bool sa_session::abort_decode() const {
    if (cancelled()) return true;
    const int32_t sole = engine ? engine->sole.load(std::memory_order_relaxed) : -1;
    return sole >= 0 && engine->slots[(size_t) sole]->cancel.load(std::memory_order_relaxed);
}

namespace sa {

Slot::~Slot() {
    drafter.reset();  // may refer to own_spec
    common_speculative_free(own_spec);
}

namespace {

// A slot's drafter: slot 0's over the session's common_speculative, as is
// every slot's where a draft context serves every sequence,
// else over the slot's own (an n-gram type's tables are per sequence).
sa_status make_slot_drafter(sa_session & s, Slot & slot) {
    common_speculative * spec = slot.seq == 0 || shares_draft_context(s) ? s.spec : nullptr;
    llama_seq_id spec_seq = slot.seq;  // the slot's sequence of spec (its own spec has one: 0)
    if (spec == nullptr && s.plan.type != SA_SPEC_NONE) {
        common_params_speculative ps = make_spec_params(s);
        try {
            slot.own_spec = common_speculative_init(ps, 1);
        } catch (const std::exception & e) {
            return fail(SA_ERR_SPEC, spec_type_name(s.plan.type) + " setup failed: " + e.what());
        }
        if (slot.own_spec == nullptr) return fail(SA_ERR_SPEC, spec_type_name(s.plan.type) + " could not be initialised");
        spec = slot.own_spec;
        spec_seq = 0;
    }
    sa_status st = make_drafter(s, spec, spec_seq, slot.drafter);
    slot.spec = spec;
    return st;
}

// Whether a step takes the sequence, and as one decoding (its prompt in) or prefilling.
bool visits(const Sequence * q, bool decoding) { return !q->ended() && q->runnable() && q->decoding() == decoding; }

// The fewest prompt tokens a cut step still takes (progress for a long prompt).
constexpr int32_t kMinPromptChunk = 16;
// Decodes of at least this many tokens teach the time per token.
constexpr int32_t kMinTimedBatch = 32;

// Whether this step's prompts are cut to the latency target: a prompt
// arrived while another sequence was already decoding (requests that
// arrive together prefill at full speed, then decode together). Which came
// first is told by Engine::order, not by the step: since decision 0080 the
// step that reads a prompt's last chunk also makes its first token, whose
// reader may send the next prompt before that step is over.
bool cuts_prompts(const std::vector<Sequence *> & seqs) {
    uint64_t oldest_decoder = UINT64_MAX, newest_prompt = 0;
    for (const Sequence * q : seqs) {
        if (q->ended() || !q->runnable()) continue;
        if (q->decoding()) oldest_decoder = std::min(oldest_decoder, q->decoding_since());
        else newest_prompt = std::max(newest_prompt, q->admitted_at());
    }
    return oldest_decoder < newest_prompt;
}

// How many tokens the step's batch may hold once its decoding sequences
// (n_decode tokens) are in: all of n_batch, or, when cut, what fits the
// session's prefill_step_ms at the measured time per token.
int32_t step_capacity(const sa_session & s, int32_t n_batch, int32_t n_decode, bool cut) {
    const Engine & e = *s.engine;
    if (!cut || n_decode == 0 || s.prefill_step_ms <= 0) return n_batch;
    const int32_t fit = e.us_per_token > 0 ? (int32_t) (s.prefill_step_ms * 1000.0 / e.us_per_token) : 4 * kMinPromptChunk;
    return std::min(n_batch, std::max(fit, n_decode + kMinPromptChunk));
}

void learn_time_per_token(Engine & e, int32_t n_tokens, int64_t t_us) {
    if (n_tokens < kMinTimedBatch) return;
    const double sample = (double) t_us / n_tokens;
    e.us_per_token = e.us_per_token > 0 ? 0.5 * (e.us_per_token + sample) : sample;
}

bool any_runnable(const Engine & e) {
    return std::any_of(e.active.begin(), e.active.end(), [](const Sequence * q) { return !q->ended() && q->runnable(); });
}

// Tokens left beyond this weigh no more (decision 0087): a request without
// a small max_tokens (a chat that runs to its end of generation) does not
// starve the drafts of every bounded one beside it.
constexpr int32_t kWeightHorizon = 256;

// The drafts of the step's decoding sequences, chosen together: every
// sequence whose drafter offers a proposal has its draft cut or extended
// along it to the lengths that make the decode's expected tokens per
// microsecond highest (draft_allocation.h, docs/decisions/0066), each
// sequence's tokens weighted by how many it has left against the most any
// of them has left (decision 0087): the one that will run longest, and
// would end up decoding alone, drafts first. Alone, or
// with prompts in the step (whose chunks take what the drafts leave), each
// keeps the length its own chooser priced.
void allocate_step_drafts(const std::vector<Sequence *> & drafting, int32_t capacity) {
    if (drafting.size() < 2) return;
    std::vector<DraftOption> options;
    std::vector<Sequence *> adjusted;
    int32_t n_fixed = 0;
    double e_fixed = 0;
    int32_t most_left = 1;
    for (Sequence * q : drafting) most_left = std::max(most_left, q->tokens_left(kWeightHorizon));
    for (Sequence * q : drafting) {
        DraftOption o{};
        const double w = (double) q->tokens_left(kWeightHorizon) / most_left;
        if (q->offer(o)) {
            o.weight = w;
            options.push_back(o);
            adjusted.push_back(q);
            n_fixed += 1;
        } else {
            n_fixed += q->n_verify_tokens();
            e_fixed += w * q->expected_tokens();
        }
    }
    const StepCost * cost = adjusted.empty() ? nullptr : adjusted[0]->step_cost();  // an offering drafter prices
    if (cost == nullptr || !cost->measured()) return;
    const std::vector<int32_t> lengths = allocate_drafts(options, n_fixed, e_fixed, *cost, capacity);
    for (size_t i = 0; i < adjusted.size(); ++i) adjusted[i]->resize_draft(lengths[i]);
}

// A draft context that serves several sequences reads each decoded batch
// once, all its sequences together (MTP, EAGLE-3 and DFlash pair each token
// with the target's hidden state at its index in the batch), unless its
// drafters catch it up themselves when they draft (auto's lazy draft model).
// false: the drafter failed. One sequence's own context is fed by its
// drafter (Sequence::complete).
bool feed_shared_draft_context(sa_session & s, const common_batch & batch) {
    // one drafter kind on every slot: slot 0's answers for the shared context
    const Drafter * drafter = s.slot0().drafter.get();
    if (!shares_draft_context(s) || drafter == nullptr || drafter->catches_up()) return true;
    return common_speculative_process(s.spec, batch);
}

// The drafts that the step's sequences left pending on the shared
// common_speculative, made in one call (docs/decisions/0070): a draft model
// or MTP decodes each draft position once for all of them, not once per
// sequence. Each pays an equal share of the call's time.
void draft_together(sa_session & s, std::vector<Sequence *> & drafting) {
    std::vector<Sequence *> pending;
    for (Sequence * q : drafting) {
        if (q->draft_pending()) pending.push_back(q);
    }
    if (pending.empty()) return;
    const int64_t t0 = ggml_time_us();
    common_speculative_draft(s.spec);
    const int64_t share_us = (ggml_time_us() - t0) / (int64_t) pending.size();
    bool ended = false;
    for (Sequence * q : pending) ended |= !q->finish_draft(share_us);
    if (ended) drafting.erase(std::remove_if(drafting.begin(), drafting.end(), [](Sequence * q) { return q->ended(); }),
                              drafting.end());
}

// Prompt tokens after which a step takes no further prompt: enough for a
// decode at full speed, few enough that prompts arriving together begin
// decoding one after another (docs/decisions/0071).
constexpr int32_t kPrefillQuantum = 256;

// The step's prompt chunks, at most capacity tokens in the batch: shortest
// prompt left first, until the step holds kPrefillQuantum prompt tokens.
// Eight prompts that arrive together then have their first tokens spread
// over the time of their joint prefill, not all at its end (the median time
// to first token about halves), and the sequences that start first decode
// in the later prompts' steps. A cancelled one ends now, whether or not its
// prompt fits in this step.
void add_prompts(common_batch & batch, int32_t capacity, const std::vector<Sequence *> & seqs,
                 std::vector<Sequence *> & in) {
    std::vector<Sequence *> prompts;
    for (Sequence * q : seqs) {
        if (visits(q, false) && q->begin_step()) prompts.push_back(q);
    }
    std::stable_sort(prompts.begin(), prompts.end(),
                     [](const Sequence * a, const Sequence * b) { return a->prefill_left() < b->prefill_left(); });
    int32_t n_prompt = 0;
    for (Sequence * q : prompts) {
        if (n_prompt >= kPrefillQuantum) break;
        const int32_t n = q->plan(batch, capacity - batch.size(), seqs);
        if (n > 0) in.push_back(q);
        n_prompt += n;
    }
}

// Whether a sequence of seqs runs on slot and holds its cells as a live request.
bool runs_on(const Slot & slot, const std::vector<Sequence *> & seqs) {
    return std::any_of(seqs.begin(), seqs.end(),
                       [&](const Sequence * q) { return &q->slot() == &slot && q->started() && !q->ended(); });
}

// A decode that found the cache full (llama_decode returned 1: no cells for
// the batch; only the sequences of a kv_unified session can outgrow it,
// docs/decisions/0113). llama.cpp placed none of the batch, so nothing is
// undone and the step's sequences plan again in the next step. Room is made
// with as little loss as possible: first the prompt prefixes that idle slots
// keep are dropped (a later request only loses their reuse); when they held
// no cells, the most recently admitted running request ends with an error
// that names the cause, and its cells, kept prefix and checkpoints go.
// false: nothing to free or end (the decode fails as any other would).
bool make_room(sa_session & s, const std::vector<Sequence *> & seqs) {
    llama_memory_t mem = llama_get_memory(s.ctx_tgt);
    bool freed = false;
    for (const auto & slot : s.engine->slots) {
        if (runs_on(*slot, seqs) || llama_memory_seq_pos_max(mem, slot->seq) < 0) continue;
        slot->prefix->drop(s);
        slot->cells.store(0);
        freed = true;
    }
    if (freed) return true;
    Sequence * newest = nullptr;
    int32_t n_running = 0;
    for (Sequence * q : seqs) {
        if (!q->started() || q->ended()) continue;
        ++n_running;
        if (newest == nullptr || q->admitted_at() > newest->admitted_at()) newest = q;
    }
    if (newest == nullptr) return false;
    const std::string n_cells = std::to_string(llama_n_ctx(s.ctx_tgt));
    newest->evict_for_room(
        "Context size has been exceeded: the " + n_cells + " cells of the KV cache that the session's sequences share "
        "are full, and this request, the most recently admitted of the " + std::to_string(n_running) +
        " running, was ended so that the others can finish; raise n_ctx (-c), or run fewer requests at once "
        "(parallel) or ask for fewer tokens (max_tokens / n_predict)");
    return true;
}

// One step for the sequences given: those already decoding draft first (so
// a prompt never crowds out a verification), their drafts are chosen
// together, then prompts take what is left; one decode, each takes its
// outputs. Run by the thread holding Engine::stepping.
void step(sa_session & s, const std::vector<Sequence *> & seqs) {
    Engine & e = *s.engine;
    // Whatever the step did to its sequences' memory (a prompt resumed from
    // the prefix cache, a decode, rejected drafts removed, a prefix kept or
    // dropped at the end), their cell counts are published when it ends.
    struct PublishCells {
        const sa_session & s;
        const std::vector<Sequence *> & seqs;
        ~PublishCells() {
            llama_memory_t mem = llama_get_memory(s.ctx_tgt);
            for (Sequence * q : seqs) {
                const llama_seq_id seq = q->slot().seq;
                s.engine->slots[(size_t) seq]->cells.store(llama_memory_seq_pos_max(mem, seq) + 1);
            }
        }
    } publish{s, seqs};
    if (!e.threads) e.threads.emplace(s.threads, s.ctx_tgt, s.ctx_dft);
    e.threads->refresh();
    common_batch & batch = e.batch;
    batch.clear();
    const int32_t n_batch = (int32_t) llama_n_batch(s.ctx_tgt);
    // Each decoding sequence drafts knowing what the ones before it put into
    // the batch and that each one after it adds at least a token (its share).
    int32_t n_after = (int32_t) std::count_if(seqs.begin(), seqs.end(), [&](const Sequence * q) { return visits(q, true); });
    const bool prompts = std::any_of(seqs.begin(), seqs.end(), [&](const Sequence * q) { return visits(q, false); });
    std::vector<Sequence *> drafting;
    int32_t used = 0;
    double e_before = 0;
    const bool defer = shares_draft_context(s) && n_after >= 2;  // one draft call for all of them
    for (Sequence * q : seqs) {
        if (!visits(q, true)) continue;
        q->set_share(BatchShare{used + --n_after, e_before + n_after});
        if (!q->draft_for_step(n_batch - used, defer)) continue;
        drafting.push_back(q);
        used += q->n_verify_tokens();
        e_before += q->expected_tokens();
    }
    if (defer) draft_together(s, drafting);
    if (!prompts) allocate_step_drafts(drafting, n_batch);
    std::vector<Sequence *> in;
    for (Sequence * q : drafting) {
        if (q->add_verify(batch)) in.push_back(q);
    }
    // prompts take what the decoding sequences left, cut to the latency
    // target; none when the step makes a sequence's first token, which then
    // waits for no other prompt's prefill (docs/decisions/0071)
    const bool first_token = std::any_of(in.begin(), in.end(), [](const Sequence * q) { return q->awaits_first_token(); });
    const int32_t capacity = first_token ? batch.size() : step_capacity(s, n_batch, batch.size(), cuts_prompts(seqs));
    add_prompts(batch, capacity, seqs, in);
    if (in.empty()) return;
    e.sole.store(in.size() == 1 ? in[0]->slot().seq : -1);
    const int64_t t0 = ggml_time_us();
    int32_t ret = llama_process(s.ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, batch.get());
    // On a GPU the decode returns once its work is queued: the step's time
    // ends when its outputs are ready, as the step-cost calibration's does
    // (decision 0081); on the CPU backend the decode has finished already.
    if (ret == 0) llama_synchronize(s.ctx_tgt);
    const int64_t t_us = ggml_time_us() - t0;
    e.sole.store(-1);
    e.steps.fetch_add(1);
    // an RPC worker that stopped answering fails the decode it took part in
    // (its outputs are zeros), whatever llama.cpp returned (decision 0097)
    const std::string rpc = rpc_failure(*s.model);
    if (ret == 0 && !rpc.empty()) ret = -3;
    if (ret == 0) learn_time_per_token(e, batch.size(), t_us);
    if (ret == 1 && rpc.empty() && make_room(s, seqs)) return;  // a full cache: no sequence took part
    if (ret != 0) {
        const std::string detail = rpc.empty() ? last_native_log_error() : rpc;
        for (Sequence * q : in) q->decode_failed(ret, detail);
        return;
    }
    // the session's one TestHooks, as the step's first sequence found it when its run started
    if (TestHooks * hooks = in.front()->test_hooks(); hooks != nullptr && hooks->take_decode_failure()) {
        for (Sequence * q : in) q->decode_failed(0, "injected by sa_testing_fail_decode");
        return;
    }
    if (!feed_shared_draft_context(s, batch)) {
        for (Sequence * q : in) q->drafter_failed();
        return;
    }
    // a decode of verifications only prices them (a prompt token has no output row, decision 0074)
    const bool priced = std::all_of(batch.tokens.begin(), batch.tokens.end(), [](const auto & t) { return t.output; });
    for (Sequence * q : in) q->complete(batch, t_us, priced);
}

}  // namespace

sa_status create_engine(sa_session & s, int32_t n_seq) {
    auto e = std::make_unique<Engine>();
    e->batch = common_batch(s.ctx_tgt);
    for (int32_t i = 0; i < n_seq; ++i) {
        auto slot = std::make_unique<Slot>();
        slot->seq = i;
        slot->stats = std::make_unique<Stats>();
        slot->prefix = std::make_unique<PrefixCache>();
        slot->prefix->seq = i;
        if (sa_status st = make_slot_drafter(s, *slot); st != SA_OK) return st;
        slot->stats->set_n_draft(slot->drafter ? s.plan.n_verify : 0);
        e->slots.push_back(std::move(slot));
    }
    s.engine = std::move(e);
    return SA_OK;
}

bool run_while_idle(sa_session & s, const std::function<void()> & fn) {
    Engine & e = *s.engine;
    {
        std::lock_guard<std::mutex> lock(e.mu);
        if (e.stepping || !e.active.empty()) return false;
        e.stepping = true;
    }
    struct Release {
        Engine & e;
        ~Release() {
            std::lock_guard<std::mutex> lock(e.mu);
            e.stepping = false;
            e.cv.notify_all();
        }
    } release{e};
    ThreadShare share(s.threads, s.ctx_tgt, s.ctx_dft);
    share.refresh();
    fn();
    return true;
}

sa_status run_on_slot(sa_session & s, int32_t seq, const sa_run_params & p, common_sampler * smpl, int32_t n_logprobs,
                      sa_event_cb cb, void * user) {
    Engine & e = *s.engine;
    Slot & slot = *e.slots[(size_t) seq];
    Sequence q(s, slot, p, smpl, n_logprobs, cb, user);
    std::unique_lock<std::mutex> lock(e.mu);
    if (slot.busy) return fail(SA_ERR_INVALID_ARG, "sequence " + std::to_string(seq) + " is already running a request");
    slot.busy = true;
    slot.pauses.store(0);  // a resume owed to an earlier request is void
    q.admit(e.order.fetch_add(1) + 1);
    e.active.push_back(&q);
    e.cv.notify_all();
    // Leaves the engine as the next caller expects it, also when a step throws.
    struct Leave {
        Engine & e;
        Slot & slot;
        Sequence * q;
        std::unique_lock<std::mutex> & lock;
        ~Leave() {
            if (!lock.owns_lock()) lock.lock();
            e.active.erase(std::remove(e.active.begin(), e.active.end(), q), e.active.end());
            slot.busy = false;
            if (e.active.empty() && !e.stepping) e.threads.reset();
            e.cv.notify_all();
        }
    } leave{e, slot, &q, lock};
    std::optional<uint64_t> left_in;  // once q ended: the step under way (or the last one) then
    while (true) {
        if (!left_in && q.ended()) {
            // No step started from now on reads q; the one under way may still.
            e.active.erase(std::remove(e.active.begin(), e.active.end(), &q), e.active.end());
            left_in = e.epoch;
        }
        // Leave once that step is over, also when another caller's next step
        // follows at once (waiting for a moment without steps could starve).
        if (left_in && (!e.stepping || e.epoch != *left_in)) break;
        if (e.stepping) {
            e.cv.wait(lock);
            continue;
        }
        if (!any_runnable(e)) {
            e.cv.wait(lock);
            continue;
        }
        e.stepping = true;
        ++e.epoch;
        const std::vector<Sequence *> seqs = e.active;
        lock.unlock();
        struct Release {
            Engine & e;
            std::unique_lock<std::mutex> & lock;
            ~Release() {
                if (!lock.owns_lock()) lock.lock();
                e.stepping = false;
                e.cv.notify_all();
            }
        } release{e, lock};
        step(s, seqs);
    }
    return q.status();
}

}  // namespace sa
