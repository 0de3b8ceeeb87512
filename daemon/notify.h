/* SPDX-License-Identifier: Apache-2.0 */
/*
 * notify.h -- all of the daemon's talk to systemd's service manager
 * (sd_notify): READY, STATUS, RELOADING, STOPPING and the watchdog.
 * Without $NOTIFY_SOCKET (not run by systemd) every call is a no-op.
 */
#ifndef WSYNC_NOTIFY_H
#define WSYNC_NOTIFY_H

#include <stdint.h>

void wsync_notify_ready(void);
/* STATUS=line, shown by `systemctl status`. */
void wsync_notify_status(const char *line);
/* RELOADING=1 with MONOTONIC_USEC (systemd 253 wants it; 252 ignores it);
 * follow with wsync_notify_ready() when the reload is done. */
void wsync_notify_reloading(void);
void wsync_notify_stopping(void);
/* How often to send WATCHDOG=1: half of $WATCHDOG_USEC, in ms; 0 when
 * the watchdog is off. */
uint64_t wsync_notify_watchdog_ms(void);
void wsync_notify_watchdog(void);

#endif
