/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manager.h -- wsyncd's run: the loop, the store, the jobs thread, the
 * role, signals (TERM/INT stop, HUP reloads), sd_notify and the watchdog.
 */
#ifndef WSYNC_MANAGER_H
#define WSYNC_MANAGER_H

#include "config.h"

/* Run the role cfg names until a stop signal.  cfg is the loaded, valid
 * configuration (the manager takes it over and frees it).  Returns the
 * process exit code: 0 after a clean stop, 1 when the role could not
 * start, 78 when its configuration could not be used. */
int wsync_manager_run(struct wsync_config *cfg, const char *config_path);

#endif
