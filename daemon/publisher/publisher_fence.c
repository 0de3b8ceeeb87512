/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_fence.c -- the publisher's conditional writes
 * (publisher_local.h, BUCKET.md §8): an object created only if absent
 * (a manifest, the writer lease), replaced only if it is still the one
 * read (HEAD, the lease).
 *
 * Two things every caller would otherwise repeat:
 *  - a store that refuses conditions (-ENOTSUP: Swift's s3api answers
 *    501) is written without them from then on, said once in the log;
 *    the writer lease is what fences such a bucket;
 *  - a put the store retried may have landed on its first attempt, and
 *    the retry then finds the object (-EEXIST), or finds it changed
 *    (-ESTALE): when what is there is byte for byte what we write, the
 *    put succeeded.
 * And a document larger than a conditional put may be (the store's
 * part_size) goes without the condition, said in the log.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "publisher_local.h"

struct fenced_put {
	struct wsync_publisher *p;
	char key[WSYNC_MANIFEST_KEY_MAX];
	const void *data;
	size_t len;
	struct wsync_store_put_options opt;
	bool conditional;		/* submitted with its conditions */
	char if_match[PUB_ETAG_MAX];
	wsync_store_cb cb;
	void *userdata;
};

static void fenced_put_done(struct wsync_store_result *res, void *data);

static bool etag_sendable(const char *etag)
{
	size_t n = 0;

	for (; etag[n]; n++)
		if ((unsigned char)etag[n] < 0x20 || etag[n] == 0x7f)
			return false;
	return n <= WSYNC_STORE_ETAG_MAX;
}

static int fenced_submit(struct fenced_put *f)
{
	struct wsync_publisher *p = f->p;

	f->conditional = !p->no_conditions && (f->opt.if_absent || f->opt.if_match);
	if (!f->conditional)
		return wsync_store_put_buf(p->d->store, f->key, f->data, f->len, fenced_put_done, f);
	return wsync_store_put_buf_if(p->d->store, f->key, f->data, f->len, &f->opt,
				      fenced_put_done, f);
}

static void fenced_finish(struct fenced_put *f, struct wsync_store_result *res)
{
	wsync_store_cb cb = f->cb;
	void *userdata = f->userdata;

	free(f);
	cb(res, userdata);
}

/* The object a conditional put found: ours (a retry's first attempt
 * landed) when it has our bytes; else another writer's (one larger than
 * ours, or gone, included). */
static void fenced_compare_got(struct wsync_store_result *res, void *data)
{
	struct fenced_put *f = data;
	int other = f->opt.if_absent ? -EEXIST : -ESTALE;
	struct wsync_store_result r = { .err = other };

	if (res->err == 0 && res->data_len == f->len && memcmp(res->data, f->data, f->len) == 0) {
		r.err = 0;
		r.size = res->size;
		r.etag = res->etag;
		fenced_finish(f, &r);
		return;
	}
	if (res->err < 0 && res->err != -ENOENT && res->err != -EFBIG && res->err != -EIO) {
		fenced_finish(f, res);	/* could not tell: a store failure, retried */
		return;
	}
	wsync_error_set(&r.error, other, "%s %s, written by another writer", f->key,
			f->opt.if_absent ? "exists already" : "changed");
	fenced_finish(f, &r);
}

static void fenced_put_done(struct wsync_store_result *res, void *data)
{
	struct fenced_put *f = data;
	struct wsync_publisher *p = f->p;
	int r;

	if (res->err == -ENOTSUP && f->conditional) {
		if (!p->no_conditions)
			log_notice("%s refuses conditional writes (%s): writing without them; "
				   "the writer lease alone keeps a second publisher out "
				   "(BUCKET.md §8)", wsync_store_describe(p->d->store),
				   wsync_error_str(&res->error));
		p->no_conditions = true;
		r = fenced_submit(f);
		if (r == 0)
			return;
		res->err = r;
		wsync_error_set(&res->error, r, "cannot queue: %s", strerror(-r));
	} else if ((res->err == -EEXIST || res->err == -ESTALE) && f->conditional) {
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;

		o.max_size = f->len + 1;
		r = wsync_store_get_buf(p->d->store, f->key, &o, fenced_compare_got, f);
		if (r == 0)
			return;
	}
	fenced_finish(f, res);
}

int pub_put_fenced(struct wsync_publisher *p, const char *key, const void *data, size_t len,
		   bool if_absent, const char *if_match, wsync_store_cb cb, void *userdata)
{
	struct fenced_put *f = calloc(1, sizeof(*f));
	int r;

	if (!f)
		return -ENOMEM;
	if (strlen(key) >= sizeof(f->key) || (if_match && strlen(if_match) >= sizeof(f->if_match))) {
		free(f);
		return -EINVAL;
	}
	*f = (struct fenced_put){ .p = p, .data = data, .len = len, .cb = cb,
				  .userdata = userdata };
	strcpy(f->key, key);
	f->opt.if_absent = if_absent;
	/* an ETag the store would refuse to send back (too long, odd
	 * bytes) is as good as none: the lease fences that store */
	if (if_match && *if_match && etag_sendable(if_match)) {
		strcpy(f->if_match, if_match);
		f->opt.if_match = f->if_match;
	}
	r = fenced_submit(f);
	if (r == -ENOTSUP && f->conditional) {	/* a backend without them */
		p->no_conditions = true;
		log_notice("%s has no conditional writes: writing without them; the writer "
			   "lease alone keeps a second publisher out (BUCKET.md §8)",
			   wsync_store_describe(p->d->store));
		r = fenced_submit(f);
	} else if (r == -EINVAL && f->conditional) {
		/* larger than a conditional put may be ([store] part_size) */
		log_warning("%s: %zu bytes, more than a conditional write may carry ([store] "
			    "part_size): written without the condition", key, len);
		f->opt = (struct wsync_store_put_options){ 0 };
		r = fenced_submit(f);
	}
	if (r < 0)
		free(f);
	return r;
}
