/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_pace.h -- building ahead yields the disk ([subscriber]
 * ahead_pace = yield).
 *
 * A version built ahead of its commit reads the target and writes temps
 * while the publisher may still be reading the checkpoint on the same
 * disk (one host, a shared file system).  Building ahead is worth doing
 * only with the disk's spare time: before each build job the subscriber
 * samples the kernel's I/O stall counter (/proc/pressure/io, "some"
 * total: microseconds during which at least one task waited for I/O)
 * over SUB_PACE_PROBE_MS with no build of its own running, and builds
 * only when the share of that window spent stalled is at most
 * SUB_PACE_MAX_SHARE; otherwise it waits SUB_PACE_WAIT_MS and looks
 * again, over that whole wait.  Waiting never holds up the version: at
 * the commit, the apply builds what was not built ahead.
 *
 * The build job does not run in the idle I/O class (ioprio_set
 * IOPRIO_CLASS_IDLE), though bfq and mq-deadline honour it: a job once
 * started is one the commit waits for (sub_ahead_claim), and its reads
 * and the writeback its fsyncs start would then queue behind every other
 * request -- on mq-deadline up to prio_aging_expire (10 s) each -- while
 * the version waits on them.  The wait happens before a job, where it
 * costs the commit nothing.
 *
 * This header's two functions are pure (the unit test's); the glue (the
 * timer, the samples, the job's class) is in subscriber_pace.c.
 */
#ifndef WSYNC_SUBSCRIBER_PACE_H
#define WSYNC_SUBSCRIBER_PACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SUB_PACE_MAX_SHARE 0.10	/* of a window stalled on I/O: above, wait */
/* A window long enough to see past one burst (the stall counter of a
 * shared disk comes in bursts of a few hundred ms): a build starts only
 * after a whole quiet window, the publisher's steady reading keeps it
 * waiting.  What a window costs a build that could have gone at once,
 * the commit does not pay: once HEAD names the version the apply builds
 * what is left. */
#define SUB_PACE_PROBE_MS 1000	/* the first window, before a build */
#define SUB_PACE_WAIT_MS 500	/* each wait, and the window after it */

struct sub_pace_sample {
	uint64_t ms;		/* monotonic, when taken */
	uint64_t stall_us;	/* /proc/pressure/io "some" total */
};

/* The "some" line's total= out of /proc/pressure/io's text (len bytes,
 * not NUL-terminated).  0, or -EINVAL (no such line: no PSI). */
int sub_pace_parse(const char *text, size_t len, uint64_t *stall_us);

/* Between samples a and b (b the later): 0 to build now, else the
 * milliseconds to wait before sampling again.  A window of no time, or a
 * counter that went back, cannot be judged: build. */
uint64_t sub_pace_decide(const struct sub_pace_sample *a, const struct sub_pace_sample *b);

#endif
