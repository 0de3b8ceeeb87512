/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher.h -- the publisher role of wsyncd (see daemon.h for the contract).
 */
#ifndef WSYNC_PUBLISHER_H
#define WSYNC_PUBLISHER_H

#include <stdio.h>

#include "daemon.h"
#include "role.h"

struct wsync_publisher;

int wsync_publisher_new(struct wsync_daemon *d, struct wsync_publisher **ret, struct wsync_error *err);
/*
 * One-shot (`wsync publish`): a publisher that publishes the checkpoint
 * directory dir as the next version and then nothing more.  It recovers
 * the bucket and its state_dir as the daemon does (the two must not run at
 * once on one state_dir), takes dir as complete (a missing marker or a
 * short shard is an error, not something to wait for), does not retry a
 * failing store beyond [store] retry_attempts, and writes no status.json.
 * cb runs once on the loop (role.h's one-shot report): result 0
 * published (or dir was the version HEAD already names: message "already
 * published"), -EINVAL dir is not a complete, valid checkpoint, another
 * negative errno a failure; version and step are HEAD's after it; message
 * says what happened (the error, for a failure).  The caller then stops
 * and frees the publisher as the daemon does.
 */
int wsync_publisher_new_once(struct wsync_daemon *d, const char *dir, wsync_role_report_cb cb,
			     void *data, struct wsync_publisher **ret, struct wsync_error *err);
int wsync_publisher_start(struct wsync_publisher *r);
void wsync_publisher_stop(struct wsync_publisher *r);
void wsync_publisher_free(struct wsync_publisher *r);
/* Rewrite runtime_dir/status.json now (atomically).  0 or a negative errno. */
/* `wsyncd --check-config` of a publisher part (part = K/N, N > 1): print
 * to out which part takes which file of the newest checkpoint in
 * watch_dir (the rule of BUCKET.md §7, or part_files).  0 or -ENOMEM. */
int wsync_publisher_print_parts(const struct wsync_config *cfg, FILE *out);
/* `wsyncd --check-config` of a publisher part: [publisher] part_keys names
 * one readable public key per part (not a private key), no two alike, and
 * this part's is its signing_key's public half.  0, or -EINVAL/-ENOMEM
 * with err saying which key and why. */
int wsync_publisher_check_part_keys(const struct wsync_config *cfg, struct wsync_error *err);

int wsync_publisher_write_status(struct wsync_publisher *r);

#endif
