/*
 * spec_actor native shim: a C ABI over llama.cpp and common_speculative.
 *
 * Rules of this ABI
 *  - No C++ exception and no llama.cpp abort crosses it: every entry point
 *    catches, validates its inputs first, and returns an sa_status.
 *  - On failure the message for the calling thread is in sa_last_error().
 *  - Handles are owned by the caller: sa_*_free releases them. A session holds
 *    a reference on the model(s) it was made from, so they may be freed in
 *    any order: sa_model_free before sa_session_free only drops the caller's
 *    reference, and the model goes with its last session.
 *  - sa_session_cancel and sa_session_seq_stats may be called from any thread at
 *    any time, also while sa_session_run is running; they take no lock.
 *
 * The probes and fault injection of the test suite are a separate ABI,
 * spec_actor_testing.h beside this file: nothing here depends on it, and a
 * run reads none of its state unless a test armed it.
 *
 * This header is parsed by cffi (spec_actor/nif/_build.py): keep it to plain C
 * declarations between the CDEF markers, no preprocessor logic there beyond
 * integer #defines (Python reads those, the enum members and the struct
 * fields from the compiled library: they are the one source of the schema).
 *
 * EVENT SCHEMA (msgpack, version SA_EVENT_SCHEMA_VERSION)
 *  sa_session_run hands the callback one *batch* per loop step: a msgpack
 *  array of events, each event an array whose first element is its kind:
 *    [0, token_id:int, piece:bin]        SA_EV_TOKEN  one accepted token; piece is
 *                                        the raw bytes of its text (may be a
 *                                        partial UTF-8 sequence)
 *    [0, token_id:int, piece:bin, logprobs:array]
 *                                        the same with the target's log-
 *                                        probabilities, when the run asks for
 *                                        them (sa_session_run's n_logprobs)
 *    [1, stats:map]                      SA_EV_STATS  a stats snapshot (below)
 *    [2, stats:map]                      SA_EV_DONE   max_tokens reached (terminal)
 *    [3, stats:map, eog_token_id:int]    SA_EV_EOG    end-of-generation token (terminal;
 *                                        the EOG token itself is not emitted)
 *    [4, code:int, message:str]          SA_EV_ERROR  native failure (terminal)
 *    [5, total:int, cache:int, processed:int, time_us:int]
 *                                        SA_EV_PROGRESS  the prompt's evaluation so
 *                                        far, only when the run asks for it
 *                                        (sa_run_params.emit_progress): one
 *                                        before any prompt token is evaluated
 *                                        (processed == cache), then one per
 *                                        prompt chunk decoded, the last with
 *                                        processed == total (in the batch of
 *                                        the first token when that token comes
 *                                        from the prompt's last chunk). total:
 *                                        the prompt's tokens; cache: those the
 *                                        prefix cache kept; processed: those
 *                                        the context holds (cache included,
 *                                        and copies from another sequence);
 *                                        time_us: the decode time of the
 *                                        prompt's chunks so far (the stats'
 *                                        t_prefill_us of this run)
 *  A cancelled run emits no terminal event; its status says SA_CANCELLED.
 *  stats map: the fields of sa_stats below, named and typed as there, except
 *  n_pos (the length of the two per-position arrays, which are cut to it)
 *  and running (an event always comes from a running loop). sa_stats_map_key
 *  lists the keys in the order they are written.
 */
#ifndef SPEC_ACTOR_H
#define SPEC_ACTOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF-BEGIN */
#define SA_EVENT_SCHEMA_VERSION 4
#define SA_MAX_DRAFT_POS 64         /* length of the per-position stats arrays */
#define SA_DEFAULT_CHECKPOINT_BYTES 268435456  /* default budget of a session's prefix checkpoints (256 MiB) */

typedef enum {
    SA_OK = 0,
    SA_CANCELLED = 1,          /* run stopped by sa_session_cancel / abort callback */
    SA_STOPPED = 2,            /* run stopped because the event callback asked to */
    SA_ERR_INVALID_ARG = 10,   /* a parameter is out of bounds */
    SA_ERR_MODEL_LOAD = 11,    /* file missing, not a GGUF, unsupported architecture */
    SA_ERR_CONTEXT = 12,       /* context creation failed (memory, params) */
    SA_ERR_SPEC = 13,          /* speculative setup failed (no MTP layers, vocab mismatch) */
    SA_ERR_PROMPT = 14,        /* empty prompt or longer than the context */
    SA_ERR_GRAMMAR = 15,       /* GBNF grammar does not parse */
    SA_ERR_DECODE = 16,        /* llama_decode failed */
    SA_ERR_BUFFER = 17,        /* output buffer too small; needed size returned */
    SA_ERR_INTERNAL = 18       /* unexpected native exception */
} sa_status;

typedef enum {
    SA_EV_TOKEN = 0,
    SA_EV_STATS = 1,
    SA_EV_DONE = 2,
    SA_EV_EOG = 3,
    SA_EV_ERROR = 4,
    SA_EV_PROGRESS = 5
} sa_event_kind;

/* Speculative types, in llama.cpp's order and by llama.cpp's names. */
typedef enum {
    SA_SPEC_NONE = 0,
    SA_SPEC_DRAFT_SIMPLE = 1,
    SA_SPEC_DRAFT_EAGLE3 = 2,
    SA_SPEC_DRAFT_MTP = 3,
    SA_SPEC_DRAFT_DFLASH = 4,
    SA_SPEC_NGRAM_SIMPLE = 5,
    SA_SPEC_NGRAM_MAP_K = 6,
    SA_SPEC_NGRAM_MAP_K4V = 7,
    SA_SPEC_NGRAM_MOD = 8,
    SA_SPEC_NGRAM_CACHE = 9,
    SA_SPEC_AUTO = 10          /* choose the drafter and length online (auto_drafter.h) */
} sa_spec_type;

/* Drafter ids of the per-drafter statistics: the sa_spec_type that drafted a
 * step (SA_SPEC_NONE: a plain step), the cross-request memory, auto's text
 * lookup (matches characters, not tokens), or auto's splice lookup (a
 * value's rest, then the record's punctuation and next key). */
typedef enum {
    SA_DRAFTER_MEMORY = 11,
    SA_DRAFTER_TEXT = 12,
    SA_DRAFTER_SPLICE = 13,
    SA_N_DRAFTERS = 14
} sa_drafter;

typedef struct sa_model sa_model;
typedef struct sa_session sa_session;

typedef struct {
    int32_t n_gpu_layers;   /* -1: all layers */
    int32_t use_mmap;
    int32_t use_mlock;
    int32_t load_mtp;       /* load NextN/MTP layers */
    int32_t vocab_only;
    const char * rpc_servers;  /* "host:port,..." of ggml RPC workers holding layers (NULL or "": none) */
    uint32_t rpc_timeout_ms;   /* a send or receive to a worker that moves nothing for this long fails
                                  the worker's connection (0: no bound); the connection is shared, so
                                  the last model loaded on a worker sets it for all (decision 0105) */
} sa_model_params;

typedef struct {
    char arch[64];
    char description[128];
    uint64_t n_params;
    uint64_t size_bytes;
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_layer;
    int32_t n_embd;
    int32_t n_layer_nextn;
    int32_t is_recurrent;   /* recurrent or hybrid: needs checkpoints to roll back */
    int32_t token_bos;
    int32_t token_eos;
    int32_t vocab_type;
    int32_t add_bos;
} sa_model_info;

typedef struct {
    uint32_t n_ctx;
    uint32_t n_batch;
    uint32_t n_ubatch;
    int32_t n_threads;
    int32_t n_threads_batch;
    int32_t type_k;          /* ggml_type; -1 = default (f16) */
    int32_t type_v;
    int32_t flash_attn;      /* -1 auto, 0 off, 1 on */
    int32_t threads_budgeted;  /* 1: n_threads were defaults; share the CPUs with other such sessions while generating */
    int32_t n_seq;           /* sequences run together in one batch (0 or 1: one); n_ctx is per sequence unless kv_unified */
    int32_t prefill_step_ms; /* a prompt admitted while other sequences decode goes in chunks cut so a step
                                takes about this long, measured (0: no cut, prompts fill n_batch) */
    int32_t kv_unified;      /* 1: n_ctx is the size of one KV cache the sequences share, and any one sequence may
                                fill it (llama-server's --kv-unified); a step that finds it full ends the most
                                recently admitted sequence (docs/decisions/0113). 0: n_ctx is per sequence */
    int32_t n_ctx_seq_max;   /* with kv_unified: most cells one sequence may hold (0: n_ctx; llama-server's
                                --kv-unified-per-slot) */
} sa_context_params;

typedef struct {
    int32_t type;            /* sa_spec_type */
    int32_t n_draft;         /* llama.cpp n_max: most tokens drafted per step */
    int32_t n_min;           /* fewest draft tokens worth verifying */
    float p_min;             /* draft-model greedy probability cut-off */
    float p_split;
    int32_t adaptive;        /* tune the draft length online (n_draft is the ceiling) */
    int32_t ngram_size_n;    /* n-gram key size (ngram-simple / map-k / map-k4v) */
    int32_t ngram_size_m;    /* m-gram value size */
    int32_t ngram_min_hits;
    int32_t ngram_mod_n_match;
    int32_t ngram_mod_n_min;
    int32_t ngram_mod_n_max;
    const sa_model * draft_model;  /* draft-simple / eagle3 / dflash */
} sa_spec_params;

typedef struct {
    float temp;              /* <= 0: greedy */
    int32_t top_k;
    float top_p;
    float min_p;
    uint32_t seed;
    int32_t penalty_last_n;
    float penalty_repeat;
    float penalty_freq;
    float penalty_present;
    const char * grammar;    /* GBNF text or NULL */
    const char * grammar_root;
    /* The grammar is lazy: it applies from the first of these triggers on
     * (sa_chat_jinja_apply's "grammar_triggers", a JSON array of {"type",
     * "value", "token"}), as llama-server's under tool_choice "auto"; NULL or
     * "": not lazy. A bad type, a token outside the vocabulary or a pattern
     * that is not a regex is SA_ERR_INVALID_ARG. */
    const char * grammar_triggers;
    /* Biases added to the logits of these tokens before the other samplers
     * (llama.cpp's logit-bias sampler, as llama-server's "logit_bias"):
     * logit_bias_values[i] for token logit_bias_tokens[i]; -INFINITY bans the
     * token. n_logit_bias 0 (the arrays may be NULL): none. A token outside
     * the vocabulary, a NaN or +INFINITY bias is SA_ERR_INVALID_ARG. */
    const int32_t * logit_bias_tokens;
    const float * logit_bias_values;
    int32_t n_logit_bias;
} sa_sampling_params;

typedef struct {
    const int32_t * prompt;  /* token ids */
    int32_t n_prompt;
    int32_t max_tokens;
    int32_t emit_stats_every;   /* 0: no periodic stats events */
    int32_t emit_progress;      /* nonzero: SA_EV_PROGRESS events while the prompt is evaluated */
    sa_sampling_params sampling;
    /* 1: the token events' log-probabilities (n_logprobs) are those of the
     * distribution the sampler drew the token from, after its samplers and
     * grammar (llama-server's post_sampling_probs), listing only tokens it
     * could have drawn; a greedy sampler's is its pick, with probability 1.
     * 0: the target's raw logits' (the default). */
    int32_t logprobs_after_sampling;
} sa_run_params;

typedef struct {
    uint64_t iters;
    uint64_t drafts_generated;
    uint64_t drafts_accepted;
    uint64_t tokens_emitted;
    uint64_t prompt_tokens;
    uint64_t requests;
    uint64_t prompt_reused;     /* prompt tokens whose state was kept from earlier requests (the prefix cache) or copied from another sequence holding the same prefix */
    uint64_t prompt_prefilled;  /* prompt tokens evaluated: prompt_tokens - prompt_reused */
    int64_t t_prefill_us;
    int64_t t_draft_us;
    int64_t t_verify_us;
    int64_t t_sample_us;
    int64_t t_total_us;
    int64_t t_decode_us;     /* wall time since the first token, live while running */
    int64_t ttft_us;
    int32_t n_draft;         /* current draft ceiling (changes under adaptive) */
    int32_t n_pos;           /* used length of the per-position arrays: max(n_draft, last non-zero + 1) */
    int32_t running;
    double tokens_per_sec;   /* tokens_emitted / decode wall time, live */
    double acceptance_rate;
    int32_t drafter;         /* sa_drafter id of the latest step */
    uint64_t accepted_per_pos[SA_MAX_DRAFT_POS];
    uint64_t drafted_per_pos[SA_MAX_DRAFT_POS];
    uint64_t drafter_steps[SA_N_DRAFTERS];     /* per drafter id: steps it drafted (id 0: plain steps) */
    uint64_t drafter_drafted[SA_N_DRAFTERS];   /* draft tokens it proposed and were verified */
    uint64_t drafter_accepted[SA_N_DRAFTERS];  /* of those, accepted */
} sa_stats;

/* Return 0 to continue, SA_CB_PAUSE to pause this sequence until
 * sa_session_resume_seq (the batch goes on without it), anything else to
 * stop the run (status SA_STOPPED). */
#define SA_CB_PAUSE 2
typedef int (*sa_event_cb)(void * user, const uint8_t * data, size_t len);

const char * sa_last_error(void);
int32_t sa_event_schema_version(void);
/* The i-th key of the stats map of the event schema; NULL past the last. */
const char * sa_stats_map_key(int32_t i);
/* The name of a speculative type (llama.cpp's, or "auto"); NULL if type is not an sa_spec_type. */
const char * sa_spec_type_name(int32_t type);

/* The facts of one speculative type, from the shim's one table of them
 * (native/draft/spec_types.cpp): Python's Spec reads its defaults from here. */
typedef struct {
    int32_t draft_context;       /* drafts with a second context (draft model, EAGLE-3, MTP, DFlash) */
    int32_t drafts_full_length;  /* every draft has its full n_draft tokens */
    int32_t default_n_draft;     /* when the caller gives none (auto: its ceiling) */
    int32_t rollback_snapshots;  /* on a recurrent target: llama.cpp's n_rs_seq snapshots, not checkpoints */
} sa_spec_facts;
sa_status sa_spec_type_facts(int32_t type, sa_spec_facts * out);
void sa_backend_init(void);
void sa_set_log_level(int32_t level);  /* 0 silent, 1 errors, 2 warnings, 3 info, 4 debug */
const char * sa_system_info(void);
/* The llama.cpp build, as llama-server reports it: "b<build number>-<commit>". */
const char * sa_llama_build_info(void);

sa_status sa_model_load(const char * path, const sa_model_params * params, sa_model ** out);
/* Serves this process's devices (its accelerators, else the CPU) to ggml RPC
 * clients on host:port (an IPv4 address) with n_threads CPU threads, one client
 * at a time, as llama.cpp's rpc-server: blocks while it serves; returns
 * SA_ERR_INVALID_ARG when it cannot listen. No authentication: a client can
 * make it compute anything (docs/deployment.md, "RPC workers"). */
sa_status sa_rpc_serve(const char * host, int32_t port, int32_t n_threads);
/* Models of this process loaded (and not yet freed) with layers on the RPC
 * worker endpoint ("host:port"): while there is one, the process holds the
 * worker's one connection, which later models on it share. */
int32_t sa_rpc_models_on(const char * endpoint);
/* Why the model's RPC worker failed (it stopped answering, or did not answer
 * within the timeout), as its requests' Error events say; "" while every
 * worker of the model answers, or it has none. */
sa_status sa_model_rpc_failure(const sa_model * model, char * buf, int32_t cap, int32_t * n_out);
void sa_model_free(sa_model * model);
sa_status sa_model_get_info(const sa_model * model, sa_model_info * out);
/* The vocabulary's fill-in-the-middle tokens, as llama.cpp found them (GGUF
 * metadata, else known token texts): out[0..5] = prefix, suffix, middle,
 * pad, repo, file separator (llama_vocab_fim_pre ... _sep order); -1 where
 * it has none. out must hold 6. */
sa_status sa_model_fim_tokens(const sa_model * model, int32_t * out);
/* Chat template text; SA_ERR_BUFFER with *n_out = needed size if cap is too small. */
sa_status sa_model_chat_template(const sa_model * model, char * buf, int32_t cap, int32_t * n_out);
sa_status sa_model_meta(const sa_model * model, const char * key, char * buf, int32_t cap, int32_t * n_out);
/* A conversation rendered by llama.cpp's llama_chat_apply_template with tmpl
 * (a GGUF chat template or a built-in template name such as "chatml").
 * SA_ERR_BUFFER with *n_out = needed length (without NUL) if cap is too small. */
sa_status sa_chat_apply_template(const char * tmpl, const char * const * roles, const char * const * contents,
                                 int32_t n_messages, int32_t add_generation_prompt, char * buf, int32_t cap,
                                 int32_t * n_out);
/* Names of llama.cpp's built-in chat templates, one per line. */
sa_status sa_chat_builtin_templates(char * buf, int32_t cap, int32_t * n_out);

sa_status sa_tokenize(const sa_model * model, const char * text, int32_t len, int32_t add_special,
                      int32_t parse_special, int32_t * out, int32_t cap, int32_t * n_out);
sa_status sa_token_piece(const sa_model * model, int32_t token, int32_t special,
                         char * buf, int32_t cap, int32_t * n_out);
int32_t sa_token_is_eog(const sa_model * model, int32_t token);

/* Bounds on a GBNF text's size, checked before llama.cpp parses it: its
 * parser recurses once per ( ) nesting level (a deep one overflows the stack)
 * and a grammar's per-token cost grows with its alternatives. */
#define SA_GRAMMAR_DEPTH_CEILING 1000  /* the most nesting any limits may allow */
typedef struct {
    int32_t max_depth;         /* nesting of ( ) groups; at most SA_GRAMMAR_DEPTH_CEILING */
    int32_t max_rules;         /* rule definitions (name ::= ...) */
    int32_t max_alternatives;  /* | separators of all rules together */
    int32_t max_repetition;    /* largest count in a {m} or {m,n} repetition */
} sa_grammar_limits;

/* GBNF checks that llama.cpp's parser lacks (e.g. a {5,2} repetition, which
 * hangs it) and the limits above (NULL: only the depth ceiling);
 * sa_session_run makes them too, with NULL. SA_ERR_GRAMMAR says what is wrong. */
sa_status sa_grammar_check(const char * grammar, const sa_grammar_limits * limits);

sa_status sa_session_new(sa_model * model, const sa_context_params * cparams,
                         const sa_spec_params * sparams, sa_session ** out);
void sa_session_free(sa_session * session);
void sa_session_cancel(sa_session * session);
void sa_session_clear_cancel(sa_session * session);

/* THE BATCHED ENGINE (docs/decisions/0050): a session made with n_seq = N
 * runs up to N requests at once, one per sequence 0..N-1, all in one decode
 * per step; a session of one sequence is the case N = 1.
 * sa_session_run, the one way to start a request, runs it on sequence seq
 * with its settings as arguments, and blocks until it ended; the threads
 * calling it take turns to run the engine's steps (any of them may call
 * another request's callback). One request per sequence at a time.
 * n_logprobs: -1 none, else its token events carry the target's
 * log-probabilities, the token's and the n_logprobs (at most 20) most likely
 * tokens' at its position (a 4th field of the token event: [logprob:float,
 * [[token_id:int, logprob:float], ...]], most likely first).
 * grammar_prefill: the run's grammar is a tool-call grammar that has already
 * read this text (sa_chat_jinja_apply's "generation_prompt", which its
 * grammar starts with and the prompt already ends with); NULL or "": a
 * plain grammar. */
sa_status sa_session_run(sa_session * session, int32_t seq, const sa_run_params * params, int32_t n_logprobs,
                         const char * grammar_prefill, sa_event_cb cb, void * user);
/* Sequences of the session (its n_seq). */
int32_t sa_session_n_seq(const sa_session * session);
/* Whether a session with these parameters may have n_seq > 1: every spec
 * and architecture batches; 0 only for null arguments or a vocab-only model. */
int32_t sa_session_can_batch(const sa_model * model, const sa_context_params * cparams, const sa_spec_params * sparams);
/* Stop the request on seq within one step; clear re-arms it (any thread, lock-free). */
void sa_session_cancel_seq(sa_session * session, int32_t seq);
void sa_session_clear_cancel_seq(sa_session * session, int32_t seq);
/* Undo one SA_CB_PAUSE of seq's callback (any thread). */
void sa_session_resume_seq(sa_session * session, int32_t seq);
/* A consistent snapshot of one sequence's statistics: which: 0 cumulative,
 * 1 the last (or current) run. A one-sequence session's are sequence 0's. */
void sa_session_seq_stats(const sa_session * session, int32_t seq, int32_t which, sa_stats * out);
/* Changes whenever any of seq's statistics does; equal values mean equal snapshots. */
uint64_t sa_session_seq_stats_version(const sa_session * session, int32_t seq);
/* Steps run since the session was made, for tests that count in steps. */
uint64_t sa_session_steps(const sa_session * session);
uint32_t sa_session_n_ctx(const sa_session * session);
uint32_t sa_session_n_batch(const sa_session * session);
/* Cross-request memory of the session (Spec "auto"): capacity in tokens kept
 * from earlier requests (0: none). Takes effect before the next run. */
sa_status sa_session_set_memory(sa_session * session, int64_t capacity_tokens);
/* Before the first run: measure what that run would measure first (Spec "auto"'s
 * step-cost table, once per model and thread count in a process), so the first
 * request's time to first token does not include it. Nothing for other specs,
 * or while a run is under way; sa_session_cancel stops it. */
sa_status sa_session_prepare(sa_session * session);
/* Forget the memory's earlier requests and the kept prompt prefix before the next run (any thread, lock-free). */
void sa_session_forget(sa_session * session);
/* The cells of the target's memory that sequence seq holds (*held: its
 * positions, the kept prompt prefix included; 0 after sa_session_forget) and
 * may hold (*capacity: the session's n_ctx per sequence; with kv_unified, the
 * shared cache's cells over n_seq, which one sequence may exceed), as of the end of the
 * last engine step it took part in. Any thread, lock-free: the KV-cache
 * utilization of the inference gateway's protocol (docs/decisions/0098). */
sa_status sa_session_seq_cells(const sa_session * session, int32_t seq, int32_t * held, int32_t * capacity);
/* Tokens held by the memory and the bytes it uses (as of the last run's end). */
void sa_session_memory_usage(const sa_session * session, int64_t * tokens, int64_t * bytes);
/* The prompt prefix a session keeps between runs, as of the last run's end. */
typedef struct {
    int64_t tokens;            /* tokens whose state the contexts hold */
    int64_t checkpoints;       /* state checkpoints kept (recurrent and hybrid models) */
    int64_t checkpoint_bytes;  /* their size */
    int64_t saves;             /* checkpoints saved since the session began */
    int64_t save_us;           /* the time saving them took */
    int64_t restores;          /* checkpoints restored since the session began */
    int64_t restore_us;        /* the time restoring them took */
} sa_prefix_usage;
/* Keep the context between runs and reuse the longest common token prefix
 * (enabled != 0), with at most checkpoint_bytes of state checkpoints on
 * recurrent and hybrid models (0: none; only a request that continues the
 * whole cached sequence reuses it there). Takes effect before the next run. */
sa_status sa_session_set_prefix_cache(sa_session * session, int32_t enabled, int64_t checkpoint_bytes);
/* What seq's prefix cache holds, as of the end of its last run. */
void sa_session_seq_prefix_usage(const sa_session * session, int32_t seq, sa_prefix_usage * out);
/* llama.cpp's name of a drafter id ("ngram-mod", "memory", "none"); "" when unknown. */
const char * sa_drafter_name(int32_t drafter);
/* Sequence seq's summary to stderr: its drafters (per drafter under auto,
 * else llama.cpp's common_speculative_print_stats), its prefix cache, and
 * llama.cpp's performance summary of the context they share. */
void sa_session_print_stats(const sa_session * session, int32_t seq);

/* Structured output and Jinja chat. */
/* JSON schema -> GBNF by llama.cpp's converter (common/json-schema-to-grammar).
 * SA_ERR_GRAMMAR names the part it cannot convert; SA_ERR_BUFFER with
 * *n_out = needed length (without NUL) if cap is too small. */
sa_status sa_json_schema_to_grammar(const char * schema, char * buf, int32_t cap, int32_t * n_out);
/* A chat rendered with the model's own Jinja template by llama.cpp's
 * common_chat_templates_apply, as llama-server renders it. request: JSON
 * {"messages": [OpenAI messages], "tools": [OpenAI tools], "tool_choice":
 * "auto"|"none"|"required", "parallel_tool_calls": bool,
 * "add_generation_prompt": bool, "template": Jinja text overriding the
 * GGUF's}. Result: JSON {"prompt", "grammar",
 * "grammar_lazy", "grammar_triggers", "format", "format_name", "generation_prompt", "parser",
 * "additional_stops"}. SA_ERR_INVALID_ARG says what is malformed;
 * SA_ERR_BUFFER with *n_out = needed length if cap is too small. */
sa_status sa_chat_jinja_apply(const sa_model * model, const char * request, char * buf, int32_t cap,
                              int32_t * n_out);
/* Generated text parsed back with common_chat_parse. chat: JSON with the
 * "format", "generation_prompt" and "parser" of sa_chat_jinja_apply's result.
 * Result: JSON {"content", "reasoning_content", "tool_calls": [{"name",
 * "arguments", "id"}]}; is_partial for text that may continue. */
sa_status sa_chat_jinja_parse(const char * text, int32_t is_partial, const char * chat, char * buf, int32_t cap,
                              int32_t * n_out);

/* CDEF-END */

#ifdef __cplusplus
}
#endif

#endif
