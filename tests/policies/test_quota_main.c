/* test_quota_main.c: the quota tests, one process per case.
 *
 *   test_quota <case>
 *
 * Every case but sha256 starts its own redis-server (tests/policies/
 * redis_fixture.c); CTest runs each case as its own test with the label
 * "redis" (tests/policies_tests.cmake). Exit 77 (skipped) when redis-server
 * is not installed.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quota_cases.h"
#include "redis_fixture.h"


static const struct {
    const char *name;
    int (*run)(void);
    bool redis;
} CASES[] = {
    {"sha256", test_quota_sha256, false},  {"leaseset", test_quota_leaseset, false},  {"limits", test_quota_limits, true},
    {"leases", test_quota_leases, true},   {"global", test_quota_global, true},
    {"faults", test_quota_faults, true},   {"journal", test_quota_journal, true},
    {"traffic", test_quota_traffic, true}, {"admin", test_quota_admin, true},
    {"dir", test_quota_dir, true},         {"instances", test_quota_instances, true},
    {"cluster", test_quota_cluster, true}, {"sentinel", test_quota_sentinel, true},
    {"rlink", test_quota_rlink, false},
};

static bool redis_server_found(void)
{
    const char *server = getenv("FG_REDIS_SERVER");
    if (server && *server)
        return access(server, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path)
        return false;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *dir = strtok_r(buf, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        char full[4200];
        snprintf(full, sizeof full, "%s/redis-server", dir);
        if (access(full, X_OK) == 0)
            return true;
    }
    return false;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s <case>; cases:", argv[0]);
        for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
            fprintf(stderr, " %s", CASES[i].name);
        fputc('\n', stderr);
        return 2;
    }
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        if (strcmp(argv[1], CASES[i].name) != 0)
            continue;
        if (CASES[i].redis && !redis_server_found()) {
            fprintf(stderr, "test_quota %s: skipped (redis-server not found)\n", argv[1]);
            return FG_REDIS_SKIP;
        }
        return CASES[i].run();
    }
    fprintf(stderr, "test_quota: unknown case %s\n", argv[1]);
    return 2;
}
