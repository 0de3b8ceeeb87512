/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.h -- one interface to the bucket, whatever it is: a directory
 * (file://), an S3-compatible object store (s3://) or a Hugging Face
 * Storage Bucket through its S3 gateway (hf://buckets/...).
 *
 * Every operation is asynchronous on the caller's libuv loop: it returns at
 * once (0, or a negative errno when the request could not even be queued)
 * and later calls its callback exactly once, on the loop thread, with a
 * struct wsync_store_result.  The loop never blocks: the file backend runs
 * its system calls on the libuv thread pool, the S3 backend drives curl's
 * multi-socket API from uv_poll and uv_timer handles.  At most
 * max_concurrency requests are in flight; the others wait in a queue.
 *
 * Keys are relative to the URL's prefix ("v/000012.delta"), checked with
 * wsync_url_check_key(): the store never sees "..", "//" or NUL; with the
 * prefix and a '/' in front a key must stay within S3's 1024 bytes.
 * An invalid key makes the call return -EINVAL (no callback).
 *
 * For the `wsync` tool and the tests, a store made without a loop runs a
 * private one: queue requests, then wsync_store_wait().
 */
#ifndef WSYNC_STORE_H
#define WSYNC_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "error.h"

/*
 * The defaults of struct wsync_store_options below and the limits
 * wsync_store_new() holds its options to: the one place they are written.
 * config.c's [store] section takes its defaults and bounds from here.
 */
#define WSYNC_STORE_REGION_DEFAULT "us-east-1"
#define WSYNC_STORE_MAX_CONCURRENCY_DEFAULT 16
#define WSYNC_STORE_MAX_CONCURRENCY_MAX 1024
#define WSYNC_STORE_PART_SIZE_DEFAULT (64ULL << 20)	/* 64 MiB */
#define WSYNC_STORE_PART_SIZE_MIN (5ULL << 20)		/* S3's limits on a multipart part */
#define WSYNC_STORE_PART_SIZE_MAX (5ULL << 30)
#define WSYNC_STORE_RETRY_ATTEMPTS_DEFAULT 6
#define WSYNC_STORE_RETRY_MAX_MS_DEFAULT 120000
#define WSYNC_STORE_RETRY_BASE_MS_DEFAULT 200
#define WSYNC_STORE_TIMEOUT_MS_DEFAULT 30000
#define WSYNC_STORE_CONNECT_TIMEOUT_MS_DEFAULT 10000

/* [store] settings.  Zero/NULL fields take the defaults above. */
struct wsync_store_options {
	const char *url;		/* required: file:///.., s3://.., hf://buckets/.. */
	const char *endpoint;		/* s3: https://host[:port]; default AWS for the region */
	const char *region;		/* default "us-east-1" */
	int path_style;			/* -1 auto (on unless endpoint is AWS), 0 off, 1 on.
					 * The one field whose zero is not its default:
					 * set -1 for auto. */
	const char *credentials;	/* a credentials file; else env, else $CREDENTIALS_DIRECTORY */
	const char *ca_file;		/* extra CA bundle; TLS verification is always on */
	unsigned max_concurrency;	/* requests in flight; default 16 */
	uint64_t part_size;		/* multipart above this; default 64 MiB (5 MiB..5 GiB) */
	unsigned retry_attempts;	/* attempts per request including the first; default 6 */
	uint64_t retry_max_ms;		/* give up after this much time retrying; default 120 s */
	uint64_t retry_base_ms;		/* first backoff ceiling; default 200 ms */
	uint64_t timeout_ms;		/* no byte moved for this long = timeout; default 30 s */
	uint64_t connect_timeout_ms;	/* default 10 s */
};

/* What a request returns.  Valid only during the callback. */
struct wsync_store_result {
	int err;			/* 0; -ENOENT no such object; -ENXIO no such bucket
					 * (file: the directory is missing); -EACCES bad
					 * credentials or denied; -EIO data did not verify;
					 * -ECANCELED the store was freed; other negative errno */
	bool not_modified;		/* conditional get: the ETag still matches */
	uint64_t size;			/* object size (head, get, put); for a range get
					 * still the whole object's size */
	const char *etag;		/* with quotes as the server sent it; "" if none */
	int64_t mtime;			/* seconds since the epoch; 0 if unknown */
	void *data;			/* get to buffer: the bytes (the callee frees them
					 * after the callback unless data_take is set) */
	size_t data_len;
	bool data_take;			/* set by the callback to keep data (then
					 * wsync_store_data_free() it) */
	const struct wsync_store_entry *entries; /* list: every key under the prefix */
	size_t n_entries;
	unsigned attempts;		/* how many tries the request took */
	struct wsync_error error;	/* one line saying what went wrong when err != 0 */
};

struct wsync_store_entry {
	char *key;			/* relative to the store's prefix */
	uint64_t size;
	char *etag;
	int64_t mtime;
};

/*
 * A get's options.  All optional (a NULL pointer means all defaults); start
 * from WSYNC_STORE_GET_OPTIONS_INIT, since expect_size's zero is not
 * "unknown".  A range is S3's: offset at or past the end of the object is
 * -EINVAL (HTTP 416), a length reaching past the end returns what there is.
 *
 * What a get accepts is bounded before a byte is written: a size the store
 * announces (S3: HEAD's or the answer's Content-Length; file: the object's
 * own) that differs from expect_size is -EIO, one above max_size -EFBIG;
 * a body that goes on past what it may be -- expect_size, max_size, the
 * size announced, the range asked for -- is stopped the moment it does
 * (the same errors).  So a download that knows its size (the subscriber's,
 * from the signed manifest) takes nothing else, and one that does not
 * takes at most max_size: callers that cannot name the size say how much
 * they are willing to take.
 */
struct wsync_store_get_options {
	uint64_t offset;		/* byte range start */
	uint64_t length;		/* 0: to the end */
	const char *if_none_match;	/* ETag from an earlier get: "not modified" if unchanged */
	int64_t expect_size;		/* -1: unknown; else bytes returned (the range's,
					 * for a range get) differing from it is -EIO */
	const uint8_t *expect_xxh3;	/* 16 bytes (XXH3-128, big-endian) of the bytes
					 * returned, or NULL; a mismatch is -EIO */
	uint64_t max_size;		/* refuse (-EFBIG) more bytes than this; 0: the
					 * default, WSYNC_STORE_GET_BUF_MAX into memory,
					 * WSYNC_STORE_GET_FILE_MAX into a file */
};

/* The defaults of max_size: 64 MiB into memory (manifests are at most
 * that); into a file 5 TiB, the largest object S3 stores -- a bound on a
 * server's lies, not on a disk: callers pass expect_size or a max_size
 * of their own (`wsync store get` the free space of the destination). */
#define WSYNC_STORE_GET_BUF_MAX (64ull << 20)
#define WSYNC_STORE_GET_FILE_MAX (5ull << 40)

/*
 * What a listing may grow to; past any of these it fails with -E2BIG and
 * a message naming the limit.  They are far above what a wsync bucket
 * holds (a few keys per version, three "folders") and bound what a server
 * that never ends a listing can cost: S3's IsTruncated forever, common
 * prefixes without end.  A continuation token that comes back a second
 * time for the same prefix, and a common prefix longer than a key may be
 * (1024 bytes), are -EPROTO at once.
 */
#define WSYNC_STORE_LIST_KEYS_MAX 1000000		/* entries returned */
#define WSYNC_STORE_LIST_KEY_BYTES_MAX (256ull << 20)	/* their keys and ETags */
#define WSYNC_STORE_LIST_PAGES_MAX 20000		/* S3: ListObjectsV2 requests */
#define WSYNC_STORE_LIST_PREFIXES_MAX 10000		/* S3: common prefixes, each one
							 * listed in turn */
#define WSYNC_STORE_LIST_XML_MAX (1ull << 30)		/* S3: bytes of all pages */

#define WSYNC_STORE_GET_OPTIONS_INIT { .expect_size = -1 }

struct wsync_store;
typedef void (*wsync_store_cb)(struct wsync_store_result *res, void *userdata);

/* Create a store on loop (NULL: a private one, see wsync_store_wait()).
 * Reads credentials now (file, $CREDENTIALS_DIRECTORY, environment).  Returns 0 or a negative errno with err set. */
int wsync_store_new(uv_loop_t *loop, const struct wsync_store_options *opt,
		    struct wsync_store **ret, struct wsync_error *err);

/*
 * Cancel what is in flight, then free.  NULL is accepted.  Every request
 * still live ends with -ECANCELED: those not started at once, those a
 * worker thread or a transfer is in the middle of as soon as it stops
 * (its callback is the sign that the store no longer touches the
 * request's buffer or files).
 *  - With a private loop, this runs the loop until every callback has run
 *    and every handle has closed, then closes it: everything has happened
 *    when it returns.  (Called from a callback inside wsync_store_wait(),
 *    the rest happens before wsync_store_wait() returns.)
 *  - On the caller's loop, callbacks may still come while that loop runs;
 *    the store's memory goes with the last of them.  Run the loop until it
 *    has nothing left before uv_loop_close().
 * Submitting to a store being freed fails with -ECANCELED.
 */
void wsync_store_free(struct wsync_store *store);

/* A short description for logs: "s3://bucket/prefix at https://host" (no secrets). */
const char *wsync_store_describe(const struct wsync_store *store);

/* put: the object appears whole or not at all. */
int wsync_store_put_file(struct wsync_store *store, const char *key,
			 const char *path, wsync_store_cb cb, void *userdata);
/* put bytes [offset, offset + length) of the file at path: a chunk of a
 * file still being written beyond them (the publisher's streaming
 * upload).  A file shorter than that is -EIO ("shrank"). */
int wsync_store_put_range(struct wsync_store *store, const char *key, const char *path,
			  uint64_t offset, uint64_t length, wsync_store_cb cb, void *userdata);
/*
 * put the file at path, which its owner will never write again (the
 * publisher's chunk files): the file store links it into the bucket
 * instead of copying it -- a hard link under a temp name beside the key,
 * fsynced, renamed over the key, the directory fsynced, so the put is as
 * atomic and as durable as a copy and reads nothing; across file systems
 * it copies, as wsync_store_put_file.  Other stores: wsync_store_put_file.
 * Writing to path afterwards would change the object: don't.
 */
int wsync_store_put_link(struct wsync_store *store, const char *key, const char *path,
			 wsync_store_cb cb, void *userdata);
/* Does wsync_store_put_link move no bytes on this store (file://)? */
bool wsync_store_links(const struct wsync_store *store);
/* data must stay valid until the callback. */
int wsync_store_put_buf(struct wsync_store *store, const char *key,
			const void *data, size_t len, wsync_store_cb cb, void *userdata);

/*
 * A conditional put (the publisher's fencing, BUCKET.md §8): the object
 * is written only if the condition holds when it is written, atomically
 * with the write where the store can do that.
 *  - if_absent: only if no object has the key (S3 `If-None-Match: *`;
 *    file: created with the name, never replacing one).  -EEXIST if one
 *    exists.
 *  - if_match: only if the object is the one with this ETag, as a get,
 *    head or put returned it, quotes included (S3 `If-Match`; file:
 *    compared and renamed under the bucket's lock).  -ESTALE if it is
 *    another or is gone.
 * opt NULL, or neither condition: wsync_store_put_buf.  Refused at once
 * (-EINVAL, no callback): both conditions; an if_match that is empty,
 * longer than WSYNC_STORE_ETAG_MAX or holds a control character; a
 * conditional put of more than part_size bytes -- a condition is for a
 * small document, and S3 has none for a multipart upload.
 * A store that refuses conditions (Swift's s3api answers 501) fails with
 * -ENOTSUP and writes nothing: the caller decides whether to write
 * without.  A store that ignores them (s3rver) cannot be told apart
 * here: BUCKET.md §8 says what fences such a bucket.  A retry of a put
 * whose first attempt did land may find its own object: -EEXIST/-ESTALE
 * then too (compare the bytes to tell).  S3's 409 (a conditional write
 * racing another on the key) is retried as a 5xx is.  On success
 * res->etag is the new object's ETag where the store says it ("" if
 * not).
 * The file store's conditions hold against other conditional puts to
 * the same bucket directory, from any process (the lock is an flock of
 * ".wsync-lock" in it, a name no key may take and no listing shows);
 * an unconditional put or a delete takes no lock and is not fenced.
 */
#define WSYNC_STORE_ETAG_MAX 127

struct wsync_store_put_options {
	bool if_absent;
	const char *if_match;		/* NULL: no If-Match */
};

int wsync_store_put_buf_if(struct wsync_store *store, const char *key,
			   const void *data, size_t len,
			   const struct wsync_store_put_options *opt,
			   wsync_store_cb cb, void *userdata);

/*
 * Free the data of a result the callback took (data_take).  A range of
 * at most WSYNC_STORE_RANGE_KEPT bytes may come in one of a few buffers
 * the store keeps for the next such range instead of freeing: a fresh
 * buffer's pages are faulted in and cleared, which costs more than the
 * bytes read into them (on a VM with shadow page tables, ten times
 * more).  Any other data is simply free()d.
 */
#define WSYNC_STORE_RANGE_KEPT (8ull << 20)
void wsync_store_data_free(void *data);

/* get into path (written beside it as a temp file, renamed when verified). */
int wsync_store_get_file(struct wsync_store *store, const char *key, const char *path,
			 const struct wsync_store_get_options *opt,
			 wsync_store_cb cb, void *userdata);
int wsync_store_get_buf(struct wsync_store *store, const char *key,
			const struct wsync_store_get_options *opt,
			wsync_store_cb cb, void *userdata);

int wsync_store_head(struct wsync_store *store, const char *key,
		     wsync_store_cb cb, void *userdata);

/* Every key under prefix (relative to the store's own prefix; "" for all),
 * all pages fetched, sorted by key (bytewise, as S3).  The prefix is a
 * string prefix as in S3: "v/" lists a "directory", "v/00" every key
 * starting so.  It is checked as a key, except that "" and a trailing '/'
 * are allowed.  Bounded by the WSYNC_STORE_LIST_* limits above. */
int wsync_store_list(struct wsync_store *store, const char *prefix,
		     wsync_store_cb cb, void *userdata);

/* Deleting a key that does not exist succeeds (as S3). */
int wsync_store_delete(struct wsync_store *store, const char *key,
		       wsync_store_cb cb, void *userdata);

/*
 * Blocking use (the `wsync` tool, tests): create the store with loop NULL
 * and it runs a private loop; queue requests as above, then
 * wsync_store_wait() runs that loop until every callback has run.
 * Returns 0, or -EINVAL when the store runs on a caller's loop.
 */
int wsync_store_wait(struct wsync_store *store);

#endif
