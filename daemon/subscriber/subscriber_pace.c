/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_pace.c -- building ahead yields the disk (subscriber_pace.h
 * says how it decides and why; this file samples and waits).  Loop
 * thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "subscriber_cycle.h"
#include "subscriber_pace.h"

#define PSI_IO "/proc/pressure/io"
#define PSI_CPU "/proc/pressure/cpu"
/* a grant not taken within this long is stale (the build it was for
 * found nothing to do): the next build samples again */
#define GRANT_MS 50

/* ---- the decision (pure) ---- */

int sub_pace_parse(const char *text, size_t len, uint64_t *stall_us)
{
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *le = eol ? eol : end;

		if (le - p > 5 && memcmp(p, "some ", 5) == 0) {
			for (const char *q = p; q + 6 <= le; q++) {
				if (memcmp(q, "total=", 6) != 0)
					continue;
				uint64_t v = 0;
				const char *d = q + 6;

				if (d == le || *d < '0' || *d > '9')
					return -EINVAL;
				for (; d < le && *d >= '0' && *d <= '9'; d++) {
					if (v > (UINT64_MAX - 9) / 10)
						return -EINVAL;
					v = v * 10 + (uint64_t)(*d - '0');
				}
				*stall_us = v;
				return 0;
			}
			return -EINVAL;
		}
		p = eol ? eol + 1 : end;
	}
	return -EINVAL;
}

uint64_t sub_pace_decide(const struct sub_pace_sample *a, const struct sub_pace_sample *b)
{
	double window_us;

	if (b->ms <= a->ms || b->stall_us < a->stall_us || b->cpu_us < a->cpu_us)
		return 0;
	window_us = (double)(b->ms - a->ms) * 1000;
	/* more than the share of the window stalled: wait */
	if ((double)(b->stall_us - a->stall_us) > SUB_PACE_MAX_SHARE * window_us ||
	    (double)(b->cpu_us - a->cpu_us) > SUB_PACE_MAX_CPU_SHARE * window_us)
		return SUB_PACE_WAIT_MS;
	return 0;
}

/* ---- samples ---- */

/* One PSI file's "some" total. */
static int read_psi(const char *path, uint64_t *total_us)
{
	char buf[512];
	ssize_t n;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf));
	r = n < 0 ? -errno : 0;
	(void)close(fd);
	return r < 0 ? r : sub_pace_parse(buf, (size_t)n, total_us);
}

static int sample(struct wsync_subscriber *s, struct sub_pace_sample *out)
{
	int r = read_psi(PSI_IO, &out->stall_us);

	if (r < 0)
		return r;
	if (read_psi(PSI_CPU, &out->cpu_us) < 0)
		out->cpu_us = 0;	/* I/O alone, then */
	out->ms = uv_now(s->d->loop);
	return 0;
}

/* No PSI (a kernel without CONFIG_PSI, or psi=0): nothing to go by, so
 * nothing waits; said once. */
static bool psi_missing(struct wsync_subscriber *s, int r)
{
	if (!s->pace.no_psi)
		log_info("%s: %s: building ahead does not wait for the disk (ahead_pace = yield "
			 "needs the kernel's pressure stall information)", PSI_IO, strerror(-r));
	s->pace.no_psi = true;
	return false;
}

/* ---- the wait ---- */

static void on_pace_timer(uv_timer_t *t)
{
	struct wsync_subscriber *s = t->data;
	struct sub_pace *p = &s->pace;
	struct sub_pace_sample now;
	uint64_t wait;
	int r;

	r = sample(s, &now);
	if (r < 0) {
		psi_missing(s, r);
		wait = 0;
	} else {
		wait = sub_pace_decide(&p->last, &now);
		if (wait)
			log_debug("building ahead waits: %.0f%% of the last %" PRIu64
				  " ms stalled on I/O, %.0f%% waiting for a CPU",
				  100.0 * (double)(now.stall_us - p->last.stall_us) /
					  (double)((now.ms - p->last.ms) * 1000),
				  now.ms - p->last.ms,
				  100.0 * (double)(now.cpu_us - p->last.cpu_us) /
					  (double)((now.ms - p->last.ms) * 1000));
		p->last = now;
	}
	if (wait && !s->stopping) {
		p->waited_ms += wait;
		uv_timer_start(&p->timer, on_pace_timer, wait, 0);
		return;
	}
	p->waiting = false;
	if (s->stopping)
		return;
	if (p->waited_ms)
		log_debug("building ahead waited %.1f s for the disk and the CPUs",
			  (double)p->waited_ms / 1000);
	p->waited_ms = 0;
	p->granted = true;
	p->granted_at = uv_now(s->d->loop);
	p->go(s);
}

bool sub_pace_hold(struct wsync_subscriber *s, void (*go)(struct wsync_subscriber *s))
{
	struct sub_pace *p = &s->pace;
	int r;

	if (s->cfg->ahead_pace != WSYNC_AHEAD_PACE_YIELD || p->no_psi || p->closing ||
	    s->stopping)
		return false;
	if (p->granted) {
		p->granted = false;
		if (uv_now(s->d->loop) - p->granted_at <= GRANT_MS)
			return false;
	}
	p->go = go;
	if (p->waiting)
		return true;	/* the timer calls go */
	r = sample(s, &p->last);
	if (r < 0)
		return psi_missing(s, r);
	if (!p->timer_init) {
		r = uv_timer_init(s->d->loop, &p->timer);
		if (r < 0) {
			log_warning("building ahead without pacing: %s", uv_strerror(r));
			return false;
		}
		p->timer.data = s;
		p->timer_init = true;
	}
	uv_timer_start(&p->timer, on_pace_timer, SUB_PACE_PROBE_MS, 0);
	p->waiting = true;
	return true;
}

static void on_pace_closed(uv_handle_t *h)
{
	struct wsync_subscriber *s = h->data;

	s->pace.timer_init = false;
	s->pace.closing = false;
	s->pace.on_closed(s);
}

bool sub_pace_close(struct wsync_subscriber *s, void (*closed)(struct wsync_subscriber *s))
{
	struct sub_pace *p = &s->pace;

	if (p->closing)
		return true;
	if (!p->timer_init)
		return false;
	p->closing = true;
	p->waiting = false;
	p->on_closed = closed;
	uv_close((uv_handle_t *)&p->timer, on_pace_closed);
	return true;
}
