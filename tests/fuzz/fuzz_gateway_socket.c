/* fuzz_gateway_socket.c: libFuzzer target for the gateway as a client meets
 * it: bytes on a TCP socket to a real, running gateway (HTTP requests,
 * pipelining, bodies, the WebSocket upgrade and frames), cut at any point.
 *
 * LLVMFuzzerInitialize starts one gateway on a port the kernel picks, with the
 * tiny test model from $FG_TEST_DATA/tiny.gguf when it is there (without it
 * the gateway has no engine, refuses upgrades with 503 and only HTTP is
 * reached). Without Redis by default (the config's tenants and keys; the
 * admin API's tenant routes answer 503), which keeps the CI run to one
 * process; with $FG_FUZZ_REDIS set it starts a private redis-server and the
 * quota module, so that the admin API and the quota paths are fuzzed too.
 * Its service loop runs on a thread of its own, which owns every gateway
 * socket; this thread only uses plain client sockets on loopback.
 *
 * An input is a script:
 *   byte 0  how: bits 0-1 the mode (below); bit 2 close with a reset
 *           (SO_LINGER 0); bit 3 shut the write side after the last byte;
 *           bit 4 (upgrade modes) send the stream behind the upgrade request
 *           without waiting for its answer; bit 5 close at once after the
 *           last byte, reading nothing more; bits 6-7 the upgrade request:
 *           tenant acme offering flashgate.v1, tenant beta offering nothing,
 *           acme offering "chat, flashgate.v1", an unknown key.
 *   byte 1  the cuts: the stream goes out in (low nibble + 1) writes, cut at
 *           points drawn from the high nibble, with a pause after each so
 *           that the server reads them apart.
 *   rest    the payload.
 * Modes: 0 and 3 the payload is the stream (raw HTTP, or an upgrade and frames
 * made by hand); 1 the upgrade, then the payload read as frame records, each
 * made into one frame; 2 the upgrade, then the payload raw.
 * A frame record: a header byte (bits 0-3 the opcode, bit 4 clears FIN, bit 5
 * leaves the frame unmasked, bit 6 sets RSV1, bit 7 writes a length under 126
 * in the 16-bit form), a length byte (255: the next two bytes, little-endian,
 * are the length), then that many payload bytes (fewer at the input's end).
 *
 * After each input a fresh connection's GET /healthz must be answered 200
 * within LIVENESS_S. If it is not, the service thread hangs or spins: it is
 * sent SIGABRT, so that libFuzzer prints that thread's stack and saves the
 * input as a crash. An input that drains the gateway (POST /admin/drain with
 * the admin key) is followed by a shutdown and a fresh start on the same
 * session directory instead. With $FG_FUZZ_TRACE set, every byte sent and
 * received goes to stderr (to read what a saved input does).
 *
 * Leaks: while the gateway runs, its memory is reachable from it, so
 * LeakSanitizer reports only what the gateway lost; libFuzzer's check after an
 * input (taken when an input allocated more than it freed, which the service
 * thread makes common) can then name the input. At exit, an atexit handler
 * stops the gateway and frees it in flashgate's shutdown order before the
 * sanitizer's final check, so that check sees every allocation the gateway
 * still holds as a leak (the shutdown path included) rather than none.
 *
 * The seed corpus is tests/fuzz/corpus/fuzz_gateway_socket/; docs/fuzzing.md
 * says how to run the target for an hour.
 */
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config/fg_config.h"
#include "engine/engine.h"
#include "gateway/gateway.h"
#include "gateway/log.h"
#include "gateway/redis_local.h"
#include "policies/quota.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LIVENESS_S 10      /* a service thread that answers nothing this long is stuck */
#define PAUSE_MS 1         /* after each write: the server reads the pieces apart */
#define QUIET_MS 10        /* after the last write: read until nothing came this long */
#define READ_MAX_MS 500    /* ... or this long in all */
#define HANDSHAKE_MS 1000  /* waiting for the upgrade's answer */

static const char ACME_KEY[] = "acme-fuzz-key-0123456789abcdef";
static const char BETA_KEY[] = "beta-fuzz-key-0123456789abcdef";
static const char ADMIN_KEY[] = "admin-fuzz-key-0123456789abcdef";

static struct {
    fg_config cfg;
    fg_gateway_t *gw;
    fg_engine_t *engine;
    fg_redis_local_t *redis;   /* $FG_FUZZ_REDIS set: a private redis-server for the quota module */
    fg_quota_t *quota;
    pthread_t thread;          /* the service thread: fg_gateway_run */
    atomic_bool loop_ended;    /* fg_gateway_run returned (a drain ended it) */
    bool have_model;
    bool trace;                /* $FG_FUZZ_TRACE set: what is sent and received goes to stderr */
    int port;
    char dir[64];
} g;

/* ---- time and sockets ---- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int connect_gateway(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        perror("fuzz_gateway_socket: socket");
        abort();
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* one segment per write */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("fuzz_gateway_socket: connect");
        abort(); /* the kernel's backlog takes it even when the service thread is stuck */
    }
    return fd;
}

static void trace(const char *dir, int fd, const void *p, size_t n)
{
    if (!g.trace)
        return;
    fprintf(stderr, "%s fd %d, %zu bytes: ", dir, fd, n);
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = ((const unsigned char *)p)[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            fputc(c, stderr);
        else
            fprintf(stderr, "\\x%02x", c);
    }
    fputc('\n', stderr);
}

/* Waits up to ms for something to read; reads it into buf (when given, up to
 * *len of cap) or drops it. Returns 1 after a read, 0 when nothing came, -1 at
 * the end of the stream or on an error. */
static int read_some(int fd, int ms, char *buf, size_t cap, size_t *len)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms < 0 ? 0 : ms) <= 0)
        return 0;
    char sink[16384];
    char *to = buf ? buf + *len : sink;
    size_t room = buf ? cap - *len : sizeof sink;
    if (room == 0)
        to = sink, room = sizeof sink;
    ssize_t r = recv(fd, to, room, MSG_DONTWAIT);
    if (r > 0) {
        trace("<<", fd, to, (size_t)r);
        if (buf && to != sink)
            *len += (size_t)r;
        return 1;
    }
    return r < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -1;
}

/* Reads (and drops) for ms. Returns false once the peer closed. */
static bool drain_for(int fd, int ms)
{
    const double end = now_ms() + ms;
    for (double t = now_ms(); t < end; t = now_ms())
        if (read_some(fd, (int)(end - t) + 1, NULL, 0, NULL) < 0)
            return false;
    return true;
}

/* Reads until nothing came for QUIET_MS, the peer closed, or READ_MAX_MS. */
static void drain_until_quiet(int fd)
{
    const double end = now_ms() + READ_MAX_MS;
    for (double t = now_ms(); t < end; t = now_ms()) {
        const int r = read_some(fd, QUIET_MS, NULL, 0, NULL);
        if (r <= 0)
            return;
    }
}

/* Writes all of p, reading what comes back while the socket is full.
 * Returns false when the peer is gone or nothing could be written in time. */
static bool send_all(int fd, const uint8_t *p, size_t n)
{
    const double end = now_ms() + READ_MAX_MS;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            trace(">>", fd, p, (size_t)w);
            p += w, n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return false;
        if (now_ms() > end || !drain_for(fd, 1))
            return false;
    }
    return true;
}

static void close_conn(int fd, bool reset)
{
    if (reset) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    close(fd);
}

/* ---- the gateway ---- */

static void *serve_main(void *arg)
{
    (void)arg;
    if (fg_gateway_run(g.gw) != FG_OK) {
        fprintf(stderr, "fuzz_gateway_socket: the service loop failed\n");
        abort();
    }
    atomic_store(&g.loop_ended, true);
    return NULL;
}

static void start_gateway(void)
{
    fg_diag d = {{0}};
    if (fg_gateway_create(&g.cfg, &g.gw, &d) != FG_OK) {
        fprintf(stderr, "fuzz_gateway_socket: %s\n", d.msg);
        exit(1);
    }
    if (g.have_model) {
        fg_engine_options eo;
        fg_gateway_engine_options(&g.cfg, g.gw, &eo);
        if (fg_engine_open(&eo, &g.engine, &d) != FG_OK) {
            fprintf(stderr, "fuzz_gateway_socket: cannot load %s: %s\n", g.cfg.model.path, d.msg);
            exit(1);
        }
        fg_gateway_set_engine(g.gw, g.engine);
    }
    if (g.redis) {
        char journal[128];
        snprintf(journal, sizeof journal, "%s/quota.journal", g.dir);
        fg_quota_options qo = {.redis_address = fg_redis_local_socket(g.redis), .timeout_ms = 1000,
                               .expected_instances = 1, .journal_path = journal, .notify = fg_gateway_wakeup,
                               .notify_user = g.gw};
        if (fg_quota_create(&qo, &g.quota, &d) != FG_OK) {
            fprintf(stderr, "fuzz_gateway_socket: quotas: %s\n", d.msg);
            exit(1);
        }
        /* The config's tenants and keys, unlimited: the admin API can then change them. */
        for (size_t i = 0; i < g.cfg.n_tenants; i++) {
            const fg_config_tenant *t = &g.cfg.tenants[i];
            fg_tenant_record rec = {.limits = {.weight = t->weight, .max_output_tokens = t->max_output_tokens}};
            snprintf(rec.id, sizeof rec.id, "%s", t->id);
            snprintf(rec.name, sizeof rec.name, "%s", t->id);
            fg_quota_tenant_seed(g.quota, &rec, t->api_keys.items, t->api_keys.count);
        }
        fg_gateway_set_quota(g.gw, g.quota);
        fg_gateway_set_redis_local(g.gw, g.redis); /* its supervision runs on the service thread */
    }
    g.port = fg_gateway_port(g.gw);
    atomic_store(&g.loop_ended, false);
    if (pthread_create(&g.thread, NULL, serve_main, NULL) != 0) {
        fprintf(stderr, "fuzz_gateway_socket: cannot start the service thread\n");
        exit(1);
    }
}

/* Sends the stuck service thread SIGABRT: libFuzzer's handler prints that
 * thread's stack and saves the current input as a crash. */
static _Noreturn void stuck(const char *what)
{
    fprintf(stderr, "fuzz_gateway_socket: %s: the service thread is stuck; its stack follows\n", what);
    pthread_kill(g.thread, SIGABRT);
    sleep(5);
    abort();
}

/* Waits for the service loop to end (a drain lasts drain_timeout_s at most),
 * then frees the gateway in flashgate's shutdown order. */
static void stop_gateway(bool request)
{
    if (request)
        fg_gateway_request_stop(g.gw);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)g.cfg.server.drain_timeout_s + LIVENESS_S;
    if (pthread_timedjoin_np(g.thread, NULL, &ts) != 0)
        stuck("the service loop did not end after a drain began");
    fg_diag d = {{0}};
    if (fg_gateway_save_sessions(g.gw, &d) != FG_OK)
        fprintf(stderr, "fuzz_gateway_socket: saving sessions: %s\n", d.msg);
    if (g.engine)
        fg_gateway_close_sessions(g.gw);
    fg_engine_close(g.engine);
    fg_gateway_destroy(g.gw);
    fg_quota_destroy(g.quota);
    g.engine = NULL;
    g.gw = NULL;
    g.quota = NULL;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* At exit: stopped and freed before the sanitizer's final leak check. */
static void stop_at_exit(void)
{
    stop_gateway(true);
    fg_redis_local_stop(g.redis);
    fg_config_free(&g.cfg);
    nftw(g.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- liveness ---- */

typedef enum health { HEALTH_OK, HEALTH_DRAINING, HEALTH_NONE } health;

/* A fresh connection's GET /healthz: 200, draining (503, or the loop has
 * ended after a drain), or no answer within LIVENESS_S. */
static health healthz(void)
{
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n";
    int fd = connect_gateway();
    health h = HEALTH_NONE;
    if (send_all(fd, (const uint8_t *)req, sizeof req - 1)) {
        char buf[1024];
        size_t len = 0;
        const double end = now_ms() + LIVENESS_S * 1000.0;
        for (double t = now_ms(); t < end && len < sizeof buf - 1; t = now_ms()) {
            if (atomic_load(&g.loop_ended)) {
                h = HEALTH_DRAINING;
                break;
            }
            if (read_some(fd, 100, buf, sizeof buf - 1, &len) < 0)
                break;
            buf[len] = 0;
            if (strstr(buf, "\r\n\r\n")) {
                h = !strncmp(buf, "HTTP/1.1 200", 12)                              ? HEALTH_OK
                    : !strncmp(buf, "HTTP/1.1 503", 12) && strstr(buf, "draining") ? HEALTH_DRAINING
                                                                                   : HEALTH_NONE;
                break;
            }
        }
    }
    close_conn(fd, false);
    return h;
}

/* Every input must leave a gateway that answers. An input may drain it (POST
 * /admin/drain with the admin key): then it is shut down and started again on
 * the same directory, which fuzzes the shutdown and the saved sessions too. */
static void check_alive(void)
{
    switch (healthz()) {
    case HEALTH_OK:
        return;
    case HEALTH_DRAINING:
        stop_gateway(false);
        start_gateway();
        if (healthz() != HEALTH_OK)
            stuck("a restarted gateway does not answer GET /healthz");
        return;
    case HEALTH_NONE:
        stuck("GET /healthz on a fresh connection got no 200 within the deadline");
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    signal(SIGPIPE, SIG_IGN);
    snprintf(g.dir, sizeof g.dir, "/tmp/fg-fuzz-socket-XXXXXX");
    if (!mkdtemp(g.dir)) {
        perror("fuzz_gateway_socket: mkdtemp");
        exit(1);
    }
    const char *data = getenv("FG_TEST_DATA");
    char model[1024];
    snprintf(model, sizeof model, "%s/tiny.gguf", data && *data ? data : ".");
    g.have_model = access(model, R_OK) == 0;
    g.trace = getenv("FG_FUZZ_TRACE") != NULL;
    if (!g.have_model)
        fprintf(stderr, "fuzz_gateway_socket: no %s (set FG_TEST_DATA): no engine, upgrades are refused "
                        "and only HTTP is fuzzed\n", model);

    /* Small output and idle limits keep each input's work short and the
     * sessions it leaves behind few; the rate limit is per connection. */
    char json[4096];
    int n = snprintf(json, sizeof json,
                     "{\"server\": {\"host\": \"127.0.0.1\", \"port\": 1, \"drain_timeout_s\": 1},"
                     " \"model\": {\"path\": \"%s\", \"threads\": 1, \"kv_budget_bytes\": %d},"
                     " \"sessions\": {\"idle_timeout_s\": 1, \"default_max_output_tokens\": 8},"
                     " \"auth\": {\"admin_key\": \"%s\"},"
                     " \"log\": {\"level\": \"error\"}, \"redis\": {\"address\": \"off\"},"
                     " \"persistence\": {\"dir\": \"%s/sessions\"},"
                     " \"tenants\": [{\"id\": \"acme\", \"api_keys\": [\"%s\"]},"
                     "               {\"id\": \"beta\", \"api_keys\": [\"%s\"], \"max_output_tokens\": 4}]}",
                     model, 8 << 20, ADMIN_KEY, g.dir, ACME_KEY, BETA_KEY);
    fg_diag d = {{0}};
    fg_config_init_defaults(&g.cfg);
    if (n <= 0 || (size_t)n >= sizeof json || fg_config_load_string(&g.cfg, json, (size_t)n, &d) != FG_OK ||
        fg_config_validate(&g.cfg, &d) != FG_OK) {
        fprintf(stderr, "fuzz_gateway_socket: config: %s\n", d.msg);
        exit(1);
    }
    g.cfg.server.port = 0; /* below the schema's range, which only files and env obey: the kernel picks */
    fg_log_set_level((fg_log_level)g.cfg.log.level);
    if (getenv("FG_FUZZ_REDIS")) {
        char rdir[128];
        snprintf(rdir, sizeof rdir, "%s/redis", g.dir);
        if (fg_redis_local_start(rdir, &g.redis, &d) != FG_OK) {
            fprintf(stderr, "fuzz_gateway_socket: %s\n", d.msg);
            exit(1);
        }
    }
    start_gateway();
    atexit(stop_at_exit);
    if (healthz() != HEALTH_OK) {
        fprintf(stderr, "fuzz_gateway_socket: the gateway does not answer GET /healthz\n");
        exit(1);
    }
    fprintf(stderr, "fuzz_gateway_socket: gateway on 127.0.0.1:%d, %s, %s\n", g.port,
            g.have_model ? "tiny model loaded" : "no engine", g.redis ? "quotas in a private Redis" : "no Redis");
    return 0;
}

/* ---- one input ---- */

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes;

static void put(bytes *b, const void *p, size_t n)
{
    if (n == 0)
        return; /* an empty payload leaves b->p NULL */
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            abort();
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_upgrade(bytes *b, unsigned variant)
{
    static const char *const keys[] = {ACME_KEY, BETA_KEY, ACME_KEY, "not-a-key-0123456789abcdef0123"};
    static const char *const protos[] = {"Sec-WebSocket-Protocol: flashgate.v1\r\n", "",
                                         "Sec-WebSocket-Protocol: chat, flashgate.v1\r\n",
                                         "Sec-WebSocket-Protocol: flashgate.v1\r\n"};
    char req[512];
    int n = snprintf(req, sizeof req,
                     "GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                     "%sAuthorization: Bearer %s\r\n\r\n",
                     protos[variant], keys[variant]);
    put(b, req, (size_t)n);
}

/* The frame records of the header comment, made into frames. */
static void put_frames(bytes *b, const uint8_t *d, size_t n)
{
    size_t i = 0;
    unsigned k = 0;
    while (i + 2 <= n) {
        const uint8_t h = d[i++];
        size_t len = d[i++];
        if (len == 255 && i + 2 <= n) {
            len = (size_t)d[i] | (size_t)d[i + 1] << 8;
            i += 2;
        }
        if (len > n - i)
            len = n - i;
        const bool masked = !(h & 0x20);
        uint8_t hdr[14];
        size_t hl = 0;
        hdr[hl++] = (uint8_t)((h & 0x10 ? 0 : 0x80) | (h & 0x40 ? 0x40 : 0) | (h & 0x0f));
        const uint8_t m = masked ? 0x80 : 0;
        if (len < 126 && !(h & 0x80)) {
            hdr[hl++] = (uint8_t)(m | len);
        } else if (len <= 0xffff) {
            hdr[hl++] = (uint8_t)(m | 126);
            hdr[hl++] = (uint8_t)(len >> 8);
            hdr[hl++] = (uint8_t)len;
        }
        uint8_t key[4] = {0x37, 0xfa, 0x21, (uint8_t)(0x3d + k++)};
        if (masked) {
            memcpy(hdr + hl, key, 4);
            hl += 4;
        }
        put(b, hdr, hl);
        for (size_t j = 0; j < len; j++) {
            uint8_t c = masked ? d[i + j] ^ key[j & 3] : d[i + j];
            put(b, &c, 1);
        }
        i += len;
    }
}

/* Reads the upgrade's answer (its headers) or gives up after HANDSHAKE_MS. */
static bool await_handshake(int fd)
{
    char buf[4096];
    size_t len = 0;
    const double end = now_ms() + HANDSHAKE_MS;
    for (double t = now_ms(); t < end && len < sizeof buf - 1; t = now_ms()) {
        if (read_some(fd, (int)(end - t) + 1, buf, sizeof buf - 1, &len) < 0)
            return false;
        buf[len] = 0;
        if (strstr(buf, "\r\n\r\n"))
            return true;
    }
    return false;
}

static int cmp_size(const void *a, const void *b)
{
    const size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const uint8_t how = data[0], cuts = data[1];
    const unsigned mode = how & 3;
    const bool reset = how & 0x04, half_close = how & 0x08, no_wait = how & 0x10, no_read = how & 0x20;
    const bool upgrade = mode == 1 || mode == 2;
    data += 2, size -= 2;

    bytes s = {0};
    int fd = connect_gateway();
    bool open = true;
    if (upgrade) {
        bytes hs = {0};
        put_upgrade(no_wait ? &s : &hs, how >> 6);
        if (!no_wait)
            open = send_all(fd, hs.p, hs.len) && await_handshake(fd);
        free(hs.p);
    }
    if (mode == 1)
        put_frames(&s, data, size);
    else
        put(&s, data, size);

    /* Cut points drawn from the input, sorted: pieces of any size, 1 byte included. */
    size_t cut[17];
    size_t n_cut = 0;
    uint32_t r = 0x9e3779b9u * (uint32_t)((cuts >> 4) + 1) ^ (uint32_t)s.len;
    for (unsigned i = 0; i < (cuts & 15u) && s.len > 1; i++) {
        r ^= r << 13, r ^= r >> 17, r ^= r << 5;
        cut[n_cut++] = 1 + r % (s.len - 1);
    }
    cut[n_cut++] = s.len;
    qsort(cut, n_cut, sizeof *cut, cmp_size);
    size_t at = 0;
    for (size_t i = 0; i < n_cut && open; i++) {
        if (cut[i] <= at)
            continue;
        open = send_all(fd, s.p + at, cut[i] - at);
        at = cut[i];
        if (open && i + 1 < n_cut)
            open = drain_for(fd, PAUSE_MS);
    }
    free(s.p);
    if (open && half_close)
        shutdown(fd, SHUT_WR);
    if (open && !no_read)
        drain_until_quiet(fd);
    close_conn(fd, reset);
    check_alive();
    return 0;
}
