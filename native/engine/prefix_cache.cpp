#include "engine/prefix_cache.h"
#include "session/session.h"
#include "support/tokens.h"

#include <algorithm>
#include <utility>

namespace sa {

namespace {

llama_pos pos_max(llama_context * ctx, llama_seq_id seq) { return llama_memory_seq_pos_max(llama_get_memory(ctx), seq); }

// Empties seq in the session's contexts (the whole memory when it is the only one).
void clear_seq(const sa_session & s, llama_seq_id seq) {
    if (s.n_seq <= 1) {
        clear_memory(s.ctx_tgt);
        clear_memory(s.ctx_dft);
        return;
    }
    llama_memory_seq_rm(llama_get_memory(s.ctx_tgt), seq, -1, -1);
    if (s.ctx_dft) llama_memory_seq_rm(llama_get_memory(s.ctx_dft), seq, -1, -1);
}

// Whether the target's memory still holds what a token at position n
// attends to: a sliding-window cache may have reused the cells of positions
// that fell out of the window (never with the full-size cache sessions make,
// unless the context filled up).
bool window_intact(const sa_session & s, llama_seq_id seq, int32_t n) {
    const llama_pos first = llama_memory_seq_pos_min(llama_get_memory(s.ctx_tgt), seq);
    const int32_t n_swa = llama_model_n_swa(s.model->model);
    return first <= 0 || (n_swa > 0 && first + n_swa < n);
}

}  // namespace

bool needs_checkpoints(const sa_session & s) {
    const llama_model * m = s.model->model;
    return llama_model_is_recurrent(m) || llama_model_is_hybrid(m) || s.use_ckpt_dft;
}

int32_t PrefixCache::resume(sa_session & s, const int32_t * prompt, int32_t n_prompt, bool forget, llama_token * first) {
    if (forget || !valid_ || !enabled.load()) reset(s);
    valid_ = false;  // until keep(): an exception midway leaves the next run a clean start
    if (first != nullptr) *first = -1;
    const llama_token first_kept = std::exchange(first_, -1);
    const int32_t first_n = std::exchange(first_n_, 0);
    if (first != nullptr && first_n == n_prompt && first_kept >= 0 && (int32_t) tokens_.size() >= n_prompt &&
        std::equal(prompt, prompt + n_prompt, tokens_.begin()) && trim(s, n_prompt)) {
        // the same prompt again: its state and first token are the previous run's, bit for bit
        *first = first_kept;
        tokens_.resize((size_t) n_prompt);
        return n_prompt;
    }
    // The run decodes at least the last prompt token; with a draft context
    // one more, so that the drafter's hidden state (MTP, EAGLE-3, DFlash)
    // comes from this prompt's tokens.
    const int32_t n_common = common_prefix(tokens_.data(), tokens_.size(), prompt, (size_t) n_prompt);
    int32_t n = std::min(n_common, n_prompt - 1 - (s.ctx_dft ? 1 : 0));
    // EAGLE-3's draft position i pairs token i+1 with the target's features at i.
    if (s.plan.type == SA_SPEC_DRAFT_EAGLE3) n = std::min(n, n_common - 1);
    // The draft context's positions must continue where it stops (EAGLE-3 lags
    // one behind), unless its drafter catches it up itself when it drafts.
    const Drafter * drafter = s.slot0().drafter.get();  // one drafter kind on every slot: slot 0's answers
    const bool dft_follows = s.ctx_dft && !s.use_ckpt_dft && !(drafter && drafter->catches_up());
    if (dft_follows) n = std::min(n, (int32_t) pos_max(s.ctx_dft, seq) + 1);
    n = std::max(n, 0);
    const bool ckpt = needs_checkpoints(s);
    if (n > 0 && !ckpt && !window_intact(s, seq, n)) n = 0;
    if (n > 0 && ckpt && !(live_ && n == (int32_t) tokens_.size())) n = restore(s, n);
    if (n > 0 && !trim(s, n)) n = 0;
    if (n == 0) clear_seq(s, seq);
    tokens_.resize((size_t) n);
    drop_checkpoints([n](const Checkpoint & c) { return c.n_tokens > n; });
    return n;
}

int32_t PrefixCache::restore(sa_session & s, int32_t n_max) {
    const Checkpoint * best = nullptr;
    for (const Checkpoint & c : ckpts_) {
        if (c.n_tokens <= n_max && (best == nullptr || c.n_tokens > best->n_tokens)) best = &c;
    }
    if (best == nullptr) return 0;
    const int64_t t0 = ggml_time_us();
    if (!best->tgt.restore(s.ctx_tgt, seq)) return 0;
    if (s.use_ckpt_dft && !best->dft.restore(s.ctx_dft, seq)) return 0;
    u_restores_.fetch_add(1);
    u_restore_us_.fetch_add(ggml_time_us() - t0);
    return best->n_tokens;
}

// Drops positions n.. from both contexts (a recurrent state was restored at
// n or already ends there) and checks that the target ends at n - 1 (the
// draft context may end earlier: EAGLE-3 writes a position one step late).
bool PrefixCache::trim(sa_session & s, int32_t n) const {
    if (!llama_memory_seq_rm(llama_get_memory(s.ctx_tgt), seq, n, -1) || pos_max(s.ctx_tgt, seq) != n - 1) return false;
    return s.ctx_dft == nullptr ||
           (llama_memory_seq_rm(llama_get_memory(s.ctx_dft), seq, n, -1) && pos_max(s.ctx_dft, seq) <= n - 1);
}

void PrefixCache::checkpoint(sa_session & s, int32_t n_tokens) {
    const int64_t budget = checkpoint_budget.load();
    if (!needs_checkpoints(s) || !enabled.load() || budget <= 0 || n_tokens <= 0) return;
    const int64_t t0 = ggml_time_us();
    Checkpoint c;
    c.n_tokens = n_tokens;
    if (!c.tgt.save(s.ctx_tgt, seq)) return;
    if (s.use_ckpt_dft && !c.dft.save(s.ctx_dft, seq)) return;
    if ((int64_t) c.bytes() > budget) return;
    drop_checkpoints([n_tokens](const Checkpoint & k) { return k.n_tokens == n_tokens; });
    int64_t total = (int64_t) c.bytes();
    for (const Checkpoint & k : ckpts_) total += (int64_t) k.bytes();
    while (total > budget) {
        total -= (int64_t) ckpts_.front().bytes();
        ckpts_.erase(ckpts_.begin());
    }
    ckpts_.push_back(std::move(c));
    u_saves_.fetch_add(1);
    u_save_us_.fetch_add(ggml_time_us() - t0);
}

void PrefixCache::keep(sa_session & s, llama_tokens && tokens, bool live, bool save, int32_t first_n,
                       llama_token first) {
    const int32_t n = (int32_t) tokens.size();
    const bool ckpt = needs_checkpoints(s);
    // A trimmable memory drops what lies past tokens (a stopped step's
    // decoded drafts); a recurrent one must end exactly there to be live.
    bool ok = enabled.load();
    if (ok && !ckpt) ok = n == 0 || trim(s, n);
    if (ok && ckpt && live) {
        live = pos_max(s.ctx_tgt, seq) == n - 1 && (!s.use_ckpt_dft || pos_max(s.ctx_dft, seq) == n - 1);
    }
    if (!ok) {
        drop(s);
        return;
    }
    tokens_ = std::move(tokens);
    live_ = live;
    valid_ = true;
    const bool first_known = first >= 0 && first_n > 0 && first_n <= n && !ckpt;
    first_n_ = first_known ? first_n : 0;
    first_ = first_known ? first : -1;
    if (save && live) checkpoint(s, n);
    publish();
}

void PrefixCache::drop(sa_session & s) {
    reset(s);
    valid_ = true;
    publish();
}

void PrefixCache::reset(sa_session & s) {
    clear_seq(s, seq);
    tokens_.clear();
    ckpts_.clear();
    first_n_ = 0;
    first_ = -1;
    live_ = true;
}

void PrefixCache::publish() {
    int64_t bytes = 0;
    for (const Checkpoint & c : ckpts_) bytes += (int64_t) c.bytes();
    u_tokens_.store((int64_t) tokens_.size());
    u_checkpoints_.store((int64_t) ckpts_.size());
    u_bytes_.store(bytes);
}

void PrefixCache::usage(sa_prefix_usage * out) const {
    out->tokens = u_tokens_.load();
    out->checkpoints = u_checkpoints_.load();
    out->checkpoint_bytes = u_bytes_.load();
    out->saves = u_saves_.load();
    out->save_us = u_save_us_.load();
    out->restores = u_restores_.load();
    out->restore_us = u_restore_us_.load();
}

}  // namespace sa
