/* SPDX-License-Identifier: Apache-2.0 */
/*
 * notify.c -- sd_notify, in one place (notify.h).
 */
#include <stdio.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "notify.h"

void wsync_notify_ready(void)
{
	(void)sd_notify(0, "READY=1");
}

void wsync_notify_status(const char *line)
{
	(void)sd_notifyf(0, "STATUS=%s", line);
}

void wsync_notify_reloading(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	(void)sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu",
			 (unsigned long long)ts.tv_sec * 1000000ull +
				 (unsigned long long)ts.tv_nsec / 1000);
}

void wsync_notify_stopping(void)
{
	(void)sd_notify(0, "STOPPING=1");
}

uint64_t wsync_notify_watchdog_ms(void)
{
	uint64_t usec = 0;

	if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
		return 0;
	return usec / 2000 ? usec / 2000 : 1;
}

void wsync_notify_watchdog(void)
{
	(void)sd_notify(0, "WATCHDOG=1");
}
