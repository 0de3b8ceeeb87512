/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber.c -- PLACEHOLDER so wsyncd links while the subscriber role is being
 * written (replace this whole file).
 */
#include <errno.h>
#include <stdlib.h>

#include "subscriber.h"

int wsync_subscriber_new(struct wsync_daemon *d, struct wsync_subscriber **ret, struct wsync_error *err)
{
	(void)d;
	*ret = NULL;
	return wsync_error_set(err, -ENOSYS, "the subscriber role is not built yet");
}

int wsync_subscriber_start(struct wsync_subscriber *r)
{
	(void)r;
	return -ENOSYS;
}

void wsync_subscriber_stop(struct wsync_subscriber *r)
{
	(void)r;
}

void wsync_subscriber_free(struct wsync_subscriber *r)
{
	(void)r;
}
