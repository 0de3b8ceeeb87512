/* SPDX-License-Identifier: Apache-2.0 */
/*
 * role.c -- the fields of status.json both roles write
 * (role.h).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "role.h"

json_t *wsync_role_time(int64_t t)
{
	time_t tt = (time_t)t;
	struct tm tm;
	char when[32];

	if (t <= 0 || !gmtime_r(&tt, &tm) ||
	    !strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm))
		return json_null();
	return json_string(when);
}

/* A JSON string of S; bytes that are not UTF-8 (a file name from a
 * trainer, say) become '?' rather than losing the field. */
static json_t *text(const char *s)
{
	json_t *j = json_string(s ? s : "");
	char *copy;

	if (j)
		return j;
	copy = strdup(s);
	if (!copy)
		return NULL;
	for (char *p = copy; *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	j = json_string(copy);
	free(copy);
	return j;
}

json_t *wsync_role_status_new(const struct wsync_role_status *c)
{
	json_t *o = json_object();
	int r = 0;

	if (!o)
		return NULL;
	r |= json_object_set_new(o, "role", json_string(c->role));
	r |= json_object_set_new(o, "state", json_string(c->stopped ? "stopped" : c->state));
	r |= json_object_set_new(o, "stopped", json_boolean(c->stopped));
	r |= json_object_set_new(o, "version", json_integer((json_int_t)c->version));
	r |= json_object_set_new(o, "step", c->has_step ? json_integer((json_int_t)c->step) :
							  json_null());
	r |= json_object_set_new(o, "last_error", text(c->last_error));
	r |= json_object_set_new(o, "store_ok", json_boolean(c->store_ok));
	r |= json_object_set_new(o, "store_down_since",
				 c->store_ok ? json_null() :
					       wsync_role_time(c->store_down_since));
	r |= json_object_set_new(o, "message", text(c->message));
	r |= json_object_set_new(o, "pid", json_integer((json_int_t)getpid()));
	r |= json_object_set_new(o, "updated", wsync_role_time((int64_t)time(NULL)));
	if (r) {
		json_decref(o);
		return NULL;
	}
	return o;
}
