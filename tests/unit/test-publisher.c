/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-publisher.c -- the publisher role (daemon/publisher/) run the way
 * wsyncd runs it -- a loop, a file:// store, the jobs thread, in one
 * process -- with its private header (publisher_local.h) read to follow
 * p->state, and its pure functions called alone.  It proves:
 *
 *  - the dispatcher's transitions: a fresh bucket goes RECOVER -> IDLE; a
 *    complete checkpoint goes PREPARE -> UPLOAD -> MANIFEST -> HEAD ->
 *    COMMIT -> GC -> IDLE, leaving HEAD naming version 1, its manifest
 *    and its anchor in the bucket; the next checkpoint is version 2, a
 *    delta on version 1;
 *  - a store request failing in RECOVER (no bucket directory), UPLOAD
 *    (anchors/ a file), MANIFEST (manifests/ a file) and HEAD (HEAD a
 *    directory) sends the publisher to BACKOFF with retry_state the
 *    state that failed, status.json and STATUS= say so, the wait starts
 *    at 1 s and doubles while the fault stays, and once the fault is gone
 *    the version is published;
 *  - a stop ends the role (stopped(), the loop closes with
 *    uv_loop_close() == 0) with nothing half-published: in PREPARE,
 *    UPLOAD or a BACKOFF the version is abandoned (HEAD absent or at the
 *    version before, no manifest); in MANIFEST, HEAD or COMMIT it is
 *    finished (HEAD names it, whole); a restart is at that version and
 *    publishes nothing twice; a stop in the start's backoff (LEASE) ends at once;
 *    stopped while HEAD's put backs off, the manifest is left and the
 *    restart's RECOVER completes HEAD from it (no version published twice);
 *  - a new checkpoint is judged on the jobs thread: with that thread held
 *    the scan waits (IDLE, nothing published) while the loop turns, and
 *    publishes it once the thread is free; a stop meanwhile waits for the
 *    judgement and ends cleanly;
 *  - the assignment rule (pub_parts_assign, pub_parts_select): shards
 *    largest first, ties by path, each to the part with the fewest bytes
 *    (ties: lowest K), other files to part 1 (counted in its bytes);
 *    equal sizes; more parts than shards; a file moving between parts as
 *    sizes change; select's `others` sorted; part_filter;
 *  - the merge (pub_parts_merge) of two and three hand-made records:
 *    objects with the committer's preamble and END chunks around every
 *    part's chunks in path order, files sorted; a path in two parts and
 *    a mix of delta-only and anchor-only records refused (-EINVAL);
 *  - part 1's checks of another part's record (pub_parts_check_keys,
 *    pub_parts_check_share): chunk keys only of that part, version and
 *    flight under parts/<V>/ (../HEAD, anchors/..., another part's K, a
 *    record's key refused); files only that part's by the rule, chunks
 *    only of its files;
 *  - two and three publisher parts (part = K/N, each its own daemon and
 *    state_dir, one loop, one bucket) publish one checkpoint: HEAD names
 *    a version of N parts holding every file, then version 2 a delta of
 *    parts; a part whose record cannot be written backs off retrying
 *    RECORD while part 1 waits in GATHER, and the version is committed
 *    once it can; parts stopped while they wait (GATHER, BACKOFF) end
 *    cleanly with no HEAD.
 *  - a publisher whose state is lost meets HEAD's checkpoint again: it
 *    is hashed against HEAD's manifest and becomes the base (no version
 *    published), the next checkpoint is a delta on it; one whose files
 *    differ from HEAD's is published;
 * Every wait is bounded (a few seconds); every temporary directory is
 * removed.
 */
/* Test paths are short mkdtemp() paths: truncation warnings are noise here
 * (gcc only: clang has no such warning and refuses the unknown name). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "checkpoint_scan.h"
#include "config.h"
#include "daemon.h"
#include "delta.h"
#include "file_filter.h"
#include "jobs.h"
#include "log.h"
#include "manifest.h"
#include "part.h"
#include "publisher.h"
#include "publisher_local.h"
#include "sign.h"
#include "store.h"
#include "tap.h"

#define MAX_INST 3
#define MAX_SEEN 256

/* One publisher: its daemon context, and what the test saw of it. */
struct inst {
	struct ctx *c;
	unsigned k;
	char state_dir[PATH_MAX], run_dir[PATH_MAX];
	struct wsync_config cfg;
	struct wsync_daemon d;
	struct wsync_publisher *p;
	void (*orig_dispatch)(struct wsync_publisher *p, const struct pub_event *ev);
	bool stopped, in_record;
	/* every distinct state seen, in order */
	enum pub_state seen[MAX_SEEN];
	size_t n_seen;
	char status[512];		/* the last STATUS= line */
	char backoff_status[512];	/* the STATUS= line given in BACKOFF */
	/* a fault made once the state `fault_at` is seen (0: none) */
	enum pub_state fault_at;
	void (*fault)(struct ctx *c);
	bool fault_done;
	/* stop once `stop_at` is seen by the loop (0: no) */
	enum pub_state stop_at;
	bool stop_done;
};

struct ctx {
	char root[PATH_MAX];
	char bucket[PATH_MAX], train[PATH_MAX], url[PATH_MAX + 16];
	uv_loop_t loop;
	uv_check_t check;
	struct wsync_store *store;
	struct wsync_jobs *jobs;
	struct inst inst[MAX_INST];
	unsigned n;
	bool loop_up;
};

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static void rm_rf(const char *path)
{
	(void)nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static bool write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	bool ok;

	if (!f)
		return false;
	ok = fwrite(p, 1, n, f) == n;
	return fclose(f) == 0 && ok;
}

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		if (buf) {
			buf[n] = '\0';
			if (len)
				*len = (size_t)n;
		}
	}
	fclose(f);
	return buf;
}

static bool exists(const char *dir, const char *rel)
{
	char p[PATH_MAX * 2];

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	return access(p, F_OK) == 0;
}

/* The bucket's object at key is the publisher's file at local (its
 * state's out/), linked in: the same inode, no copy made. */
static bool linked_from(const char *bucket, const char *key, const char *local)
{
	char p[PATH_MAX * 2];
	struct stat a, b;

	snprintf(p, sizeof(p), "%s/%s", bucket, key);
	if (stat(p, &a) < 0 || stat(local, &b) < 0) {
		printf("# %s or %s: %s\n", p, local, strerror(errno));
		return false;
	}
	return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* test_transitions: is version 1's anchor (a whole object: smaller
 * than a chunk) linked_from linked_out, once uploaded?  -1 not looked. */
static char linked_out[PATH_MAX + 32];
static int anchor_linked = -1;

static void check_linked(struct ctx *c)
{
	anchor_linked = linked_from(c->bucket, "anchors/000000000001.wsa", linked_out);
}

/* ---- checkpoints ---- */

/* A safetensors file of one F32 tensor of n values, its bytes a function
 * of seed (a small change from one seed to the next). */
static bool write_shard(const char *path, size_t n, unsigned seed)
{
	char hdr[160];
	size_t hl, total;
	uint8_t *buf;
	bool ok;

	hl = (size_t)snprintf(hdr, sizeof(hdr), "{\"w\":{\"dtype\":\"F32\",\"shape\":[%zu],"
			      "\"data_offsets\":[0,%zu]}}", n, 4 * n);
	while (hl % 8)
		hdr[hl++] = ' ';
	hdr[hl] = '\0';
	total = 8 + hl + 4 * n;
	buf = malloc(total);
	if (!buf)
		return false;
	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
	memcpy(buf + 8, hdr, hl);
	for (size_t i = 0; i < n; i++) {
		float v = (float)(i % 977) / 977.0f + (i % 61 == 0 ? (float)seed * 0.01f : 0.0f);

		memcpy(buf + 8 + hl + 4 * i, &v, 4);
	}
	ok = write_file(path, buf, total);
	free(buf);
	return ok;
}

/*
 * train/checkpoint-<step>/: n_shards shards (model.safetensors, or
 * model-0000K-of-0000N.safetensors of decreasing sizes), config.json, and
 * trainer_state.json -- the marker -- last.
 */
static bool make_checkpoint(struct ctx *c, int64_t step, unsigned n_shards, size_t floats)
{
	char dir[PATH_MAX + 32], p[PATH_MAX + 96], text[128];
	bool ok = true;

	snprintf(dir, sizeof(dir), "%s/checkpoint-%lld", c->train, (long long)step);
	if (mkdir(dir, 0755) < 0)
		return false;
	for (unsigned k = 1; k <= n_shards; k++) {
		if (n_shards == 1)
			snprintf(p, sizeof(p), "%s/model.safetensors", dir);
		else
			snprintf(p, sizeof(p), "%s/model-%05u-of-%05u.safetensors", dir, k,
				 n_shards);
		ok = ok && write_shard(p, floats / k, (unsigned)step + k);
	}
	snprintf(p, sizeof(p), "%s/config.json", dir);
	snprintf(text, sizeof(text), "{\"hidden\": 8, \"step\": %lld}\n", (long long)step);
	ok = ok && write_file(p, text, strlen(text));
	snprintf(p, sizeof(p), "%s/trainer_state.json", dir);
	snprintf(text, sizeof(text), "{\"global_step\": %lld}\n", (long long)step);
	ok = ok && write_file(p, text, strlen(text));
	return ok;
}

/* ---- the bucket ---- */

/* HEAD's version (0: no HEAD or not readable), its manifest parsed into
 * m when not NULL (free with wsync_manifest_free). */
static uint64_t bucket_head(struct ctx *c, struct wsync_manifest *m)
{
	char p[PATH_MAX + 64], *doc;
	size_t len = 0;
	struct wsync_manifest_head h = { 0 };
	struct wsync_error err = { 0 };
	uint64_t v;

	snprintf(p, sizeof(p), "%s/HEAD", c->bucket);
	doc = read_all(p, &len);
	if (!doc)
		return 0;
	if (wsync_manifest_head_parse(doc, len, NULL, &h, &err) < 0) {
		printf("# HEAD: %s\n", wsync_error_str(&err));
		free(doc);
		return 0;
	}
	free(doc);
	v = h.version;
	if (m) {
		snprintf(p, sizeof(p), "%s/%s", c->bucket, h.manifest.key);
		doc = read_all(p, &len);
		if (!doc || wsync_manifest_ref_check(&h.manifest, doc, len, &err) < 0 ||
		    wsync_manifest_parse(doc, len, NULL, m, &err) < 0) {
			printf("# HEAD's manifest %s: %s\n", h.manifest.key,
			       doc ? wsync_error_str(&err) : "missing");
			v = 0;
		}
		free(doc);
	}
	wsync_manifest_head_free(&h);
	return v;
}

/* Every object m lists is in the bucket (whole, or each chunk). */
static bool objects_present(struct ctx *c, const struct wsync_manifest *m)
{
	for (size_t i = 0; i < m->n_objects; i++) {
		const struct wsync_manifest_object *o = &m->objects[i];

		if (o->n_chunks) {
			for (size_t k = 0; k < o->n_chunks; k++)
				if (!exists(c->bucket, o->chunks[k].key)) {
					printf("# chunk %s missing\n", o->chunks[k].key);
					return false;
				}
		} else if (!exists(c->bucket, o->ref.key)) {
			printf("# object %s missing\n", o->ref.key);
			return false;
		}
	}
	return true;
}

/* ---- the daemons ---- */

static void record(struct inst *in, enum pub_state s)
{
	if (!in->p || in->in_record)
		return;
	in->in_record = true;
	if ((!in->n_seen || in->seen[in->n_seen - 1] != s) && in->n_seen < MAX_SEEN)
		in->seen[in->n_seen++] = s;
	if (in->fault && !in->fault_done && s == in->fault_at) {
		in->fault_done = true;
		in->fault(in->c);
	}
	in->in_record = false;
}

/* Between a module's report and what follows it: the state the event
 * came in, then the one it led to. */
static void spy_dispatch(struct wsync_publisher *p, const struct pub_event *ev)
{
	struct inst *in = p->d->data;

	record(in, p->state);
	in->orig_dispatch(p, ev);
	record(in, p->state);
}

static void set_status(struct wsync_daemon *d, const char *line)
{
	struct inst *in = d->data;

	snprintf(in->status, sizeof(in->status), "%s", line);
	if (in->p && in->p->state == PUB_BACKOFF)
		snprintf(in->backoff_status, sizeof(in->backoff_status), "%s", line);
	if (in->p)
		record(in, in->p->state);
}

static void on_stopped(struct wsync_daemon *d)
{
	((struct inst *)d->data)->stopped = true;
}

/* After each loop iteration: every publisher's state. */
static void on_check(uv_check_t *h)
{
	struct ctx *c = h->data;

	for (unsigned i = 0; i < c->n; i++) {
		struct inst *in = &c->inst[i];

		if (!in->p || in->stopped)
			continue;
		record(in, in->p->state);
		if (in->stop_at && !in->stop_done && in->p->state == in->stop_at) {
			in->stop_done = true;
			wsync_publisher_stop(in->p);
		}
	}
}

static int ctx_init(struct ctx *c)
{
	char tmpl[] = "/tmp/test-publisher.XXXXXX";

	memset(c, 0, sizeof(*c));
	if (!mkdtemp(tmpl))
		return -errno;
	snprintf(c->root, sizeof(c->root), "%s", tmpl);
	snprintf(c->bucket, sizeof(c->bucket), "%s/bucket", c->root);
	snprintf(c->train, sizeof(c->train), "%s/train", c->root);
	snprintf(c->url, sizeof(c->url), "file://%s", c->bucket);
	if (mkdir(c->bucket, 0755) < 0 || mkdir(c->train, 0755) < 0)
		return -errno;
	return 0;
}

/* Publisher k (from 1) of n: its configuration (part = k/n when n > 1). */
static struct inst *inst_config(struct ctx *c, unsigned k, unsigned n)
{
	struct inst *in = &c->inst[k - 1];
	char root[PATH_MAX];

	memset(in, 0, sizeof(*in));
	in->c = c;
	in->k = k;
	/* through a copy: in lies inside c, which gcc's -Wrestrict minds */
	snprintf(root, sizeof(root), "%s", c->root);
	snprintf(in->state_dir, sizeof(in->state_dir), "%s/state%u", root, k);
	snprintf(in->run_dir, sizeof(in->run_dir), "%s/run%u", root, k);
	wsync_config_init(&in->cfg);
	in->cfg.role = WSYNC_ROLE_PUBLISHER;
	free(in->cfg.state_dir);
	free(in->cfg.runtime_dir);
	in->cfg.state_dir = strdup(in->state_dir);
	in->cfg.runtime_dir = strdup(in->run_dir);
	free(in->cfg.watch_dir);
	in->cfg.watch_dir = strdup(c->train);
	free(in->cfg.store_url);
	in->cfg.store_url = strdup(c->url);
	in->cfg.settle_time_ms = 100;
	in->cfg.watch_mode = WSYNC_WATCH_POLL;
	in->cfg.rescan_interval_ms = 100;
	in->cfg.threads = 2;
	if (n > 1) {
		in->cfg.part = k;
		in->cfg.parts = n;
	}
	if (c->n < k)
		c->n = k;
	return in;
}

/* The loop, the store and the jobs thread every publisher shares. */
static int loop_start(struct ctx *c)
{
	struct wsync_store_options so;
	struct wsync_error err = { 0 };
	int r;

	uv_loop_init(&c->loop);
	c->loop_up = true;
	wsync_config_store_options(&c->inst[0].cfg, &so);
	r = wsync_store_new(&c->loop, &so, &c->store, &err);
	if (r < 0) {
		printf("# store: %s\n", wsync_error_str(&err));
		return r;
	}
	r = wsync_jobs_new(&c->loop, &c->jobs);
	if (r < 0)
		return r;
	uv_check_init(&c->loop, &c->check);
	c->check.data = c;
	return uv_check_start(&c->check, on_check);
}

static int inst_start(struct inst *in)
{
	struct ctx *c = in->c;
	struct wsync_error err = { 0 };
	int r;

	in->d = (struct wsync_daemon){
		.loop = &c->loop, .cfg = &in->cfg, .store = c->store, .jobs = c->jobs,
		.program = "test-publisher", .set_status = set_status, .stopped = on_stopped,
		.data = in,
	};
	in->stopped = false;
	in->stop_done = false;
	in->n_seen = 0;
	r = wsync_publisher_new(&in->d, &in->p, &err);
	if (r < 0) {
		printf("# publisher %u: %s\n", in->k, wsync_error_str(&err));
		return r;
	}
	in->orig_dispatch = in->p->dispatch;
	in->p->dispatch = spy_dispatch;
	return wsync_publisher_start(in->p);
}

/* Run the loop until done(c) or ms pass; true when done. */
static bool run_until(struct ctx *c, bool (*done)(struct ctx *c), uint64_t ms)
{
	uint64_t t0;

	uv_update_time(&c->loop);
	t0 = uv_now(&c->loop);
	while (!done(c)) {
		uv_update_time(&c->loop);
		if (uv_now(&c->loop) - t0 >= ms)
			return false;
		/* NOWAIT plus a short sleep: a wait bounded even when nothing
		 * is due on the loop */
		uv_run(&c->loop, UV_RUN_NOWAIT);
		if (!done(c))
			usleep(2000);
	}
	return true;
}

/* Stop publisher in; true when stopped() came within a few seconds. */
static bool inst_stop(struct inst *in)
{
	struct ctx *c = in->c;
	uint64_t t0;

	if (!in->p)
		return true;
	if (!in->stopped)
		wsync_publisher_stop(in->p);	/* a second call is a no-op */
	uv_update_time(&c->loop);
	t0 = uv_now(&c->loop);
	while (!in->stopped && uv_now(&c->loop) - t0 < 10000) {
		uv_run(&c->loop, UV_RUN_NOWAIT);
		usleep(2000);
		uv_update_time(&c->loop);
	}
	if (in->stopped) {
		wsync_publisher_free(in->p);
		in->p = NULL;
	}
	return in->stopped;
}

static void on_check_closed(uv_handle_t *h)
{
	(void)h;
}

/* Stop every publisher, free everything; true when every one stopped
 * and the loop closed cleanly. */
static bool loop_stop(struct ctx *c)
{
	bool ok = true;

	for (unsigned i = 0; i < c->n; i++)
		ok = inst_stop(&c->inst[i]) && ok;
	wsync_jobs_free(c->jobs);
	c->jobs = NULL;
	wsync_store_free(c->store);
	c->store = NULL;
	uv_close((uv_handle_t *)&c->check, on_check_closed);
	uv_run(&c->loop, UV_RUN_DEFAULT);
	c->loop_up = false;
	return uv_loop_close(&c->loop) == 0 && ok;
}

static void ctx_free(struct ctx *c)
{
	if (c->loop_up)
		(void)loop_stop(c);
	for (unsigned i = 0; i < MAX_INST; i++)
		if (c->inst[i].c)
			wsync_config_free(&c->inst[i].cfg);
	rm_rf(c->root);
}

/* Is `want` (n states) a subsequence of what in saw? */
static bool saw_in_order(const struct inst *in, const enum pub_state *want, size_t n)
{
	size_t j = 0;

	for (size_t i = 0; i < in->n_seen && j < n; i++)
		if (in->seen[i] == want[j])
			j++;
	if (j < n) {
		printf("# states seen:");
		for (size_t i = 0; i < in->n_seen; i++)
			printf(" %s", pub_state_name(in->seen[i]));
		printf("\n# missing from %s on\n", pub_state_name(want[j]));
	}
	return j == n;
}

static bool saw(const struct inst *in, enum pub_state s)
{
	for (size_t i = 0; i < in->n_seen; i++)
		if (in->seen[i] == s)
			return true;
	return false;
}

/* status.json of publisher in. */
struct status {
	long long version;
	char state[32], phase[64], last_error[512], message[512];
	bool store_ok;
};

static bool read_status(const struct inst *in, struct status *st)
{
	char p[PATH_MAX + 32];
	json_t *o;

	snprintf(p, sizeof(p), "%s/status.json", in->run_dir);
	o = json_load_file(p, 0, NULL);
	if (!o)
		return false;
	memset(st, 0, sizeof(*st));
	st->version = json_integer_value(json_object_get(o, "version"));
	snprintf(st->state, sizeof(st->state), "%s",
		 json_string_value(json_object_get(o, "state")) ?: "");
	snprintf(st->phase, sizeof(st->phase), "%s",
		 json_string_value(json_object_get(o, "phase")) ?: "");
	snprintf(st->last_error, sizeof(st->last_error), "%s",
		 json_string_value(json_object_get(o, "last_error")) ?: "");
	snprintf(st->message, sizeof(st->message), "%s",
		 json_string_value(json_object_get(o, "message")) ?: "");
	st->store_ok = json_is_true(json_object_get(o, "store_ok"));
	json_decref(o);
	return true;
}

/* ---- conditions for run_until ---- */

static uint64_t want_version;
static enum pub_state want_retry;

static bool first_idle(struct ctx *c)
{
	return c->inst[0].p && c->inst[0].p->state == PUB_IDLE;
}

/* Every publisher idle with HEAD at want_version, nothing in flight. */
static bool all_at_version(struct ctx *c)
{
	for (unsigned i = 0; i < c->n; i++) {
		struct wsync_publisher *p = c->inst[i].p;

		if (!p || p->state != PUB_IDLE || p->pub || p->head_version != want_version)
			return false;
	}
	return true;
}

static bool first_backing_off(struct ctx *c)
{
	struct wsync_publisher *p = c->inst[0].p;

	return p && p->state == PUB_BACKOFF && p->retry_state == want_retry;
}

static bool second_backing_off(struct ctx *c)
{
	struct wsync_publisher *p = c->inst[1].p;

	return p && p->state == PUB_BACKOFF && p->retry_state == want_retry;
}

/* Part 1 gathering, part 2 backing off retrying want_retry. */
static bool parts_waiting(struct ctx *c)
{
	return c->inst[0].p && c->inst[0].p->state == PUB_GATHER && second_backing_off(c);
}

static bool second_backoff(struct ctx *c)
{
	return strstr(c->inst[0].backoff_status, "retrying in 2 s") != NULL;
}

static bool first_stopped(struct ctx *c)
{
	return c->inst[0].stopped;
}

/* ---- 1. the dispatcher's transitions ---- */

static void test_transitions(void)
{
	static const enum pub_state boot[] = { PUB_LEASE, PUB_RECOVER, PUB_IDLE };
	static const enum pub_state publish[] = { PUB_IDLE, PUB_PREPARE, PUB_UPLOAD,
						  PUB_MANIFEST, PUB_HEAD, PUB_COMMIT,
						  PUB_GC, PUB_IDLE };
	struct wsync_manifest m = { 0 };
	struct ctx c;
	struct inst *in;
	struct status st;

	CHECK(ctx_init(&c) == 0);
	in = inst_config(&c, 1, 1);
	CHECK(loop_start(&c) == 0);
	CHECK(inst_start(in) == 0);
	CHECK(run_until(&c, first_idle, 5000));
	CHECK(saw_in_order(in, boot, 2));
	CHECK(!saw(in, PUB_VERIFY));	/* a fresh bucket: nothing to check */
	CHECK_EQ_U64(in->p->head_version, 0);
	CHECK(!exists(c.bucket, "HEAD"));

	/* version 1: an anchor */
	in->n_seen = 0;
	snprintf(linked_out, sizeof(linked_out), "%s/out/anchor.wsa", in->p->pub_dir);
	in->fault_at = PUB_MANIFEST;
	in->fault = check_linked;
	CHECK(make_checkpoint(&c, 100, 1, 20000));
	want_version = 1;
	CHECK(run_until(&c, all_at_version, 10000));
	CHECK(saw_in_order(in, publish, sizeof(publish) / sizeof(publish[0])));
	CHECK(!saw(in, PUB_BACKOFF));
	CHECK(exists(c.bucket, "HEAD"));
	CHECK(exists(c.bucket, "manifests/000000000001.json"));
	CHECK_EQ_U64(bucket_head(&c, &m), 1);
	CHECK_EQ_U64(m.version, 1);
	CHECK_EQ_U64(m.step, 100);
	CHECK(m.kind == WSYNC_MANIFEST_ANCHOR);
	CHECK_EQ_U64(m.base_version, 0);
	CHECK(wsync_manifest_find_object(&m, WSYNC_MANIFEST_ROLE_ANCHOR) != NULL);
	CHECK(wsync_manifest_find_object(&m, WSYNC_MANIFEST_ROLE_DELTA) == NULL);
	CHECK_EQ_U64(m.n_files, 3);	/* config, model, trainer_state */
	CHECK(objects_present(&c, &m));
	CHECK(exists(c.bucket, "anchors/000000000001.wsa") ||
	      exists(c.bucket, "anchors/000000000001-00001.wsa"));
	/* file://: the object went in by a link of the encoder's output,
	 * nothing read back to copy it (seen once uploaded, before the
	 * commit empties out/) */
	CHECK(anchor_linked == 1);
	wsync_manifest_free(&m);
	CHECK(read_status(in, &st) && st.version == 1 && strcmp(st.state, "idle") == 0 &&
	      st.store_ok && !st.last_error[0]);
	CHECK_CONTAINS(in->status, "idle at version 1");

	/* version 2: a delta on 1 */
	in->n_seen = 0;
	CHECK(make_checkpoint(&c, 200, 1, 20000));
	want_version = 2;
	CHECK(run_until(&c, all_at_version, 10000));
	CHECK(saw_in_order(in, publish, sizeof(publish) / sizeof(publish[0])));
	CHECK_EQ_U64(bucket_head(&c, &m), 2);
	CHECK_EQ_U64(m.step, 200);
	CHECK(m.kind == WSYNC_MANIFEST_DELTA);
	CHECK_EQ_U64(m.base_version, 1);
	CHECK_EQ_U64(m.anchor_version, 1);
	CHECK(wsync_manifest_find_object(&m, WSYNC_MANIFEST_ROLE_DELTA) != NULL);
	CHECK(wsync_manifest_find_object(&m, WSYNC_MANIFEST_ROLE_ANCHOR) == NULL);
	CHECK(objects_present(&c, &m));
	CHECK(exists(c.bucket, "manifests/000000000001.json"));
	wsync_manifest_free(&m);
	CHECK(loop_stop(&c));
	CHECK(in->stopped);
	ctx_free(&c);
}

/* ---- 2. store failures ---- */

static char aside[PATH_MAX + 32], faulted[PATH_MAX + 32];

/* anchors/ a file: the anchor's put fails */
static void fault_anchors(struct ctx *c)
{
	snprintf(faulted, sizeof(faulted), "%s/anchors", c->bucket);
	rm_rf(faulted);
	(void)write_file(faulted, "x", 1);
	aside[0] = '\0';
}

/* manifests/ a file (the real one set aside): the manifest's put fails */
static void fault_manifests(struct ctx *c)
{
	snprintf(faulted, sizeof(faulted), "%s/manifests", c->bucket);
	snprintf(aside, sizeof(aside), "%s/manifests.aside", c->root);
	if (rename(faulted, aside) < 0)
		printf("# rename manifests: %s\n", strerror(errno));
	(void)write_file(faulted, "x", 1);
}

/* HEAD a directory (the real one set aside): HEAD's put fails */
static void fault_head(struct ctx *c)
{
	snprintf(faulted, sizeof(faulted), "%s/HEAD", c->bucket);
	snprintf(aside, sizeof(aside), "%s/HEAD.aside", c->root);
	if (rename(faulted, aside) < 0)
		printf("# rename HEAD: %s\n", strerror(errno));
	if (mkdir(faulted, 0755) < 0)
		printf("# mkdir HEAD: %s\n", strerror(errno));
}

static void fault_clear(void)
{
	rm_rf(faulted);
	if (aside[0] && rename(aside, faulted) < 0)
		printf("# rename back: %s\n", strerror(errno));
	aside[0] = '\0';
}

/* Wait for BACKOFF retrying state s (what: the request named), check
 * status.json and STATUS=, clear the fault, wait for version v. */
static void backoff_then_publish(struct ctx *c, enum pub_state s, const char *what, uint64_t v)
{
	struct inst *in = &c->inst[0];
	struct status st;

	want_retry = s;
	CHECK(run_until(c, first_backing_off, 8000));
	if (!in->p || in->p->state != PUB_BACKOFF) {
		printf("# expected BACKOFF (retry %s), in %s\n", pub_state_name(s),
		       in->p ? pub_state_name(in->p->state) : "-");
		fault_clear();
		return;
	}
	CHECK(in->p->retry_state == s);
	CHECK_CONTAINS(in->backoff_status, "bucket unreachable");
	CHECK_CONTAINS(in->backoff_status, "retrying in 1 s");	/* reset by the last success */
	CHECK_CONTAINS(in->backoff_status, what);
	CHECK_CONTAINS(in->p->last_error, what);
	CHECK(read_status(in, &st));
	CHECK_STR(st.state, "error");
	CHECK_STR(st.phase, "retrying");
	CHECK(!st.store_ok);
	CHECK_CONTAINS(st.last_error, what);
	if (s != PUB_HEAD)	/* (HEAD is the fault there: set aside) */
		CHECK_EQ_U64(bucket_head(c, NULL), v - 1);	/* nothing of v is HEAD's yet */
	fault_clear();
	/* the first backoff is RETRY_MIN_MS (1 s) */
	want_version = v;
	CHECK(run_until(c, all_at_version, 8000));
	CHECK_EQ_U64(bucket_head(c, NULL), v);
	CHECK(read_status(in, &st) && st.store_ok && st.version == (long long)v);
	CHECK_STR(st.state, "idle");	/* the publication cleared the error */
	CHECK_STR(st.last_error, "");
}

static void test_store_failures(void)
{
	static const enum pub_state rec[] = { PUB_LEASE, PUB_BACKOFF, PUB_LEASE, PUB_RECOVER,
					      PUB_IDLE };
	struct wsync_manifest m = { 0 };
	struct ctx c;
	struct inst *in;

	CHECK(ctx_init(&c) == 0);
	in = inst_config(&c, 1, 1);
	CHECK(loop_start(&c) == 0);

	/* RECOVER: no bucket directory (the file store says -ENXIO).  A
	 * publisher makes a missing one at start: a dangling link in its
	 * place is one it cannot make, as a mount not up yet. */
	CHECK(rmdir(c.bucket) == 0);
	CHECK(symlink("/nonexistent/wsync-test-bucket", c.bucket) == 0);
	CHECK(inst_start(in) == 0);
	want_retry = PUB_LEASE;
	CHECK(run_until(&c, first_backing_off, 5000));
	CHECK(in->p->state == PUB_BACKOFF && in->p->retry_state == PUB_LEASE);
	CHECK_CONTAINS(in->backoff_status, "bucket unreachable (reading the writer lease)");
	CHECK_CONTAINS(in->backoff_status, "retrying in 1 s");
	CHECK_CONTAINS(in->p->last_error, "does not exist");
	/* still missing at the retry: RECOVER again, then a wait twice as long */
	CHECK(run_until(&c, second_backoff, 3000));
	CHECK(in->p->state == PUB_BACKOFF && in->p->retry_state == PUB_LEASE);
	CHECK(unlink(c.bucket) == 0 && mkdir(c.bucket, 0755) == 0);
	CHECK(run_until(&c, first_idle, 5000));
	CHECK(saw_in_order(in, rec, 5));
	{
		struct status st;

		CHECK(read_status(in, &st) && st.store_ok);
		/* the outage is over: idle, not "error" (role.h: error is
		 * backing off, or the last attempt failed) */
		CHECK_STR(st.state, "idle");
		CHECK_STR(st.last_error, "");
	}

	/* UPLOAD: anchors/ is a file when version 1 is coded */
	in->fault_at = PUB_PREPARE;
	in->fault = fault_anchors;
	in->fault_done = false;
	CHECK(make_checkpoint(&c, 100, 1, 20000));
	backoff_then_publish(&c, PUB_UPLOAD, "uploading objects", 1);

	/* MANIFEST: manifests/ is a file once version 2 is uploading */
	in->fault_at = PUB_UPLOAD;
	in->fault = fault_manifests;
	in->fault_done = false;
	CHECK(make_checkpoint(&c, 200, 1, 20000));
	backoff_then_publish(&c, PUB_MANIFEST, "writing the manifest", 2);

	/* HEAD: HEAD is a directory once version 3's manifest is written */
	in->fault_at = PUB_MANIFEST;
	in->fault = fault_head;
	in->fault_done = false;
	CHECK(make_checkpoint(&c, 300, 1, 20000));
	backoff_then_publish(&c, PUB_HEAD, "writing HEAD", 3);

	/* what was published in between is whole */
	CHECK_EQ_U64(bucket_head(&c, &m), 3);
	CHECK(m.kind == WSYNC_MANIFEST_DELTA && m.base_version == 2);
	CHECK(objects_present(&c, &m));
	wsync_manifest_free(&m);
	CHECK(loop_stop(&c));
	ctx_free(&c);
}

/* ---- 3. stop in the middle ---- */

/* Run the loop for ms regardless. */
static void run_for(struct ctx *c, uint64_t ms)
{
	uint64_t t0;

	uv_update_time(&c->loop);
	t0 = uv_now(&c->loop);
	while (uv_now(&c->loop) - t0 < ms) {
		uv_run(&c->loop, UV_RUN_NOWAIT);
		usleep(2000);
		uv_update_time(&c->loop);
	}
}

/*
 * Stop publisher 1 when the loop sees it in state s while publishing
 * version v (1, or 2 after a first one).  Before the manifest (PREPARE,
 * UPLOAD, a BACKOFF of UPLOAD) the version is abandoned: HEAD still names
 * v - 1 and there is no manifest v.  From the manifest on (MANIFEST,
 * HEAD, COMMIT) the version exists, so HEAD must follow even when
 * stopping: HEAD names v.  Either way HEAD's version is whole, and a
 * restart on the same state_dir is at v, with nothing published twice.
 */
static void stop_in(enum pub_state s, bool first_version)
{
	bool completes = s == PUB_MANIFEST || s == PUB_HEAD || s == PUB_COMMIT;
	struct wsync_manifest m = { 0 };
	struct ctx c;
	struct inst *in;
	uint64_t v = first_version ? 1 : 2;
	char mkey[WSYNC_MANIFEST_KEY_MAX];

	CHECK(ctx_init(&c) == 0);
	in = inst_config(&c, 1, 1);
	/* whole objects, uploaded after coding: UPLOAD waits for the puts */
	in->cfg.chunk_size = 0;
	CHECK(loop_start(&c) == 0);
	CHECK(inst_start(in) == 0);
	if (!first_version) {
		CHECK(make_checkpoint(&c, 100, 1, 200000));
		want_version = 1;
		CHECK(run_until(&c, all_at_version, 10000));
	}
	/* a pause between the scan and the snapshot keeps PREPARE long */
	in->d.test.snapshot_pause_ms = s == PUB_PREPARE ? 500 : 0;
	if (s == PUB_BACKOFF) {
		in->fault_at = PUB_PREPARE;
		in->fault = fault_anchors;
		in->fault_done = false;
	}
	in->stop_at = s;
	in->stop_done = false;
	in->n_seen = 0;
	CHECK(make_checkpoint(&c, 100 * (int64_t)v + 100, 1, 200000));
	CHECK(run_until(&c, first_stopped, 10000));
	CHECK(in->stop_done);
	CHECK(in->p == NULL || in->p->state == PUB_STOPPED);
	if (s == PUB_BACKOFF)
		CHECK(in->p && in->p->retry_state == PUB_UPLOAD);
	if (!completes)
		CHECK(!saw(in, PUB_MANIFEST) && !saw(in, PUB_HEAD));
	else
		CHECK(saw(in, PUB_HEAD) && !saw(in, PUB_GC));	/* stopped before gc */
	/* nothing half-published */
	CHECK_EQ_U64(bucket_head(&c, v > 1 || completes ? &m : NULL), completes ? v : v - 1);
	if (v > 1 || completes) {
		CHECK(objects_present(&c, &m));
		wsync_manifest_free(&m);
	}
	wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, v, mkey);
	CHECK(exists(c.bucket, mkey) == completes);
	CHECK(inst_stop(in));
	CHECK(loop_stop(&c));
	if (s == PUB_BACKOFF)
		fault_clear();

	/* a restart on the same state_dir is at v, and stays there */
	CHECK(loop_start(&c) == 0);
	in->stop_at = 0;
	in->fault = NULL;
	CHECK(inst_start(in) == 0);
	want_version = v;
	CHECK(run_until(&c, all_at_version, 10000));
	run_for(&c, 600);	/* past settle_time: a second publication would start */
	CHECK(all_at_version(&c));
	CHECK_EQ_U64(bucket_head(&c, &m), v);
	CHECK(objects_present(&c, &m));
	wsync_manifest_free(&m);
	CHECK(loop_stop(&c));
	ctx_free(&c);
}

static void test_stop_in_prepare(void)
{
	stop_in(PUB_PREPARE, true);
}

static void test_stop_in_upload(void)
{
	stop_in(PUB_UPLOAD, false);
}

static void test_stop_in_backoff(void)
{
	stop_in(PUB_BACKOFF, true);
}

static void test_stop_in_manifest(void)
{
	stop_in(PUB_MANIFEST, false);
}

static void test_stop_in_head(void)
{
	stop_in(PUB_HEAD, true);
}

static void test_stop_in_commit(void)
{
	stop_in(PUB_COMMIT, false);
}

/* Stopped while HEAD's put backs off: version 2's manifest is in the
 * bucket, HEAD still names 1.  The restart's RECOVER completes HEAD from
 * that manifest -- version 2 as written, not a version 3 of the same
 * checkpoint. */
static void test_stop_in_head_backoff(void)
{
	struct wsync_manifest m = { 0 };
	struct ctx c;
	struct inst *in;

	CHECK(ctx_init(&c) == 0);
	in = inst_config(&c, 1, 1);
	CHECK(loop_start(&c) == 0);
	CHECK(inst_start(in) == 0);
	CHECK(make_checkpoint(&c, 100, 1, 20000));
	want_version = 1;
	CHECK(run_until(&c, all_at_version, 10000));
	in->fault_at = PUB_MANIFEST;
	in->fault = fault_head;
	in->fault_done = false;
	in->stop_at = PUB_BACKOFF;
	CHECK(make_checkpoint(&c, 200, 1, 20000));
	CHECK(run_until(&c, first_stopped, 10000));
	CHECK(in->p && in->p->retry_state == PUB_HEAD);
	CHECK(inst_stop(in));
	CHECK(loop_stop(&c));
	fault_clear();
	CHECK_EQ_U64(bucket_head(&c, NULL), 1);
	CHECK(exists(c.bucket, "manifests/000000000002.json"));

	CHECK(loop_start(&c) == 0);
	in->stop_at = 0;
	in->fault = NULL;
	CHECK(inst_start(in) == 0);
	want_version = 2;
	CHECK(run_until(&c, all_at_version, 10000));
	CHECK(!saw(in, PUB_PREPARE));	/* completed, not published again */
	run_for(&c, 600);
	CHECK(all_at_version(&c));
	CHECK_EQ_U64(bucket_head(&c, &m), 2);
	CHECK_EQ_U64(m.step, 200);
	CHECK(m.kind == WSYNC_MANIFEST_DELTA && m.base_version == 1);
	CHECK(objects_present(&c, &m));
	wsync_manifest_free(&m);
	CHECK(!exists(c.bucket, "manifests/000000000003.json"));
	CHECK(loop_stop(&c));
	ctx_free(&c);
}

/* ---- the first judgement of a checkpoint, on the jobs thread ---- */

static volatile int jobs_held;	/* 1: hold_work keeps the jobs thread */

/* Keep the jobs thread busy until released (5 s at most). */
static void hold_work(void *data)
{
	(void)data;
	for (int i = 0; i < 5000 && __atomic_load_n(&jobs_held, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
}

static void hold_done(void *data, bool cancelled)
{
	(void)data;
	(void)cancelled;
}

static bool first_judging(struct ctx *c)
{
	return c->inst[0].p && c->inst[0].p->judging;
}

/*
 * A new checkpoint's judgement reads its headers on the jobs thread, not
 * on the loop: while that thread is held, the scan waits for it (judging,
 * still IDLE, nothing published) and the loop keeps turning; once it is
 * free, the verdict is acted on and the checkpoint published.  A stop
 * while it is out waits for it and then ends cleanly, nothing published.
 */
static void test_judge_off_loop(void)
{
	struct wsync_manifest m = { 0 };
	struct ctx c;
	struct inst *in;

	CHECK(ctx_init(&c) == 0);
	in = inst_config(&c, 1, 1);
	CHECK(loop_start(&c) == 0);
	CHECK(inst_start(in) == 0);
	CHECK(run_until(&c, first_idle, 10000));

	/* published once the jobs thread is free */
	__atomic_store_n(&jobs_held, 1, __ATOMIC_RELEASE);
	CHECK(wsync_jobs_submit(c.jobs, hold_work, hold_done, NULL) == 0);
	CHECK(make_checkpoint(&c, 100, 2, 20000));
	CHECK(run_until(&c, first_judging, 10000));
	run_for(&c, 300);	/* rescans come (every 100 ms): they wait for it */
	CHECK(in->p->judging && in->p->state == PUB_IDLE && !in->p->pub);
	CHECK(!saw(in, PUB_PREPARE));
	__atomic_store_n(&jobs_held, 0, __ATOMIC_RELEASE);
	want_version = 1;
	CHECK(run_until(&c, all_at_version, 10000));
	CHECK(!in->p->judging);
	CHECK_EQ_U64(bucket_head(&c, &m), 1);
	CHECK_EQ_U64(m.step, 100);
	wsync_manifest_free(&m);

	/* stopped while a judgement is out: the stop waits for it */
	__atomic_store_n(&jobs_held, 1, __ATOMIC_RELEASE);
	CHECK(wsync_jobs_submit(c.jobs, hold_work, hold_done, NULL) == 0);
	CHECK(make_checkpoint(&c, 200, 2, 20000));
	CHECK(run_until(&c, first_judging, 10000));
	wsync_publisher_stop(in->p);
	run_for(&c, 200);
	CHECK(!in->stopped && in->p->judging);
	__atomic_store_n(&jobs_held, 0, __ATOMIC_RELEASE);
	CHECK(run_until(&c, first_stopped, 10000));
	CHECK(!in->p->judging && in->p->state == PUB_STOPPED);
	CHECK_EQ_U64(bucket_head(&c, NULL), 1);
	CHECK(loop_stop(&c));
	ctx_free(&c);
}

/* Two parts on one bucket where part 2's record, parts/1/2.json, is a
 * directory (its parents made first): part 2 backs off retrying RECORD
 * while part 1 waits in GATHER, as parts_waiting sees it.  key gets the
 * record's key, p its path. */
static void parts_record_blocked(struct ctx *c, char *key, char *p, size_t n)
{
	CHECK(ctx_init(c) == 0);
	(void)inst_config(c, 1, 2);
	(void)inst_config(c, 2, 2);
	wsync_part_record_key(1, 2, key);
	snprintf(p, n, "%s/parts", c->bucket);
	CHECK(mkdir(p, 0755) == 0);
	snprintf(p, n, "%s/%.*s", c->bucket, (int)(strrchr(key, '/') - key), key);
	CHECK(mkdir(p, 0755) == 0);
	snprintf(p, n, "%s/%s", c->bucket, key);
	CHECK(mkdir(p, 0755) == 0);
	CHECK(loop_start(c) == 0);
	CHECK(inst_start(&c->inst[0]) == 0);
	CHECK(inst_start(&c->inst[1]) == 0);
	CHECK(make_checkpoint(c, 100, 2, 30000));
	want_retry = PUB_RECORD;
	CHECK(run_until(c, parts_waiting, 8000));
}

/* Parts stopped while they wait: part 1 in GATHER (part 2's record
 * cannot be written), part 2 in BACKOFF retrying RECORD.  Both end, the
 * loop closes, and no HEAD was written. */
static void test_parts_stop_while_waiting(void)
{
	char key[WSYNC_PART_KEY_MAX], p[PATH_MAX + WSYNC_PART_KEY_MAX + 2];
	struct ctx c;

	parts_record_blocked(&c, key, p, sizeof(p));
	CHECK(c.inst[0].p && c.inst[0].p->state == PUB_GATHER);
	CHECK(inst_stop(&c.inst[0]));
	CHECK(inst_stop(&c.inst[1]));
	CHECK(loop_stop(&c));
	CHECK(!exists(c.bucket, "HEAD"));
	ctx_free(&c);
}

/* A publisher whose state is lost (its state_dir emptied, a node
 * replaced) on a bucket whose HEAD holds the newest checkpoint: the
 * checkpoint is hashed against HEAD's manifest and becomes the base
 * again -- HEAD stays, nothing is uploaded -- and the next checkpoint is a
 * delta on it.  One that differs from HEAD's files is published. */
static void test_state_lost(void)
{
	struct wsync_manifest m = { 0 };
	char mkey[WSYNC_MANIFEST_KEY_MAX];
	struct ctx c;
	struct inst *in;

	CHECK(ctx_init(&c) == 0);
	in = inst_config(&c, 1, 1);
	CHECK(loop_start(&c) == 0);
	CHECK(inst_start(in) == 0);
	CHECK(make_checkpoint(&c, 100, 2, 20000));
	want_version = 1;
	CHECK(run_until(&c, all_at_version, 10000));
	CHECK(inst_stop(in));
	CHECK(loop_stop(&c));

	rm_rf(in->state_dir);
	CHECK(loop_start(&c) == 0);
	in->n_seen = 0;
	CHECK(inst_start(in) == 0);
	CHECK(run_until(&c, all_at_version, 10000));
	run_for(&c, 1500);	/* past settle_time and the job */
	CHECK(saw(in, PUB_PREPARE) && saw(in, PUB_COMMIT));	/* hashed, then the base */
	CHECK(!saw(in, PUB_UPLOAD) && !saw(in, PUB_MANIFEST) && !saw(in, PUB_HEAD));
	CHECK_EQ_U64(bucket_head(&c, NULL), 1);
	wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, 2, mkey);
	CHECK(!exists(c.bucket, mkey));
	CHECK(in->p && in->p->has_step && in->p->step == 100 && !in->p->need_anchor);

	/* the next one: a delta on the base taken back */
	CHECK(make_checkpoint(&c, 200, 2, 20000));
	want_version = 2;
	CHECK(run_until(&c, all_at_version, 10000));
	CHECK_EQ_U64(bucket_head(&c, &m), 2);
	CHECK(m.kind == WSYNC_MANIFEST_DELTA && m.base_version == 1);
	wsync_manifest_free(&m);
	CHECK(inst_stop(in));
	CHECK(loop_stop(&c));

	/* lost again, and the newest checkpoint is not HEAD's (its files
	 * changed since): published, as a full anchor */
	rm_rf(in->state_dir);
	{
		char f[PATH_MAX + 64];

		snprintf(f, sizeof(f), "%s/checkpoint-200/config.json", c.train);
		CHECK(write_file(f, "{\"hidden\": 9}\n", 14));
	}
	CHECK(loop_start(&c) == 0);
	CHECK(inst_start(in) == 0);
	want_version = 3;
	CHECK(run_until(&c, all_at_version, 10000));
	CHECK_EQ_U64(bucket_head(&c, &m), 3);
	CHECK(m.kind == WSYNC_MANIFEST_ANCHOR && m.base_version == 0);
	wsync_manifest_free(&m);
	CHECK(loop_stop(&c));
	ctx_free(&c);
}

/*
 * A rotation after a leaked key (issue 40): key A signs version 1, then a
 * HEAD forged with A names version 999999999999.  Restarted with key B,
 * the publisher does not number from it (B does not verify it): the next
 * checkpoint is version 2 -- its own last + 1 from state.json, which
 * recorded A's key id -- a full anchor signed by B, written over the
 * forged HEAD.
 */
static void test_key_rotated(void)
{
	struct wsync_sign_key *ka = NULL, *kb = NULL;
	struct wsync_manifest_head h = { 0 };
	struct wsync_buf doc = { 0 };
	struct wsync_error err = { 0 };
	struct wsync_manifest m = { 0 };
	char pa[PATH_MAX + 16], pb[PATH_MAX + 16], pub[PATH_MAX + 32], f[PATH_MAX + 32];
	char *text;
	size_t len = 0;
	struct ctx c;
	struct inst *in;

	CHECK(ctx_init(&c) == 0);
	snprintf(pa, sizeof(pa), "%s/A.key", c.root);
	snprintf(pb, sizeof(pb), "%s/B.key", c.root);
	snprintf(pub, sizeof(pub), "%s.pub", pa);
	CHECK(wsync_sign_keygen(pa, pub, &ka, &err) == 0);
	snprintf(pub, sizeof(pub), "%s.pub", pb);
	CHECK(wsync_sign_keygen(pb, pub, &kb, &err) == 0);
	in = inst_config(&c, 1, 1);
	in->cfg.signing_key = strdup(pa);
	CHECK(loop_start(&c) == 0);
	CHECK(inst_start(in) == 0);
	CHECK(make_checkpoint(&c, 100, 2, 20000));
	want_version = 1;
	CHECK(run_until(&c, all_at_version, 10000));
	CHECK(inst_stop(in));
	CHECK(loop_stop(&c));
	snprintf(f, sizeof(f), "%s/publisher/state.json", in->state_dir);
	text = read_all(f, &len);
	CHECK(text && strstr(text, wsync_sign_key_id(ka)));
	free(text);

	/* the forged HEAD, signed by A */
	h.version = 999999999999ull;
	h.created = 1764687600;
	h.manifest.key = "manifests/999999999999.json";
	h.manifest.size = 100;
	CHECK(wsync_manifest_head_serialize(&h, ka, &doc, &err) == 0);
	snprintf(f, sizeof(f), "%s/HEAD", c.bucket);
	CHECK(write_file(f, doc.data, doc.len));
	wsync_buf_free(&doc);

	free(in->cfg.signing_key);
	in->cfg.signing_key = strdup(pb);
	CHECK(loop_start(&c) == 0);
	in->n_seen = 0;
	CHECK(inst_start(in) == 0);
	CHECK(make_checkpoint(&c, 200, 2, 20000));
	want_version = 2;
	CHECK(run_until(&c, all_at_version, 10000));
	CHECK_EQ_U64(bucket_head(&c, &m), 2);
	CHECK(m.kind == WSYNC_MANIFEST_ANCHOR && m.base_version == 0);
	CHECK(strcmp(m.signature.key_id, wsync_sign_key_id(kb)) == 0);
	wsync_manifest_free(&m);
	text = read_all(f, &len);
	CHECK(text && wsync_manifest_head_parse(text, len, kb, &h, &err) == 0 && h.version == 2);
	wsync_manifest_head_free(&h);
	free(text);
	CHECK(inst_stop(in));
	CHECK(loop_stop(&c));
	wsync_sign_key_free(ka);
	wsync_sign_key_free(kb);
	ctx_free(&c);
}

/* ---- one writer per bucket (BUCKET.md §8) ---- */

static struct inst *want_inst;
static enum pub_state want_state;

static bool inst_in_state(struct ctx *c)
{
	(void)c;
	return want_inst->p && want_inst->p->state == want_state && !want_inst->p->pub;
}

static bool inst_at_version(struct ctx *c)
{
	return inst_in_state(c) && want_inst->p->head_version == want_version;
}

static size_t count_manifests(struct ctx *c)
{
	char d[PATH_MAX + 32];
	struct dirent *e;
	size_t n = 0;
	DIR *dir;

	snprintf(d, sizeof(d), "%s/manifests", c->bucket);
	dir = opendir(d);
	if (!dir)
		return 0;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

/*
 * A second publisher (its own state_dir, the same folder and bucket)
 * stands by while the first holds the writer lease; a clean stop hands
 * the bucket over at once, and the new writer publishes nothing the
 * bucket holds already; a writer whose lease goes unrenewed is taken
 * over after writer_lease, and the old one, finding it gone, writes
 * nothing more.
 */
static void test_two_writers(void)
{
	struct wsync_manifest m = { 0 };
	struct inst *a, *b;
	struct status st;
	struct ctx c;
	char f[PATH_MAX + 64];

	CHECK(ctx_init(&c) == 0);
	a = inst_config(&c, 1, 1);
	b = inst_config(&c, 2, 1);	/* state2, run2: another publisher, not a part */
	a->cfg.writer_lease_ms = b->cfg.writer_lease_ms = 3000;
	CHECK(loop_start(&c) == 0);
	CHECK(inst_start(a) == 0);
	CHECK(make_checkpoint(&c, 100, 1, 20000));
	want_inst = a;
	want_state = PUB_IDLE;
	want_version = 1;
	CHECK(run_until(&c, inst_at_version, 10000));
	snprintf(f, sizeof(f), "%s/writers/1.json", c.bucket);
	CHECK(access(f, F_OK) == 0);

	/* b stands by, says so, writes nothing */
	CHECK(inst_start(b) == 0);
	want_inst = b;
	want_state = PUB_STANDBY;
	CHECK(run_until(&c, inst_in_state, 5000));
	CHECK(read_status(b, &st));
	CHECK_STR(st.phase, "standby");
	CHECK_CONTAINS(st.message, "another publisher writes the bucket");
	CHECK_CONTAINS(st.message, a->state_dir);
	CHECK(b->p->metrics.standby || b->p->state == PUB_STANDBY);
	CHECK(make_checkpoint(&c, 200, 1, 20000));
	want_inst = a;
	want_state = PUB_IDLE;
	want_version = 2;
	CHECK(run_until(&c, inst_at_version, 10000));
	run_for(&c, 1500);	/* b polls the lease: still a's */
	CHECK(b->p->state == PUB_STANDBY);
	CHECK_EQ_U64(count_manifests(&c), 2);

	/* the handover: a stops (deleting its lease), b takes over within a
	 * third of writer_lease and publishes nothing HEAD holds */
	CHECK(inst_stop(a));
	CHECK(access(f, F_OK) < 0);
	want_inst = b;
	want_state = PUB_IDLE;
	CHECK(run_until(&c, inst_in_state, 5000));
	run_for(&c, 1500);	/* past settle_time: checkpoint-200 judged and hashed */
	CHECK(b->p->state == PUB_IDLE && b->p->lease.held);
	CHECK_EQ_U64(bucket_head(&c, NULL), 2);
	CHECK_EQ_U64(count_manifests(&c), 2);
	CHECK(b->p->has_step && b->p->step == 200 && !b->p->need_anchor);
	CHECK(make_checkpoint(&c, 300, 1, 20000));
	want_version = 3;
	CHECK(run_until(&c, inst_at_version, 10000));
	CHECK_EQ_U64(bucket_head(&c, &m), 3);
	CHECK(m.kind == WSYNC_MANIFEST_DELTA && m.base_version == 2);	/* on the adopted base */
	wsync_manifest_free(&m);

	/* failover: b's lease stops being renewed (as if hung); a, started
	 * again, stands by, then takes over after writer_lease.  Not while
	 * a request of b's lease is in flight: HEAD written, b reads its
	 * lease back, and that answer starts the renewals again as it lands
	 * (under load a never took over) */
	for (int i = 0; i < 200 && b->p->lease.inflight; i++)
		run_for(&c, 50);
	CHECK(b->p->lease.inflight == 0);
	uv_timer_stop(&b->p->lease.timer);
	CHECK(inst_start(a) == 0);
	want_inst = a;
	want_state = PUB_STANDBY;
	CHECK(run_until(&c, inst_in_state, 5000));
	want_state = PUB_IDLE;
	CHECK(run_until(&c, inst_in_state, 8000));
	CHECK(a->p->lease.held);
	CHECK_EQ_U64(a->p->metrics.writer_takeovers, 1);
	/* b finds it out at its next write, or at the next renewal: either
	 * way step 400 is a's version 4 alone */
	run_for(&c, 3100);	/* b's own lease is stale by its own clock now */
	CHECK(make_checkpoint(&c, 400, 1, 20000));
	want_version = 4;
	CHECK(run_until(&c, inst_at_version, 10000));
	run_for(&c, 1500);
	CHECK_EQ_U64(bucket_head(&c, NULL), 4);
	want_inst = b;
	want_state = PUB_STANDBY;
	CHECK(run_until(&c, inst_in_state, 15000));	/* (its own publication of 400
							 * dropped first, under load) */
	CHECK(!b->p->lease.held);
	CHECK_EQ_U64(bucket_head(&c, NULL), 4);
	CHECK_EQ_U64(count_manifests(&c), 4);
	CHECK(inst_stop(b));
	CHECK(access(f, F_OK) == 0);	/* b deletes no lease of a's */
	CHECK(inst_stop(a));
	CHECK(loop_stop(&c));
	ctx_free(&c);
}

/* A stop while RECOVER backs off (no bucket directory): the role ends
 * at once, without waiting for the retry. */
static void test_stop_in_recover_backoff(void)
{
	struct ctx c;
	struct inst *in;
	uint64_t t0;

	CHECK(ctx_init(&c) == 0);
	in = inst_config(&c, 1, 1);
	CHECK(loop_start(&c) == 0);
	CHECK(rmdir(c.bucket) == 0);
	CHECK(symlink("/nonexistent/wsync-test-bucket", c.bucket) == 0);	/* (above) */
	CHECK(inst_start(in) == 0);
	want_retry = PUB_LEASE;
	CHECK(run_until(&c, first_backing_off, 5000));
	t0 = uv_now(&c.loop);
	wsync_publisher_stop(in->p);
	CHECK(run_until(&c, first_stopped, 5000));
	CHECK(uv_now(&c.loop) - t0 < 900);	/* not after the 1 s backoff */
	CHECK(!exists(c.root, "bucket"));
	CHECK(loop_stop(&c));
	ctx_free(&c);
}

/* ---- 4. the assignment rule ---- */

struct spec {
	const char *path;
	uint64_t size;
};

/* A tree of the files in spec (sorted by path, as ckscan makes them). */
static void tree_of(struct ckscan_tree *t, const struct spec *s, size_t n)
{
	memset(t, 0, sizeof(*t));
	t->files = calloc(n ? n : 1, sizeof(*t->files));
	if (!t->files)
		return;
	for (size_t i = 0; i < n; i++) {
		t->files[i].path = strdup(s[i].path);
		t->files[i].size = s[i].size;
		t->total_bytes += s[i].size;
		if (i)
			CHECK(strcmp(s[i - 1].path, s[i].path) < 0);
	}
	t->n = n;
}

/* pub_parts_assign of spec into parts; owner[] checked against want. */
static void check_assign(const struct spec *s, size_t n, unsigned parts, const unsigned *want)
{
	struct ckscan_tree t;
	unsigned owner[16];

	tree_of(&t, s, n);
	CHECK(pub_parts_assign(&t, parts, owner) == 0);
	for (size_t i = 0; i < n; i++)
		if (owner[i] != want[i]) {
			tap_case_failed = 1;
			printf("# %u parts: %s to part %u, expected %u\n", parts, s[i].path,
			       owner[i], want[i]);
		}
	ckscan_tree_free(&t);
}

static void test_assign_rule(void)
{
	/* config.json's 10 bytes count in part 1's load: a (100) goes to 2,
	 * b (100, after a by path) to 1, c (50) to 2 (100 < 110) */
	static const struct spec mixed[] = { { "a.safetensors", 100 },
					     { "b.safetensors", 100 },
					     { "c.safetensors", 50 },
					     { "config.json", 10 } };
	static const unsigned mixed2[] = { 2, 1, 2, 1 };
	/* three parts: a 2, b 3, c 1 (10 < 100), config 1 */
	static const unsigned mixed3[] = { 2, 3, 1, 1 };
	/* equal sizes, no other file: ties by path, each to the lowest K */
	static const struct spec equal[] = { { "s1.safetensors", 64 },
					     { "s2.safetensors", 64 },
					     { "s3.safetensors", 64 },
					     { "s4.safetensors", 64 } };
	static const unsigned equal2[] = { 1, 2, 1, 2 };
	static const unsigned equal3[] = { 1, 2, 3, 1 };
	/* more parts than shards: parts 3 and 4 get nothing */
	static const struct spec two[] = { { "big.safetensors", 500 },
					   { "small.safetensors", 5 },
					   { "tokenizer.json", 1 } };
	static const unsigned two4[] = { 2, 3, 1 };
	/* nested paths and largest first regardless of path order */
	static const struct spec nested[] = { { "a/x.safetensors", 10 },
					      { "b/y.safetensors", 30 },
					      { "c/z.safetensors", 20 } };
	static const unsigned nested2[] = { 2, 1, 2 };
	/* one part: everything is part 1's */
	static const unsigned nested1[] = { 1, 1, 1 };
	/* a file that is not a shard, however large, is part 1's */
	static const struct spec notshard[] = { { "huge.bin", 1000 },
						{ "w.safetensors", 1 },
						{ "x.safetensors.index.json", 5 } };
	static const unsigned notshard2[] = { 1, 2, 1 };

	check_assign(mixed, 4, 2, mixed2);
	check_assign(mixed, 4, 3, mixed3);
	check_assign(equal, 4, 2, equal2);
	check_assign(equal, 4, 3, equal3);
	check_assign(two, 3, 4, two4);
	check_assign(nested, 3, 2, nested2);
	check_assign(nested, 3, 1, nested1);
	check_assign(notshard, 3, 2, notshard2);
}

/* A shard that grows moves to another part. */
static void test_assign_moves(void)
{
	struct spec s[] = { { "a.safetensors", 100 }, { "b.safetensors", 90 },
			    { "c.safetensors", 20 } };
	static const unsigned before[] = { 1, 2, 2 };	/* loads 100, 110 */
	static const unsigned after[] = { 2, 1, 2 };	/* b 120 first: 120, 120 */

	check_assign(s, 3, 2, before);
	s[1].size = 120;
	check_assign(s, 3, 2, after);
}

static void test_select(void)
{
	static const struct spec mixed[] = { { "a.safetensors", 100 },
					     { "b.safetensors", 100 },
					     { "c.safetensors", 50 },
					     { "config.json", 10 } };
	static const struct spec two[] = { { "big.safetensors", 500 },
					   { "small.safetensors", 5 } };
	struct wsync_file_filter f;
	struct ckscan_tree t;
	char **others;
	size_t n_others;

	/* part 2 of 2: a and c; the others sorted */
	tree_of(&t, mixed, 4);
	CHECK_EQ_U64(pub_parts_select(&t, 2, 2, NULL, &others, &n_others), 2);
	CHECK_EQ_U64(t.n, 2);
	CHECK(t.n == 2 && strcmp(t.files[0].path, "a.safetensors") == 0 &&
	      strcmp(t.files[1].path, "c.safetensors") == 0);
	CHECK_EQ_U64(t.total_bytes, 150);
	CHECK_EQ_U64(n_others, 2);
	CHECK(n_others == 2 && strcmp(others[0], "b.safetensors") == 0 &&
	      strcmp(others[1], "config.json") == 0);
	pub_parts_others_free(others, n_others);
	ckscan_tree_free(&t);

	/* part 1 of 2: b and config.json; without others (dropped, freed) */
	tree_of(&t, mixed, 4);
	CHECK_EQ_U64(pub_parts_select(&t, 1, 2, NULL, NULL, NULL), 2);
	CHECK(t.n == 2 && strcmp(t.files[0].path, "b.safetensors") == 0 &&
	      strcmp(t.files[1].path, "config.json") == 0);
	CHECK_EQ_U64(t.total_bytes, 110);
	ckscan_tree_free(&t);

	/* more parts than shards: part 3 of 3 has nothing; all are others */
	tree_of(&t, two, 2);
	CHECK_EQ_U64(pub_parts_select(&t, 3, 3, NULL, &others, &n_others), 0);
	CHECK_EQ_U64(t.n, 0);
	CHECK_EQ_U64(t.total_bytes, 0);
	CHECK(n_others == 2 && strcmp(others[0], "big.safetensors") == 0 &&
	      strcmp(others[1], "small.safetensors") == 0);
	pub_parts_others_free(others, n_others);
	ckscan_tree_free(&t);

	/* one part: everything kept, no others */
	tree_of(&t, mixed, 4);
	CHECK_EQ_U64(pub_parts_select(&t, 1, 1, NULL, &others, &n_others), 4);
	CHECK(others == NULL && n_others == 0);
	ckscan_tree_free(&t);

	/* part_files: the filter decides, not the rule */
	CHECK(wsync_file_filter_init(&f, "config.json c*", "") == 0);
	tree_of(&t, mixed, 4);
	CHECK_EQ_U64(pub_parts_select(&t, 2, 2, &f, &others, &n_others), 2);
	CHECK(t.n == 2 && strcmp(t.files[0].path, "c.safetensors") == 0 &&
	      strcmp(t.files[1].path, "config.json") == 0);
	CHECK_EQ_U64(t.total_bytes, 60);
	CHECK(n_others == 2 && strcmp(others[0], "a.safetensors") == 0 &&
	      strcmp(others[1], "b.safetensors") == 0);
	pub_parts_others_free(others, n_others);
	ckscan_tree_free(&t);
	wsync_file_filter_free(&f);
}

/* ---- 5. the merge ---- */

/* A hand-made record: part k of n, its files (paths), each a chunk of
 * `size` bytes in each object of roles (bit 0 delta, bit 1 anchor). */
struct hand_rec {
	struct wsync_part_record r;
	struct wsync_manifest_file files[4];
	struct wsync_part_chunk chunks[2][4];
	struct wsync_manifest_piece pieces[2][4];
	char keys[2][4][WSYNC_PART_KEY_MAX];
};

static const uint8_t flight[WSYNC_MANIFEST_FLIGHT_LEN] = { 0xf1, 0x1e, 7 };

static void hand_rec(struct hand_rec *h, uint64_t v, unsigned k, unsigned n, int roles,
		     const char *const *paths, size_t n_paths)
{
	static const uint8_t part_flight[WSYNC_MANIFEST_FLIGHT_LEN] = { 0xab };

	memset(h, 0, sizeof(*h));
	h->r.version = v;
	h->r.part = k;
	h->r.parts = n;
	h->r.step = 1000;
	h->r.base_version = roles & 1 ? v - 1 : 0;
	memcpy(h->r.flight, part_flight, sizeof(part_flight));
	for (size_t i = 0; i < n_paths; i++) {
		h->files[i] = (struct wsync_manifest_file){ .path = (char *)paths[i],
							    .size = 1000 + i };
		h->files[i].hash.b[0] = (uint8_t)(i + 1);
	}
	h->r.files = h->files;
	h->r.n_files = n_paths;
	for (int role = 0; role < 2; role++) {
		struct wsync_part_object *o;

		if (!(roles & (1 << role)))
			continue;
		o = &h->r.objects[h->r.n_objects++];
		o->role = role ? WSYNC_MANIFEST_ROLE_ANCHOR : WSYNC_MANIFEST_ROLE_DELTA;
		o->chunks = h->chunks[role];
		o->n_chunks = n_paths;
		o->write_bytes = 100 * n_paths;
		for (size_t i = 0; i < n_paths; i++) {
			struct wsync_part_chunk *ch = &h->chunks[role][i];

			ch->key = (char *)wsync_part_chunk_key(v, k, part_flight, o->role,
							       (unsigned)i + 1, h->keys[role][i]);
			ch->size = 40 + 10 * k + i;
			ch->sha256[0] = (uint8_t)k;
			ch->sha256[1] = (uint8_t)i;
			ch->path = (char *)paths[i];
			h->pieces[role][i].length = ch->size;
			ch->pieces = &h->pieces[role][i];
			ch->n_pieces = 1;
		}
	}
}

/* Merge the records of h[0..n) as version v, into *m (zeroed first): the
 * objects' keys "deltas/d<v>" and "anchors/a<v>", which *m borrows
 * until the next call.  pub_parts_merge's return. */
static int merge_hand(const struct hand_rec *h, unsigned n, uint64_t v, struct pub_merge *m,
		      struct wsync_error *err)
{
	static char dkey[32], akey[32];
	struct wsync_part_record recs[MAX_INST];

	if (n > MAX_INST)
		return -E2BIG;
	for (unsigned k = 0; k < n; k++)
		recs[k] = h[k].r;
	snprintf(dkey, sizeof(dkey), "deltas/d%llu", (unsigned long long)v);
	snprintf(akey, sizeof(akey), "anchors/a%llu", (unsigned long long)v);
	memset(m, 0, sizeof(*m));
	*err = (struct wsync_error){ 0 };
	return pub_parts_merge(recs, n, v, flight, dkey, akey, m, err);
}

/* The merged object o is preamble, the chunks of paths (in that order,
 * from the records), END. */
static void check_object(const struct pub_merge *m, size_t idx, enum wsync_manifest_role role,
			 uint64_t v, const char *key, const char *const *paths, size_t n,
			 const struct hand_rec *const *recs, unsigned parts)
{
	const struct wsync_manifest_object *o = &m->merged[idx];
	char want[WSYNC_PART_KEY_MAX];
	uint8_t frame[WSYNC_DELTA_PREAMBLE_LEN + WSYNC_DELTA_END_RECORD_LEN], sha[32];
	uint64_t off = WSYNC_DELTA_PREAMBLE_LEN, wb = 0;

	CHECK(o->role == role);
	CHECK_STR(o->ref.key, key);
	CHECK(o->hashless);
	CHECK_EQ_U64(o->n_chunks, n + 2);
	if (o->n_chunks != n + 2 || !o->index)
		return;
	/* the committer's frame: preamble and END record under part 0 */
	CHECK_STR(o->chunks[0].key, wsync_part_chunk_key(v, 0, flight, role, 1, want));
	CHECK_STR(o->chunks[n + 1].key, wsync_part_chunk_key(v, 0, flight, role, 2, want));
	CHECK_EQ_U64(o->chunks[0].size, WSYNC_DELTA_PREAMBLE_LEN);
	CHECK_EQ_U64(o->chunks[n + 1].size, WSYNC_DELTA_END_RECORD_LEN);
	for (unsigned k = 0; k < parts; k++)
		for (size_t i = 0; i < recs[k]->r.n_objects; i++)
			if (recs[k]->r.objects[i].role == role)
				wb += recs[k]->r.objects[i].write_bytes;
	wsync_delta_preamble(frame);
	wsync_delta_end_record(frame + WSYNC_DELTA_PREAMBLE_LEN, n, wb);
	CHECK(memcmp(m->frame[idx], frame, sizeof(frame)) == 0);
	CHECK(wsync_sha256_mem(frame, WSYNC_DELTA_PREAMBLE_LEN, sha) == 0 &&
	      memcmp(sha, o->chunks[0].sha256, 32) == 0);
	CHECK(wsync_sha256_mem(frame + WSYNC_DELTA_PREAMBLE_LEN, WSYNC_DELTA_END_RECORD_LEN,
			       sha) == 0 && memcmp(sha, o->chunks[n + 1].sha256, 32) == 0);
	CHECK_EQ_U64(o->index->head.length, WSYNC_DELTA_PREAMBLE_LEN);
	CHECK_EQ_U64(o->index->n_files, n);
	for (size_t i = 0; i < n && i < o->index->n_files; i++) {
		const struct wsync_part_chunk *src = NULL;

		for (unsigned k = 0; k < parts && !src; k++)
			for (size_t j = 0; j < recs[k]->r.n_objects && !src; j++) {
				const struct wsync_part_object *po = &recs[k]->r.objects[j];

				if (po->role != role)
					continue;
				for (size_t q = 0; q < po->n_chunks; q++)
					if (strcmp(po->chunks[q].path, paths[i]) == 0)
						src = &po->chunks[q];
			}
		CHECK(src != NULL);
		if (!src)
			return;
		CHECK_STR(o->index->files[i].path, paths[i]);
		CHECK_STR(o->chunks[i + 1].key, src->key);
		CHECK_EQ_U64(o->chunks[i + 1].size, src->size);
		CHECK(memcmp(o->chunks[i + 1].sha256, src->sha256, 32) == 0);
		CHECK_EQ_U64(o->index->files[i].offset, off);
		CHECK_EQ_U64(o->index->files[i].length, src->size);
		off += src->size;
	}
	CHECK_EQ_U64(o->ref.size, off + WSYNC_DELTA_END_RECORD_LEN);
}

static void check_files(const struct pub_merge *m, const char *const *paths, size_t n)
{
	CHECK_EQ_U64(m->n_files, n);
	for (size_t i = 0; i < n && i < m->n_files; i++)
		CHECK_STR(m->files[i].path, paths[i]);
}

static void test_merge_two(void)
{
	static const char *const p1[] = { "config.json", "m-b.safetensors" };
	static const char *const p2[] = { "m-a.safetensors", "m-c.safetensors" };
	static const char *const all[] = { "config.json", "m-a.safetensors", "m-b.safetensors",
					   "m-c.safetensors" };
	struct hand_rec h[2];
	const struct hand_rec *hr[2] = { &h[0], &h[1] };
	struct pub_merge m;
	struct wsync_error err = { 0 };

	/* version 1: anchors only */
	hand_rec(&h[0], 1, 1, 2, 2, p1, 2);
	hand_rec(&h[1], 1, 2, 2, 2, p2, 2);
	CHECK(merge_hand(h, 2, 1, &m, &err) == 0);
	CHECK_EQ_U64(m.n_merged, 1);
	check_object(&m, 0, WSYNC_MANIFEST_ROLE_ANCHOR, 1, "anchors/a1", all, 4, hr, 2);
	check_files(&m, all, 4);
	pub_parts_merge_free(&m);
	CHECK(m.n_merged == 0 && m.files == NULL);

	/* version 7: delta and anchor from both, anchor listed first */
	hand_rec(&h[0], 7, 1, 2, 3, p1, 2);
	hand_rec(&h[1], 7, 2, 2, 3, p2, 2);
	CHECK(merge_hand(h, 2, 7, &m, &err) == 0);
	CHECK_EQ_U64(m.n_merged, 2);
	check_object(&m, 0, WSYNC_MANIFEST_ROLE_ANCHOR, 7, "anchors/a7", all, 4, hr, 2);
	check_object(&m, 1, WSYNC_MANIFEST_ROLE_DELTA, 7, "deltas/d7", all, 4, hr, 2);
	check_files(&m, all, 4);
	pub_parts_merge_free(&m);

	/* version 8: deltas only */
	hand_rec(&h[0], 8, 1, 2, 1, p1, 2);
	hand_rec(&h[1], 8, 2, 2, 1, p2, 2);
	CHECK(merge_hand(h, 2, 8, &m, &err) == 0);
	CHECK_EQ_U64(m.n_merged, 1);
	check_object(&m, 0, WSYNC_MANIFEST_ROLE_DELTA, 8, "deltas/d8", all, 4, hr, 2);
	pub_parts_merge_free(&m);
}

static void test_merge_three(void)
{
	static const char *const p1[] = { "config.json", "z.safetensors" };
	static const char *const p2[] = { "b.safetensors" };
	static const char *const p3[] = { "a.safetensors", "sub/c.safetensors", "y.safetensors" };
	static const char *const all[] = { "a.safetensors", "b.safetensors", "config.json",
					   "sub/c.safetensors", "y.safetensors",
					   "z.safetensors" };
	static const char *const shards[] = { "a.safetensors", "b.safetensors", "config.json",
					      "sub/c.safetensors", "y.safetensors",
					      "z.safetensors" };
	struct hand_rec h[3];
	const struct hand_rec *hr[3] = { &h[0], &h[1], &h[2] };
	struct pub_merge m;
	struct wsync_error err = { 0 };

	hand_rec(&h[0], 4, 1, 3, 3, p1, 2);
	hand_rec(&h[1], 4, 2, 3, 3, p2, 1);
	hand_rec(&h[2], 4, 3, 3, 3, p3, 3);
	CHECK(merge_hand(h, 3, 4, &m, &err) == 0);
	CHECK_EQ_U64(m.n_merged, 2);
	check_object(&m, 0, WSYNC_MANIFEST_ROLE_ANCHOR, 4, "anchors/a4", shards, 6, hr, 3);
	check_object(&m, 1, WSYNC_MANIFEST_ROLE_DELTA, 4, "deltas/d4", shards, 6, hr, 3);
	check_files(&m, all, 6);
	pub_parts_merge_free(&m);

	/* some parts sent an anchor too, not all: every one has a delta, so
	 * the version is a delta */
	hand_rec(&h[1], 4, 2, 3, 1, p2, 1);
	CHECK(merge_hand(h, 3, 4, &m, &err) == 0);
	CHECK_EQ_U64(m.n_merged, 1);
	check_object(&m, 0, WSYNC_MANIFEST_ROLE_DELTA, 4, "deltas/d4", shards, 6, hr, 3);
	pub_parts_merge_free(&m);
}

/* A file whose records a part cut into two chunks: both listed in the
 * part's order, one file of the index over both, counted once by END. */
static void test_merge_file_in_chunks(void)
{
	static const char *const p1[] = { "a.json", "c.safetensors", "c.safetensors" };
	static const char *const p2[] = { "b.safetensors", "d.safetensors" };
	static const char *const files[] = { "a.json", "b.safetensors", "c.safetensors",
					     "d.safetensors" };
	struct hand_rec h[2];
	struct pub_merge m;
	struct wsync_error err = { 0 };
	const struct wsync_manifest_object *o;
	const struct wsync_manifest_range *c;
	uint8_t frame[WSYNC_DELTA_END_RECORD_LEN];

	hand_rec(&h[0], 5, 1, 2, 1, p1, 3);
	h[0].r.n_files = 2;	/* its files: a.json and c.safetensors */
	hand_rec(&h[1], 5, 2, 2, 1, p2, 2);
	CHECK(merge_hand(h, 2, 5, &m, &err) == 0);
	CHECK_EQ_U64(m.n_merged, 1);
	o = &m.merged[0];
	CHECK_EQ_U64(o->n_chunks, 5 + 2);
	/* c's two chunks in the part's order: keys 00003 then 00004 */
	CHECK_STR(o->chunks[3].key, h[0].chunks[0][1].key);
	CHECK_STR(o->chunks[4].key, h[0].chunks[0][2].key);
	CHECK_STR(o->chunks[2].key, h[1].chunks[0][0].key);
	CHECK(o->index && o->index->n_files == 4);
	if (!o->index || o->index->n_files != 4) {
		pub_parts_merge_free(&m);
		return;
	}
	for (size_t i = 0; i < 4; i++)
		CHECK_STR(o->index->files[i].path, files[i]);
	c = &o->index->files[2];
	CHECK_STR(c->path, "c.safetensors");
	CHECK_EQ_U64(c->offset, WSYNC_DELTA_PREAMBLE_LEN + h[0].chunks[0][0].size +
				h[1].chunks[0][0].size);
	CHECK_EQ_U64(c->length, h[0].chunks[0][1].size + h[0].chunks[0][2].size);
	CHECK_EQ_U64(c->n_pieces, 2);
	CHECK_EQ_U64(c->pieces[0].length, h[0].chunks[0][1].size);
	CHECK_EQ_U64(c->pieces[1].length, h[0].chunks[0][2].size);
	CHECK_STR(o->index->files[3].path, "d.safetensors");
	CHECK_EQ_U64(o->index->files[3].offset, c->offset + c->length);
	/* the END record counts 4 files */
	wsync_delta_end_record(frame, 4, h[0].r.objects[0].write_bytes +
					 h[1].r.objects[0].write_bytes);
	CHECK(memcmp(m.frame[0] + WSYNC_DELTA_PREAMBLE_LEN, frame, sizeof(frame)) == 0);
	CHECK_EQ_U64(m.n_files, 4);
	pub_parts_merge_free(&m);
}

static void test_merge_refused(void)
{
	static const char *const p1[] = { "config.json", "x.safetensors" };
	static const char *const p2[] = { "x.safetensors" };
	static const char *const p3[] = { "y.safetensors" };
	struct hand_rec h[3];
	struct pub_merge m;
	struct wsync_error err = { 0 };

	/* a path in two parts */
	hand_rec(&h[0], 3, 1, 2, 3, p1, 2);
	hand_rec(&h[1], 3, 2, 2, 3, p2, 1);
	CHECK_EQ_U64((uint64_t)-merge_hand(h, 2, 3, &m, &err), EINVAL);
	CHECK_CONTAINS(err.msg, "x.safetensors is in the files of two parts");
	pub_parts_merge_free(&m);

	/* a path in the files of two parts, not in their chunks */
	hand_rec(&h[0], 3, 1, 2, 1, p1, 2);
	hand_rec(&h[1], 3, 2, 2, 1, p3, 1);
	h[1].files[0].path = "config.json";
	CHECK_EQ_U64((uint64_t)-merge_hand(h, 2, 3, &m, &err), EINVAL);
	CHECK_CONTAINS(err.msg, "config.json is in the files of two parts");
	pub_parts_merge_free(&m);

	/* neither all deltas nor all anchors */
	hand_rec(&h[0], 3, 1, 3, 1, p1, 2);
	hand_rec(&h[1], 3, 2, 3, 2, p3, 1);
	hand_rec(&h[2], 3, 3, 3, 3, p2, 1);
	CHECK_EQ_U64((uint64_t)-merge_hand(h, 3, 3, &m, &err), EINVAL);
	CHECK_CONTAINS(err.msg, "neither all a delta nor all an anchor");
	CHECK_EQ_U64(m.n_merged, 0);
	pub_parts_merge_free(&m);
}

/* Part 1's checks of another part's record (pub_parts_check_keys,
 * pub_parts_check_share, BUCKET.md §7): a record names only chunks of
 * its own part, version and flight under parts/<V>/ (from 00002), and,
 * by the rule, only files the rule gives that part, each chunk one of
 * its files'.  A part holding its own key must not be able to send
 * another's share nor point the manifest at any other object. */
static void test_parts_check_keys(void)
{
	static const char *const paths[] = { "b.safetensors", "d.safetensors" };
	static const char *const bad[] = {
		"../HEAD", "HEAD", "anchors/000000000001.wsa", "manifests/000000000005.json",
		"parts/000000000005/2.json", "parts/000000000005/../../HEAD",
	};
	struct hand_rec h;
	struct wsync_error err = { 0 };
	char key[WSYNC_PART_KEY_MAX];
	uint8_t other_flight[WSYNC_MANIFEST_FLIGHT_LEN] = { 0xcd };

	hand_rec(&h, 5, 2, 3, 3, paths, 2);
	for (int role = 0; role < 2; role++)	/* a part's own chunks are 00002.. */
		for (size_t i = 0; i < 2; i++)
			wsync_part_chunk_key(5, 2, h.r.flight, h.r.objects[role].role,
					     (unsigned)i + 2, h.keys[role][i]);
	CHECK_EQ_U64(pub_parts_check_keys(&h.r, 2, 5, &err), 0);
	/* as part 3's, or of another version: none of them is its own */
	CHECK_EQ_U64((uint64_t)-pub_parts_check_keys(&h.r, 3, 5, &err), EINVAL);
	CHECK_CONTAINS(err.msg, "is not one of part 3's own");
	CHECK_EQ_U64((uint64_t)-pub_parts_check_keys(&h.r, 2, 6, &err), EINVAL);

	for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
		h.chunks[1][1].key = (char *)bad[b];
		err = (struct wsync_error){ 0 };
		CHECK_EQ_U64((uint64_t)-pub_parts_check_keys(&h.r, 2, 5, &err), EINVAL);
		CHECK_CONTAINS(err.msg, "is not one of part 2's own for its flight");
	}
	/* another part's chunk, another flight's, the other role's, the
	 * preamble's number, a sixth digit */
	h.chunks[1][1].key = (char *)wsync_part_chunk_key(5, 3, h.r.flight, h.r.objects[1].role,
							  3, key);
	CHECK_EQ_U64((uint64_t)-pub_parts_check_keys(&h.r, 2, 5, &err), EINVAL);
	h.chunks[1][1].key = (char *)wsync_part_chunk_key(5, 2, other_flight,
							  h.r.objects[1].role, 3, key);
	CHECK_EQ_U64((uint64_t)-pub_parts_check_keys(&h.r, 2, 5, &err), EINVAL);
	h.chunks[1][1].key = (char *)wsync_part_chunk_key(5, 2, h.r.flight,
							  WSYNC_MANIFEST_ROLE_DELTA, 3, key);
	CHECK_EQ_U64((uint64_t)-pub_parts_check_keys(&h.r, 2, 5, &err), EINVAL);
	h.chunks[1][1].key = (char *)wsync_part_chunk_key(5, 2, h.r.flight, h.r.objects[1].role,
							  1, key);
	CHECK_EQ_U64((uint64_t)-pub_parts_check_keys(&h.r, 2, 5, &err), EINVAL);
	h.chunks[1][1].key = (char *)wsync_part_chunk_key(5, 2, h.r.flight, h.r.objects[1].role,
							  100000, key);
	CHECK_EQ_U64((uint64_t)-pub_parts_check_keys(&h.r, 2, 5, &err), EINVAL);
	h.chunks[1][1].key = (char *)wsync_part_chunk_key(5, 2, h.r.flight, h.r.objects[1].role,
							  99999, key);
	CHECK_EQ_U64(pub_parts_check_keys(&h.r, 2, 5, &err), 0);
}

static void test_parts_check_share(void)
{
	static const char *const paths[] = { "b.safetensors", "d.safetensors" };
	/* part 1's listing of the others' files, sorted, and whose each is */
	static char *const theirs[] = { "b.safetensors", "c.safetensors", "d.safetensors" };
	static const unsigned ok_part[] = { 2, 3, 2 }, moved_part[] = { 2, 2, 3 };
	struct hand_rec h;
	struct wsync_error err = { 0 };

	hand_rec(&h, 5, 2, 3, 3, paths, 2);
	CHECK_EQ_U64(pub_parts_check_share(&h.r, 2, theirs, ok_part, 3, &err), 0);
	/* a file the rule gives part 3 */
	CHECK_EQ_U64((uint64_t)-pub_parts_check_share(&h.r, 2, theirs, moved_part, 3, &err),
		     EINVAL);
	CHECK_CONTAINS(err.msg, "d.safetensors is not part 2's (by the rule it is part 3's)");
	/* part 3 sending part 2's files */
	hand_rec(&h, 5, 3, 3, 3, paths, 2);
	CHECK_EQ_U64((uint64_t)-pub_parts_check_share(&h.r, 3, theirs, ok_part, 3, &err),
		     EINVAL);
	CHECK_CONTAINS(err.msg, "b.safetensors is not part 3's (by the rule it is part 2's)");
	/* part 1's file, or one the checkpoint does not have */
	hand_rec(&h, 5, 2, 3, 3, paths, 2);
	h.files[0].path = "a.json";
	CHECK_EQ_U64((uint64_t)-pub_parts_check_share(&h.r, 2, theirs, ok_part, 3, &err),
		     EINVAL);
	CHECK_CONTAINS(err.msg, "a.json is not part 2's (by the rule it is part 1's, or");
	CHECK_EQ_U64((uint64_t)-pub_parts_check_share(&h.r, 2, theirs, ok_part, 0, &err),
		     EINVAL);
	/* a chunk of a file the record does not name */
	hand_rec(&h, 5, 2, 3, 3, paths, 2);
	h.chunks[0][1].path = "config.json";
	CHECK_EQ_U64((uint64_t)-pub_parts_check_share(&h.r, 2, theirs, ok_part, 3, &err),
		     EINVAL);
	CHECK_CONTAINS(err.msg, "its chunk of config.json is of no file it names");
}

/* ---- 6. several parts in one process ---- */

static void parts_publish(unsigned n)
{
	struct wsync_manifest m = { 0 };
	struct ctx c;

	CHECK(ctx_init(&c) == 0);
	for (unsigned k = 1; k <= n; k++)
		(void)inst_config(&c, k, n);
	CHECK(loop_start(&c) == 0);
	for (unsigned k = 0; k < n; k++)
		CHECK(inst_start(&c.inst[k]) == 0);
	/* n shards of decreasing sizes: each part takes one */
	CHECK(make_checkpoint(&c, 100, n, 30000));
	want_version = 1;
	CHECK(run_until(&c, all_at_version, 20000));
	for (unsigned k = 0; k < n; k++) {
		struct inst *in = &c.inst[k];

		if (!in->p)
			continue;
		CHECK_EQ_U64(in->p->head_version, 1);
		CHECK(saw(in, PUB_RECORD));
		CHECK(k == 0 ? saw(in, PUB_GATHER) && saw(in, PUB_HEAD) :
			       saw(in, PUB_WAIT) && !saw(in, PUB_HEAD));
	}
	CHECK_EQ_U64(bucket_head(&c, &m), 1);
	CHECK_EQ_U64(m.parts, n);
	CHECK(m.format_version == WSYNC_MANIFEST_FORMAT_VERSION_PARTS);
	CHECK_EQ_U64(m.step, 100);
	CHECK_EQ_U64(m.n_files, n + 2);	/* the shards, config, trainer_state */
	CHECK(wsync_manifest_find_object(&m, WSYNC_MANIFEST_ROLE_ANCHOR) != NULL);
	CHECK(objects_present(&c, &m));
	wsync_manifest_free(&m);

	/* the next step together: version 2, a delta of parts */
	CHECK(make_checkpoint(&c, 200, n, 30000));
	want_version = 2;
	CHECK(run_until(&c, all_at_version, 20000));
	CHECK_EQ_U64(bucket_head(&c, &m), 2);
	CHECK_EQ_U64(m.parts, n);
	CHECK_EQ_U64(m.base_version, 1);
	CHECK(wsync_manifest_find_object(&m, WSYNC_MANIFEST_ROLE_DELTA) != NULL);
	CHECK(objects_present(&c, &m));
	wsync_manifest_free(&m);
	CHECK(loop_stop(&c));
	ctx_free(&c);
}

/* Part 2's record cannot be written (a directory in its place): part 2
 * backs off retrying RECORD, part 1 waits in GATHER, HEAD is not
 * written; with the directory gone, the version of parts is committed. */
static void test_parts_record_failure(void)
{
	struct wsync_manifest m = { 0 };
	char key[WSYNC_PART_KEY_MAX], p[PATH_MAX + WSYNC_PART_KEY_MAX + 2];
	struct ctx c;
	struct status st;

	parts_record_blocked(&c, key, p, sizeof(p));
	CHECK_CONTAINS(c.inst[1].backoff_status, "bucket unreachable");
	CHECK(read_status(&c.inst[1], &st) && strcmp(st.state, "error") == 0 && !st.store_ok);
	CHECK(c.inst[0].p && c.inst[0].p->state == PUB_GATHER);
	CHECK(!exists(c.bucket, "HEAD"));
	CHECK(rmdir(p) == 0);
	want_version = 1;
	CHECK(run_until(&c, all_at_version, 15000));
	CHECK_EQ_U64(bucket_head(&c, &m), 1);
	CHECK_EQ_U64(m.parts, 2);
	CHECK(objects_present(&c, &m));
	wsync_manifest_free(&m);
	CHECK(loop_stop(&c));
	ctx_free(&c);
}

static void test_two_parts(void)
{
	parts_publish(2);
}

static void test_three_parts(void)
{
	parts_publish(3);
}

int main(int argc, char **argv)
{
	alarm(110);	/* a hang fails the run rather than the suite's timeout */
	wsync_log_set_target(WSYNC_LOG_TARGET_STDERR);
	wsync_log_set_level(getenv("WSYNC_TEST_DEBUG") ? LOG_DEBUG : LOG_CRIT);
	if (argc > 1) {	/* one case, by name: for debugging */
		static const struct { const char *name; void (*fn)(void); } cases[] = {
			{ "stop_in_prepare", test_stop_in_prepare },
			{ "stop_in_upload", test_stop_in_upload },
			{ "stop_in_backoff", test_stop_in_backoff },
			{ "stop_in_manifest", test_stop_in_manifest },
			{ "stop_in_head", test_stop_in_head },
			{ "stop_in_commit", test_stop_in_commit },
			{ "two_parts", test_two_parts },
			{ "three_parts", test_three_parts },
			{ "parts_record_failure", test_parts_record_failure },
			{ "parts_stop_while_waiting", test_parts_stop_while_waiting },
			{ "stop_in_head_backoff", test_stop_in_head_backoff },
			{ "judge_off_loop", test_judge_off_loop },
			{ "store_failures", test_store_failures },
			{ "two_writers", test_two_writers },
		};

		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			if (strcmp(argv[1], cases[i].name) == 0)
				TEST(cases[i].fn);
		return tap_done();
	}
	TEST(test_assign_rule);
	TEST(test_assign_moves);
	TEST(test_select);
	TEST(test_merge_two);
	TEST(test_merge_three);
	TEST(test_merge_file_in_chunks);
	TEST(test_merge_refused);
	TEST(test_parts_check_keys);
	TEST(test_parts_check_share);
	TEST(test_transitions);
	TEST(test_store_failures);
	TEST(test_stop_in_prepare);
	TEST(test_stop_in_upload);
	TEST(test_stop_in_backoff);
	TEST(test_stop_in_manifest);
	TEST(test_stop_in_head);
	TEST(test_stop_in_commit);
	TEST(test_stop_in_recover_backoff);
	TEST(test_key_rotated);
	TEST(test_state_lost);
	TEST(test_two_writers);
	TEST(test_stop_in_head_backoff);
	TEST(test_judge_off_loop);
	TEST(test_two_parts);
	TEST(test_three_parts);
	TEST(test_parts_record_failure);
	TEST(test_parts_stop_while_waiting);
	return tap_done();
}
