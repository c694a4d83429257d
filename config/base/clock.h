/* clock.h: the process's clocks, once. Monotonic time measures intervals
 * (timeouts, idle times, rates); real time is for what a person or another
 * machine reads (timestamps) and for pthread_cond_timedwait deadlines.
 * Thread safety: pure; any thread.
 */
#ifndef FG_CLOCK_H
#define FG_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic time in seconds / microseconds since an arbitrary start. */
double fg_clock_mono_s(void);
int64_t fg_clock_mono_us(void);

/* Real (wall-clock) time in seconds / microseconds since the Unix epoch. */
double fg_clock_real_s(void);
int64_t fg_clock_real_us(void);

/* The CLOCK_REALTIME instant `seconds` from now (>= 0), for
 * pthread_cond_timedwait on a condition variable with the default clock. */
struct timespec fg_clock_deadline(double seconds);

#endif
