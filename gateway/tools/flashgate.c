/* flashgate: the server. Loads the config (file, then FLASHGATE_* environment
 * overrides), opens the engine in serving mode, and serves until SIGTERM or
 * SIGINT, then drains: in-flight responses end with response.done and every
 * socket closes with 1001. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/fg_config.h"
#include "engine/engine.h"
#include "gateway/gateway.h"
#include "gateway/log.h"
#include "gateway/redis_local.h"
#include "policies/quota.h"
#include "policies/session_dir.h"

extern char **environ;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flashgate [--config FILE] [--check-config] [--help-config] [--help]\n"
            "\n"
            "Serves the flashgate WebSocket protocol (docs/protocol.md) on /v1/realtime and\n"
            "HTTP on one port: GET /healthz, the admin API under /admin (docs/admin.md),\n"
            "GET /metrics (Prometheus), GET /v1/status and the dashboard page at /dashboard\n"
            "(docs/metrics.md). Logs are JSON lines on stderr.\n"
            "\n"
            "  --config FILE    JSON config (default: $FLASHGATE_CONFIG, else built-in defaults)\n"
            "  --check-config   load and validate the config, print the effective port, and exit\n"
            "  --help-config    print every config key with its type, default and range\n"
            "\n"
            "Every key can be overridden by an environment variable FLASHGATE_<SECTION>_<KEY>,\n"
            "e.g. FLASHGATE_SERVER_PORT=9000. SIGTERM or SIGINT drains and stops the server.\n");
}

typedef struct signal_thread {
    sigset_t set;
    fg_gateway_t *gw;
} signal_thread;

/* Waits for SIGTERM/SIGINT and asks the gateway to drain; a second signal exits at once. */
static void *signal_main(void *arg)
{
    signal_thread *st = arg;
    int sig, count = 0;
    while (sigwait(&st->set, &sig) == 0) {
        if (++count > 1) {
            fg_log(FG_LOG_WARN, "forced_exit", "\"signal\":%d", sig);
            _exit(1);
        }
        fg_log(FG_LOG_INFO, "stop_requested", "\"signal\":%d", sig);
        fg_gateway_request_stop(st->gw);
    }
    return NULL;
}

/* Redis: the configured one, or our own redis-server under persistence.dir
 * (one per port, so several gateways can share a directory); then the quota
 * module, seeded with the config's tenants and keys. */
static int start_quota(const fg_config *cfg, fg_gateway_t *gw, fg_redis_local_t **redis, fg_quota_t **quota)
{
    fg_diag d = {{0}};
    char dir[512], journal[600];
    snprintf(dir, sizeof dir, "%s/redis-%d", cfg->persistence.dir, fg_gateway_port(gw));
    const char *address = cfg->redis.address;
    bool single = cfg->redis.mode == FG_CONFIG_REDIS_SINGLE;
    if (single && address && !strcmp(address, "off"))
        return 0; /* no quotas: tenants and keys come from the config */
    if (single && (!address || !*address)) {
        if (fg_redis_local_start(dir, redis, &d) != FG_OK) {
            fprintf(stderr, "error: %s\n", d.msg);
            return -1;
        }
        address = fg_redis_local_socket(*redis);
        fg_log(FG_LOG_INFO, "redis_started", "\"socket\":\"%s\"", address);
    }
    /* The journal lives in persistence.dir, which nothing has created yet when Redis is external. */
    char parent[512];
    snprintf(parent, sizeof parent, "%s", cfg->persistence.dir);
    for (char *p = parent + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            (void)mkdir(parent, 0700); /* mkdir -p; a real failure shows at the journal's open */
            *p = '/';
        }
    (void)mkdir(parent, 0700);
    snprintf(journal, sizeof journal, "%s/quota-%d.journal", cfg->persistence.dir, fg_gateway_port(gw));
    /* The config's modes are fg_rlink_mode's, in the same order (config/ knows no policies/). */
    _Static_assert((int)FG_CONFIG_REDIS_SENTINEL == (int)FG_RLINK_SENTINEL &&
                       (int)FG_CONFIG_REDIS_CLUSTER == (int)FG_RLINK_CLUSTER,
                   "redis modes");
    fg_quota_options qo = {.redis_mode = (fg_rlink_mode)cfg->redis.mode, .redis_address = address,
                           .redis_nodes = cfg->redis.nodes.items, .n_redis_nodes = cfg->redis.nodes.count,
                           .redis_master_name = cfg->redis.master_name, .timeout_ms = (int)cfg->redis.timeout_ms,
                           .expected_instances = 1, .journal_path = journal, .notify = fg_gateway_wakeup,
                           .notify_user = gw};
    if (fg_quota_create(&qo, quota, &d) != FG_OK) {
        fprintf(stderr, "error: quotas: %s\n", d.msg);
        return -1;
    }
    for (size_t i = 0; i < cfg->n_tenants; i++) {
        const fg_config_tenant *t = &cfg->tenants[i];
        fg_tenant_record rec;
        memset(&rec, 0, sizeof rec);
        snprintf(rec.id, sizeof rec.id, "%s", t->id);
        snprintf(rec.name, sizeof rec.name, "%s", t->name ? t->name : t->id);
        rec.limits = (fg_tenant_limits){.max_sessions = t->max_sessions, .max_responses = t->max_responses,
                                        .tokens_per_minute = t->tokens_per_minute, .daily_tokens = t->daily_tokens,
                                        .max_kv_bytes = t->max_kv_bytes, .max_context_tokens = t->max_context_tokens,
                                        .max_output_tokens = t->max_output_tokens, .weight = t->weight,
                                        .fail_closed = t->fail_mode == FG_CONFIG_FAIL_CLOSED};
        fg_quota_tenant_seed(*quota, &rec, t->api_keys.items, t->api_keys.count);
    }
    if (cfg->cluster.advertise_url[0]) {
        fg_dir_options dopt = {.instance_id = cfg->cluster.instance_id, .advertise_url = cfg->cluster.advertise_url,
                               .lease_ttl_ms = (int)cfg->cluster.lease_ttl_ms};
        if (fg_quota_dir_enable(*quota, &dopt, &d) != FG_OK) {
            fprintf(stderr, "error: %s\n", d.msg);
            return -1;
        }
        fg_log(FG_LOG_INFO, "session_directory", "\"instance_id\":\"%s\",\"lease_ttl_ms\":%lld",
               cfg->cluster.instance_id, (long long)cfg->cluster.lease_ttl_ms);
    }
    fg_gateway_set_quota(gw, *quota);
    fg_gateway_set_redis_local(gw, *redis);
    return 0;
}

int main(int argc, char **argv)
{
    const char *config_path = getenv("FLASHGATE_CONFIG");
    int check_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--help-config")) {
            fg_config_print_reference(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            config_path = argv[++i];
        } else if (!strcmp(argv[i], "--check-config")) {
            check_only = 1;
        } else {
            fprintf(stderr, "error: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }

    fg_config cfg;
    fg_config_init_defaults(&cfg);
    fg_diag d = {{0}};
    fg_err e = FG_OK;
    if (config_path && *config_path)
        e = fg_config_load_file(&cfg, config_path, &d);
    if (e == FG_OK)
        e = fg_config_apply_env(&cfg, environ, &d);
    if (e == FG_OK)
        e = fg_config_validate(&cfg, &d);
    if (e != FG_OK) {
        fprintf(stderr, "error: config: %s\n", d.msg);
        fg_config_free(&cfg);
        return 2;
    }
    fg_log_set_level((fg_log_level)cfg.log.level);
    if (check_only) {
        printf("config ok: %s:%lld, model %s\n", cfg.server.host, (long long)cfg.server.port, cfg.model.path);
        fg_config_free(&cfg);
        return 0;
    }

    /* Signals go to the signal thread only; SIGPIPE is ignored (lws handles EPIPE). */
    signal(SIGPIPE, SIG_IGN);
    signal_thread st;
    sigemptyset(&st.set);
    sigaddset(&st.set, SIGTERM);
    sigaddset(&st.set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &st.set, NULL);

    int rc = 1;
    fg_gateway_t *gw = NULL;
    fg_engine_t *engine = NULL;
    fg_redis_local_t *redis = NULL;
    fg_quota_t *quota = NULL;
    if ((e = fg_gateway_create(&cfg, &gw, &d)) != FG_OK) {
        fg_log(FG_LOG_ERROR, "startup_failed", "\"error\":\"%s\",\"message\":\"%s\"", fg_err_name(e), d.msg);
        fprintf(stderr, "error: %s\n", d.msg);
        goto out;
    }
    if (start_quota(&cfg, gw, &redis, &quota) != 0)
        goto out;
    fg_engine_options eo;
    fg_gateway_engine_options(&cfg, gw, &eo);
    if ((e = fg_engine_open(&eo, &engine, &d)) != FG_OK) {
        fprintf(stderr, "error: cannot load model %s: %s\n", cfg.model.path, d.msg);
        fg_log(FG_LOG_ERROR, "startup_failed", "\"error\":\"%s\"", fg_err_name(e));
        goto out;
    }
    fg_gateway_set_engine(gw, engine);
    st.gw = gw;
    pthread_t sig_thread;
    if (pthread_create(&sig_thread, NULL, signal_main, &st) != 0) {
        fprintf(stderr, "error: cannot start the signal thread\n");
        goto out;
    }
    pthread_detach(sig_thread);
    fg_engine_info info;
    fg_engine_get_info(engine, &info);
    fg_log(FG_LOG_INFO, "listening",
           "\"host\":\"%s\",\"port\":%d,\"model\":\"%s\",\"kv_format\":\"%s\",\"kv_bytes_per_token\":%zu,"
           "\"threads\":%d,\"ranks\":%d,\"tls\":%s,\"pid\":%d",
           cfg.server.host, fg_gateway_port(gw), cfg.model.path, fg_kv_format_name(info.kv_format),
           info.kv_bytes_per_token, info.n_threads, (int)cfg.topology.ranks, cfg.server.tls_cert_file[0] ? "true" : "false",
           (int)getpid());
    rc = fg_gateway_run(gw) == FG_OK ? 0 : 1;
    if (fg_gateway_save_sessions(gw, &d) != FG_OK)
        fprintf(stderr, "warning: some sessions were not saved: %s\n", d.msg);
    fg_log(FG_LOG_INFO, "stopped", NULL);
out:
    if (gw && engine)
        fg_gateway_close_sessions(gw);
    fg_engine_close(engine);
    fg_gateway_destroy(gw);
    fg_quota_destroy(quota);
    fg_redis_local_stop(redis);
    fg_config_free(&cfg);
    return rc;
}
