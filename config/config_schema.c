/* config_schema.c: the configuration schema — every key of flashgate.json
 * with its type, default, range and one-line doc — and what derives from the
 * table alone: defaults, freeing, comparing, the reference text and the
 * tenant lookup by api key.
 *
 * Design: one table drives every use of a key. Adding a key is one line here
 * plus its field in fg_config.h; loading, env overrides, validation, the
 * reference and docs/config.md (checked by tests/unit/test_config.c) follow.
 * Defaults point at static storage so fg_config_init_defaults() allocates
 * nothing and cannot fail; see config_schema.h for the ownership rule.
 */
#include "config/config_schema.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- the tables ---- */

static const char *const kv_format_names[] = {"auto", "f32", "f16", "int8", "fp8", "fp4", NULL};
static const char *const backend_names[] = {"cpu", "cuda", NULL};
static const char *const log_level_names[] = {"debug", "info", "warn", "error", NULL};
static const char *const placement_names[] = {"contiguous", "strided", NULL};
static const char *const transport_names[] = {"inproc", "nccl", NULL};
static const char *const redis_mode_names[] = {"single", "sentinel", "cluster", NULL};

/* Enum fields are written through an int pointer: the enums must be int-sized
 * and their values must be the positions of the names above. */
_Static_assert(sizeof(fg_config_kv_format) == sizeof(int), "enum size");
_Static_assert(sizeof(fg_config_backend) == sizeof(int), "enum size");
_Static_assert(sizeof(fg_config_log_level) == sizeof(int), "enum size");
_Static_assert(sizeof(fg_config_placement) == sizeof(int), "enum size");
_Static_assert(sizeof(fg_config_transport) == sizeof(int), "enum size");
_Static_assert(sizeof(fg_config_redis_mode) == sizeof(int), "enum size");
_Static_assert(sizeof redis_mode_names / sizeof redis_mode_names[0] == FG_CONFIG_REDIS_CLUSTER + 2, "redis modes");
_Static_assert(sizeof placement_names / sizeof placement_names[0] == FG_CONFIG_PLACEMENT_STRIDED + 2, "placement names");
_Static_assert(sizeof transport_names / sizeof transport_names[0] == FG_CONFIG_TRANSPORT_NCCL + 2, "transport names");
_Static_assert(sizeof kv_format_names / sizeof kv_format_names[0] == FG_CONFIG_KV_FP4 + 2, "kv names");
_Static_assert(sizeof backend_names / sizeof backend_names[0] == FG_CONFIG_BACKEND_CUDA + 2, "backend names");
_Static_assert(sizeof log_level_names / sizeof log_level_names[0] == FG_CONFIG_LOG_ERROR + 2, "log names");

#define KIB INT64_C(1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)
#define DAY_S INT64_C(86400)

#define K_INT(S, p, f, def, lo, hi, d)                                                             \
    {.path = p, .type = FG_CFG_INT, .offset = offsetof(S, f), .def_int = (def), .min_int = (lo),   \
     .max_int = (hi), .doc = d}
#define K_DOUBLE(S, p, f, def, lo, hi, d)                                                          \
    {.path = p, .type = FG_CFG_DOUBLE, .offset = offsetof(S, f), .def_double = (def),              \
     .min_double = (lo), .max_double = (hi), .doc = d}
#define K_STR(S, p, f, def, fl, d)                                                                 \
    {.path = p, .type = FG_CFG_STRING, .flags = (fl), .offset = offsetof(S, f), .def_str = (def), .doc = d}
#define K_ENUM(S, p, f, nm, def, d)                                                                \
    {.path = p, .type = FG_CFG_ENUM, .offset = offsetof(S, f), .names = nm, .def_enum = (def), .doc = d}
#define K_LIST(S, p, f, fl, d)                                                                     \
    {.path = p, .type = FG_CFG_STRLIST, .flags = (fl), .offset = offsetof(S, f), .doc = d}

const fg_cfg_section fg_cfg_sections[] = {
    {"server", "The listener: WebSocket sessions, the HTTP admin API, /metrics and the dashboard."},
    {"model", "The model file and the in-process engine that runs it."},
    {"topology", "Expert parallelism: the MoE experts sharded over ranks (threads on the cpu, one GPU each over NCCL); "
                 "attention stays per session on one rank."},
    {"sessions", "Agent sessions: how long they live, how much each may hold."},
    {"limits", "Per-connection limits on what a client may send."},
    {"auth", "Keys for the operator-facing endpoints (tenant keys are under tenants)."},
    {"log", "Logging."},
    {"redis", "The Redis server that holds every tenant's quotas."},
    {"persistence", "Sessions written to disk when idle, under memory pressure, and across restarts."},
    {"cluster", "Several instances behind one load balancer, sharing one Redis and one persistence.dir: where each "
                "session is held, redirects and migration (docs/deploy.md, \"Sessions across instances\")."},
    {"debug", "For tests and debugging only; a production server leaves this section out."},
};
const size_t fg_cfg_n_sections = sizeof fg_cfg_sections / sizeof fg_cfg_sections[0];

/* Grouped by section, sections in the order above: the reference prints in
 * table order. */
const fg_cfg_key fg_cfg_keys[] = {
    K_STR(fg_config, "server.host", server.host, "127.0.0.1", FG_CFG_NONEMPTY,
          "Address to listen on, an IP literal or host name; \"0.0.0.0\" or \"::\" listens on every "
          "interface."),
    K_INT(fg_config, "server.port", server.port, 8080, 1, 65535,
          "TCP port for WebSocket sessions, the HTTP API, /metrics and the dashboard."),
    K_INT(fg_config, "server.max_connections", server.max_connections, 20000, 1, 1000000,
          "Most client connections open at once; further ones are refused."),
    K_INT(fg_config, "server.drain_timeout_s", server.drain_timeout_s, 30, 0, 3600,
          "Seconds a shutdown or an admin drain lets running responses finish before closing "
          "connections; 0 closes at once."),
    K_STR(fg_config, "server.tls_cert_file", server.tls_cert_file, "", 0,
          "PEM certificate (chain) for https:// and wss:// on server.port, served by libwebsockets; "
          "empty serves plain TCP only. Needs server.tls_key_file."),
    K_STR(fg_config, "server.tls_key_file", server.tls_key_file, "", 0,
          "PEM private key of server.tls_cert_file."),
    {.path = "server.tls_allow_plain", .type = FG_CFG_BOOL, .offset = offsetof(fg_config, server.tls_allow_plain),
     .def_bool = true,
     .doc = "With TLS on: the same port also answers plain http:// and ws:// (for a proxy or a local "
            "client); false refuses them."},

    K_STR(fg_config, "model.path", model.path, "models/flash-english.gguf", FG_CFG_NONEMPTY,
          "GGUF model file (architecture deepseek2 or deepseek4); a relative path is taken from the working "
          "directory."),
    K_ENUM(fg_config, "model.kv_format", model.kv_format, kv_format_names, FG_CONFIG_KV_AUTO,
           "KV cache storage format: f32, f16 (the reference), int8, fp8 (E4M3) or fp4 (E2M1) with "
           "per-token or per-block scales; auto lets the engine pick for the model and backend."),
    K_INT(fg_config, "model.kv_budget_bytes", model.kv_budget_bytes, 2 * GIB, MIB, INT64_C(1) << 50,
          "Bytes of KV cache kept resident for all sessions together (RAM on cpu, GPU memory on "
          "cuda); beyond it sessions move to disk or new work waits."),
    K_INT(fg_config, "model.threads", model.threads, 0, 0, 1024,
          "Compute threads of the cpu backend; 0 uses one per online CPU."),
    K_INT(fg_config, "model.max_batch_tokens", model.max_batch_tokens, 256, 1, 65536,
          "Most tokens (decode and prefill, all sessions) in one engine step."),
    K_INT(fg_config, "model.max_context", model.max_context, 0, 0, INT64_C(1) << 24,
          "Longest sequence of one session in tokens; 0 uses the model's context length."),
    K_INT(fg_config, "model.prefill_chunk", model.prefill_chunk, 128, 1, 65536,
          "Prompt tokens of one session prefilled per step, so that a long prompt does not stall "
          "other sessions' decoding; at most model.max_batch_tokens."),
    K_INT(fg_config, "model.prefill_alone_tokens", model.prefill_alone_tokens, 512, 0, 65536,
          "Prompt tokens of a step in which no session decodes (at least model.max_batch_tokens), one "
          "session up to all of them: such a step delays nobody's next token, and longer chunks make "
          "prefill over a long history cheaper. Results are the same for any chunking. 0 treats "
          "those steps like any other."),
    {.path = "model.speculative", .type = FG_CFG_BOOL, .offset = offsetof(fg_config, model.speculative),
     .def_bool = false,
     .doc = "Speculative decoding: each decoding session also feeds up to model.speculative_drafts "
            "proposed tokens (from the model's MTP block where the backend runs it, else from its own "
            "history), verified in the same step; greedy output is that of plain decoding (docs/engine.md, "
            "\"Speculative decoding\", says where bits may differ) and sampled output keeps its "
            "distribution. Off by default: it pays where a pass of a few more tokens costs little more "
            "than one (weights streaming from memory); where the weights sit in cache a draft costs "
            "nearly a token and the default model's MTP drafts lose (docs/benchmarks.md). false decodes "
            "one token per session and step."},
    K_INT(fg_config, "model.speculative_drafts", model.speculative_drafts, 2, 1, 16,
          "Most draft tokens a session proposes per step with model.speculative; they count against "
          "its tenant's share of the step like any token. 2 measured best on a CPU, where each "
          "draft costs about a token's compute (docs/benchmarks.md)."),
    K_ENUM(fg_config, "model.backend", model.backend, backend_names, FG_CONFIG_BACKEND_CPU,
           "Compute backend: cpu, or cuda (needs a CUDA build and a GPU; with topology.ranks > 1 one GPU "
           "per local rank, rank i on device i)."),

    K_INT(fg_config, "topology.ranks", topology.ranks, 1, 1, 1024,
          "Expert-parallel ranks over all nodes (72 on an NVL72 rack); 1 runs every expert in one place "
          "without exchanges. At most the model's expert count; when it does not divide it, the first "
          "experts % ranks ranks own one expert more."),
    K_INT(fg_config, "topology.ranks_per_node", topology.ranks_per_node, 0, 0, 1024,
          "Ranks this process runs (one per GPU with nccl); 0 runs all topology.ranks here, as the "
          "inproc transport requires."),
    K_INT(fg_config, "topology.node", topology.node, 0, 0, 1023,
          "This process's node index; its ranks are node * ranks_per_node onwards, and node 0 "
          "publishes the NCCL id."),
    K_INT(fg_config, "topology.experts_per_rank", topology.experts_per_rank, 0, 0, 65536,
          "Expert slots of the fullest rank, replicas included; 0 derives it ((experts + "
          "redundant_experts) / ranks, or experts / ranks rounded up without replicas), any other value "
          "must equal that."),
    K_INT(fg_config, "topology.redundant_experts", topology.redundant_experts, 0, 0, 65536,
          "Extra replicas of hot experts over all ranks; experts + redundant_experts must be a multiple "
          "of topology.ranks, so that every rank holds as many slots (a rank owning fewer experts takes "
          "more replicas). Replicas copy the hottest experts first, one each (topology.hot_experts)."),
    K_INT(fg_config, "topology.recv_capacity_rows", topology.recv_capacity_rows, 0, 0, INT64_C(1) << 40,
          "Rows (d + 1 floats each) one rank's expert exchange receives per round; 0 sizes it for the "
          "worst case (ranks * model.max_batch_tokens * experts per token). A layer whose dispatch "
          "would exceed it runs in rounds, each expert whole in one round unless it alone exceeds it. "
          "At least the model's experts per token."),
    K_STR(fg_config, "topology.hot_experts", topology.hot_experts, "", 0,
          "Which experts the replicas (topology.redundant_experts) copy first: expert ids hottest first, "
          "separated by commas (\"17,3,250\"); the ones not listed follow in id order; empty: id order. "
          "GET /admin/experts gives the order the routed-token counts so far suggest."),
    K_ENUM(fg_config, "topology.placement", topology.placement, placement_names, FG_CONFIG_PLACEMENT_CONTIGUOUS,
           "Which experts a rank owns: contiguous (a block of neighbouring ids) or strided (every "
           "ranks-th id)."),
    K_ENUM(fg_config, "topology.transport", topology.transport, transport_names, FG_CONFIG_TRANSPORT_INPROC,
           "How ranks exchange tokens: inproc (threads of this process, shared memory) or nccl (one "
           "rank per GPU, the nodes in separate processes; needs a CUDA build with NCCL, and with several "
           "nodes a redis.address every node reaches; the ranks compute on model.backend, with cuda local "
           "rank i on GPU i, see docs/parallel.md)."),
    K_STR(fg_config, "topology.bootstrap", topology.bootstrap, "flashgate:ep", FG_CFG_NONEMPTY,
          "Redis key prefix under which node 0 publishes the NCCL unique id for the other nodes; give "
          "each launch its own (a job id) so no node reads a stale one."),
    K_INT(fg_config, "topology.bootstrap_timeout_ms", topology.bootstrap_timeout_ms, 60000, 100, 3600000,
          "Milliseconds a node waits for the NCCL id (and node 0 for every node to take it) before "
          "giving up."),

    K_INT(fg_config, "sessions.idle_timeout_s", sessions.idle_timeout_s, 600, 1, 30 * DAY_S,
          "Seconds a session may sit unused (no request, no connection) before it ends and its "
          "state is deleted."),
    K_INT(fg_config, "sessions.resume_buffer_events", sessions.resume_buffer_events, 1024, 16, 1000000,
          "Server events kept per session so that a reconnecting client can ask for those it "
          "missed (by sequence_number)."),
    K_INT(fg_config, "sessions.resume_buffer_bytes", sessions.resume_buffer_bytes, 256 * KIB, 4 * KIB, GIB,
          "Bytes of server events kept per session for a reconnecting client, besides those its "
          "connected client has not been sent yet; past it (or past sessions.resume_buffer_events) "
          "the oldest leave, and a resume that asks for them gets sequence_expired. The newest "
          "event always stays."),
    K_INT(fg_config, "sessions.max_per_tenant", sessions.max_per_tenant, 1000, 1, 10000000,
          "Most sessions one tenant may have open on this gateway, whatever its quota says."),
    K_INT(fg_config, "sessions.output_buffer_bytes", sessions.output_buffer_bytes, 256 * KIB, 4 * KIB,
          GIB,
          "Soft limit on the bytes of events a connection has queued unsent: above it the "
          "connection's generation pauses and the server stops reading the client until it reads "
          "(to half of it); a connection above it for sessions.output_buffer_soft_s is closed with "
          "1008."),
    K_INT(fg_config, "sessions.output_buffer_hard_bytes", sessions.output_buffer_hard_bytes, 4 * MIB, 4 * KIB,
          GIB,
          "Hard limit on the bytes of events a connection has queued unsent: past it the "
          "connection is closed with 1008 at once. At least sessions.output_buffer_bytes and "
          "sessions.resume_buffer_bytes (a resume replays up to that much)."),
    K_INT(fg_config, "sessions.output_buffer_soft_s", sessions.output_buffer_soft_s, 30, 1, 3600,
          "Seconds a connection may stay above sessions.output_buffer_bytes before it is closed "
          "with 1008."),
    K_INT(fg_config, "sessions.default_max_output_tokens", sessions.default_max_output_tokens, 512, 1,
          INT64_C(1) << 24, "Output tokens per response when response.create gives no limit."),
    K_INT(fg_config, "sessions.max_instructions_bytes", sessions.max_instructions_bytes,
          FG_CONFIG_MAX_INSTRUCTIONS_BYTES, 0,
          INT64_C(1) << 26,
          "Longest instructions (system prompt) a session may set, in bytes; 0 refuses "
          "instructions. At most limits.max_frame_bytes, and at most 61440 (60 KiB), so that a session's "
          "settings fit its session file."),

    K_INT(fg_config, "limits.max_frame_bytes", limits.max_frame_bytes, MIB, KIB, INT64_C(1) << 28,
          "Largest message a client may send (WebSocket message or HTTP body), in bytes; larger "
          "ones are refused with an error."),
    K_DOUBLE(fg_config, "limits.messages_per_second", limits.messages_per_second, 50.0, 0.1, 1e6,
             "Messages per second a connection may send, sustained (token bucket rate)."),
    K_INT(fg_config, "limits.message_burst", limits.message_burst, 200, 1, 1000000,
          "Messages a connection may send at once above the sustained rate (token bucket size)."),

    K_STR(fg_config, "auth.admin_key", auth.admin_key, "", FG_CFG_SECRET,
          "Key the HTTP admin API requires; empty disables the admin API. 16 to 256 printable "
          "characters, no spaces, shared with no other key."),
    K_STR(fg_config, "auth.dashboard_key", auth.dashboard_key, "", FG_CFG_SECRET,
          "Key the dashboard page and its data require; empty asks for none (keep server.host on "
          "loopback then). Same rules as auth.admin_key."),
    {.path = "auth.api_key_in_subprotocol", .type = FG_CFG_BOOL,
     .offset = offsetof(fg_config, auth.api_key_in_subprotocol), .def_bool = false,
     .doc = "Accept a tenant's API key in the WebSocket subprotocol list (openai-insecure-api-key.KEY, as "
            "OpenAI's browser clients send a credential); false accepts only client secrets there "
            "(POST /v1/realtime/client_secrets), so API keys never reach browsers."},

    K_ENUM(fg_config, "log.level", log.level, log_level_names, FG_CONFIG_LOG_INFO,
           "Least severe log messages written: debug, info, warn or error."),

    K_ENUM(fg_config, "redis.mode", redis.mode, redis_mode_names, FG_CONFIG_REDIS_SINGLE,
           "How Redis is deployed: single (one server, redis.address), sentinel (the master a Sentinel "
           "group names: redis.nodes lists the sentinels, redis.master_name the master; found again after a "
           "failover) or cluster (a Redis Cluster: redis.nodes lists seed nodes, the rest are discovered)."),
    K_STR(fg_config, "redis.address", redis.address, "", 0,
          "redis.mode single: the server as host:port ([v6addr]:port for IPv6) or an absolute unix socket "
          "path; empty starts a private redis-server on a unix socket; off runs without Redis (the config's "
          "tenants and keys, no quotas). Leave empty with sentinel or cluster."),
    K_LIST(fg_config, "redis.nodes", redis.nodes, 0,
           "redis.mode sentinel: the sentinels, cluster: one or more seed nodes; each host:port "
           "([v6addr]:port), at most 64. Empty with single."),
    K_STR(fg_config, "redis.master_name", redis.master_name, "", 0,
          "redis.mode sentinel: the master's name in the sentinels' configuration (sentinel monitor NAME ...); "
          "printable, no spaces."),
    K_INT(fg_config, "redis.timeout_ms", redis.timeout_ms, 200, 1, 60000,
          "Milliseconds to wait for Redis to connect or answer before treating it as unreachable."),

    K_STR(fg_config, "persistence.dir", persistence.dir, "var/sessions", FG_CFG_NONEMPTY,
          "Directory of session files (tenants/<tenant>/<session id>.fgs, one per session, kept "
          "across restarts), the private Redis's data and the quota journals; a relative path is "
          "taken from the working directory."),
    K_INT(fg_config, "persistence.idle_spill_s", persistence.idle_spill_s, 300, 0, 30 * DAY_S,
          "Seconds of idleness after which a session's KV cache, and a cached shared page no "
          "session holds, moves from memory to disk; 0 moves them only under memory pressure."),
    K_INT(fg_config, "persistence.disk_budget_bytes", persistence.disk_budget_bytes, 0, 0, INT64_C(1) << 50,
          "Most bytes of session and page files under persistence.dir (0: unlimited); the "
          "tenant's oldest page files (cold shared pages) are removed to make room, then a save "
          "that would still pass it fails like a full disk: the session stays in memory and its "
          "client gets persist_failed."),

    K_STR(fg_config, "cluster.instance_id", cluster.instance_id, "", 0,
          "This instance's name in the session directory: 1 to 64 of A-Z a-z 0-9 _ -, unique among the "
          "instances; required with cluster.advertise_url."),
    K_STR(fg_config, "cluster.advertise_url", cluster.advertise_url, "", 0,
          "Where clients reach this instance (ws://host:port or https://host:port, no spaces), named in "
          "the redirect a client gets when it resumes a session this instance holds at another one; "
          "empty (the default) turns the session directory off. Needs Redis (not off) and a "
          "persistence.dir every instance shares."),
    K_INT(fg_config, "cluster.lease_ttl_ms", cluster.lease_ttl_ms, 10000, 300, 3600000,
          "Milliseconds a session's lease in the directory outlives its holder's last renewal (renewed "
          "every third of it): how soon after an instance dies its sessions can move to another. The "
          "holder writes a session's file only within three quarters of it after a renewal."),

    K_LIST(fg_config, "debug.scripted_output", debug.scripted_output, 0,
           "TESTS ONLY: the k-th generating response the server starts (all sessions, in order) emits the tokens of the k-th text "
           "(tokenized with the model's vocabulary, DeepSeek's chat and tool markers as their special "
           "ids) instead of sampled ones; every forward pass still runs. Empty (the default): off, "
           "and nothing can turn it on. The server logs a warning at start when it is set."),
    K_STR(fg_config, "debug.restore_gate_file", debug.restore_gate_file, "", 0,
          "TESTS ONLY: a session restore from disk (session.resume after a restart), a fork "
          "(session.create with fork_from, an out-of-band response.create) and a cut "
          "(conversation.item.delete, .truncate) wait, on their worker thread, "
          "until this file exists, so a test can hold one in progress. Empty (the default): off. "
          "The server logs a warning at start when it is set."),
};
const size_t fg_cfg_n_keys = sizeof fg_cfg_keys / sizeof fg_cfg_keys[0];

static const char *const fail_mode_names[] = {"open", "closed", NULL};

const fg_cfg_key fg_cfg_tenant_keys[] = {
    K_STR(fg_config_tenant, "id", id, NULL, FG_CFG_REQUIRED | FG_CFG_NONEMPTY,
          "Tenant id: 1 to 64 of A-Z a-z 0-9 _ -, unique; names the tenant in quotas, metrics and "
          "logs."),
    K_STR(fg_config_tenant, "name", name, NULL, 0, "Display name; the id when not given."),
    K_LIST(fg_config_tenant, "api_keys", api_keys, FG_CFG_SECRET,
           "Keys that authenticate the tenant's clients: each 16 to 256 printable characters, no "
           "spaces, unique across all tenants. A tenant without keys cannot connect."),
    K_INT(fg_config_tenant, "weight", weight, 1, 1, 1000,
          "Share of engine steps relative to other tenants when the engine is busy (deficit round "
          "robin weight)."),
    K_INT(fg_config_tenant, "priority", priority, 0, -10, 10,
          "Scheduling priority, -10 lowest to 10 highest; higher goes first when work waits."),
    K_INT(fg_config_tenant, "max_sessions", max_sessions, 0, 0, INT64_C(1) << 40,
          "Quota: concurrent sessions over every gateway (0: unlimited). Seeded into Redis when the tenant is new."),
    K_INT(fg_config_tenant, "max_responses", max_responses, 0, 0, INT64_C(1) << 40,
          "Quota: concurrent responses (0: unlimited)."),
    K_INT(fg_config_tenant, "tokens_per_minute", tokens_per_minute, 0, 0, INT64_C(1) << 40,
          "Quota: input plus output tokens per minute, GCRA on Redis's clock (0: unlimited)."),
    K_INT(fg_config_tenant, "daily_tokens", daily_tokens, 0, 0, INT64_C(1) << 50,
          "Quota: input plus output tokens per UTC day (0: unlimited)."),
    K_INT(fg_config_tenant, "max_kv_bytes", max_kv_bytes, 0, 0, INT64_C(1) << 50,
          "Quota: resident KV cache bytes, checked when a response starts (0: unlimited)."),
    K_INT(fg_config_tenant, "max_context_tokens", max_context_tokens, 0, 0, INT64_C(1) << 30,
          "Quota: tokens per session (0: the model's context)."),
    K_INT(fg_config_tenant, "max_output_tokens", max_output_tokens, 0, 0, INT64_C(1) << 30,
          "Quota: output tokens per response (0: unlimited)."),
    K_ENUM(fg_config_tenant, "fail_mode", fail_mode, fail_mode_names, FG_CONFIG_FAIL_OPEN,
           "When Redis is unreachable: open admits within a local per-gateway backstop and journals usage; "
           "closed refuses new sessions and responses while running ones finish."),
};
const size_t fg_cfg_n_tenant_keys = sizeof fg_cfg_tenant_keys / sizeof fg_cfg_tenant_keys[0];

/* The built-in tenant list: a development key that the shipped
 * config/flashgate.json repeats and every deployment should replace. */
static const char *const default_api_keys[] = {"fg-dev-key-change-me-0001"};
static const fg_config_tenant default_tenants[] = {{
    .id = "default",
    .name = "default",
    .api_keys = {default_api_keys, 1},
    .weight = 1,
    .priority = 0,
}};

/* ---- per-field helpers ---- */

static void *field(const fg_cfg_key *k, void *base)
{
    return (char *)base + k->offset;
}

static const void *cfield(const fg_cfg_key *k, const void *base)
{
    return (const char *)base + k->offset;
}

static void list_free(fg_config_strlist *l)
{
    for (size_t i = 0; i < l->count; i++)
        free((void *)l->items[i]);
    free((void *)l->items);
    l->items = NULL;
    l->count = 0;
}

void fg_cfg_set_defaults(const fg_cfg_key *keys, size_t n, void *base)
{
    for (size_t i = 0; i < n; i++) {
        const fg_cfg_key *k = &keys[i];
        void *p = field(k, base);
        switch (k->type) {
        case FG_CFG_BOOL: *(bool *)p = k->def_bool; break;
        case FG_CFG_INT: *(int64_t *)p = k->def_int; break;
        case FG_CFG_DOUBLE: *(double *)p = k->def_double; break;
        case FG_CFG_STRING: *(const char **)p = k->def_str; break;
        case FG_CFG_ENUM: *(int *)p = k->def_enum; break;
        case FG_CFG_STRLIST: *(fg_config_strlist *)p = (fg_config_strlist){NULL, 0}; break;
        }
    }
}

fg_cfg_value fg_cfg_read(const fg_cfg_key *k, const void *base)
{
    const void *p = cfield(k, base);
    fg_cfg_value v;
    memset(&v, 0, sizeof v);
    switch (k->type) {
    case FG_CFG_BOOL: v.b = *(const bool *)p; break;
    case FG_CFG_INT: v.i = *(const int64_t *)p; break;
    case FG_CFG_DOUBLE: v.d = *(const double *)p; break;
    case FG_CFG_STRING: v.s = *(const char *const *)p; break;
    case FG_CFG_ENUM: v.e = *(const int *)p; break;
    case FG_CFG_STRLIST: v.list = *(const fg_config_strlist *)p; break;
    }
    return v;
}

void fg_cfg_value_free(const fg_cfg_key *k, fg_cfg_value *v)
{
    if (k->type == FG_CFG_STRING) {
        free((void *)v->s);
        v->s = NULL;
    } else if (k->type == FG_CFG_STRLIST) {
        list_free(&v->list);
    }
}

/* Frees what the field owns, without resetting it. */
static void field_release(const fg_cfg_key *k, void *base)
{
    void *p = field(k, base);
    if (k->type == FG_CFG_STRING) {
        const char *s = *(const char **)p;
        if (s != k->def_str)
            free((void *)s);
    } else if (k->type == FG_CFG_STRLIST) {
        list_free(p);
    }
}

void fg_cfg_store(const fg_cfg_key *k, void *base, fg_cfg_value *v)
{
    field_release(k, base);
    void *p = field(k, base);
    switch (k->type) {
    case FG_CFG_BOOL: *(bool *)p = v->b; break;
    case FG_CFG_INT: *(int64_t *)p = v->i; break;
    case FG_CFG_DOUBLE: *(double *)p = v->d; break;
    case FG_CFG_STRING: *(const char **)p = v->s; break;
    case FG_CFG_ENUM: *(int *)p = v->e; break;
    case FG_CFG_STRLIST: *(fg_config_strlist *)p = v->list; break;
    }
    memset(v, 0, sizeof *v); /* consumed: the field owns it now */
}

void fg_cfg_free_fields(const fg_cfg_key *keys, size_t n, void *base)
{
    for (size_t i = 0; i < n; i++)
        field_release(&keys[i], base);
    fg_cfg_set_defaults(keys, n, base);
}

static bool str_equal(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    return strcmp(a, b) == 0;
}

bool fg_cfg_value_equal(const fg_cfg_key *k, const fg_cfg_value *a, const fg_cfg_value *b)
{
    switch (k->type) {
    case FG_CFG_BOOL: return a->b == b->b;
    case FG_CFG_INT: return a->i == b->i;
    case FG_CFG_DOUBLE: return a->d == b->d;
    case FG_CFG_STRING: return str_equal(a->s, b->s);
    case FG_CFG_ENUM: return a->e == b->e;
    case FG_CFG_STRLIST:
        if (a->list.count != b->list.count)
            return false;
        for (size_t i = 0; i < a->list.count; i++)
            if (!str_equal(a->list.items[i], b->list.items[i]))
                return false;
        return true;
    }
    return false;
}

void fg_cfg_tenants_free(fg_config_tenant *t, size_t n)
{
    if (!t)
        return;
    for (size_t i = 0; i < n; i++)
        fg_cfg_free_fields(fg_cfg_tenant_keys, fg_cfg_n_tenant_keys, &t[i]);
    free(t);
}

void fg_cfg_tenants_replace(fg_config *c, fg_config_tenant *t, size_t n)
{
    if (c->tenants != default_tenants)
        fg_cfg_tenants_free((fg_config_tenant *)c->tenants, c->n_tenants);
    c->tenants = t;
    c->n_tenants = n;
}

/* ---- whole configs ---- */

void fg_config_init_defaults(fg_config *c)
{
    memset(c, 0, sizeof *c);
    fg_cfg_set_defaults(fg_cfg_keys, fg_cfg_n_keys, c);
    c->tenants = default_tenants;
    c->n_tenants = sizeof default_tenants / sizeof default_tenants[0];
}

void fg_config_free(fg_config *c)
{
    if (!c)
        return;
    fg_cfg_free_fields(fg_cfg_keys, fg_cfg_n_keys, c);
    if (c->tenants != default_tenants)
        fg_cfg_tenants_free((fg_config_tenant *)c->tenants, c->n_tenants);
    fg_config_init_defaults(c);
}

static bool fields_equal(const fg_cfg_key *keys, size_t n, const void *a, const void *b)
{
    for (size_t i = 0; i < n; i++) {
        fg_cfg_value va = fg_cfg_read(&keys[i], a), vb = fg_cfg_read(&keys[i], b);
        if (!fg_cfg_value_equal(&keys[i], &va, &vb))
            return false;
    }
    return true;
}

bool fg_config_equal(const fg_config *a, const fg_config *b)
{
    if (!fields_equal(fg_cfg_keys, fg_cfg_n_keys, a, b) || a->n_tenants != b->n_tenants)
        return false;
    for (size_t i = 0; i < a->n_tenants; i++)
        if (!fields_equal(fg_cfg_tenant_keys, fg_cfg_n_tenant_keys, &a->tenants[i], &b->tenants[i]))
            return false;
    return true;
}

/* ---- tenant lookup ---- */

/* Non-zero unless stored equals the candidate. The loop runs over the
 * candidate's length whatever the bytes are, and folds differences with OR
 * instead of returning at the first one, so that its time does not tell an
 * attacker how long a prefix of a real key they guessed. */
static unsigned key_differs(const char *stored, const unsigned char *cand, size_t cand_len)
{
    const size_t slen = strlen(stored);
    unsigned diff = slen != cand_len;
    for (size_t i = 0; i < cand_len; i++) {
        const size_t j = i < slen ? i : 0; /* stays inside stored; lengths are not secret */
        diff |= (unsigned)((unsigned char)stored[j] ^ cand[i]);
    }
    return diff;
}

const fg_config_tenant *fg_config_find_tenant_by_key(const fg_config *c, const char *api_key)
{
    if (!c || !api_key || !api_key[0])
        return NULL;
    const size_t len = strlen(api_key);
    if (len > FG_CFG_API_KEY_MAX)
        return NULL; /* no stored key is this long; bounds the work per attempt */
    const fg_config_tenant *found = NULL;
    for (size_t t = 0; t < c->n_tenants; t++)
        for (size_t i = 0; i < c->tenants[t].api_keys.count; i++)
            if (!key_differs(c->tenants[t].api_keys.items[i], (const unsigned char *)api_key, len) &&
                !found)
                found = &c->tenants[t];
    return found;
}

/* ---- the reference text ---- */

static void print_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* An integer, with its binary-unit size after it for byte counts
 * ("2147483648 (2 GiB)"), since those are hard to read. */
static void print_int(FILE *f, const fg_cfg_key *k, int64_t v)
{
    fprintf(f, "%" PRId64, v);
    const size_t n = strlen(k->path);
    if (n < 6 || strcmp(k->path + n - 6, "_bytes") != 0 || v < 1024)
        return;
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = -1;
    while (u < 4 && v % 1024 == 0 && v >= 1024) {
        v /= 1024;
        u++;
    }
    if (u >= 0)
        fprintf(f, " (%" PRId64 " %s)", v, units[u]);
}

static void print_names(FILE *f, const char *const *names)
{
    for (size_t i = 0; names[i]; i++)
        fprintf(f, "%s%s", i ? "|" : "", names[i]);
}

/* "(integer 1..65535, default 8080; env `FLASHGATE_SERVER_PORT`)" */
static void print_spec(FILE *f, const fg_cfg_key *k, bool with_env)
{
    fputc('(', f);
    switch (k->type) {
    case FG_CFG_BOOL: fprintf(f, "true or false, default %s", k->def_bool ? "true" : "false"); break;
    case FG_CFG_INT:
        fputs("integer ", f);
        print_int(f, k, k->min_int);
        fputs(" to ", f);
        print_int(f, k, k->max_int);
        fputs(", default ", f);
        print_int(f, k, k->def_int);
        break;
    case FG_CFG_DOUBLE:
        fprintf(f, "number %.15g to %.15g, default %.15g", k->min_double, k->max_double, k->def_double);
        break;
    case FG_CFG_STRING:
        fputs("string", f);
        if (k->flags & FG_CFG_REQUIRED)
            fputs(", required", f);
        if (k->def_str) {
            fputs(", default ", f);
            print_json_string(f, k->def_str);
        }
        break;
    case FG_CFG_ENUM:
        fputs("one of ", f);
        print_names(f, k->names);
        fprintf(f, ", default \"%s\"", k->names[k->def_enum]);
        break;
    case FG_CFG_STRLIST: fputs("list of strings, default []", f); break;
    }
    if (with_env) {
        fputs("; env `FLASHGATE_", f);
        for (const char *p = k->path; *p; p++)
            fputc(*p == '.' ? '_' : (*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p), f);
        fputc('`', f);
    }
    fputc(')', f);
}

static void print_tenant_json(FILE *f, const fg_config_tenant *t)
{
    fputs("{", f);
    for (size_t i = 0; i < fg_cfg_n_tenant_keys; i++) {
        const fg_cfg_key *k = &fg_cfg_tenant_keys[i];
        const fg_cfg_value v = fg_cfg_read(k, t);
        fprintf(f, "%s\"%s\": ", i ? ", " : "", k->path);
        switch (k->type) {
        case FG_CFG_BOOL: fputs(v.b ? "true" : "false", f); break;
        case FG_CFG_INT: fprintf(f, "%" PRId64, v.i); break;
        case FG_CFG_DOUBLE: fprintf(f, "%.17g", v.d); break;
        case FG_CFG_STRING: print_json_string(f, v.s ? v.s : ""); break;
        case FG_CFG_ENUM: print_json_string(f, k->names[v.e]); break;
        case FG_CFG_STRLIST:
            fputc('[', f);
            for (size_t j = 0; j < v.list.count; j++) {
                fputs(j ? ", " : "", f);
                print_json_string(f, v.list.items[j]);
            }
            fputc(']', f);
            break;
        }
    }
    fputs("}", f);
}

void fg_config_print_reference(FILE *f)
{
    for (size_t s = 0; s < fg_cfg_n_sections; s++) {
        const fg_cfg_section *sec = &fg_cfg_sections[s];
        const size_t nlen = strlen(sec->name);
        fprintf(f, "## %s\n\n%s\n\n", sec->name, sec->doc);
        for (size_t i = 0; i < fg_cfg_n_keys; i++) {
            const fg_cfg_key *k = &fg_cfg_keys[i];
            if (strncmp(k->path, sec->name, nlen) != 0 || k->path[nlen] != '.')
                continue;
            fprintf(f, "- `%s` ", k->path);
            print_spec(f, k, true);
            fprintf(f, "\n  %s\n", k->doc);
        }
        fputc('\n', f);
    }

    fputs("## tenants\n\n"
          "The tenants allowed to connect, as an array of objects, one per tenant. A `tenants`\n"
          "array in the file replaces the built-in list as a whole; the environment cannot set it.\n"
          "The built-in list:\n\n    [",
          f);
    for (size_t t = 0; t < sizeof default_tenants / sizeof default_tenants[0]; t++) {
        fputs(t ? ", " : "", f);
        print_tenant_json(f, &default_tenants[t]);
    }
    fputs("]\n\n", f);
    for (size_t i = 0; i < fg_cfg_n_tenant_keys; i++) {
        const fg_cfg_key *k = &fg_cfg_tenant_keys[i];
        fprintf(f, "- `tenants[].%s` ", k->path);
        print_spec(f, k, false);
        fprintf(f, "\n  %s\n", k->doc);
    }
}
