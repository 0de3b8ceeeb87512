/* SPDX-License-Identifier: Apache-2.0 */
/*
 * preflight.h -- what a loaded configuration names on this machine,
 * looked at before a role starts: the folders it reads or writes, the key
 * files, and whether an include can take a weight file at all.
 *
 * config.c judges the file (syntax, values, rules across keys); this
 * judges the machine it runs on, as this user.  `wsyncd --check-config`
 * and a daemon's start run this one function, so the first says all that
 * the second would refuse, every problem at once.  It only looks: it
 * creates nothing (the roles create what they may -- their state and
 * runtime folders, a subscriber's target_dir, a publisher's file://
 * bucket directory -- and this checks that they can).  It checks as the
 * user it runs as; a key or credentials file under /run/credentials/
 * (a systemd credential, there only while its unit runs) is left to the
 * start unless $CREDENTIALS_DIRECTORY says this is that unit.
 */
#ifndef WSYNC_PREFLIGHT_H
#define WSYNC_PREFLIGHT_H

#include <stdbool.h>

#include "config.h"

/*
 * Check cfg (loaded from cfg->path; its role set) and append every
 * problem to errs as "FILE:LINE: [section] key: what, and the fix".
 * Returns how many problems were found (0: none), or -ENOMEM.
 * *may_pass is set true when every problem found may come right without
 * an operator: a watch_dir that does not exist yet (a mount not up, a
 * trainer that has not started) -- a daemon exits 1 for those, so that
 * systemd starts it again, and 78 (EX_CONFIG) for the rest.
 */
int wsync_preflight(const struct wsync_config *cfg, struct wsync_config_errors *errs,
		    bool *may_pass);

/*
 * Can a checkpoint file that include and exclude take (wsync_file_filter)
 * be a weight file (wsync_checkpoint_is_weight_name)?  Judged from the
 * globs alone: false only when no weight name can match, true when one
 * can or the globs use what this does not follow ([!...], backslashes).
 * -ENOMEM is never: it returns true when it cannot tell.
 */
bool wsync_preflight_globs_take_weights(const char *include, const char *exclude);

#endif
