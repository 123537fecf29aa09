// The events of one loop step, encoded as the msgpack batch of the event
// schema (spec_actor.h) and handed to the run's callback in one call.
#pragma once

#include "abi/spec_actor.h"
#include "report/logprobs.h"
#include "report/msgpack_writer.h"

#include "llama.h"

#include <string>

namespace sa {

class EventBatch {
public:
    EventBatch(const llama_vocab * vocab, sa_event_cb cb, void * user) : vocab_(vocab), cb_(cb), user_(user) {}

    // [SA_EV_TOKEN, id, piece]: the raw bytes of the token's text; with
    // n_top >= 0, a fourth field with the target's log-probabilities at output
    // idx of ctx's last decode (see logprobs.h).
    void token(llama_token id, llama_context * ctx = nullptr, int32_t idx = 0, int32_t n_top = -1);
    // The same with the fourth field from probabilities taken after sampling.
    void token(llama_token id, const SampledProbs & probs);
    // [kind, stats] for Stats and Done; [SA_EV_EOG, stats, eog_id] for Eog.
    void stats(int kind, const sa_stats & snapshot, llama_token eog_id = -1);
    // [SA_EV_PROGRESS, total, cache, processed, time_us]: the prompt's evaluation so far.
    void progress(int64_t total, int64_t cache, int64_t processed, int64_t time_us);
    // [SA_EV_ERROR, code, message].
    void error(int code, const std::string & msg);

    // Hands the step's events to the callback (nothing if there are none);
    // returns what the callback returned (0: go on; SA_CB_PAUSE; else stop).
    int flush();

private:
    // A token event's first three fields (of n_fields), counted as one event.
    void open_token(llama_token id, uint32_t n_fields);

    const llama_vocab * vocab_;
    sa_event_cb cb_;
    void * user_;
    MsgpackWriter body_;   // the events so far
    MsgpackWriter batch_;  // array header + body, what the callback gets
    uint32_t n_events_ = 0;
};

}  // namespace sa
