/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c -- the dispatcher behind store.h: options and their defaults,
 * the choice of backend, the request objects and their lifetime, the
 * private loop of blocking users.
 *
 * Every request is a struct wsync_store_req on store->live from the moment
 * the backend accepts it until wsync_store_req_done().  The store itself
 * outlives wsync_store_free() while requests are live, because a backend
 * may only be able to stop a request later (a thread-pool job already
 * running, a transfer curl still holds): the last wsync_store_req_done()
 * frees it then.  Callers never see that: after wsync_store_free() the
 * pointer is gone for them, and every remaining callback says -ECANCELED.
 */
#include "store_backend.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 1024			/* S3: the full key, prefix included */

/* ---- options -------------------------------------------------------------- */

static int dup_opt(const char *s, const char **ret)
{
	char *d;

	*ret = NULL;
	if (!s)
		return 0;
	d = strdup(s);
	if (!d)
		return -ENOMEM;
	*ret = d;
	return 0;
}

static void free_opts(struct wsync_store_options *o)
{
	free((char *)o->url);
	free((char *)o->endpoint);
	free((char *)o->region);
	free((char *)o->credentials);
	free((char *)o->ca_file);
	memset(o, 0, sizeof(*o));
}

/* Copy in into out (strings duplicated), every zero filled with its
 * default; refuse values no backend could honour. */
static int copy_opts(const struct wsync_store_options *in, struct wsync_store_options *out,
		     struct wsync_error *err)
{
	*out = *in;
	out->url = out->endpoint = out->region = out->credentials = out->ca_file = NULL;
	if (dup_opt(in->url, &out->url) < 0 || dup_opt(in->endpoint, &out->endpoint) < 0 ||
	    dup_opt(in->region && *in->region ? in->region : WSYNC_STORE_REGION_DEFAULT,
		    &out->region) < 0 ||
	    dup_opt(in->credentials, &out->credentials) < 0 ||
	    dup_opt(in->ca_file, &out->ca_file) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	if (!out->max_concurrency)
		out->max_concurrency = WSYNC_STORE_MAX_CONCURRENCY_DEFAULT;
	if (!out->part_size)
		out->part_size = WSYNC_STORE_PART_SIZE_DEFAULT;
	if (!out->retry_attempts)
		out->retry_attempts = WSYNC_STORE_RETRY_ATTEMPTS_DEFAULT;
	if (!out->retry_max_ms)
		out->retry_max_ms = WSYNC_STORE_RETRY_MAX_MS_DEFAULT;
	if (!out->retry_base_ms)
		out->retry_base_ms = WSYNC_STORE_RETRY_BASE_MS_DEFAULT;
	if (!out->timeout_ms)
		out->timeout_ms = WSYNC_STORE_TIMEOUT_MS_DEFAULT;
	if (!out->connect_timeout_ms)
		out->connect_timeout_ms = WSYNC_STORE_CONNECT_TIMEOUT_MS_DEFAULT;

	if (out->max_concurrency > WSYNC_STORE_MAX_CONCURRENCY_MAX)
		return wsync_error_set(err, -EINVAL, "max_concurrency %u is out of range (1..%d)",
				       out->max_concurrency, WSYNC_STORE_MAX_CONCURRENCY_MAX);
	if (out->part_size < WSYNC_STORE_PART_SIZE_MIN ||
	    out->part_size > WSYNC_STORE_PART_SIZE_MAX)
		return wsync_error_set(err, -EINVAL,
				       "part_size %llu is out of range (5 MiB..5 GiB, S3's limits)",
				       (unsigned long long)out->part_size);
	if (out->path_style < -1 || out->path_style > 1)
		return wsync_error_set(err, -EINVAL,
				       "path_style %d: expected -1 (auto), 0 or 1", out->path_style);
	return 0;
}

/* "file:///srv/bucket", "s3://bucket/prefix at https://host",
 * "hf://buckets/ns/b/prefix": never credentials, which URLs cannot hold. */
static int make_describe(struct wsync_store *store)
{
	const struct wsync_url *u = &store->url;
	const char *pre = u->prefix && *u->prefix ? u->prefix : "";
	const char *slash = *pre ? "/" : "";
	int r = -1;

	switch (u->scheme) {
	case WSYNC_URL_FILE:
		r = asprintf(&store->describe, "file://%s", u->path);
		break;
	case WSYNC_URL_S3:
		if (store->opt.endpoint)
			r = asprintf(&store->describe, "s3://%s%s%s at %s", u->bucket, slash,
				     pre, store->opt.endpoint);
		else
			r = asprintf(&store->describe, "s3://%s%s%s in %s", u->bucket, slash,
				     pre, store->opt.region);
		break;
	case WSYNC_URL_HF:
		r = asprintf(&store->describe, "hf://buckets/%s/%s%s%s%s%s", u->ns, u->bucket,
			     slash, pre, store->opt.endpoint ? " at " : "",
			     store->opt.endpoint ? store->opt.endpoint : "");
		break;
	}
	if (r < 0) {
		store->describe = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* ---- lifetime ------------------------------------------------------------- */

static void close_walk_cb(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

/* Run the private loop until nothing is left in it, and close it.  A
 * handle a backend forgot to close is closed here rather than leaving
 * uv_loop_close() failing (and the loop's memory leaking). */
static void close_private_loop(struct wsync_store *store)
{
	for (int i = 0; i < 3; i++) {
		(void)uv_run(&store->private_loop, UV_RUN_DEFAULT);
		if (uv_loop_close(&store->private_loop) == 0)
			return;
		uv_walk(&store->private_loop, close_walk_cb, NULL);
	}
}

static void destroy(struct wsync_store *store)
{
	if (store->own_loop)
		close_private_loop(store);
	wsync_url_free(&store->url);
	free_opts(&store->opt);
	free(store->describe);
	free(store);
}

int wsync_store_new(uv_loop_t *loop, const struct wsync_store_options *opt,
		    struct wsync_store **ret, struct wsync_error *err)
{
	struct wsync_store *store;
	int r;

	*ret = NULL;
	if (!opt || !opt->url)
		return wsync_error_set(err, -EINVAL, "no store URL given");
	store = calloc(1, sizeof(*store));
	if (!store)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	r = wsync_url_parse(opt->url, &store->url, err);
	if (r < 0) {
		free(store);
		return r;
	}
	r = copy_opts(opt, &store->opt, err);
	if (r < 0)
		goto fail;
	r = make_describe(store);
	if (r < 0) {
		r = wsync_error_set(err, r, "out of memory");
		goto fail;
	}
	store->backend = store->url.scheme == WSYNC_URL_FILE ? &wsync_store_backend_file
							     : &wsync_store_backend_s3;
	if (loop) {
		store->loop = loop;
	} else {
		r = uv_loop_init(&store->private_loop);
		if (r < 0) {
			r = wsync_error_set(err, r, "cannot create an event loop: %s",
					    uv_strerror(r));
			goto fail;
		}
		store->own_loop = true;
		store->loop = &store->private_loop;
	}
	r = store->backend->init(store, err);
	if (r < 0)
		goto fail;
	*ret = store;
	return 0;
fail:
	destroy(store);
	return r;
}

/* End every request still live with -ECANCELED: only for a backend that
 * broke its contract, so that no callback is lost and nothing leaks. */
static void cancel_stragglers(struct wsync_store *store)
{
	while (store->live) {
		struct wsync_store_req *req = store->live;

		wsync_store_req_fail(req, -ECANCELED, "%s: cancelled (the store was freed)",
				     req->key);
		wsync_store_req_done(req);
	}
}

void wsync_store_free(struct wsync_store *store)
{
	if (!store || store->freeing)
		return;
	store->freeing = true;
	store->in_free = true;
	store->backend->free(store);
	store->backend_data = NULL;
	store->in_free = false;
	if (store->own_loop) {
		if (store->waiting)
			return;		/* wsync_store_wait() finishes the job */
		while (store->live && uv_run(store->loop, UV_RUN_ONCE))
			;
		cancel_stragglers(store);
		destroy(store);
	} else if (!store->live) {
		destroy(store);
	}
	/* else the last wsync_store_req_done() destroys it */
}

const char *wsync_store_describe(const struct wsync_store *store)
{
	return store && store->describe ? store->describe : "(no store)";
}

int wsync_store_wait(struct wsync_store *store)
{
	if (!store || !store->own_loop)
		return -EINVAL;
	if (store->waiting)
		return -EBUSY;	/* from a callback: the outer wait goes on */
	store->waiting = true;
	/* UV_RUN_ONCE returns 0 when nothing is left to wait for: a live
	 * request then could never end. */
	while (store->live && uv_run(store->loop, UV_RUN_ONCE))
		;
	store->waiting = false;
	if (store->freeing) {
		/* wsync_store_free() from a callback left the rest to us */
		while (store->live && uv_run(store->loop, UV_RUN_ONCE))
			;
		cancel_stragglers(store);
		destroy(store);
		return 0;
	}
	if (store->live) {
		while (store->live) {
			struct wsync_store_req *req = store->live;

			wsync_store_req_fail(req, -EIO, "%s: the %s backend stopped "
					     "without finishing the request", req->key,
					     store->backend->name);
			wsync_store_req_done(req);
		}
		return -EIO;
	}
	return 0;
}

/* ---- requests ------------------------------------------------------------- */

int wsync_store_req_fail(struct wsync_store_req *req, int err, const char *fmt, ...)
{
	va_list ap;

	req->res.err = err;
	req->res.error.code = err;
	va_start(ap, fmt);
	vsnprintf(req->res.error.msg, sizeof(req->res.error.msg), fmt, ap);
	va_end(ap);
	return err;
}

static void link_req(struct wsync_store_req *req)
{
	struct wsync_store *store = req->store;

	req->prev = NULL;
	req->next = store->live;
	if (store->live)
		store->live->prev = req;
	store->live = req;
}

/* ---- range buffers kept ---- */

/* A few range buffers, each WSYNC_STORE_RANGE_KEPT + RANGE_SLACK_MAX
 * bytes, kept for the process (at most RANGE_KEPT_N: 32 MiB): a
 * subscriber asks for ranges of 8 MiB, four at a time, one after another
 * for GBs. */
#define RANGE_KEPT_N 4
#define RANGE_SLACK_MAX (2u * WSYNC_STORE_RANGE_ALIGN)
#define RANGE_KEPT_CAP (WSYNC_STORE_RANGE_KEPT + RANGE_SLACK_MAX)

static struct {
	pthread_mutex_t mu;
	void *buf[RANGE_KEPT_N];
	bool busy[RANGE_KEPT_N];
} kept = { .mu = PTHREAD_MUTEX_INITIALIZER };

void *wsync_store_range_buf(size_t n, size_t slack)
{
	void *p = NULL;

	if (n > SIZE_MAX - slack - WSYNC_STORE_RANGE_ALIGN)
		return NULL;
	if (n + slack <= RANGE_KEPT_CAP) {
		int i, free_slot = -1;

		pthread_mutex_lock(&kept.mu);
		for (i = 0; i < RANGE_KEPT_N; i++) {
			if (kept.buf[i] && !kept.busy[i])
				break;
			if (!kept.buf[i] && free_slot < 0)
				free_slot = i;
		}
		if (i == RANGE_KEPT_N && free_slot >= 0 &&
		    posix_memalign(&kept.buf[free_slot], WSYNC_STORE_RANGE_ALIGN,
				   RANGE_KEPT_CAP) == 0)
			i = free_slot;
		else if (i == RANGE_KEPT_N && free_slot >= 0)
			kept.buf[free_slot] = NULL;
		if (i < RANGE_KEPT_N) {
			kept.busy[i] = true;
			p = kept.buf[i];
		}
		pthread_mutex_unlock(&kept.mu);
		if (p)
			return p;
	}
	if (posix_memalign(&p, WSYNC_STORE_RANGE_ALIGN, n + slack ? n + slack : 1) != 0)
		return NULL;
	return p;
}

void wsync_store_data_free(void *data)
{
	if (!data)
		return;
	pthread_mutex_lock(&kept.mu);
	for (int i = 0; i < RANGE_KEPT_N; i++)
		if (kept.buf[i] == data) {
			kept.busy[i] = false;
			data = NULL;
			break;
		}
	pthread_mutex_unlock(&kept.mu);
	free(data);
}

static void unlink_req(struct wsync_store_req *req)
{
	struct wsync_store *store = req->store;

	if (req->prev)
		req->prev->next = req->next;
	else if (store->live == req)
		store->live = req->next;
	if (req->next)
		req->next->prev = req->prev;
	req->prev = req->next = NULL;
}

static void req_free(struct wsync_store_req *req)
{
	struct wsync_store_entry *e = (struct wsync_store_entry *)req->res.entries;

	if (!req->res.data_take)
		wsync_store_data_free(req->res.data);
	for (size_t i = 0; e && i < req->res.n_entries; i++) {
		free(e[i].key);
		free(e[i].etag);
	}
	free(e);
	free(req->key);
	free(req->path);
	free(req->if_none_match);
	free(req->put_if_match);
	free(req);
}

void wsync_store_req_done(struct wsync_store_req *req)
{
	struct wsync_store *store = req->store;
	bool was_freeing = store->freeing;

	unlink_req(req);
	if (req->res.err == 0) {
		wsync_error_clear(&req->res.error);
	} else if (!req->res.error.msg[0]) {
		req->res.error.code = req->res.err;
		snprintf(req->res.error.msg, sizeof(req->res.error.msg), "%s: %s", req->key,
			 strerror(-req->res.err));
	}
	if (!req->res.etag)
		req->res.etag = "";
	if (req->cb)
		req->cb(&req->res, req->userdata);
	req_free(req);
	/* A callback that frees a store not yet being freed either destroys it
	 * (nothing else live) or leaves that to a later call: don't touch it
	 * unless it was already being freed before the callback. */
	if (was_freeing && !store->live && !store->in_free && !store->own_loop)
		destroy(store);
}

/* The prefix of list: "" or a key with an optional trailing '/'. */
static int check_list_prefix(const char *prefix)
{
	size_t n = strlen(prefix);
	char *p;
	int r;

	if (n == 0)
		return 0;
	if (prefix[n - 1] != '/')
		return wsync_url_check_key(prefix, NULL);
	if (n == 1)
		return -EINVAL;
	p = strndup(prefix, n - 1);
	if (!p)
		return -ENOMEM;
	r = wsync_url_check_key(p, NULL);
	free(p);
	return r;
}

/* A request for op on key, checked, not yet linked or submitted. */
static int req_new(struct wsync_store *store, enum wsync_store_op op, const char *key,
		   wsync_store_cb cb, void *userdata, struct wsync_store_req **ret)
{
	struct wsync_store_req *req;
	size_t pre;
	int r;

	*ret = NULL;
	if (!store || !key)
		return -EINVAL;
	if (store->freeing)
		return -ECANCELED;
	r = op == WSYNC_STORE_LIST ? check_list_prefix(key) : wsync_url_check_key(key, NULL);
	if (r < 0)
		return r;
	pre = store->url.prefix ? strlen(store->url.prefix) : 0;
	if (pre && pre + 1 + strlen(key) > KEY_MAX)
		return -EINVAL;
	req = calloc(1, sizeof(*req));
	if (!req)
		return -ENOMEM;
	req->key = strdup(key);
	if (!req->key) {
		free(req);
		return -ENOMEM;
	}
	req->store = store;
	req->op = op;
	req->cb = cb;
	req->userdata = userdata;
	req->get.expect_size = -1;
	req->res.etag = "";
	*ret = req;
	return 0;
}

/* Hand req to the backend; on refusal nothing is left of it. */
static int req_submit(struct wsync_store_req *req)
{
	int r;

	link_req(req);
	r = req->store->backend->submit(req);
	if (r < 0) {
		unlink_req(req);
		req->res.data_take = false;
		req_free(req);
	}
	return r;
}

static int put(struct wsync_store *store, const char *key, const char *path,
	       const void *data, size_t len, const uint64_t *range,
	       const struct wsync_store_put_options *cond, bool link, wsync_store_cb cb,
	       void *userdata)
{
	struct wsync_store_req *req;
	int r;

	if ((!path && !data && len) || (path && !*path) ||
	    (range && range[0] + range[1] < range[0]))
		return -EINVAL;
	r = req_new(store, WSYNC_STORE_PUT, key, cb, userdata, &req);
	if (r < 0)
		return r;
	req->put_link = link;
	if (range) {
		req->put_range = true;
		req->put_offset = range[0];
		req->put_length = range[1];
	}
	if (path) {
		req->path = strdup(path);
		if (!req->path) {
			req_free(req);
			return -ENOMEM;
		}
	} else {
		req->buf = data;
		req->buf_len = len;
	}
	if (cond) {
		req->put_if_absent = cond->if_absent;
		if (cond->if_match && !(req->put_if_match = strdup(cond->if_match))) {
			req_free(req);
			return -ENOMEM;
		}
	}
	return req_submit(req);
}

int wsync_store_put_file(struct wsync_store *store, const char *key, const char *path,
			 wsync_store_cb cb, void *userdata)
{
	if (!path)
		return -EINVAL;
	return put(store, key, path, NULL, 0, NULL, NULL, false, cb, userdata);
}

int wsync_store_put_link(struct wsync_store *store, const char *key, const char *path,
			 wsync_store_cb cb, void *userdata)
{
	if (!path)
		return -EINVAL;
	return put(store, key, path, NULL, 0, NULL, NULL, true, cb, userdata);
}

bool wsync_store_links(const struct wsync_store *store)
{
	return store->url.scheme == WSYNC_URL_FILE;
}

int wsync_store_put_range(struct wsync_store *store, const char *key, const char *path,
			  uint64_t offset, uint64_t length, wsync_store_cb cb, void *userdata)
{
	uint64_t range[2] = { offset, length };

	if (!path)
		return -EINVAL;
	return put(store, key, path, NULL, 0, range, NULL, false, cb, userdata);
}

int wsync_store_put_buf(struct wsync_store *store, const char *key, const void *data,
			size_t len, wsync_store_cb cb, void *userdata)
{
	return put(store, key, NULL, data, len, NULL, NULL, false, cb, userdata);
}

/* An ETag a condition may name: it goes into a request header as it is,
 * so no control character (a CR or LF would start another header) and
 * no more than WSYNC_STORE_ETAG_MAX bytes. */
static bool etag_ok(const char *etag)
{
	size_t n = strlen(etag);

	if (n == 0 || n > WSYNC_STORE_ETAG_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)etag[i] < 0x20 || etag[i] == 0x7f)
			return false;
	return true;
}

int wsync_store_put_buf_if(struct wsync_store *store, const char *key,
			   const void *data, size_t len,
			   const struct wsync_store_put_options *opt,
			   wsync_store_cb cb, void *userdata)
{
	if (opt && opt->if_absent && opt->if_match)
		return -EINVAL;
	if (opt && opt->if_match && !etag_ok(opt->if_match))
		return -EINVAL;
	/* One request on every store: S3 has no condition on a multipart
	 * upload's parts, so no backend takes one this large. */
	if (opt && (opt->if_absent || opt->if_match) && store && len > store->opt.part_size)
		return -EINVAL;
	return put(store, key, NULL, data, len, NULL, opt, false, cb, userdata);
}

static int get(struct wsync_store *store, const char *key, const char *path,
	       const struct wsync_store_get_options *opt, wsync_store_cb cb, void *userdata)
{
	struct wsync_store_req *req;
	int r;

	if (opt && (opt->expect_size < -1 || opt->offset + opt->length < opt->offset))
		return -EINVAL;
	r = req_new(store, WSYNC_STORE_GET, key, cb, userdata, &req);
	if (r < 0)
		return r;
	if (opt)
		req->get = *opt;
	req->get.if_none_match = NULL;
	req->get.expect_xxh3 = NULL;
	if (!req->get.max_size)
		req->get.max_size = path ? WSYNC_STORE_GET_FILE_MAX : WSYNC_STORE_GET_BUF_MAX;
	if (opt && opt->if_none_match) {
		req->if_none_match = strdup(opt->if_none_match);
		if (!req->if_none_match) {
			req_free(req);
			return -ENOMEM;
		}
		req->get.if_none_match = req->if_none_match;
	}
	if (opt && opt->expect_xxh3) {
		memcpy(req->expect_xxh3, opt->expect_xxh3, sizeof(req->expect_xxh3));
		req->get.expect_xxh3 = req->expect_xxh3;
	}
	if (path) {
		req->path = strdup(path);
		if (!req->path) {
			req_free(req);
			return -ENOMEM;
		}
	}
	return req_submit(req);
}

int wsync_store_get_file(struct wsync_store *store, const char *key, const char *path,
			 const struct wsync_store_get_options *opt,
			 wsync_store_cb cb, void *userdata)
{
	if (!path || !*path)
		return -EINVAL;
	return get(store, key, path, opt, cb, userdata);
}

int wsync_store_get_buf(struct wsync_store *store, const char *key,
			const struct wsync_store_get_options *opt,
			wsync_store_cb cb, void *userdata)
{
	return get(store, key, NULL, opt, cb, userdata);
}

/* head, list and delete carry nothing but their key. */
static int simple(struct wsync_store *store, enum wsync_store_op op, const char *key,
		  wsync_store_cb cb, void *userdata)
{
	struct wsync_store_req *req;
	int r;

	r = req_new(store, op, key, cb, userdata, &req);
	if (r < 0)
		return r;
	return req_submit(req);
}

int wsync_store_head(struct wsync_store *store, const char *key,
		     wsync_store_cb cb, void *userdata)
{
	return simple(store, WSYNC_STORE_HEAD, key, cb, userdata);
}

int wsync_store_list(struct wsync_store *store, const char *prefix,
		     wsync_store_cb cb, void *userdata)
{
	return simple(store, WSYNC_STORE_LIST, prefix, cb, userdata);
}

int wsync_store_delete(struct wsync_store *store, const char *key,
		       wsync_store_cb cb, void *userdata)
{
	return simple(store, WSYNC_STORE_DELETE, key, cb, userdata);
}
