"""Edits spec_actor makes to the llama.cpp source it builds (docs/decisions/0085, 0086, 0088, 0089, 0090, 0092, 0093, 0094).

Each edit replaces one exact, unique passage of one file; `apply` refuses a
tree where a passage is missing or not unique, so a new llama.cpp version
fails the build loudly instead of building without the edit. The edits'
text is part of the build's cache key (llama_build.py), and the patched
tree is a copy of the unpacked source, never the source itself.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Edit:
    """Replace the one occurrence of ``before`` in ``path`` (relative to the tree) by ``after``."""

    path: str
    before: str
    after: str


def _insert(path: str, anchor: str, above: str = "", below: str = "") -> Edit:
    """An edit that keeps the one passage ``anchor`` and adds lines above or below it."""
    return Edit(path=path, before=anchor, after=above + anchor + below)


# ggml's CPU flash attention takes its tiled path (64 query rows x 64 KV cells
# per GEMM) for every batch of 64 rows or more. A tile skips a KV tile only
# when all its rows mask all its cells. A batched engine's decode rows belong
# to several sequences, whose cells interleave in the unified cache, so a tile
# holding them multiplies against every sequence's cells: at 8 sequences a
# 64-row step cost 57% more than a 56-row one after 500 tokens each. Such a
# tile, whose rows attend to scattered cells, now takes the per-row path,
# which skips masked cells one by one (ggml's own path below 64 rows).
_FA_SPARSE_TILES = r'''
// spec_actor (docs/decisions/0085): whether a tile of `rows` query rows from
// iq1 attends to scattered cells: fewer than half the cells between each
// row's first and last unmasked one unmasked, summed over the rows. The rows
// of several sequences, whose cells interleave in a unified cache, do; one
// sequence's causal rows (its prompt, its drafts) do not, and keep the GEMM
// and its F32 accumulation.
static bool ggml_fa_tile_is_sparse(const ggml_tensor * mask, int64_t iq1, int64_t iq2, int64_t iq3,
                                   int64_t rows, int64_t nek1) {
    if (mask == nullptr || mask->type != GGML_TYPE_F16) {
        return false;
    }
    const int64_t kv_tile = ggml_fa_tile_config::KV;
    int64_t open = 0, span = 0;
    for (int64_t tq = 0; tq < rows; tq++) {
        const uint16_t * mp = (const uint16_t *) ((const char *) mask->data + (iq1 + tq)*mask->nb[1] +
                                                  (iq2%mask->ne[2])*mask->nb[2] + (iq3%mask->ne[3])*mask->nb[3]);
        int64_t first = -1, last = -1;
        for (int64_t t = 0; t*kv_tile < nek1; t++) {
            const uint16_t * cells = mp + t*kv_tile;
            const int n = (int) (std::min(nek1, (t + 1)*kv_tile) - t*kv_tile);
            int in_tile = 0;  // 32-bit and branch-free: the compiler vectorizes the count
            for (int i = 0; i < n; i++) {
                in_tile += cells[i] != 0xFC00;  // 0xFC00: -INFINITY in F16, a masked cell
            }
            if (in_tile == 0) {
                continue;
            }
            open += in_tile;
            int lo = 0, hi = n - 1;
            while (cells[lo] == 0xFC00) lo++;
            while (cells[hi] == 0xFC00) hi--;
            if (first < 0) first = t*kv_tile + lo;
            last = t*kv_tile + hi;
        }
        span += first < 0 ? 0 : last - first + 1;
    }
    return 2*open < span;
}

// The rows ir0..ir1 tile by tile, each by the tiled GEMM or, where it attends
// sparsely (ggml_fa_tile_is_sparse), by the per-row path.
static void ggml_compute_forward_flash_attn_ext_tiles(
        const ggml_compute_params * params,
        ggml_tensor * dst,
        int ir0, int ir1) {
    const ggml_tensor * q    = dst->src[0];
    const ggml_tensor * mask = dst->src[3];
    const int64_t neq1 = q->ne[1];
    const int64_t neq2 = q->ne[2];
    const int64_t nek1 = dst->src[1]->ne[1];
    const int64_t DK   = dst->src[1]->ne[0];
    const int64_t DV   = dst->src[2]->ne[0];
    const int64_t Q    = ggml_fa_tile_config::Q;
    const int64_t KV   = ggml_fa_tile_config::KV;
    // floats of scratch per thread, laid out as the tiled path does
    const int64_t tiled_scratch = Q*DK + 2*Q*KV + Q*DV + KV*DV + KV*DK + (int64_t) CACHE_LINE_SIZE_F32;
    int ir = ir0;
    while (ir < ir1) {
        const int64_t iq3 = ir/(neq2*neq1);
        const int64_t iq2 = (ir - iq3*neq2*neq1)/neq1;
        const int64_t iq1 = (ir - iq3*neq2*neq1 - iq2*neq1);
        const int rows = (int) std::min<int64_t>((int64_t) ggml_fa_tile_config::Q, std::min<int64_t>(ir1 - ir, neq1 - iq1));
        if (ggml_fa_tile_is_sparse(mask, iq1, iq2, iq3, rows, nek1)) {
            // the per-row path finds its scratch at wdata + ith*(its own, smaller
            // stride): point it at this thread's tiled scratch, which other
            // threads' tiles never touch, instead of into thread 0's
            ggml_compute_params own = *params;
            own.ith   = 0;
            own.wdata = (float *) params->wdata + params->ith*tiled_scratch;
            ggml_compute_forward_flash_attn_ext_f16_one_chunk(&own, dst, ir, ir + rows, 0, nek1, nullptr, 0);
        } else {
            ggml_compute_forward_flash_attn_ext_tiled(params, dst, ir, ir + rows);
        }
        ir += rows;
    }
}
'''

# The per-row path reads each masked cell's mask value, converts it and
# compares it before it skips the cell. In a unified cache a row of one of 8
# sequences masks about 7 cells in 8, so at 8 sequences this scan was about
# half of the path's time and grew with every sequence's context, not the
# row's own (docs/decisions/0088). Masked cells (F16 -INFINITY, 0xFC00) are
# now skipped 8 at a time by two 64-bit compares; the cells attended to, and
# the order they are summed in, are exactly what they were.
_FA_SKIP_MASKED_RUNS = r"""
// spec_actor (docs/decisions/0088): the first cell from ic on that the mask
// row mp does not mask (-INFINITY in F16 is 0xFC00), or end.
static inline int64_t ggml_fa_next_open_cell(const ggml_fp16_t * mp, int64_t ic, int64_t end) {
    const uint64_t masked = 0xFC00FC00FC00FC00ull;
    for (; ic + 8 <= end; ic += 8) {
        uint64_t a, b;
        memcpy(&a, mp + ic, sizeof a);
        memcpy(&b, mp + ic + 4, sizeof b);
        if (((a ^ masked) | (b ^ masked)) != 0) {
            break;
        }
    }
    while (ic < end && mp[ic] == (ggml_fp16_t) 0xFC00) {
        ic++;
    }
    return ic;
}

static void ggml_compute_forward_flash_attn_ext_f16_one_chunk(
"""

_FA_ROW_LOOP = (
    "        for (int64_t ic = ic_start; ic < ic_end; ++ic) {\n"
    "            const float mv = mp ? slope*GGML_CPU_FP16_TO_FP32(mp[ic]) : 0.0f;\n"
)
_FA_ROW_LOOP_SKIPPING = (
    "        for (int64_t ic = ic_start; ic < ic_end; ++ic) {\n"
    "            if (mp && (ic = ggml_fa_next_open_cell(mp, ic, ic_end)) == ic_end) {  // spec_actor: 0088\n"
    "                break;\n"
    "            }\n"
    "            const float mv = mp ? slope*GGML_CPU_FP16_TO_FP32(mp[ic]) : 0.0f;\n"
)

# llama.cpp sizes the buffer its decodes copy their outputs into for one row
# per sequence when a context is made, and makes a new one, cleared, each
# time a decode asks for more rows than the last largest one. A batched
# engine's verification steps grow from a few rows to hundreds as sequences
# start to draft, so a new server re-allocated and cleared it about ten times
# in its first seconds, and the kernel's page faults for those fresh pages
# cost eight first requests about a tenth of their time (docs/decisions/0086).
# A context whose caller bounds its outputs (n_outputs_max, as spec_actor's
# and llama-server's do) gets the buffer for all of them when it is made.
_OUTPUTS_RESERVED = (
    "            const uint32_t n_reserve = std::max(params.n_seq_max, params.n_outputs_max);  // spec_actor: 0086\n"
    "            if (output_reserve(n_reserve) < n_reserve) {\n"
)

# A decode copies every output row's logits from the compute buffer into the
# context's output buffer: 1 MiB a row on Gemma's 262,144-token vocabulary,
# about 6 GB/s on one core, while the other core waits. A pool's eight mixed
# requests copied about 880 MiB that way, some 2% of their time, only for
# spec_actor to read each row once before the next decode. A context that
# asks for it (llama_set_logits_in_place, off by default, so llama-server and
# every other caller are unchanged) keeps a decode's logits where the graph
# wrote them when one micro-batch holds the whole batch in host memory, until
# its next decode (docs/decisions/0089).
_LOGITS_API = (
    "    LLAMA_API float * llama_get_logits_ith(struct llama_context * ctx, int32_t i);\n"
    "\n"
    "    // spec_actor (docs/decisions/0089): with in_place, a decode whose batch fits one micro-batch in host\n"
    "    // memory leaves its logits in the compute buffer instead of copying them; the pointers the getters\n"
    "    // return then hold until the context's next decode. Off by default.\n"
    "    LLAMA_API void llama_set_logits_in_place(struct llama_context * ctx, bool in_place);\n"
    "#define LLAMA_HAS_LOGITS_IN_PLACE 1\n"
)
_LOGITS_MEMBERS = (
    "    buffer_view<float> logits = {nullptr, 0};\n"
    "    bool    keep_logits_in_place = false;    // spec_actor: 0089\n"
    "    float * logits_in_place      = nullptr;  // the last decode's logits in the compute buffer, or null\n"
    "    float * logits_rows() const { return logits_in_place ? logits_in_place : logits.data; }  // where they are\n"
)
_LOGITS_SETTER = (
    "    float * get_logits_ith(int32_t i);\n"
    "    void set_logits_in_place(bool in_place) { keep_logits_in_place = in_place; logits_in_place = nullptr; }  // spec_actor: 0089\n"
)
_LOGITS_KEPT = (
    "                if (keep_logits_in_place && n_outputs == n_outputs_all && n_tokens_prev + ubatch.n_tokens == n_tokens_all &&\n"
    "                    t_logits->buffer && ggml_backend_buffer_is_host(t_logits->buffer) && ggml_is_contiguous(t_logits)) {\n"
    "                    logits_in_place = (float *) t_logits->data;  // spec_actor: 0089, the batch's only micro-batch\n"
    "                } else {\n"
    "                    ggml_backend_tensor_get_async(backend_res, t_logits, logits_out, 0, n_outputs*n_vocab*sizeof(float));\n"
    "                }\n"
)

# llamafile's quantized product (tinyBLAS_Q0_AVX: Q8_0, Q5_0, Q4_0 and IQ4_NL
# weights by Q8_0 activations, every product of two rows or more) works in
# 256-bit tiles, five instructions per 32 multiply-adds of one column. On a
# CPU with AVX512-VNNI it was about a sixth of the dot instructions' peak: a
# batched engine's 40-row verification spent 101 ms of its 200 in the
# 262,144-row output head. With AVX512-VNNI the class now takes the kernels
# of native/sgemm_q0_avx512.inc (docs/decisions/0090); without it nothing
# changes.
_SGEMM = "ggml/src/ggml-cpu/llamafile/sgemm.cpp"
_SGEMM_AVX512 = (Path(__file__).with_name("sgemm_q0_avx512.inc")).read_text()
_SGEMM_CLASS = ("#if defined(__AVX2__) || defined(__AVX512F__) || defined(__AVX__)\n"
                "template <typename TA, typename TB, typename TC>\nclass tinyBLAS_Q0_AVX {\n")
_SGEMM_GUARD = ("#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VNNI__)\n"
                "#define SA_Q0_AVX512 1  // spec_actor: 0090\n"
                "#endif\n")
_SGEMM_MATMUL = ("        iq4nlt = _mm_loadu_si128((const __m128i *)kvalues_iq4nl);\n    }\n\n"
                 "    void matmul(int64_t m, int64_t n) {\n        mnpack(0, m, 0, n);\n    }\n\n  private:\n")
_SGEMM_MATMUL_AVX512 = ("        iq4nlt = _mm_loadu_si128((const __m128i *)kvalues_iq4nl);\n    }\n\n"
                        "    void matmul(int64_t m, int64_t n) {\n"
                        "#if defined(SA_Q0_AVX512)\n        matmul_avx512(m, n);  // spec_actor: 0090\n"
                        "#else\n        mnpack(0, m, 0, n);\n#endif\n    }\n\n  private:\n"
                        "#if defined(SA_Q0_AVX512)\n" + _SGEMM_AVX512 + "#endif\n\n")
# ggml hands a one-row product to its own vec_dot instead (a lone decode),
# whose lanes sum differently; with the kernels above one row takes them
# too, so a row's value is the same alone and in any batch (and 4% faster).
_SGEMM_ONE_ROW = "    // only enable sgemm for prompt processing\n#if !defined(__MMA__)\n    if (n < 2)\n"
_SGEMM_ONE_ROW_AVX512 = (
    "    // only enable sgemm for prompt processing\n#if !defined(__MMA__)\n"
    "#if defined(SA_Q0_AVX512)  // spec_actor: 0090, one row too\n"
    "    if (n < 2 && !(Btype == GGML_TYPE_Q8_0 && (Atype == GGML_TYPE_Q8_0 || Atype == GGML_TYPE_Q4_0 ||\n"
    "                                               Atype == GGML_TYPE_Q5_0 || Atype == GGML_TYPE_IQ4_NL)))\n"
    "#else\n"
    "    if (n < 2)\n"
    "#endif\n"
)

# common_speculative holds what its n-gram drafters learned from earlier
# sequences; auto's "fresh" runs (memory=0, forget()) must start without it,
# and made new ones per request. ngram-mod's table is 16 MiB, zeroed and
# filled at construction: about 8 ms of page faults and writes a request.
# common_speculative_forget drops the learned state in place where a drafter
# can (ngram-mod: a reset of its resident table); false: make a new one.
_SPEC_FORGET_API = (
    "// spec_actor (docs/decisions/0092): drops what spec's drafters learned from earlier\n"
    "// sequences, in place, so that it holds what a new one holds; false: one of them\n"
    "// cannot, and the caller makes a new one.\n"
    "#define COMMON_HAS_SPECULATIVE_FORGET 1\n"
    "bool common_speculative_forget(common_speculative * spec);\n"
    "\n"
)
_SPEC_FORGET_NGRAM_MOD = (
    "        sinfos.resize(n_seq);\n"
    "    }\n"
    "\n"
    "    bool forget() override {  // spec_actor: 0092\n"
    "        mod.reset();\n"
    "        for (auto & sinfo : sinfos) {\n"
    "            sinfo = seq_info{};\n"
    "        }\n"
    "        return true;\n"
    "    }\n"
    "\n"
    "    void begin(llama_seq_id seq_id, const llama_tokens & prompt) override {\n"
    "        auto & sinfo = sinfos[seq_id];\n"
)
_SPEC_FORGET = (
    "bool common_speculative_forget(common_speculative * spec) {  // spec_actor: 0092\n"
    "    if (spec == nullptr) {\n"
    "        return true;\n"
    "    }\n"
    "    bool ok = true;\n"
    "    for (auto & impl : spec->impls) {\n"
    "        ok = impl->forget() && ok;\n"
    "    }\n"
    "    return ok;\n"
    "}\n"
    "\n"
)

# ngram-mod's reset filled all 4M entries of its table (16 MiB) however few
# were in use: a fresh run per request paid that in every slot. It now
# clears the entries add() filled, while they are few enough to list.
_NGRAM_MOD_FILLED_MEMBER = (
    "    std::vector<entry_t> entries;\n"
    "\n"
    "    // spec_actor (docs/decisions/0092): the entries add() filled, listed while\n"
    "    // they are fewer than 1/16 of the table, so that reset() clears only them\n"
    "    std::vector<uint32_t> filled;\n"
)
_NGRAM_MOD_ADD = (
    "    if (entries[i] == EMPTY) {\n"
    "        used++;\n"
    "        if (filled.size() < entries.size() / 16 && i <= UINT32_MAX) {  // spec_actor: 0092\n"
    "            filled.push_back((uint32_t) i);\n"
    "        }\n"
    "    }\n"
)
_NGRAM_MOD_RESET = (
    "void common_ngram_mod::reset() {\n"
    "    if (filled.size() == used) {  // spec_actor: 0092, every filled entry is listed\n"
    "        for (const uint32_t i : filled) {\n"
    "            entries[i] = EMPTY;\n"
    "        }\n"
    "    } else {\n"
    "        std::fill(entries.begin(), entries.end(), EMPTY);\n"
    "    }\n"
    "    filled.clear();\n"
    "    used = 0;\n"
    "}\n"
)

# A recurrent target that may roll back from snapshots (n_rs_seq > 0, what MTP,
# EAGLE-3 and DFlash drafting ask for) wrote n_rs_seq + 1 state snapshots in
# every decode: the delta-net took ggml_gated_delta_net's snapshot path (the
# state built in scratch, then copied out) and the convolution state was copied
# n_rs_seq + 1 times. A one-token decode (a plain step, which verifies no
# draft) can never be rolled back, and the delta-net already left the snapshots
# past a decode's own tokens unwritten; now a one-token decode writes only the
# state it makes, through the same graph as a context without snapshots, and
# the convolution keeps one snapshot per token of the decode at most. At a
# released Qwen 3.5's state size (2 MiB per block) the snapshots cost a third
# of a plain step.
_DELTA_NET_CONV_SNAPSHOTS = (
    "        // spec_actor (0093): a decode keeps at most one snapshot per token it holds\n"
    "        const int64_t K = std::min<int64_t>((int64_t) cparams.n_rs_seq + 1, conv_input->ne[0] - conv_states->ne[0]);\n"
    "\n"
    "        for (int64_t t = 1; t <= K; ++t) {\n"
)
_DELTA_NET_STATE_SNAPSHOTS = (
    "    // spec_actor (0093): a one-token decode is never rolled back: no snapshots\n"
    "    const bool keep = cparams.n_rs_seq > 0 && n_seq_tokens > 1;\n"
)

# ggml's RPC client aborts the process when a server cannot be reached or
# stops answering (RPC_STATUS_ASSERT and GGML_ABORT, on the thread that talks
# to the server), and a vanished peer is noticed only after the system's TCP
# timeouts (2 hours idle, 15 minutes of retransmissions). Now a connection that
# fails marks its dispatcher failed: every command from then on completes at
# once without I/O (its output zeroed), graph_compute answers
# GGML_STATUS_FAILED (llama_decode returns -3), and
# ggml_backend_rpc_server_failed(endpoint) says so, for the caller to report
# and to refuse the model (docs/decisions/0094). Sockets probe a silent peer
# (keepalive) and give up on unacknowledged data after 25 s, and a closed
# peer is an error, not SIGPIPE. Two contexts that compute on one server from
# two threads no longer race on the server's stored graph (the check of the
# last graph id and the push of the command are one step).
_RPC = "ggml/src/ggml-rpc/ggml-rpc.cpp"
_RPC_TRANSPORT = "ggml/src/ggml-rpc/transport.cpp"
_RPC_HELLO_ASSERT = (
    "    bool status = send_rpc_cmd(sock, RPC_CMD_HELLO, &request, sizeof(request), &response, sizeof(response));\n"
    "    RPC_STATUS_ASSERT(status);\n"
)
_RPC_HELLO_FAILS = (
    "    bool status = send_rpc_cmd(sock, RPC_CMD_HELLO, &request, sizeof(request), &response, sizeof(response));\n"
    "    if (!status) {  // spec_actor (0094): the caller fails the dispatcher\n"
    "        return false;\n"
    "    }\n"
)
_RPC_DISPATCHER_ANCHOR = "    void start(const std::string & endpoint);\n    void work();\n"
_RPC_DISPATCHER_MEMBERS = (
    "\n"
    "    // spec_actor (0094): set once the server could not be reached or stopped\n"
    "    // answering; every command then completes at once, its output zeroed\n"
    "    std::atomic<bool> failed{false};\n"
    "    void fail(const char * what);\n"
    "    std::string name;\n"
)
_RPC_START = (
    "void rpc_dispatcher::start(const std::string & endpoint) {\n"
    "    std::string host;\n"
    "    int port;\n"
    "    if (!parse_endpoint(endpoint, host, port)) {\n"
    "        GGML_ABORT(\"Failed to parse endpoint: %s\\n\", endpoint.c_str());\n"
    "    }\n"
    "    if (!rpc_transport_init()) {\n"
    "        GGML_ABORT(\"RPC transport initialization failed\\n\");\n"
    "    }\n"
    "\n"
    "    sock = socket_t::connect(host.c_str(), port);\n"
    "    if (sock == nullptr) {\n"
    "        GGML_ABORT(\"Failed to connect to %s\\n\", endpoint.c_str());\n"
    "    }\n"
    "    if (!negotiate_hello(sock)) {\n"
    "        GGML_ABORT(\"RPC handshake failed for %s\\n\", endpoint.c_str());\n"
    "    }\n"
    "    LOG_DBG(\"[%s] connected to %s\\n\", __func__, endpoint.c_str());\n"
    "    running = true;\n"
)
_RPC_START_FAILS = (
    "void rpc_dispatcher::fail(const char * what) {  // spec_actor (0094)\n"
    "    if (!failed.exchange(true)) {\n"
    "        GGML_LOG_ERROR(\"RPC server %s: %s; its backend computes nothing from now on\\n\", name.c_str(), what);\n"
    "    }\n"
    "}\n"
    "\n"
    "void rpc_dispatcher::start(const std::string & endpoint) {\n"
    "    // spec_actor (0094): a server that cannot be reached fails the dispatcher, whose\n"
    "    // thread still runs (and completes every command), instead of aborting\n"
    "    name = endpoint;\n"
    "    std::string host;\n"
    "    int port;\n"
    "    if (!parse_endpoint(endpoint, host, port)) {\n"
    "        fail(\"cannot parse the endpoint (expected host:port)\");\n"
    "    } else if (!rpc_transport_init()) {\n"
    "        fail(\"RPC transport initialization failed\");\n"
    "    } else if ((sock = socket_t::connect(host.c_str(), port)) == nullptr) {\n"
    "        fail(\"cannot connect\");\n"
    "    } else if (!negotiate_hello(sock)) {\n"
    "        fail(\"the handshake failed (not a ggml RPC server of this protocol version)\");\n"
    "    } else {\n"
    "        LOG_DBG(\"[%s] connected to %s\\n\", __func__, endpoint.c_str());\n"
    "    }\n"
    "    running = true;\n"
)
_RPC_WORK = (
    "        if (msg_ptr->cmd != RPC_CMD_NONE) {\n"
    "            if (msg_ptr->output) {\n"
    "                bool status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size, msg_ptr->output, msg_ptr->output_size);\n"
    "                RPC_STATUS_ASSERT(status);\n"
    "            } else {\n"
    "                bool status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size);\n"
    "                RPC_STATUS_ASSERT(status);\n"
    "            }\n"
    "        }\n"
)
_RPC_WORK_FAILS = (
    "        if (msg_ptr->cmd != RPC_CMD_NONE) {\n"
    "            // spec_actor (0094): a server that stops answering fails the dispatcher\n"
    "            // instead of aborting; the command completes with its output zeroed\n"
    "            bool status = !failed.load();\n"
    "            if (status && msg_ptr->output) {\n"
    "                status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size, msg_ptr->output, msg_ptr->output_size);\n"
    "            } else if (status) {\n"
    "                status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size);\n"
    "            }\n"
    "            if (!status) {\n"
    "                fail(\"the server stopped answering\");\n"
    "                if (msg_ptr->output) {\n"
    "                    memset(msg_ptr->output, 0, msg_ptr->output_size);\n"
    "                }\n"
    "            }\n"
    "        }\n"
)
_RPC_GET_DISPATCHER = "static std::shared_ptr<rpc_dispatcher> get_dispatcher(const std::string & endpoint) {\n"
_RPC_GET_DISPATCHER_LOOKUP = (
    "// spec_actor (0094): create false only looks up a live dispatcher (null: none)\n"
    "static std::shared_ptr<rpc_dispatcher> get_dispatcher(const std::string & endpoint, bool create = true) {\n"
)
_RPC_DISPATCHER_MADE = "    auto dispatcher = std::make_shared<rpc_dispatcher>();\n    dispatcher->start(endpoint);\n"
_RPC_GRAPH_COMPUTE = (
    "    GGML_ASSERT(cgraph->n_nodes > 0);\n"
    "    bool reuse = cgraph->uid != 0 && rpc_dev_ctx->last_graph_uid == cgraph->uid;\n"
)
_RPC_GRAPH_COMPUTE_CHECKED = (
    "    GGML_ASSERT(cgraph->n_nodes > 0);\n"
    "    // spec_actor (0094): a failed server computes nothing; and the check of the\n"
    "    // server's stored graph and the push of the command are one step, so that\n"
    "    // two threads' contexts never recompute each other's graph\n"
    "    if (rpc_ctx->dispatcher->failed.load()) {\n"
    "        return GGML_STATUS_FAILED;\n"
    "    }\n"
    "    static std::mutex graph_mutex;\n"
    "    std::lock_guard<std::mutex> graph_lock(graph_mutex);\n"
    "    bool reuse = cgraph->uid != 0 && rpc_dev_ctx->last_graph_uid == cgraph->uid;\n"
)
_RPC_DEVICE_MEMORY = (
    "void ggml_backend_rpc_get_device_memory(const char * endpoint, uint32_t device, size_t * free, size_t * total) {\n"
)
_RPC_FAILED_API = (
    "bool ggml_backend_rpc_server_failed(const char * endpoint) {  // spec_actor (0094)\n"
    "    auto dispatcher = get_dispatcher(endpoint, false);\n"
    "    return dispatcher != nullptr && dispatcher->failed.load();\n"
    "}\n"
    "\n"
)
_RPC_FAILED_DECL = (
    "\n"
    "// spec_actor (0094): whether the connection to endpoint failed (the server could\n"
    "// not be reached or stopped answering): its commands then complete without I/O,\n"
    "// outputs zeroed, and its graph computations fail. false while no buffer or\n"
    "// backend uses the endpoint.\n"
    "#define GGML_RPC_HAS_SERVER_FAILED 1\n"
    "GGML_BACKEND_API bool ggml_backend_rpc_server_failed(const char * endpoint);\n"
)
_RPC_SOCKET_OPTIONS = (
    "static bool set_no_delay(sockfd_t sockfd) {\n"
    "    int flag = 1;\n"
)
_RPC_SOCKET_OPTIONS_TIMED = (
    "static bool set_no_delay(sockfd_t sockfd) {\n"
    "    int flag = 1;\n"
    "#if defined(__linux__)\n"
    "    // spec_actor (0094): a peer that vanishes is noticed within about 25 s, on both\n"
    "    // ends (the kernel answers keepalive probes while a server computes)\n"
    "    int idle = 5, interval = 5, probes = 4, unacked_ms = 25000;\n"
    "    setsockopt(sockfd, SOL_SOCKET, SO_KEEPALIVE, &flag, sizeof(flag));\n"
    "    setsockopt(sockfd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));\n"
    "    setsockopt(sockfd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));\n"
    "    setsockopt(sockfd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));\n"
    "    setsockopt(sockfd, IPPROTO_TCP, TCP_USER_TIMEOUT, &unacked_ms, sizeof(unacked_ms));\n"
    "#endif\n"
)
_RPC_SEND = "        ssize_t n = send(fd, (const char *)data + bytes_sent, size_to_send, 0);\n"
_RPC_SEND_NOSIGNAL = (
    "#if defined(MSG_NOSIGNAL)  // spec_actor (0094): a closed peer is an error, not SIGPIPE\n"
    "        ssize_t n = send(fd, (const char *)data + bytes_sent, size_to_send, MSG_NOSIGNAL);\n"
    "#else\n"
    "        ssize_t n = send(fd, (const char *)data + bytes_sent, size_to_send, 0);\n"
    "#endif\n"
)

EDITS = (
    Edit(
        path="ggml/src/ggml-cpu/ops.cpp",
        before="// Reduction function: combines partial results across KV chunks\n",
        after=_FA_SPARSE_TILES + "\n// Reduction function: combines partial results across KV chunks\n",
    ),
    Edit(
        path="ggml/src/ggml-cpu/ops.cpp",
        before="            if (use_tiled) {\n                ggml_compute_forward_flash_attn_ext_tiled(params, dst, ir0, ir1);\n",
        after="            if (use_tiled) {\n                ggml_compute_forward_flash_attn_ext_tiles(params, dst, ir0, ir1);\n",
    ),
    Edit(
        path="ggml/src/ggml-cpu/ops.cpp",
        before="\nstatic void ggml_compute_forward_flash_attn_ext_f16_one_chunk(\n",
        after=_FA_SKIP_MASKED_RUNS,
    ),
    Edit(path="ggml/src/ggml-cpu/ops.cpp", before=_FA_ROW_LOOP, after=_FA_ROW_LOOP_SKIPPING),
    Edit(
        path="src/llama-context.cpp",
        before="            if (output_reserve(params.n_seq_max) < params.n_seq_max) {\n",
        after=_OUTPUTS_RESERVED,
    ),
    Edit(path="include/llama.h",
         before="    LLAMA_API float * llama_get_logits_ith(struct llama_context * ctx, int32_t i);\n", after=_LOGITS_API),
    Edit(path="src/llama-context.h", before="    buffer_view<float> logits = {nullptr, 0};\n", after=_LOGITS_MEMBERS),
    Edit(path="src/llama-context.h", before="    float * get_logits_ith(int32_t i);\n", after=_LOGITS_SETTER),
    _insert(path="src/llama-context.cpp", anchor="int llama_context::decode(const llama_batch_ext & batch_inp) {\n",
            below="    logits_in_place = nullptr;  // spec_actor: 0089, a decode's logits replace the last one's\n"),
    Edit(path="src/llama-context.cpp",
         before="                ggml_backend_tensor_get_async(backend_res, t_logits, logits_out, 0, n_outputs*n_vocab*sizeof(float));\n",
         after=_LOGITS_KEPT),
    Edit(path="src/llama-context.cpp",
         before="        return logits.data + j*model.vocab.n_tokens();\n",
         after="        return logits_rows() + j*model.vocab.n_tokens();  // spec_actor: 0089\n"),
    Edit(path="src/llama-context.cpp",
         before="    output_reorder();\n\n    return logits.data;\n}\n",
         after="    output_reorder();\n\n    return logits_rows();  // spec_actor: 0089\n}\n"),
    Edit(path="src/llama-context.cpp",
         before=("        if (logits.size > 0) {\n"
                 "            for (uint64_t k = 0; k < n_vocab; k++) {\n"
                 "                std::swap(logits.data[i0*n_vocab + k], logits.data[i1*n_vocab + k]);\n"),
         after=("        if (logits.size > 0) {\n"
                "            float * rows = logits_rows();  // spec_actor: 0089\n"
                "            for (uint64_t k = 0; k < n_vocab; k++) {\n"
                "                std::swap(rows[i0*n_vocab + k], rows[i1*n_vocab + k]);\n")),
    _insert(path="src/llama-context.cpp", anchor="float * llama_get_logits_ith(llama_context * ctx, int32_t i) {\n",
            above="void llama_set_logits_in_place(llama_context * ctx, bool in_place) {  // spec_actor: 0089\n"
                  "    ctx->set_logits_in_place(in_place);\n"
                  "}\n"
                  "\n"),
    _insert(path=_SGEMM, anchor="#include <array>\n#include <type_traits>\n",
            below="#include <algorithm>  // spec_actor: 0090\n#include <cstring>\n#include <vector>\n"),
    _insert(path=_SGEMM, anchor=_SGEMM_CLASS, above=_SGEMM_GUARD),
    Edit(path=_SGEMM, before=_SGEMM_MATMUL, after=_SGEMM_MATMUL_AVX512),
    Edit(path=_SGEMM, before=_SGEMM_ONE_ROW, after=_SGEMM_ONE_ROW_AVX512),
    _insert(path="common/speculative.h", anchor="// process the batch and update the internal state of the speculative context\n",
            above=_SPEC_FORGET_API),
    _insert(path="common/speculative.cpp",
            anchor="    virtual void set_state(llama_seq_id /*seq_id*/, const std::vector<uint8_t> & /*data*/) {}\n",
            below="\n    // spec_actor (0092): drops what was learned from earlier sequences; false: cannot\n"
                  "    virtual bool forget() { return false; }\n"),
    Edit(path="common/speculative.cpp",
         before=("        sinfos.resize(n_seq);\n"
                 "    }\n"
                 "\n"
                 "    void begin(llama_seq_id seq_id, const llama_tokens & prompt) override {\n"
                 "        auto & sinfo = sinfos[seq_id];\n"),
         after=_SPEC_FORGET_NGRAM_MOD),
    _insert(path="common/speculative.cpp",
            anchor="bool common_speculative_process(common_speculative * spec, const common_batch & batch) {\n",
            above=_SPEC_FORGET),
    Edit(path="common/ngram-mod.h", before="    std::vector<entry_t> entries;\n", after=_NGRAM_MOD_FILLED_MEMBER),
    Edit(path="common/ngram-mod.cpp", before="    entries.resize(size);\n",
         after="    entries.assign(size, EMPTY);  // spec_actor: 0092, so that reset() has nothing listed to clear\n"),
    Edit(path="common/ngram-mod.cpp", before="    if (entries[i] == EMPTY) {\n        used++;\n    }\n",
         after=_NGRAM_MOD_ADD),
    Edit(path="common/ngram-mod.cpp",
         before="void common_ngram_mod::reset() {\n    std::fill(entries.begin(), entries.end(), EMPTY);\n    used = 0;\n}\n",
         after=_NGRAM_MOD_RESET),
    Edit(path="src/models/delta-net-base.cpp",
         before=("        const int64_t K = (int64_t) cparams.n_rs_seq + 1;\n"
                 "\n"
                 "        for (int64_t t = 1; t <= K; ++t) {\n"),
         after=_DELTA_NET_CONV_SNAPSHOTS),
    Edit(path="src/models/delta-net-base.cpp", before="    const bool keep = cparams.n_rs_seq > 0;\n",
         after=_DELTA_NET_STATE_SNAPSHOTS),
    Edit(path=_RPC, before=_RPC_HELLO_ASSERT, after=_RPC_HELLO_FAILS),
    _insert(path=_RPC, anchor=_RPC_DISPATCHER_ANCHOR, below=_RPC_DISPATCHER_MEMBERS),
    Edit(path=_RPC, before=_RPC_START, after=_RPC_START_FAILS),
    Edit(path=_RPC, before=_RPC_WORK, after=_RPC_WORK_FAILS),
    Edit(path=_RPC, before=_RPC_GET_DISPATCHER, after=_RPC_GET_DISPATCHER_LOOKUP),
    _insert(path=_RPC, anchor=_RPC_DISPATCHER_MADE, above="    if (!create) {\n        return nullptr;\n    }\n"),
    Edit(path=_RPC, before=_RPC_GRAPH_COMPUTE, after=_RPC_GRAPH_COMPUTE_CHECKED),
    _insert(path=_RPC, anchor=_RPC_DEVICE_MEMORY, above=_RPC_FAILED_API),
    _insert(path="ggml/include/ggml-rpc.h",
            anchor="GGML_BACKEND_API ggml_backend_reg_t ggml_backend_rpc_add_server(const char * endpoint);\n",
            below=_RPC_FAILED_DECL),
    Edit(path=_RPC_TRANSPORT, before=_RPC_SOCKET_OPTIONS, after=_RPC_SOCKET_OPTIONS_TIMED),
    Edit(path=_RPC_TRANSPORT, before=_RPC_SEND, after=_RPC_SEND_NOSIGNAL),
)


def fingerprint() -> str:
    """A hash of every edit, for the build's cache key."""
    digest = hashlib.sha256()
    for e in EDITS:
        digest.update(f"{e.path}\0{e.before}\0{e.after}\0".encode())
    return digest.hexdigest()[:16]


def apply(tree: Path) -> None:
    """Make every edit in the llama.cpp tree at ``tree``; SystemExit when a passage is not found exactly once."""
    for e in EDITS:
        path = tree / e.path
        text = path.read_text()
        count = text.count(e.before)
        if count != 1:
            raise SystemExit(f"llama.cpp patch: {e.path} holds the passage to replace {count} times, not once "
                             f"(a llama.cpp this patch was not written for); see native/llama_patches.py")
        path.write_text(text.replace(e.before, e.after))
