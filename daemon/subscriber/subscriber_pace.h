/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_pace.h -- building ahead yields the disk ([subscriber]
 * ahead_pace = yield).
 *
 * A version built ahead of its commit reads the target, decodes and
 * hashes, and writes temps while the publisher may still be reading and
 * coding the checkpoint on the same disk and CPUs (one host, a shared
 * file system).  Building ahead is worth doing only with spare time:
 * before each build job the subscriber samples the kernel's stall
 * counters (/proc/pressure/io and /proc/pressure/cpu, "some" totals:
 * microseconds during which at least one task waited for I/O, for a
 * CPU) over SUB_PACE_PROBE_MS with no build of its own running, and
 * builds only when at most SUB_PACE_MAX_SHARE of that window was spent
 * stalled on I/O and at most SUB_PACE_MAX_CPU_SHARE waiting for a CPU;
 * otherwise it waits SUB_PACE_WAIT_MS and looks again, over that whole
 * wait.  (On one host the anchor's coding is what the build slows most:
 * its reads come from the page cache, its CPUs are the contended part.)
 * Waiting never holds up the version: at the commit, the apply builds
 * what was not built ahead.
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
#define SUB_PACE_MAX_CPU_SHARE 0.20	/* of a window some task waited for a CPU */
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
	uint64_t cpu_us;	/* /proc/pressure/cpu "some" total (0: none) */
};

/* The "some" line's total= out of a /proc/pressure file's text (len
 * bytes, not NUL-terminated).  0, or -EINVAL (no such line: no PSI). */
int sub_pace_parse(const char *text, size_t len, uint64_t *stall_us);

/* Between samples a and b (b the later): 0 to build now, else the
 * milliseconds to wait before sampling again.  A window of no time, or a
 * counter that went back, cannot be judged: build. */
uint64_t sub_pace_decide(const struct sub_pace_sample *a, const struct sub_pace_sample *b);

#endif
