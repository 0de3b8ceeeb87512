/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_s3.c -- the S3 backend (s3:// and hf://buckets/...), on http.c and
 * sigv4.c.
 *
 * Addressing.  Path style puts the bucket in the path
 * (https://host/bucket/key), virtual-hosted style in the host name
 * (https://bucket.host/key); path style is the default for every endpoint
 * but AWS's own.  A Hugging Face bucket hf://buckets/NS/B/prefix is the
 * bucket B at https://s3.hf.co/NS (path style only, us-east-1): its
 * requests go to https://s3.hf.co/NS/B/key.
 *
 * Every request is signed (SigV4, x-amz-content-sha256 always sent, as
 * Debian 12's curl won't) just before each attempt, so retries carry a
 * fresh date.  Bodies are signed with their real SHA-256, computed on the
 * libuv thread pool: the store then rejects a body damaged on the way.
 *
 * An operation is a small state machine over one or more transfers:
 *   put    [HASH] -> PUT                            (size <= part_size;
 *          a conditional put is always this one PUT, store.c sees to it)
 *          INIT -> [HASH -> PART]* -> COMPLETE     (multipart; ABORT on failure)
 *   get    GET first range -> [GET range]* -> FINISH (fsync, verify, rename
 *          on the thread pool); a whole object into a file: HEAD first,
 *          its size checked against the caller's bounds, then one GET or
 *          ranges, at most max_concurrency queued at a time
 *   head, delete   one transfer
 *   list   one ListObjectsV2 page per transfer, delimiter "/": common
 *          prefixes are listed in turn (the HF gateway accepts no other
 *          delimiter), continuation tokens followed, all of it within the
 *          WSYNC_STORE_LIST_* bounds of store.h.
 *
 * The server is not trusted more than the bucket's content: every size it
 * announces is checked before it is acted on, and every body is bounded
 * by what it may be (get_range(), http.h's sink_max).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "credentials.h"
#include "curl_lazy.h"
#include "durable.h"
#include "hash.h"
#include "http.h"
#include "s3_xml.h"
#include "sigv4.h"
#include "store_backend.h"

#define HF_ENDPOINT "https://s3.hf.co"
#define HF_REGION "us-east-1"
/* S3's limits on multipart uploads. */
#define PART_MIN (5ull << 20)
#define PART_MAX (5ull << 30)
#define PARTS_MAX 10000
/* Bodies of answers read into memory (lists, errors, upload ids). */
#define ANSWER_MAX (16u << 20)
/* A range into memory this long or longer comes in one of the store's
 * kept buffers (wsync_store_range_buf): below, a fresh one costs little. */
#define RANGE_KEPT_MIN (1u << 20)

struct s3 {
	struct wsync_store *store;
	struct wsync_http *http;
	char *origin;			/* "https://host[:port]", no trailing '/' */
	char *host;			/* the Host header */
	char *base;			/* raw path before the key: "/bucket", "/NS/bucket", "" */
	char *prefix;			/* key prefix with its '/': "runs/a/" or "" */
	char *region;
	struct wsync_credentials cred;
	struct s3_op *ops;		/* live operations */
};

struct s3_op;

/* One HTTP transfer of an operation. */
struct s3_xfer {
	struct wsync_http_req h;
	struct s3_op *op;
	const char *method;
	char *key;			/* full key (with the prefix); NULL: the bucket */
	struct wsync_sigv4_param query[4];
	char *query_buf[4];		/* owned strings behind query[] */
	size_t n_query;
	char range[80];			/* "bytes=a-b" or "" */
	char cond_name[16];		/* "if-none-match" / "if-match" or "" */
	char cond_value[128];
	char payload_hash[WSYNC_SHA256_HEX_LEN + 1];
	unsigned part;			/* multipart: the part number; get: the range index */
	uint64_t offset, len;		/* multipart part / get range */
	bool cap_is_max;		/* get: sink_max is the caller's max_size */
	char *body;			/* owned request body (complete's XML) */
	struct s3_xfer *next;		/* the op's live transfers */
	bool hashing;			/* on the thread pool */
	uv_work_t work;
	struct wsync_error werr;
};

enum op_state {
	OP_RUNNING,			/* transfers in flight */
	OP_FINISHING,			/* get to file: verify + rename on the pool */
	OP_ABORTING,			/* multipart: DELETE ?uploadId after a failure */
};

struct s3_op {
	struct s3 *s3;			/* NULL once orphaned by a store free */
	struct wsync_store_req *req;
	enum op_state state;
	struct s3_xfer *xfers;
	unsigned n_xfers;		/* live, hashing included */
	int err;			/* first failure */
	struct wsync_error error;
	int fd;				/* put from / get into */
	struct wsync_atomic out;	/* get to file: the temp (fd is its fd) */
	uint64_t size;			/* put: the body size; get: the object size */
	uint64_t base;			/* put_range: the body starts here in fd */
	/* multipart */
	char *upload_id;
	char **etags;			/* per part */
	unsigned n_parts, parts_done, next_part;
	/* get */
	bool probed;			/* a HEAD gave size and etag first */
	uint64_t next_off;		/* probed: where the next range starts */
	uint64_t got;			/* bytes received over all ranges */
	char *etag;
	int64_t mtime;
	/* list */
	struct wsync_store_entry *entries;
	size_t n_entries, cap_entries;
	char **pending;			/* prefixes still to list */
	size_t n_pending, cap_pending;
	uint64_t *tokens;		/* continuation tokens seen for this prefix */
	size_t n_tokens, cap_tokens;
	unsigned list_pages;		/* the WSYNC_STORE_LIST_* bounds (store.h) */
	size_t n_prefixes_seen;
	uint64_t list_xml, key_bytes;
	char *dest;			/* get to file: the final path (copied: the pool uses it) */
	bool check_xxh3;
	uint8_t xxh3[16];
	unsigned pool_busy;		/* thread-pool jobs not yet returned */
	uv_work_t work;
	struct s3_op *prev, *next;
};

static void op_end(struct s3_op *op);
static void xfer_done(struct wsync_http_req *h);
static int xfer_prepare(struct wsync_http_req *h, const char *redirect_url);

/* --- helpers ----------------------------------------------------------------------- */

static char *join3(const char *a, const char *b, const char *c)
{
	size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
	char *s = malloc(la + lb + lc + 1);

	if (s) {
		memcpy(s, a, la);
		memcpy(s + la, b, lb);
		memcpy(s + la + lb, c, lc + 1);
	}
	return s;
}

/* Record the op's first failure. */
__attribute__((format(printf, 3, 4)))
static int op_fail(struct s3_op *op, int err, const char *fmt, ...)
{
	va_list ap;
	char msg[WSYNC_ERROR_MSG_MAX];

	if (op->err)
		return op->err;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	op->err = err;
	wsync_error_set(&op->error, err, "%s", msg);
	return err;
}

static const char *op_name(const struct s3_op *op)
{
	static const char *const names[] = {
		[WSYNC_STORE_PUT] = "put", [WSYNC_STORE_GET] = "get",
		[WSYNC_STORE_HEAD] = "head", [WSYNC_STORE_LIST] = "list",
		[WSYNC_STORE_DELETE] = "delete",
	};
	return names[op->req->op];
}

/* The message for a transfer that ended badly, and its errno. */
static int xfer_error(struct s3_xfer *x)
{
	struct s3_op *op = x->op;
	struct wsync_http_req *h = &x->h;
	const char *what = op->req->key[0] ? op->req->key : "(bucket)";
	char code[64], msg[256], rid[160] = "";
	char tries[48] = "";

	if (h->attempts > 1)
		snprintf(tries, sizeof(tries), " after %u attempts", h->attempts);
	if (h->err < 0)
		return op_fail(op, h->err, "%s %s: %s%s", op_name(op), what, h->errmsg, tries);
	if (!wsync_s3_parse_error(h->resp.data, h->resp.len, code, sizeof(code), msg,
				  sizeof(msg))) {
		code[0] = '\0';
		snprintf(msg, sizeof(msg), "HTTP %ld", h->status);
	}
	if (h->hdr.request_id[0])
		snprintf(rid, sizeof(rid), " (request id %s)", h->hdr.request_id);
	switch (h->status) {
	case 404:
		if (strcmp(code, "NoSuchBucket") == 0)
			return op_fail(op, -ENXIO, "%s %s: no such bucket: %s%s", op_name(op),
				       what, wsync_store_describe(op->s3->store), rid);
		if (strcmp(code, "NoSuchUpload") == 0)
			return op_fail(op, -EIO, "%s %s: the multipart upload vanished%s",
				       op_name(op), what, rid);
		return op_fail(op, -ENOENT, "no such object: %s", what);
	case 401:
	case 403:
		return op_fail(op, -EACCES,
			       "%s %s: access denied (%s%s%s): check the credentials (%s)%s",
			       op_name(op), what, code, code[0] ? ": " : "", msg,
			       op->s3->cred.access_key ? op->s3->cred.source : "none: anonymous",
			       rid);
	case 416:
		return op_fail(op, -EINVAL, "%s %s: byte range not satisfiable%s", op_name(op),
			       what, rid);
	default:
		if (h->status >= 500 || h->status == 408 || h->status == 429)
			return op_fail(op, -EAGAIN, "%s %s: the store answered %ld %s%s%s%s",
				       op_name(op), what, h->status, code, code[0] ? ": " : "",
				       msg, tries);
		return op_fail(op, h->status >= 400 && h->status < 500 ? -EINVAL : -EPROTO,
			       "%s %s: the store answered %ld %s%s%s%s", op_name(op), what,
			       h->status, code, code[0] ? ": " : "", msg, rid);
	}
}

static bool ok_status(long s)
{
	return s >= 200 && s < 300;
}

/* --- transfers ------------------------------------------------------------------ */

static struct s3_xfer *xfer_new(struct s3_op *op, const char *method, const char *key)
{
	struct s3_xfer *x = calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->op = op;
	x->method = method;
	if (key && !(x->key = join3(op->s3->prefix, key, ""))) {
		free(x);
		return NULL;
	}
	x->h.method = method;
	x->h.prepare = xfer_prepare;
	x->h.done = xfer_done;
	x->h.data = x;
	x->h.body = WSYNC_HTTP_BODY_NONE;
	x->h.body_fd = -1;
	x->h.sink = WSYNC_HTTP_SINK_BUF;
	x->h.sink_max = ANSWER_MAX;
	x->h.sink_fd = -1;
	memcpy(x->payload_hash, WSYNC_SHA256_EMPTY, sizeof(x->payload_hash));
	x->next = op->xfers;
	op->xfers = x;
	op->n_xfers++;
	return x;
}

static int xfer_query(struct s3_xfer *x, const char *name, const char *value)
{
	char *v = strdup(value ? value : "");

	if (!v || x->n_query == 4) {
		free(v);
		return -ENOMEM;
	}
	x->query_buf[x->n_query] = v;
	x->query[x->n_query].name = name;
	x->query[x->n_query].value = v;
	x->n_query++;
	return 0;
}

static void xfer_free(struct s3_xfer *x)
{
	struct s3_op *op = x->op;

	for (struct s3_xfer **p = &op->xfers; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			break;
		}
	op->n_xfers--;
	wsync_http_req_release(&x->h);
	free(x->h.url);
	for (size_t i = 0; i < x->n_query; i++)
		free(x->query_buf[i]);
	free(x->key);
	free(x->body);
	free(x);
}

static void xfer_send(struct s3_xfer *x)
{
	wsync_http_submit(x->op->s3->http, &x->h);
}

/* Sign and address the next attempt (http.h: prepare). */
static int xfer_prepare(struct wsync_http_req *h, const char *redirect_url)
{
	struct s3_xfer *x = h->data;
	struct s3 *s3 = x->op->s3;
	struct wsync_sigv4_header hdr[3];
	struct wsync_sigv4_signed sig = { 0 };
	struct wsync_error err;
	struct curl_slist *list = NULL;
	char line[256];
	size_t n = 0;
	int r = 0;

	if (redirect_url) {
		/* Another host (a CDN edge): it gets no credentials, only
		 * what shapes the answer. */
		if (x->range[0]) {
			snprintf(line, sizeof(line), "Range: %s", x->range);
			if (!(list = curl_slist_append(list, line)))
				return -ENOMEM;
		}
		h->headers = list;
		return 0;
	}
	char *path = join3(s3->base, x->key ? "/" : "", x->key ? x->key : "");

	if (!path)
		return -ENOMEM;
	if (!s3->base[0] && !x->key) {
		free(path);
		path = strdup("/");
		if (!path)
			return -ENOMEM;
	}
	hdr[n++] = (struct wsync_sigv4_header){ "host", s3->host };
	if (x->range[0])
		hdr[n++] = (struct wsync_sigv4_header){ "range", x->range };
	if (x->cond_name[0])
		hdr[n++] = (struct wsync_sigv4_header){ x->cond_name, x->cond_value };

	if (s3->cred.access_key) {
		struct wsync_sigv4_request sr = {
			.method = x->method,
			.path = path,
			.query = x->query,
			.n_query = x->n_query,
			.headers = hdr,
			.n_headers = n,
			.payload_hash = x->payload_hash,
			.content_sha256_header = true,
			.region = s3->region,
			.service = "s3",
			.when = time(NULL),
			.access_key = s3->cred.access_key,
			.secret_key = s3->cred.secret_key,
			.session_token = s3->cred.session_token,
		};

		r = wsync_sigv4_sign(&sr, &sig, &err);
		if (r < 0) {
			snprintf(h->errmsg, sizeof(h->errmsg), "signing: %s", wsync_error_str(&err));
			goto out;
		}
	} else {
		/* Anonymous: a public bucket.  Same encoding, no signature. */
		r = wsync_sigv4_uri_encode(path, true, &sig.canonical_uri);
		if (r >= 0)
			r = wsync_sigv4_canonical_query(x->query, x->n_query, &sig.canonical_query);
		if (r < 0)
			goto out;
	}
	free(h->url);
	h->url = malloc(strlen(s3->origin) + strlen(sig.canonical_uri) +
			strlen(sig.canonical_query) + 2);
	if (!h->url) {
		r = -ENOMEM;
		goto out;
	}
	sprintf(h->url, "%s%s%s%s", s3->origin, sig.canonical_uri,
		sig.canonical_query[0] ? "?" : "", sig.canonical_query);

	for (size_t i = 0; i < n && r >= 0; i++) {
		snprintf(line, sizeof(line), "%s: %s", hdr[i].name, hdr[i].value);
		struct curl_slist *l = curl_slist_append(list, line);

		if (!l)
			r = -ENOMEM;
		else
			list = l;
	}
	for (size_t i = 0; sig.send_headers[i] && r >= 0; i++) {
		struct curl_slist *l = curl_slist_append(list, sig.send_headers[i]);

		if (!l)
			r = -ENOMEM;
		else
			list = l;
	}
	if (r >= 0 && h->body != WSYNC_HTTP_BODY_NONE) {
		struct curl_slist *l = curl_slist_append(list, x->body ?
							 "Content-Type: application/xml" :
							 "Content-Type: application/octet-stream");
		if (!l)
			r = -ENOMEM;
		else
			list = l;
	}
out:
	if (r < 0)
		curl_slist_free_all(list);
	else
		h->headers = list;
	wsync_sigv4_signed_free(&sig);
	free(path);
	return r;
}

/* --- hashing bodies on the thread pool ------------------------------------------ */

static void hash_work(uv_work_t *w)
{
	struct s3_xfer *x = w->data;

	if (x->h.body == WSYNC_HTTP_BODY_FD) {
		if (wsync_sha256_fd_hex(x->h.body_fd, x->h.body_offset, x->h.body_len,
					x->payload_hash, &x->werr) < 0 && !x->werr.code)
			x->werr.code = -EIO;
	} else if (wsync_sha256_hex(x->h.body_buf, x->h.body_len, x->payload_hash) < 0) {
		wsync_error_set(&x->werr, -EIO, "SHA-256 failed");
	}
}

static void op_orphan_check(struct s3_op *op);
static void put_abort(struct s3_op *op);

static void hash_done(uv_work_t *w, int status)
{
	struct s3_xfer *x = w->data;
	struct s3_op *op = x->op;

	x->hashing = false;
	op->pool_busy--;
	if (!op->s3) {			/* the store went away meanwhile */
		xfer_free(x);
		op_orphan_check(op);
		return;
	}
	if (status < 0 || x->werr.code < 0 || op->err) {
		if (!op->err)
			op_fail(op, status < 0 ? status : x->werr.code, "put %s: %s", op->req->key,
				status < 0 ? uv_strerror(status) : wsync_error_str(&x->werr));
		xfer_free(x);
		put_abort(op);
		return;
	}
	xfer_send(x);
}

/*
 * Send x once its body's SHA-256 is known.  A file body is hashed on the
 * thread pool; a buffer (manifests, small objects) right here, because the
 * caller's memory may be gone by the time a pool job returns from a
 * cancelled request.
 */
static int xfer_hash_then_send(struct s3_xfer *x)
{
	if (x->h.body == WSYNC_HTTP_BODY_BUF) {
		if (wsync_sha256_hex(x->h.body_buf, x->h.body_len, x->payload_hash) < 0)
			return -EIO;
		xfer_send(x);
		return 0;
	}
	x->work.data = x;
	x->hashing = true;
	int r = uv_queue_work(x->op->s3->store->loop, &x->work, hash_work, hash_done);

	if (r < 0)
		x->hashing = false;
	else
		x->op->pool_busy++;
	return r;
}

/* --- put ---------------------------------------------------------------------------- */

static int put_single(struct s3_op *op)
{
	struct wsync_store_req *req = op->req;
	struct s3_xfer *x = xfer_new(op, "PUT", req->key);

	if (!x)
		return -ENOMEM;
	x->h.body = op->fd >= 0 ? WSYNC_HTTP_BODY_FD : WSYNC_HTTP_BODY_BUF;
	x->h.body_fd = op->fd;
	x->h.body_buf = req->buf;
	x->h.body_offset = op->fd >= 0 ? op->base : 0;
	x->h.body_len = op->size;
	/* A condition rides in the header GET's If-None-Match does (signed
	 * with the rest); store.c keeps an ETag within cond_value. */
	if (req->put_if_absent) {
		snprintf(x->cond_name, sizeof(x->cond_name), "if-none-match");
		snprintf(x->cond_value, sizeof(x->cond_value), "*");
	} else if (req->put_if_match) {
		snprintf(x->cond_name, sizeof(x->cond_name), "if-match");
		snprintf(x->cond_value, sizeof(x->cond_value), "%s", req->put_if_match);
	}
	x->h.retry_conflict = x->cond_name[0] != '\0';
	return xfer_hash_then_send(x);
}

/*
 * A conditional PUT's answers of its own: 412 the condition does not
 * hold (and for If-Match AWS's 404 NoSuchKey: the object is gone), 501
 * the store refuses conditions (OpenStack Swift's s3api), 409 a write
 * racing this one on the key still after the retries.  Records the
 * failure and returns true; false for any other answer (xfer_error's).
 * A 412 after several attempts may be this put's own first attempt,
 * landed but unanswered: the message says so.
 */
static bool put_cond_error(struct s3_xfer *x)
{
	struct s3_op *op = x->op;
	struct wsync_store_req *req = op->req;
	struct wsync_http_req *h = &x->h;
	char code[64] = "", msg[256];
	const char *retried = h->attempts > 1 ? " (after a retry: perhaps this put's own "
				"first attempt, which landed unanswered)" : "";

	if (!x->cond_name[0] || h->err < 0)
		return false;
	(void)wsync_s3_parse_error(h->resp.data, h->resp.len, code, sizeof(code), msg,
				   sizeof(msg));
	switch (h->status) {
	case 412:
		if (req->put_if_absent)
			op_fail(op, -EEXIST, "put %s: an object has this key (If-None-Match: *)%s",
				req->key, retried);
		else
			op_fail(op, -ESTALE, "put %s: the object is no longer %s (If-Match)%s",
				req->key, req->put_if_match, retried);
		return true;
	case 404:
		if (!req->put_if_match || strcmp(code, "NoSuchBucket") == 0)
			return false;
		op_fail(op, -ESTALE, "put %s: no such object (If-Match %s)%s", req->key,
			req->put_if_match, retried);
		return true;
	case 501:
		op_fail(op, -ENOTSUP, "put %s: %s does not support conditional writes "
			"(HTTP 501%s%s)", req->key, wsync_store_describe(op->s3->store),
			code[0] ? " " : "", code);
		return true;
	case 409:
		op_fail(op, -EAGAIN, "put %s: another write to the key conflicted with this "
			"conditional one (HTTP 409%s%s) after %u attempts", req->key,
			code[0] ? " " : "", code, h->attempts);
		return true;
	default:
		return false;
	}
}

static int put_part(struct s3_op *op)
{
	uint64_t ps = op->s3->store->opt.part_size;
	unsigned i = op->next_part++;
	struct s3_xfer *x = xfer_new(op, "PUT", op->req->key);
	char num[16];
	int r;

	if (!x)
		return -ENOMEM;
	x->part = i + 1;
	x->offset = (uint64_t)i * ps;
	x->len = op->size - x->offset < ps ? op->size - x->offset : ps;
	snprintf(num, sizeof(num), "%u", x->part);
	r = xfer_query(x, "partNumber", num);
	if (r >= 0)
		r = xfer_query(x, "uploadId", op->upload_id);
	if (r < 0)
		return r;
	x->h.body = op->fd >= 0 ? WSYNC_HTTP_BODY_FD : WSYNC_HTTP_BODY_BUF;
	x->h.body_fd = op->fd;
	x->h.body_buf = op->fd >= 0 ? NULL : (const char *)op->req->buf + x->offset;
	x->h.body_offset = op->fd >= 0 ? op->base + x->offset : 0;
	x->h.body_len = x->len;
	return xfer_hash_then_send(x);
}

/* Keep as many parts in flight as the store allows. */
static int put_parts(struct s3_op *op)
{
	unsigned window = op->s3->store->opt.max_concurrency;
	int r = 0;

	while (r >= 0 && op->next_part < op->n_parts && op->n_xfers < window)
		r = put_part(op);
	return r;
}

static int put_complete(struct s3_op *op)
{
	struct wsync_buf b = { 0 };
	struct s3_xfer *x;
	char num[64];
	int r = wsync_buf_append(&b, "<CompleteMultipartUpload>", 25);

	for (unsigned i = 0; i < op->n_parts && r >= 0; i++) {
		snprintf(num, sizeof(num), "<Part><PartNumber>%u</PartNumber><ETag>", i + 1);
		r = wsync_buf_append(&b, num, strlen(num));
		if (r >= 0)
			r = wsync_s3_xml_escape(&b, op->etags[i]);
		if (r >= 0)
			r = wsync_buf_append(&b, "</ETag></Part>", 14);
	}
	if (r >= 0)
		r = wsync_buf_append(&b, "</CompleteMultipartUpload>", 27);
	if (r >= 0)
		r = wsync_buf_put_u8(&b, 0);
	if (r < 0 || !(x = xfer_new(op, "POST", op->req->key))) {
		wsync_buf_free(&b);
		return r < 0 ? r : -ENOMEM;
	}
	x->body = (char *)b.data;
	x->part = 0;
	r = xfer_query(x, "uploadId", op->upload_id);
	if (r < 0)
		return r;
	x->h.body = WSYNC_HTTP_BODY_BUF;
	x->h.body_buf = x->body;
	x->h.body_len = b.len - 1;
	return xfer_hash_then_send(x);
}

/*
 * After a failure: wait for the transfers in flight, then DELETE
 * ?uploadId so no orphaned parts stay stored (and billed), then end.
 * A single PUT has nothing to abort.
 */
static void put_abort(struct s3_op *op)
{
	struct s3_xfer *x;

	op->state = OP_ABORTING;
	if (op->n_xfers)
		return;
	if (!op->upload_id) {
		op_end(op);
		return;
	}
	x = xfer_new(op, "DELETE", op->req->key);
	if (!x || xfer_query(x, "uploadId", op->upload_id) < 0) {
		if (x)
			xfer_free(x);
		op_end(op);
		return;
	}
	free(op->upload_id);
	op->upload_id = NULL;		/* one abort only */
	x->part = UINT32_MAX;
	xfer_send(x);
}

static void put_done(struct s3_xfer *x)
{
	struct s3_op *op = x->op;
	struct wsync_http_req *h = &x->h;
	struct wsync_error err;
	char code[64], msg[256];

	if (op->state == OP_ABORTING) {
		xfer_free(x);
		put_abort(op);
		return;
	}
	if (h->err < 0 || !ok_status(h->status)) {
		if (!put_cond_error(x))
			xfer_error(x);
		xfer_free(x);
		put_abort(op);
		return;
	}
	if (!op->n_parts) {			/* single PUT: its ETag is the object's */
		free(op->etag);
		op->etag = strdup(h->hdr.etag);
		xfer_free(x);
		op_end(op);
		return;
	}
	if (!op->upload_id) {			/* INIT answered */
		if (wsync_s3_parse_upload_id(h->resp.data, h->resp.len, &op->upload_id, &err) < 0)
			op_fail(op, -EPROTO, "put %s: starting the multipart upload: %s",
				op->req->key, wsync_error_str(&err));
		xfer_free(x);
		if (op->err || put_parts(op) < 0) {
			op_fail(op, -ENOMEM, "put %s: out of memory", op->req->key);
			put_abort(op);
		}
		return;
	}
	if (x->part == 0) {			/* COMPLETE answered: 200 may still be an error */
		if (wsync_s3_parse_error(h->resp.data, h->resp.len, code, sizeof(code), msg,
					 sizeof(msg))) {
			op_fail(op, -EIO, "put %s: completing the upload: %s: %s", op->req->key,
				code, msg);
			xfer_free(x);
			put_abort(op);
			return;
		}
		free(op->upload_id);
		op->upload_id = NULL;
		xfer_free(x);
		op_end(op);
		return;
	}
	if (!h->hdr.etag[0]) {
		op_fail(op, -EPROTO, "put %s: part %u answered without an ETag", op->req->key,
			x->part);
		xfer_free(x);
		put_abort(op);
		return;
	}
	op->etags[x->part - 1] = strdup(h->hdr.etag);
	op->parts_done++;
	if (!op->etags[x->part - 1]) {
		op_fail(op, -ENOMEM, "put %s: out of memory", op->req->key);
		xfer_free(x);
		put_abort(op);
		return;
	}
	xfer_free(x);
	if (op->parts_done == op->n_parts) {
		if (put_complete(op) < 0) {
			op_fail(op, -ENOMEM, "put %s: out of memory", op->req->key);
			put_abort(op);
		}
	} else if (put_parts(op) < 0) {
		op_fail(op, -ENOMEM, "put %s: out of memory", op->req->key);
		put_abort(op);
	}
}

static int put_start(struct s3_op *op)
{
	struct wsync_store_req *req = op->req;
	uint64_t ps = op->s3->store->opt.part_size;
	struct stat st;

	if (req->path) {
		op->fd = open(req->path, O_RDONLY | O_CLOEXEC);
		if (op->fd < 0)
			return wsync_store_req_fail(req, -errno, "put %s: cannot open %s: %m",
						    req->key, req->path);
		if (fstat(op->fd, &st) < 0 || !S_ISREG(st.st_mode))
			return wsync_store_req_fail(req, -EINVAL, "put %s: %s is not a regular file",
						    req->key, req->path);
		op->size = (uint64_t)st.st_size;
		if (req->put_range && req->put_offset + req->put_length > op->size)
			return wsync_store_req_fail(req, -EIO, "put %s: %s shrank while it was "
						    "read", req->key, req->path);
		if (req->put_range) {
			op->base = req->put_offset;
			op->size = req->put_length;
		}
	} else {
		op->size = req->buf_len;
	}
	if (op->size <= ps)
		return put_single(op);
	if ((op->size + ps - 1) / ps > PARTS_MAX)
		return wsync_store_req_fail(req, -EFBIG,
					    "put %s: %llu bytes need more than %d parts of %llu bytes: "
					    "raise part_size", req->key,
					    (unsigned long long)op->size, PARTS_MAX,
					    (unsigned long long)ps);
	op->n_parts = (unsigned)((op->size + ps - 1) / ps);
	op->etags = calloc(op->n_parts, sizeof(*op->etags));
	struct s3_xfer *x = op->etags ? xfer_new(op, "POST", req->key) : NULL;

	if (!x || xfer_query(x, "uploads", "") < 0)
		return -ENOMEM;
	xfer_send(x);
	return 0;
}

/* --- get ---------------------------------------------------------------------------- */

/*
 * What a get takes is bounded (store.h) before anything is queued or
 * written, and while bytes arrive: each transfer's sink_max is what its
 * body may be, so http.c stops a body that goes on the moment it does
 * (-EFBIG, which get_done() turns into the caller's error).  A ranged
 * download keeps at most max_concurrency ranges queued, and its first
 * failure cancels the others.
 */

/* At most how many bytes the get may return, and whether that bound is
 * max_size (exceeding it is -EFBIG) or what the caller expects (-EIO). */
static uint64_t get_cap(const struct s3_op *op, uint64_t len, bool *is_max)
{
	const struct wsync_store_get_options *g = &op->req->get;
	uint64_t cap = g->max_size;

	*is_max = true;
	if (g->expect_size >= 0 && (uint64_t)g->expect_size < cap) {
		cap = (uint64_t)g->expect_size;
		*is_max = false;
	}
	if (len && len < cap) {
		cap = len;
		*is_max = false;
	}
	return cap;
}

/* Queue a GET of [off, off + len) (len 0: to the end). */
static int get_range(struct s3_op *op, uint64_t off, uint64_t len, bool first)
{
	struct wsync_store_req *req = op->req;
	struct s3_xfer *x = xfer_new(op, "GET", req->key);

	if (!x)
		return -ENOMEM;
	x->offset = off;
	x->len = len;
	x->part = first ? 0 : 1;
	if (len)
		snprintf(x->range, sizeof(x->range), "bytes=%llu-%llu",
			 (unsigned long long)off, (unsigned long long)(off + len - 1));
	else if (off)
		snprintf(x->range, sizeof(x->range), "bytes=%llu-", (unsigned long long)off);
	if (first && req->if_none_match) {
		snprintf(x->cond_name, sizeof(x->cond_name), "if-none-match");
		snprintf(x->cond_value, sizeof(x->cond_value), "%s", req->if_none_match);
	} else if ((!first || op->probed) && op->etag && op->etag[0]) {
		/* Every range of one object from the same version of it. */
		snprintf(x->cond_name, sizeof(x->cond_name), "if-match");
		snprintf(x->cond_value, sizeof(x->cond_value), "%s", op->etag);
	}
	if (op->probed) {
		/* HEAD's size is already checked against the caller's bounds */
		x->h.sink_max = len ? len : op->size;
		x->cap_is_max = false;
	} else {
		x->h.sink_max = get_cap(op, len, &x->cap_is_max);
	}
	if (op->fd >= 0) {
		x->h.sink = WSYNC_HTTP_SINK_FD;
		x->h.sink_fd = op->fd;
		/* Ranges land at their place in the temp file, which holds the
		 * bytes from the caller's offset on. */
		x->h.sink_offset = off - req->get.offset;
	} else if (len >= RANGE_KEPT_MIN && len <= WSYNC_STORE_RANGE_KEPT &&
		   x->h.sink_max <= len && (x->h.resp.data = wsync_store_range_buf(len, 0))) {
		/* a range into memory: into one of the buffers the store
		 * keeps, not a fresh one grown as the bytes come (their pages
		 * faulted in anew for every range of a GB download) */
		x->h.resp.cap = (size_t)len;
		x->h.resp_free = wsync_store_data_free;
	}
	xfer_send(x);
	return 0;
}

/* Keep a probed ranged download's window full: ranges are queued as the
 * ones before them end, never all at once. */
static int get_more(struct s3_op *op)
{
	uint64_t ps = op->s3->store->opt.part_size;
	unsigned window = op->s3->store->opt.max_concurrency;

	while (!op->err && op->next_off < op->size && op->n_xfers < window) {
		uint64_t len = op->size - op->next_off < ps ? op->size - op->next_off : ps;

		if (get_range(op, op->next_off, len, op->next_off == 0) < 0)
			return -ENOMEM;
		op->next_off += len;
	}
	return 0;
}

/* After a failure: the transfers still out end now (-ECANCELED). */
static void get_cancel_rest(struct s3_op *op)
{
	for (struct s3_xfer *x = op->xfers; x; x = x->next)
		wsync_http_cancel(op->s3->http, &x->h);
}

static void get_finish_work(uv_work_t *w)
{
	/* Runs on the pool: it may outlive req (a cancelled request), so it
	 * uses the op's own copies only. */
	struct s3_op *op = w->data;
	struct wsync_hash128 h;
	struct wsync_error err = { 0 };
	uint64_t n;
	int r = wsync_atomic_sync(&op->out, &err);

	if (r < 0) {
		op_fail(op, r, "get: %s", wsync_error_str(&err));
		return;
	}
	if (op->check_xxh3) {
		if (wsync_hash_fd(op->fd, op->dest, &h, &n, &op->error) < 0) {
			op->err = op->error.code;
			return;
		}
		if (memcmp(h.b, op->xxh3, 16) != 0) {
			op_fail(op, -EIO, "get %s: content hash mismatch: the object is not what "
				"was expected", op->dest);
			return;
		}
	}
	/* closes the temp: op->fd is not used after this */
	r = wsync_atomic_commit(&op->out, &err);
	if (r < 0)
		op_fail(op, r, "get: %s", wsync_error_str(&err));
}

static void get_finish_done(uv_work_t *w, int status)
{
	struct s3_op *op = w->data;

	op->pool_busy--;
	if (!op->s3) {
		op_orphan_check(op);
		return;
	}
	if (status < 0)
		op_fail(op, status, "get %s: %s", op->req->key, uv_strerror(status));
	op_end(op);
}

/* All bytes are in: check the size, then verify and rename off the loop. */
static void get_complete(struct s3_op *op)
{
	struct wsync_store_req *req = op->req;

	if (req->get.expect_size >= 0 && op->got != (uint64_t)req->get.expect_size) {
		op_fail(op, -EIO, "get %s: %llu bytes, expected %lld", req->key,
			(unsigned long long)op->got, (long long)req->get.expect_size);
	} else if (!req->get.length && op->got + req->get.offset != op->size) {
		op_fail(op, -EIO, "get %s: %llu bytes of %llu", req->key,
			(unsigned long long)op->got, (unsigned long long)op->size);
	} else if (op->fd < 0 && req->get.expect_xxh3) {
		struct wsync_hash128 h;

		wsync_hash_mem(op->req->res.data, op->req->res.data_len, &h);
		if (memcmp(h.b, op->xxh3, 16) != 0)
			op_fail(op, -EIO, "get %s: content hash mismatch: the object is not what "
				"was expected", req->key);
	}
	if (op->err || op->fd < 0) {
		op_end(op);
		return;
	}
	op->state = OP_FINISHING;
	op->work.data = op;
	int r = uv_queue_work(op->s3->store->loop, &op->work, get_finish_work, get_finish_done);

	if (r >= 0)
		op->pool_busy++;
	if (r < 0) {
		op_fail(op, r, "get %s: %s", req->key, uv_strerror(r));
		op_end(op);
	}
}

static void get_probed(struct s3_xfer *x);

/* A 304 to a conditional get: the object is what the caller has; the
 * op ends with not_modified and the ETag it answered for. */
static void get_not_modified(struct s3_op *op, struct s3_xfer *x)
{
	const char *etag = x->h.hdr.etag[0] ? x->h.hdr.etag : op->req->if_none_match;

	op->req->res.not_modified = true;
	free(op->etag);
	op->etag = strdup(etag);
	xfer_free(x);
	op_end(op);
}

/* A 2xx answer to x: is its body what was asked for?  Records the
 * failure in op; total gets the object's size when the answer says it. */
static void get_check_body(struct s3_xfer *x, int64_t *total)
{
	struct s3_op *op = x->op;
	const char *key = op->req->key;
	struct wsync_http_req *h = &x->h;
	struct wsync_http_content_range cr;

	*total = -1;
	if (h->status == 206) {
		uint64_t want;

		if (wsync_http_parse_content_range(h->hdr.content_range, &cr) < 0 ||
		    cr.unsatisfied || cr.total < 0) {
			op_fail(op, -EIO, "get %s: a partial answer with Content-Range \"%s\"",
				key, h->hdr.content_range);
			return;
		}
		if (cr.first != x->offset) {
			op_fail(op, -EIO, "get %s: the store sent bytes from %llu where %llu "
				"were asked for", key, (unsigned long long)cr.first,
				(unsigned long long)x->offset);
			return;
		}
		/* first <= last < total: the offset is inside the object */
		want = (uint64_t)cr.total - x->offset;
		if (x->len && x->len < want)
			want = x->len;
		if (cr.last - cr.first + 1 != want || h->received != want) {
			op_fail(op, -EIO, "get %s: range of %llu bytes where %llu were due (%s)",
				key, (unsigned long long)h->received, (unsigned long long)want,
				h->hdr.content_range);
			return;
		}
		if (op->probed && (uint64_t)cr.total != op->size) {
			op_fail(op, -EIO, "get %s: the object has %lld bytes now, HEAD said %llu",
				key, (long long)cr.total, (unsigned long long)op->size);
			return;
		}
		*total = cr.total;
	} else if (x->offset > 0 || x->len) {
		op_fail(op, -EPROTO, "get %s: the store ignored the Range header", key);
	} else if (h->hdr.content_length >= 0 && (uint64_t)h->hdr.content_length != h->received) {
		op_fail(op, -EIO, "get %s: body of %llu bytes, Content-Length said %lld", key,
			(unsigned long long)h->received, (long long)h->hdr.content_length);
	} else {
		*total = (int64_t)h->received;
	}
}

static void get_done(struct s3_xfer *x)
{
	struct s3_op *op = x->op;
	struct wsync_store_req *req = op->req;
	struct wsync_http_req *h = &x->h;
	bool first = x->part == 0;
	int64_t total = -1;

	if (op->err) {
		xfer_free(x);
		if (!op->n_xfers)
			op_end(op);
		return;
	}
	if (x->part == 2) {
		get_probed(x);
		return;
	}
	if (first && h->err == 0 && h->status == 304) {
		get_not_modified(op, x);
		return;
	}
	if (h->err == -EFBIG) {
		/* stopped by its sink_max: more than it may be */
		if (h->hdr.status == 200 && (x->offset > 0 || x->len))
			op_fail(op, -EPROTO, "get %s: the store ignored the Range header",
				req->key);
		else
			op_fail(op, x->cap_is_max ? -EFBIG : -EIO, "get %s: %s", req->key,
				h->errmsg);
	} else if (h->err < 0 || !ok_status(h->status)) {
		if ((!first || op->probed) && h->status == 412)
			op_fail(op, -EAGAIN, "get %s: the object changed during the download",
				req->key);
		else
			xfer_error(x);
	} else {
		get_check_body(x, &total);
	}
	if (!op->err) {
		op->got += h->received;
		if (first && !op->probed) {
			free(op->etag);
			op->etag = strdup(h->hdr.etag);
			op->mtime = h->hdr.last_modified[0] ?
				    (int64_t)curl_getdate(h->hdr.last_modified, NULL) : 0;
			op->size = total >= 0 ? (uint64_t)total : h->received;
			if (!op->etag)
				op_fail(op, -ENOMEM, "get: out of memory");
			if (op->fd < 0) {
				req->res.data = h->resp.data;
				req->res.data_len = h->resp.len;
				h->resp.data = NULL;
				h->resp.len = h->resp.cap = 0;
			}
		}
	}
	xfer_free(x);
	if (!op->err && op->probed && get_more(op) < 0)
		op_fail(op, -ENOMEM, "get: out of memory");
	if (op->err)
		get_cancel_rest(op);
	if (op->n_xfers)
		return;
	if (op->err)
		op_end(op);
	else
		get_complete(op);
}

/* The HEAD before a whole-object get into a file has answered. */
static void get_probed(struct s3_xfer *x)
{
	struct s3_op *op = x->op;
	struct wsync_store_req *req = op->req;
	struct wsync_http_req *h = &x->h;
	uint64_t ps = op->s3->store->opt.part_size;

	if (h->err == 0 && h->status == 304) {
		get_not_modified(op, x);
		return;
	}
	if (h->err == 0 && h->status >= 400 && h->status < 500) {
		/* A HEAD answer has no error document: ask with a plain GET,
		 * whose answer says which (NoSuchBucket or NoSuchKey,
		 * InvalidAccessKeyId or SignatureDoesNotMatch). */
		xfer_free(x);
		if (get_range(op, 0, 0, true) < 0) {
			op_fail(op, -ENOMEM, "get: out of memory");
			op_end(op);
		}
		return;
	}
	if (h->err < 0 || !ok_status(h->status) || h->hdr.content_length < 0) {
		if (h->err == 0 && ok_status(h->status))
			op_fail(op, -EPROTO, "get %s: HEAD answered without a Content-Length",
				req->key);
		else
			xfer_error(x);
		xfer_free(x);
		op_end(op);
		return;
	}
	op->probed = true;
	op->size = (uint64_t)h->hdr.content_length;
	free(op->etag);
	op->etag = strdup(h->hdr.etag);
	op->mtime = h->hdr.last_modified[0] ?
		    (int64_t)curl_getdate(h->hdr.last_modified, NULL) : 0;
	xfer_free(x);
	/* The size the store claims is checked before anything is queued:
	 * a HEAD that lies costs one request. */
	if (!op->etag) {
		op_fail(op, -ENOMEM, "get: out of memory");
	} else if (req->get.expect_size >= 0 && op->size != (uint64_t)req->get.expect_size) {
		op_fail(op, -EIO, "get %s: the store says %llu bytes, expected %lld", req->key,
			(unsigned long long)op->size, (long long)req->get.expect_size);
	} else if (op->size > req->get.max_size) {
		op_fail(op, -EFBIG, "get %s: the store says %llu bytes, more than the %llu "
			"this get accepts", req->key, (unsigned long long)op->size,
			(unsigned long long)req->get.max_size);
	} else if (op->size <= ps) {
		/* One plain GET (an empty object can't take a Range). */
		op->next_off = op->size;
		if (get_range(op, 0, 0, true) < 0)
			op_fail(op, -ENOMEM, "get: out of memory");
	} else if (get_more(op) < 0) {
		op_fail(op, -ENOMEM, "get: out of memory");
		get_cancel_rest(op);
	}
	if (!op->n_xfers)
		op_end(op);
}

static int get_start(struct s3_op *op)
{
	struct wsync_store_req *req = op->req;
	uint64_t len = req->get.length;

	if (req->get.expect_xxh3) {
		op->check_xxh3 = true;
		memcpy(op->xxh3, req->get.expect_xxh3, 16);
	}
	if (req->path) {
		struct wsync_error err = { 0 };
		int r;

		if (!(op->dest = strdup(req->path)))
			return -ENOMEM;
		/* 0600, the mode the downloads always had */
		r = wsync_atomic_begin(&op->out, AT_FDCWD, req->path, ".wsync-tmp.XXXXXX", 0600, 0,
				       &err);
		if (r < 0)
			return wsync_store_req_fail(req, r, "get %s: cannot create a file beside "
						    "%s: %s", req->key, req->path, strerror(-r));
		op->fd = op->out.fd;
		if (!len && !req->get.offset) {
			/* A whole object into a file: HEAD first for its size
			 * and ETag, then one GET or parallel ranges. */
			struct s3_xfer *x = xfer_new(op, "HEAD", req->key);

			if (!x)
				return -ENOMEM;
			x->part = 2;
			if (req->if_none_match) {
				snprintf(x->cond_name, sizeof(x->cond_name), "if-none-match");
				snprintf(x->cond_value, sizeof(x->cond_value), "%s",
					 req->if_none_match);
			}
			xfer_send(x);
			return 0;
		}
	}
	return get_range(op, req->get.offset, len, true) < 0 ? -ENOMEM : 0;
}

/* --- head, delete ----------------------------------------------------------------- */

static void simple_done(struct s3_xfer *x)
{
	struct s3_op *op = x->op;
	struct wsync_http_req *h = &x->h;

	if (op->req->op == WSYNC_STORE_DELETE && h->err == 0 && h->status == 404) {
		/* Deleting what is not there succeeds, as on S3. */
	} else if (h->err < 0 || !ok_status(h->status)) {
		xfer_error(x);
	} else if (op->req->op == WSYNC_STORE_HEAD) {
		op->size = h->hdr.content_length >= 0 ? (uint64_t)h->hdr.content_length : 0;
		free(op->etag);
		op->etag = strdup(h->hdr.etag);
		op->mtime = h->hdr.last_modified[0] ? (int64_t)curl_getdate(h->hdr.last_modified, NULL) : 0;
	}
	xfer_free(x);
	op_end(op);
}

/* --- list ---------------------------------------------------------------------------- */

static int list_page(struct s3_op *op, const char *prefix, const char *token)
{
	struct s3_xfer *x = xfer_new(op, "GET", NULL);
	char *full;
	int r;

	if (!x)
		return -ENOMEM;
	full = join3(op->s3->prefix, prefix, "");
	if (!full)
		return -ENOMEM;
	r = xfer_query(x, "list-type", "2");
	if (r >= 0)
		r = xfer_query(x, "prefix", full);
	if (r >= 0)
		r = xfer_query(x, "delimiter", "/");
	if (r >= 0 && token)
		r = xfer_query(x, "continuation-token", token);
	free(full);
	if (r < 0)
		return r;
	xfer_send(x);
	return 0;
}

static int list_push(struct s3_op *op, char *s)
{
	if (WSYNC_GROW(op->pending, op->cap_pending, op->n_pending, 16) < 0)
		return -ENOMEM;
	op->pending[op->n_pending++] = s;
	return 0;
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct wsync_store_entry *)a)->key,
		      ((const struct wsync_store_entry *)b)->key);
}

/* Whether token was already seen for the prefix being listed; records it.
 * 0, -EPROTO (seen), -ENOMEM.  Tokens are kept as 64 bits of their XXH3:
 * a collision can only end a listing early with an error, as a server
 * that wants to can anyway. */
static int list_token_seen(struct s3_op *op, const char *token)
{
	struct wsync_hash128 hh;
	uint64_t v;

	wsync_hash_mem(token, strlen(token), &hh);
	memcpy(&v, hh.b, sizeof(v));
	for (size_t i = 0; i < op->n_tokens; i++)
		if (op->tokens[i] == v)
			return -EPROTO;
	if (WSYNC_GROW(op->tokens, op->cap_tokens, op->n_tokens, 16) < 0)
		return -ENOMEM;
	op->tokens[op->n_tokens++] = v;
	return 0;
}

/* Take one page's keys and common prefixes into op.  page_prefix is the
 * full prefix the page was asked for (the store's prefix included). */
static void list_take(struct s3_op *op, struct wsync_s3_list_page *pg, const char *page_prefix)
{
	const char *what = op->req->key[0] ? op->req->key : "(bucket)";
	size_t plen = strlen(op->s3->prefix), pplen = strlen(page_prefix);

	for (size_t i = 0; i < pg->n_entries; i++) {
		struct wsync_store_entry *e = &pg->entries[i];

		if (strncmp(e->key, page_prefix, pplen) != 0)
			continue;	/* not ours: a server ignoring the prefix */
		size_t kb = strlen(e->key) - plen + 1 + (e->etag ? strlen(e->etag) + 1 : 0);

		if (op->n_entries == WSYNC_STORE_LIST_KEYS_MAX) {
			op_fail(op, -E2BIG, "list %s: more than %d keys "
				"(WSYNC_STORE_LIST_KEYS_MAX)", what, WSYNC_STORE_LIST_KEYS_MAX);
			return;
		}
		if (kb > WSYNC_STORE_LIST_KEY_BYTES_MAX - op->key_bytes) {
			op_fail(op, -E2BIG, "list %s: keys and ETags of more than %llu bytes "
				"(WSYNC_STORE_LIST_KEY_BYTES_MAX)", what,
				(unsigned long long)WSYNC_STORE_LIST_KEY_BYTES_MAX);
			return;
		}
		if (WSYNC_GROW(op->entries, op->cap_entries, op->n_entries, 256) < 0) {
			op_fail(op, -ENOMEM, "list %s: out of memory", what);
			return;
		}
		struct wsync_store_entry *d = &op->entries[op->n_entries];

		*d = *e;
		d->key = strdup(e->key + plen);
		if (!d->key) {
			op_fail(op, -ENOMEM, "list %s: out of memory", what);
			return;
		}
		e->etag = NULL;		/* moved */
		op->n_entries++;
		op->key_bytes += kb;
	}
	/* Sub-"directories" are listed in turn, after this prefix's pages.
	 * Only those strictly below the page's prefix: a server sending the
	 * prefix itself or another one back would loop. */
	for (size_t i = 0; i < pg->n_prefixes; i++) {
		const char *cp = pg->prefixes[i];
		size_t cl = strlen(cp);

		if (cl <= pplen || strncmp(cp, page_prefix, pplen) != 0)
			continue;
		if (cl > WSYNC_URL_KEY_MAX) {
			op_fail(op, -EPROTO, "list %s: a common prefix longer than %d bytes, "
				"which no key can be under (\"%.60s...\")", what,
				WSYNC_URL_KEY_MAX, cp);
			return;
		}
		if (++op->n_prefixes_seen > WSYNC_STORE_LIST_PREFIXES_MAX) {
			op_fail(op, -E2BIG, "list %s: more than %d common prefixes "
				"(WSYNC_STORE_LIST_PREFIXES_MAX)", what,
				WSYNC_STORE_LIST_PREFIXES_MAX);
			return;
		}
		char *p = strdup(cp + plen);

		if (!p || list_push(op, p) < 0) {
			free(p);
			op_fail(op, -ENOMEM, "list %s: out of memory", what);
			return;
		}
	}
}

static void list_done(struct s3_xfer *x)
{
	struct s3_op *op = x->op;
	struct wsync_http_req *h = &x->h;
	struct wsync_s3_list_page pg = { 0 };
	struct wsync_error err;
	const char *what = op->req->key[0] ? op->req->key : "(bucket)";
	/* the page's prefix, full: query[1] (list_page) */
	const char *page_prefix = x->query[1].value;
	size_t plen = strlen(op->s3->prefix);
	int r = 0;

	if (h->err < 0 || !ok_status(h->status)) {
		xfer_error(x);
		goto out;
	}
	op->list_pages++;
	op->list_xml += h->resp.len;
	if (op->list_xml > WSYNC_STORE_LIST_XML_MAX) {
		op_fail(op, -E2BIG, "list %s: more than %llu bytes of listing "
			"(WSYNC_STORE_LIST_XML_MAX)", what,
			(unsigned long long)WSYNC_STORE_LIST_XML_MAX);
		goto out;
	}
	if (wsync_s3_parse_list(h->resp.data, h->resp.len, &pg, &err) < 0) {
		op_fail(op, -EPROTO, "list %s: %s", what, wsync_error_str(&err));
		goto out;
	}
	list_take(op, &pg, page_prefix);
	if (op->err)
		goto out;
	if (pg.truncated || op->n_pending) {
		if (op->list_pages >= WSYNC_STORE_LIST_PAGES_MAX) {
			op_fail(op, -E2BIG, "list %s: more than %d pages "
				"(WSYNC_STORE_LIST_PAGES_MAX)", what, WSYNC_STORE_LIST_PAGES_MAX);
			goto out;
		}
	}
	if (pg.truncated) {
		/* The same prefix again from the token, which must move on. */
		r = list_token_seen(op, pg.next_token);
		if (r == -EPROTO) {
			op_fail(op, -EPROTO, "list %s: the store sent the continuation token "
				"\"%.60s\" a second time for \"%s\"", what, pg.next_token,
				page_prefix + plen);
			r = 0;
			goto out;
		}
		if (r >= 0)
			r = list_page(op, page_prefix + plen, pg.next_token);
	} else if (op->n_pending) {
		char *p = op->pending[--op->n_pending];

		op->n_tokens = 0;	/* tokens are per prefix */
		r = list_page(op, p, NULL);
		free(p);
	}
out:
	if (r < 0)
		op_fail(op, r, "list %s: %s", what, strerror(-r));
	wsync_s3_list_page_free(&pg);
	xfer_free(x);
	if (op->n_xfers)
		return;
	if (!op->err && op->n_entries > 1)	/* an empty list has no array */
		qsort(op->entries, op->n_entries, sizeof(*op->entries), entry_cmp);
	op_end(op);
}

/* --- operations ------------------------------------------------------------------------ */

static void xfer_done(struct wsync_http_req *h)
{
	struct s3_xfer *x = h->data;
	struct s3_op *op = x->op;

	if (!op->s3) {
		xfer_free(x);
		op_orphan_check(op);
		return;
	}
	if (h->err == -ECANCELED) {
		op_fail(op, -ECANCELED, "%s %s: cancelled", op_name(op), op->req->key);
		xfer_free(x);
		if (!op->n_xfers)
			op_end(op);
		return;
	}
	switch (op->req->op) {
	case WSYNC_STORE_PUT:
		put_done(x);
		break;
	case WSYNC_STORE_GET:
		get_done(x);
		break;
	case WSYNC_STORE_LIST:
		list_done(x);
		break;
	default:
		simple_done(x);
		break;
	}
}

static void op_free(struct s3_op *op)
{
	if (op->dest)
		wsync_atomic_abort(&op->out);	/* op->fd is its temp's, closed there */
	else if (op->fd >= 0)
		close(op->fd);
	free(op->upload_id);
	if (op->etags)
		for (unsigned i = 0; i < op->n_parts; i++)
			free(op->etags[i]);
	free(op->etags);
	free(op->etag);
	free(op->dest);
	for (size_t i = 0; i < op->n_entries; i++) {
		free(op->entries[i].key);
		free(op->entries[i].etag);
	}
	free(op->entries);
	for (size_t i = 0; i < op->n_pending; i++)
		free(op->pending[i]);
	free(op->pending);
	free(op->tokens);
	free(op);
}

/* An op whose store is gone waits for its thread-pool work only. */
static void op_orphan_check(struct s3_op *op)
{
	if (!op->n_xfers && !op->pool_busy)
		op_free(op);
}

/* Take op off the store's list of live operations. */
static void op_unlink(struct s3 *s3, struct s3_op *op)
{
	if (op->prev)
		op->prev->next = op->next;
	else
		s3->ops = op->next;
	if (op->next)
		op->next->prev = op->prev;
	op->prev = op->next = NULL;
}

/* The op is over: report to store.c and free. */
static void op_end(struct s3_op *op)
{
	struct s3 *s3 = op->s3;
	struct wsync_store_req *req = op->req;

	op_unlink(s3, op);
	if (op->err) {
		req->res.err = op->err;
		req->res.error = op->error;
		if (req->op == WSYNC_STORE_GET && op->fd < 0) {
			free(req->res.data);
			req->res.data = NULL;
			req->res.data_len = 0;
		}
	} else {
		req->res.err = 0;
		/* put, head: the object's size; get: the whole object's,
		 * even for a range (unknown after "not modified": 0). */
		req->res.size = op->size;
		req->res.mtime = op->mtime;
		/* store.c frees the entries (and data) after the callback. */
		req->res.entries = op->entries;
		req->res.n_entries = op->n_entries;
		op->entries = NULL;
		op->n_entries = 0;
	}
	req->res.etag = op->etag ? op->etag : "";
	req->backend_data = NULL;
	wsync_store_req_done(req);
	/* the etag was only lent to the callback */
	op_free(op);
}

static int s3_submit(struct wsync_store_req *req)
{
	struct s3 *s3 = req->store->backend_data;
	struct s3_op *op = calloc(1, sizeof(*op));
	int r;

	if (!op)
		return -ENOMEM;
	op->s3 = s3;
	op->req = req;
	op->fd = -1;
	op->out.fd = op->out.dirfd = -1;
	req->backend_data = op;
	op->next = s3->ops;
	if (op->next)
		op->next->prev = op;
	s3->ops = op;

	switch (req->op) {
	case WSYNC_STORE_PUT:
		r = put_start(op);
		break;
	case WSYNC_STORE_GET:
		r = get_start(op);
		break;
	case WSYNC_STORE_HEAD:
	case WSYNC_STORE_DELETE: {
		struct s3_xfer *x = xfer_new(op, req->op == WSYNC_STORE_HEAD ? "HEAD" : "DELETE",
					     req->key);

		r = x ? 0 : -ENOMEM;
		if (x)
			xfer_send(x);
		break;
	}
	case WSYNC_STORE_LIST:
		r = list_page(op, req->key, NULL);
		break;
	default:
		r = -EINVAL;
	}
	if (r < 0 && !op->n_xfers) {
		/* Nothing started: no callback, store.c reports r. */
		op_unlink(s3, op);
		req->backend_data = NULL;
		op_free(op);
		return r;
	}
	if (r < 0) {
		op_fail(op, r, "%s %s: %s", op_name(op), req->key, strerror(-r));
		/* the transfers in flight end the op */
	}
	return 0;
}

/* --- the store ------------------------------------------------------------------------- */

/* Split an endpoint "scheme://authority[/path]" into origin and base path;
 * the Host header drops a default port. */
static int parse_endpoint(struct s3 *s3, const char *ep, const char *bucket, bool path_style,
			  struct wsync_error *err)
{
	const char *auth, *slash;
	bool https;

	if (strncasecmp(ep, "https://", 8) == 0)
		https = true, auth = ep + 8;
	else if (strncasecmp(ep, "http://", 7) == 0)
		https = false, auth = ep + 7;
	else
		return wsync_error_set(err, -EINVAL,
				       "endpoint \"%s\": must start with https:// or http://", ep);
	slash = strchr(auth, '/');
	size_t alen = slash ? (size_t)(slash - auth) : strlen(auth);

	if (alen == 0 || memchr(auth, '@', alen) || memchr(auth, '?', alen))
		return wsync_error_set(err, -EINVAL, "endpoint \"%s\": bad host", ep);
	char *host = strndup(auth, alen);
	char *basepath = strdup(slash ? slash : "");

	if (!host || !basepath) {
		free(host);
		free(basepath);
		return -ENOMEM;
	}
	/* Base path without a trailing '/'. */
	for (size_t l = strlen(basepath); l && basepath[l - 1] == '/'; l--)
		basepath[l - 1] = '\0';
	size_t hl = strlen(host);

	if ((https && hl > 4 && strcmp(host + hl - 4, ":443") == 0) ||
	    (!https && hl > 3 && strcmp(host + hl - 3, ":80") == 0))
		*strrchr(host, ':') = '\0';
	if (path_style) {
		s3->host = host;
		s3->origin = join3(https ? "https://" : "http://", host, "");
		s3->base = join3(basepath, "/", bucket);
	} else {
		s3->host = join3(bucket, ".", host);
		free(host);
		s3->origin = s3->host ? join3(https ? "https://" : "http://", s3->host, "") : NULL;
		s3->base = strdup(basepath);
	}
	free(basepath);
	return s3->host && s3->origin && s3->base ? 0 : -ENOMEM;
}

static void s3_free(struct wsync_store *store);

static int s3_init(struct wsync_store *store, struct wsync_error *err)
{
	const struct wsync_store_options *o = &store->opt;
	const struct wsync_url *u = &store->url;
	struct s3 *s3 = calloc(1, sizeof(*s3));
	char ep_buf[512];
	const char *ep = o->endpoint;
	bool hf = u->scheme == WSYNC_URL_HF;
	bool path_style;
	int r;

	if (!s3)
		return -ENOMEM;
	s3->store = store;
	store->backend_data = s3;
	if (hf) {
		/* The gateway's namespace is part of the path. */
		snprintf(ep_buf, sizeof(ep_buf), "%s/%s", ep ? ep : HF_ENDPOINT, u->ns);
		ep = ep_buf;
		if (o->path_style == 0) {
			r = wsync_error_set(err, -EINVAL,
					    "hf:// buckets only work with path_style on");
			goto fail;
		}
		path_style = true;
		s3->region = strdup(HF_REGION);
	} else {
		const char *region = o->region ? o->region : WSYNC_STORE_REGION_DEFAULT;

		if (!ep) {
			snprintf(ep_buf, sizeof(ep_buf), "https://s3.%s.amazonaws.com", region);
			ep = ep_buf;
		}
		path_style = o->path_style < 0 ? !strstr(ep, ".amazonaws.com") : o->path_style;
		/* Virtual-hosted style needs the bucket to be a DNS label. */
		if (!path_style && strchr(u->bucket, '.') && strncasecmp(ep, "https:", 6) == 0)
			path_style = true;
		s3->region = strdup(region);
	}
	if (!s3->region) {
		r = -ENOMEM;
		goto fail;
	}
	r = parse_endpoint(s3, ep, u->bucket, path_style, err);
	if (r < 0)
		goto fail;
	s3->prefix = join3(u->prefix, u->prefix[0] ? "/" : "", "");
	if (!s3->prefix) {
		r = -ENOMEM;
		goto fail;
	}
	r = wsync_credentials_load(o->credentials, &s3->cred, err);
	if (r < 0)
		goto fail;

	struct wsync_http_options ho = {
		.max_active = o->max_concurrency,
		.attempts = o->retry_attempts,
		.retry_base_ms = o->retry_base_ms,
		.retry_cap_ms = 20000,
		.retry_total_ms = o->retry_max_ms,
		.timeout_ms = o->timeout_ms,
		.connect_timeout_ms = o->connect_timeout_ms,
		.ca_file = o->ca_file,
	};
	r = wsync_curl_load(err);
	if (r < 0)
		goto fail;
	r = wsync_http_new(store->loop, &ho, &s3->http);
	if (r < 0) {
		wsync_error_set(err, r, "cannot start the HTTP engine");
		goto fail;
	}
	if (o->part_size < PART_MIN || o->part_size > PART_MAX) {
		r = wsync_error_set(err, -EINVAL, "part_size must be within 5 MiB..5 GiB");
		goto fail;
	}
	return 0;
fail:
	s3_free(store);
	return r;
}

static void s3_free(struct wsync_store *store)
{
	struct s3 *s3 = store->backend_data;

	if (!s3)
		return;
	/* Ops waiting on the thread pool lose their store: they end now
	 * with -ECANCELED and free themselves when their work returns. */
	for (struct s3_op *op = s3->ops, *next; op; op = next) {
		next = op->next;
		if (!op->pool_busy)
			continue;
		op_fail(op, -ECANCELED, "%s %s: cancelled", op_name(op), op->req->key);
		struct wsync_store_req *req = op->req;

		op_unlink(s3, op);
		req->res.err = op->err;
		req->res.error = op->error;
		req->res.etag = "";
		req->backend_data = NULL;
		op->s3 = NULL;
		op->req = NULL;
		wsync_store_req_done(req);
	}
	/* The rest end through http's cancellation (xfer_done, -ECANCELED). */
	wsync_http_free(s3->http);
	s3->http = NULL;
	wsync_credentials_free(&s3->cred);
	free(s3->origin);
	free(s3->host);
	free(s3->base);
	free(s3->prefix);
	free(s3->region);
	free(s3);
	store->backend_data = NULL;
}

const struct wsync_store_backend wsync_store_backend_s3 = {
	.name = "s3",
	.init = s3_init,
	.submit = s3_submit,
	.free = s3_free,
};
