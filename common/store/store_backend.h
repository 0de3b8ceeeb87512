/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_backend.h -- what store.c shares with its backends (store_file.c,
 * store_s3.c).  Not for users of the store: they see store.h only.
 *
 * store.c owns the request objects: it validates the key, copies the
 * arguments into a struct wsync_store_req and hands it to the backend's
 * submit().  The backend fills req->res and calls wsync_store_req_done()
 * exactly once, on the loop thread, which runs the user's callback and
 * frees the request.
 *
 * Who owns what in req->res when the backend calls wsync_store_req_done():
 *  - data: malloc'd by the backend, or from wsync_store_range_buf; store.c
 *    frees it (wsync_store_data_free) after the callback unless the
 *    callback took it (data_take).
 *  - entries: a malloc'd array, each key and etag malloc'd (etag may be
 *    NULL); store.c frees all of it after the callback.
 *  - etag: borrowed.  It must stay valid until wsync_store_req_done()
 *    returns (point it into the backend's per-request state and free that
 *    after the call).
 *  - error: in place; set it with wsync_store_req_fail().  A res.err
 *    without a message gets strerror's text.
 * backend_data of a request is the backend's to free, before or after
 * the wsync_store_req_done() call (which frees req itself).
 *
 * The limit of max_concurrency requests in flight is each backend's to
 * keep (store.c hands every request on at once): a backend knows what a
 * "transfer" is (a multipart upload is several).
 *
 * Lifetime: the store stays allocated while any request is live.  Once
 * backend->free() has run and the last live request is done, store.c frees
 * the store, possibly inside that last wsync_store_req_done() call: after
 * it, a backend touches neither req nor store.
 */
#ifndef WSYNC_STORE_BACKEND_H
#define WSYNC_STORE_BACKEND_H

#include "store.h"
#include "url.h"

enum wsync_store_op {
	WSYNC_STORE_PUT,
	WSYNC_STORE_GET,
	WSYNC_STORE_HEAD,
	WSYNC_STORE_LIST,
	WSYNC_STORE_DELETE,
};

struct wsync_store_req {
	struct wsync_store *store;
	enum wsync_store_op op;
	char *key;			/* put/get/head/delete: the key; list: the prefix */
	char *path;			/* put from / get into this file; NULL: buffer */
	const void *buf;		/* put from buffer (caller's memory) */
	size_t buf_len;
	bool put_link;			/* put path by linking it where the backend can */
	bool put_range;			/* put only [put_offset, +put_length) of path */
	uint64_t put_offset, put_length;
	bool put_if_absent;		/* put: only if no object has the key */
	char *put_if_match;		/* put: only if the object has this ETag (owned) */
	struct wsync_store_get_options get;	/* get: copied, max_size's default
						 * filled in (never 0); if_none_match and
						 * expect_xxh3 point into storage below */
	char *if_none_match;
	uint8_t expect_xxh3[16];
	wsync_store_cb cb;
	void *userdata;
	struct wsync_store_result res;	/* filled by the backend */
	void *backend_data;		/* the backend's own per-request state */
	struct wsync_store_req *prev, *next; /* the store's list of live requests */
};

struct wsync_store_backend {
	const char *name;
	/* Set up store->backend_data from store->opt / store->url.  May
	 * replace store->describe (free() the old one).  On failure it
	 * leaves nothing behind: free() is not called. */
	int (*init)(struct wsync_store *store, struct wsync_error *err);
	/* Start req; return 0 (the callback will come, never from inside
	 * submit() itself) or a negative errno (then no callback: store.c
	 * reports the error to the caller and frees req). */
	int (*submit)(struct wsync_store_req *req);
	/* Cancel every live request: each still ends in wsync_store_req_done
	 * with -ECANCELED, at once or (work that cannot be stopped at once)
	 * later from the loop.  Then release backend_data: store.c calls the
	 * backend no more, but keeps the store allocated until the last live
	 * request is done.  Handles must be uv_close()d here (a private loop
	 * is run until they are closed, then uv_loop_close()d). */
	void (*free)(struct wsync_store *store);
};

struct wsync_store {
	uv_loop_t *loop;
	uv_loop_t private_loop;		/* when created with loop NULL */
	bool own_loop;
	struct wsync_store_options opt;	/* strings copied, defaults filled in
					 * (path_style stays -1 for auto) */
	struct wsync_url url;
	char *describe;
	const struct wsync_store_backend *backend;
	void *backend_data;
	struct wsync_store_req *live;	/* requests submitted, not done */
	bool freeing;			/* wsync_store_free() was called */
	bool in_free;			/* inside wsync_store_free(): don't free yet */
	bool waiting;			/* inside wsync_store_wait() */
};

extern const struct wsync_store_backend wsync_store_backend_file;
extern const struct wsync_store_backend wsync_store_backend_s3;

/* The backend is done with req: run the callback, free req. */
void wsync_store_req_done(struct wsync_store_req *req);

/* Set req->res.err and its message; returns err.  Touches only req, so a
 * worker thread that holds req may call it. */
int wsync_store_req_fail(struct wsync_store_req *req, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A buffer for a range of n bytes, aligned to WSYNC_STORE_RANGE_ALIGN
 * and slack bytes longer (a read around the page cache needs both): one
 * of the kept ones when n + slack fits (WSYNC_STORE_RANGE_KEPT + slack),
 * else a new one.  Free it with wsync_store_data_free.  NULL: no memory. */
#define WSYNC_STORE_RANGE_ALIGN 4096u
void *wsync_store_range_buf(size_t n, size_t slack);

#endif
