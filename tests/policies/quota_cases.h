/* quota_cases.h: the cases of the test_quota executable (test_quota_main.c). */
#ifndef FG_QUOTA_CASES_H
#define FG_QUOTA_CASES_H

int test_quota_sha256(void);
int test_quota_limits(void);
int test_quota_leases(void);
int test_quota_global(void);
int test_quota_faults(void);
int test_quota_journal(void);
int test_quota_traffic(void);
int test_quota_admin(void);
int test_quota_leaseset(void);
int test_quota_dir(void);
int test_quota_instances(void);
int test_quota_cluster(void);
int test_quota_rlink(void);
int test_quota_sentinel(void);

#endif
