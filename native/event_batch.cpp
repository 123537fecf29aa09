#include "event_batch.h"
#include "stats.h"

#include "common.h"

namespace sa {

void EventBatch::token(llama_token id) {
    const std::string piece = common_token_to_piece(vocab_, id, false);
    body_.array(3);
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

void EventBatch::error(int code, const std::string & msg) {
    body_.array(3);
    body_.integer(SA_EV_ERROR);
    body_.integer(code);
    body_.str(msg);
    ++n_events_;
}

bool EventBatch::flush() {
    if (n_events_ == 0) return true;
    batch_.clear();
    batch_.array(n_events_);
    batch_.append(body_);
    body_.clear();
    n_events_ = 0;
    return cb_ == nullptr || cb_(user_, batch_.data(), batch_.size()) == 0;
}

}  // namespace sa
