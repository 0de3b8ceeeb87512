/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber.h -- the subscriber role of wsyncd (see daemon.h for the contract).
 */
#ifndef WSYNC_SUBSCRIBER_H
#define WSYNC_SUBSCRIBER_H

#include "daemon.h"

struct wsync_subscriber;

int wsync_subscriber_new(struct wsync_daemon *d, struct wsync_subscriber **ret, struct wsync_error *err);
int wsync_subscriber_start(struct wsync_subscriber *r);
void wsync_subscriber_stop(struct wsync_subscriber *r);
void wsync_subscriber_free(struct wsync_subscriber *r);
/* Rewrite runtime_dir/status.json now (atomically).  0 or a negative errno. */
int wsync_subscriber_write_status(struct wsync_subscriber *r);

#endif
