/* SPDX-License-Identifier: Apache-2.0 */
/*
 * role_ops.c -- the roles' table (role_ops.h): each role's functions
 * behind one signature.
 */
#include "role_ops.h"

#include <stddef.h>

#include "publisher.h"
#include "subscriber.h"

/* ---- the publisher ---- */

static int pub_new(struct wsync_daemon *d, void **ret, struct wsync_error *err)
{
	struct wsync_publisher *p = NULL;
	int r = wsync_publisher_new(d, &p, err);

	*ret = p;
	return r;
}

static int pub_new_once(struct wsync_daemon *d, const struct wsync_role_once_opts *once,
			void **ret, struct wsync_error *err)
{
	struct wsync_publisher *p = NULL;
	/* its progress goes through d->set_status, as the daemon's does */
	int r = wsync_publisher_new_once(d, once->dir, once->done, once->data, &p, err);

	*ret = p;
	return r;
}

static int pub_start(void *role)
{
	return wsync_publisher_start(role);
}

static void pub_stop(void *role)
{
	wsync_publisher_stop(role);
}

static void pub_free(void *role)
{
	wsync_publisher_free(role);
}

static int pub_write_status(void *role)
{
	return wsync_publisher_write_status(role);
}

/* ---- the subscriber ---- */

static int sub_new(struct wsync_daemon *d, void **ret, struct wsync_error *err)
{
	struct wsync_subscriber *s = NULL;
	int r = wsync_subscriber_new(d, &s, err);

	*ret = s;
	return r;
}

static int sub_new_once(struct wsync_daemon *d, const struct wsync_role_once_opts *once,
			void **ret, struct wsync_error *err)
{
	struct wsync_subscriber_once o = {
		.hooks = once->hooks, .progress = once->progress, .done = once->done,
		.userdata = once->data,
	};
	struct wsync_subscriber *s = NULL;
	int r = wsync_subscriber_new(d, &s, err);

	if (r >= 0)
		wsync_subscriber_set_once(s, &o);	/* copied */
	*ret = s;
	return r;
}

static int sub_start(void *role)
{
	return wsync_subscriber_start(role);
}

static void sub_stop(void *role)
{
	wsync_subscriber_stop(role);
}

static void sub_free(void *role)
{
	wsync_subscriber_free(role);
}

static int sub_write_status(void *role)
{
	return wsync_subscriber_write_status(role);
}

static int sub_reload_filter(void *role, const char *include, const char *exclude)
{
	return wsync_subscriber_reload_filter(role, include, exclude);
}

static const struct wsync_role_ops roles[] = {
	{
		.role = WSYNC_ROLE_PUBLISHER,
		.new = pub_new, .new_once = pub_new_once, .start = pub_start,
		.stop = pub_stop, .free = pub_free, .write_status = pub_write_status,
	},
	{
		.role = WSYNC_ROLE_SUBSCRIBER,
		.new = sub_new, .new_once = sub_new_once, .start = sub_start,
		.stop = sub_stop, .free = sub_free, .write_status = sub_write_status,
		.reload_filter = sub_reload_filter,
	},
};

const struct wsync_role_ops *wsync_role_ops(enum wsync_role role)
{
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
		if (roles[i].role == role)
			return &roles[i];
	return NULL;
}
