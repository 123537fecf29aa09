#include "report/event_batch.h"
#include "report/logprobs.h"
#include "report/stats.h"

#include "common.h"

namespace sa {

void EventBatch::token(llama_token id, llama_context * ctx, int32_t idx, int32_t n_top) {
    const bool logprobs = ctx != nullptr && n_top >= 0;
    open_token(id, logprobs ? 4 : 3);
    if (logprobs) write_logprobs(body_, ctx, idx, id, n_top);
}

void EventBatch::token(llama_token id, const SampledProbs & probs) {
    open_token(id, 4);
    write_sampled_logprobs(body_, probs);
}

void EventBatch::open_token(llama_token id, uint32_t n_fields) {
    const std::string piece = common_token_to_piece(vocab_, id, false);
    body_.array(n_fields);
    body_.integer(SA_EV_TOKEN);
    body_.integer(id);
    body_.bin(piece.data(), piece.size());
    ++n_events_;
}

void EventBatch::stats(int kind, const sa_stats & snapshot, llama_token eog_id) {
    body_.array(kind == SA_EV_EOG ? 3 : 2);
    body_.integer(kind);
    write_stats_map(body_, snapshot);
    if (kind == SA_EV_EOG) body_.integer(eog_id);
    ++n_events_;
}

void EventBatch::progress(int64_t total, int64_t cache, int64_t processed, int64_t time_us) {
    body_.array(5);
    body_.integer(SA_EV_PROGRESS);
    body_.integer(total);
    body_.integer(cache);
    body_.integer(processed);
    body_.integer(time_us);
    ++n_events_;
}

void EventBatch::error(int code, const std::string & msg) {
    body_.array(3);
    body_.integer(SA_EV_ERROR);
    body_.integer(code);
    body_.str(msg);
    ++n_events_;
}

int EventBatch::flush() {
    if (n_events_ == 0) return 0;
    batch_.clear();
    batch_.array(n_events_);
    batch_.append(body_);
    body_.clear();
    n_events_ = 0;
    return cb_ == nullptr ? 0 : cb_(user_, batch_.data(), batch_.size());
}

}  // namespace sa
