/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher.c -- PLACEHOLDER so wsyncd links while the publisher role is being
 * written (replace this whole file).
 */
#include <errno.h>
#include <stdlib.h>

#include "publisher.h"

int wsync_publisher_new(struct wsync_daemon *d, struct wsync_publisher **ret, struct wsync_error *err)
{
	(void)d;
	*ret = NULL;
	return wsync_error_set(err, -ENOSYS, "the publisher role is not built yet");
}

int wsync_publisher_start(struct wsync_publisher *r)
{
	(void)r;
	return -ENOSYS;
}

void wsync_publisher_stop(struct wsync_publisher *r)
{
	(void)r;
}

void wsync_publisher_free(struct wsync_publisher *r)
{
	(void)r;
}
