/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher.h -- the publisher role of wsyncd (see daemon.h for the contract).
 */
#ifndef WSYNC_PUBLISHER_H
#define WSYNC_PUBLISHER_H

#include "daemon.h"

struct wsync_publisher;

int wsync_publisher_new(struct wsync_daemon *d, struct wsync_publisher **ret, struct wsync_error *err);
int wsync_publisher_start(struct wsync_publisher *r);
void wsync_publisher_stop(struct wsync_publisher *r);
void wsync_publisher_free(struct wsync_publisher *r);
/* Rewrite runtime_dir/status.json now (atomically).  0 or a negative errno. */
int wsync_publisher_write_status(struct wsync_publisher *r);

#endif
