/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-store-file.c -- the store interface (store.h) on its file://
 * backend: put/get/head/list/delete round trips, ranges, conditional gets,
 * size and hash verification, the memory limit of a get, missing objects
 * and buckets, S3's prefix semantics and ordering in listings, temp files
 * that never show and never stay, symlinks planted in the bucket that are
 * never followed, conditional puts (if absent, if match: each condition
 * met, refused and raced; the bucket's lock never listed, never a key,
 * waited for by conditional puts only), 100 requests queued at once, and
 * freeing the store with
 * requests in flight (every callback runs once, nothing leaks: the tests
 * run under LeakSanitizer too).
 *
 * Each case makes its own bucket under a mkdtemp() directory, removed at
 * the end.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"
#include "store.h"
#include "store_backend.h"
#include "tap.h"

/* One request's outcome, copied out of the callback. */
struct got {
	int calls;
	int err;
	bool not_modified;
	uint64_t size;
	char etag[80];
	int64_t mtime;
	uint8_t *data;		/* taken with data_take */
	size_t data_len;
	char msg[WSYNC_ERROR_MSG_MAX];
	size_t n_entries;
	char **keys;
	uint64_t *sizes;
};

static void got_clear(struct got *g)
{
	wsync_store_data_free(g->data);
	for (size_t i = 0; i < g->n_entries; i++)
		free(g->keys[i]);
	free(g->keys);
	free(g->sizes);
	memset(g, 0, sizeof(*g));
}

static void on_done(struct wsync_store_result *res, void *userdata)
{
	struct got *g = userdata;

	g->calls++;
	g->err = res->err;
	g->not_modified = res->not_modified;
	g->size = res->size;
	snprintf(g->etag, sizeof(g->etag), "%s", res->etag ? res->etag : "(null)");
	g->mtime = res->mtime;
	snprintf(g->msg, sizeof(g->msg), "%s", res->err ? wsync_error_str(&res->error) : "");
	if (res->data) {
		g->data = res->data;
		g->data_len = res->data_len;
		res->data_take = true;
	}
	if (res->n_entries) {
		g->keys = calloc(res->n_entries, sizeof(*g->keys));
		g->sizes = calloc(res->n_entries, sizeof(*g->sizes));
		for (size_t i = 0; g->keys && g->sizes && i < res->n_entries; i++) {
			g->keys[i] = strdup(res->entries[i].key);
			g->sizes[i] = res->entries[i].size;
			g->n_entries++;
		}
	}
}

struct bucket {
	char dir[64];		/* the test's scratch directory */
	char root[96];		/* dir/bucket: the store */
	char url[128];
	struct wsync_store *store;
};

static bool bucket_open(struct bucket *b, unsigned max_concurrency)
{
	struct wsync_store_options opt = { .path_style = -1, .max_concurrency = max_concurrency };
	struct wsync_error err = { 0 };
	int r;

	snprintf(b->dir, sizeof(b->dir), "/tmp/wsync-test-store.XXXXXX");
	if (!mkdtemp(b->dir))
		return false;
	snprintf(b->root, sizeof(b->root), "%s/bucket", b->dir);
	if (mkdir(b->root, 0755) < 0)
		return false;
	snprintf(b->url, sizeof(b->url), "file://%s", b->root);
	opt.url = b->url;
	r = wsync_store_new(NULL, &opt, &b->store, &err);
	if (r < 0)
		printf("# wsync_store_new: %s\n", wsync_error_str(&err));
	return r == 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void bucket_close(struct bucket *b)
{
	wsync_store_free(b->store);
	b->store = NULL;
	if (b->dir[0])
		(void)nftw(b->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Blocking wrappers: submit, wait, return the callback's error (or the
 * submission's). */
static int put_buf(struct bucket *b, const char *key, const void *data, size_t len,
		   struct got *g)
{
	int r = wsync_store_put_buf(b->store, key, data, len, on_done, g);

	if (r < 0)
		return r;
	CHECK(wsync_store_wait(b->store) == 0);
	CHECK(g->calls == 1);
	return g->err;
}

static int put_str(struct bucket *b, const char *key, const char *s)
{
	struct got g = { 0 };
	int r = put_buf(b, key, s, strlen(s), &g);

	got_clear(&g);
	return r;
}

static int get_buf(struct bucket *b, const char *key, const struct wsync_store_get_options *o,
		   struct got *g)
{
	int r = wsync_store_get_buf(b->store, key, o, on_done, g);

	if (r < 0)
		return r;
	CHECK(wsync_store_wait(b->store) == 0);
	CHECK(g->calls == 1);
	return g->err;
}

static int get_file(struct bucket *b, const char *key, const char *path,
		    const struct wsync_store_get_options *o, struct got *g)
{
	int r = wsync_store_get_file(b->store, key, path, o, on_done, g);

	if (r < 0)
		return r;
	CHECK(wsync_store_wait(b->store) == 0);
	CHECK(g->calls == 1);
	return g->err;
}

static int head(struct bucket *b, const char *key, struct got *g)
{
	int r = wsync_store_head(b->store, key, on_done, g);

	if (r < 0)
		return r;
	CHECK(wsync_store_wait(b->store) == 0);
	CHECK(g->calls == 1);
	return g->err;
}

static int list(struct bucket *b, const char *prefix, struct got *g)
{
	int r = wsync_store_list(b->store, prefix, on_done, g);

	if (r < 0)
		return r;
	CHECK(wsync_store_wait(b->store) == 0);
	CHECK(g->calls == 1);
	return g->err;
}

static int del(struct bucket *b, const char *key)
{
	struct got g = { 0 };
	int r = wsync_store_delete(b->store, key, on_done, &g);

	if (r < 0)
		return r;
	CHECK(wsync_store_wait(b->store) == 0);
	CHECK(g.calls == 1);
	r = g.err;
	got_clear(&g);
	return r;
}

static int put_if(struct bucket *b, const char *key, const char *s,
		  const struct wsync_store_put_options *o, struct got *g)
{
	int r = wsync_store_put_buf_if(b->store, key, s, strlen(s), o, on_done, g);

	if (r < 0)
		return r;
	CHECK(wsync_store_wait(b->store) == 0);
	CHECK(g->calls == 1);
	return g->err;
}

static bool got_data_is(const struct got *g, const void *p, size_t n)
{
	if (g->data_len == n && (n == 0 || (g->data && memcmp(g->data, p, n) == 0)))
		return true;
	printf("# data: %zu bytes, expected %zu\n", g->data_len, n);
	return false;
}

static bool write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	bool ok;

	if (fd < 0)
		return false;
	ok = write(fd, p, n) == (ssize_t)n;
	return close(fd) == 0 && ok;
}

/* The whole of a small file, malloc'd; NULL if it cannot be read. */
static uint8_t *read_file(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *p;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !(p = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return NULL;
	}
	*len = (size_t)st.st_size;
	if (read(fd, p, *len) != (ssize_t)*len) {
		free(p);
		p = NULL;
	}
	close(fd);
	return p;
}

static bool file_is(const char *path, const void *want, size_t n)
{
	size_t len = 0;
	uint8_t *p = read_file(path, &len);
	bool ok = p && len == n && memcmp(p, want, n) == 0;

	if (!ok)
		printf("# %s: %s, %zu bytes (expected %zu)\n", path, p ? "differs" : "unreadable",
		       len, n);
	free(p);
	return ok;
}

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static unsigned temps_found;

static int count_temp(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	if (strncmp(path + ftw->base, ".wsync-tmp.", 11) == 0) {
		printf("# temp file left: %s\n", path);
		temps_found++;
	}
	return 0;
}

/* Temp files of ours anywhere under dir. */
static unsigned temps_under(const char *dir)
{
	temps_found = 0;
	(void)nftw(dir, count_temp, 16, FTW_PHYS);
	return temps_found;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (uint8_t)(x >> 24);
	}
}

/* ---- cases ---------------------------------------------------------------- */

/* put (buffer and file) -> head -> get (buffer and file) give back the same
 * bytes, with one ETag for one version of the object. */
static void test_round_trip(void)
{
	struct wsync_store_get_options gopt = WSYNC_STORE_GET_OPTIONS_INIT;
	struct bucket b = { 0 };
	struct got g = { 0 }, h = { 0 };
	char src[128], dst[128], path[192];
	uint8_t data[5000];
	char etag1[80];
	time_t now = time(NULL);

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	CHECK_STR(wsync_store_describe(b.store), b.url);
	fill(data, sizeof(data), 1);
	CHECK(put_buf(&b, "runs/1/model.delta", data, sizeof(data), &g) == 0);
	CHECK_EQ_U64(g.size, sizeof(data));
	CHECK(g.etag[0] == '"' && g.etag[strlen(g.etag) - 1] == '"');
	snprintf(etag1, sizeof(etag1), "%s", g.etag);
	got_clear(&g);
	snprintf(path, sizeof(path), "%s/runs/1/model.delta", b.root);
	CHECK(file_is(path, data, sizeof(data)));	/* a plain file, where it belongs */

	CHECK(head(&b, "runs/1/model.delta", &h) == 0);
	CHECK_EQ_U64(h.size, sizeof(data));
	CHECK_STR(h.etag, etag1);
	CHECK(h.mtime >= now - 5 && h.mtime <= now + 5);
	got_clear(&h);

	CHECK(get_buf(&b, "runs/1/model.delta", NULL, &g) == 0);
	CHECK(got_data_is(&g, data, sizeof(data)));
	CHECK_STR(g.etag, etag1);
	CHECK(!g.not_modified);
	got_clear(&g);

	/* from a file, into a file */
	snprintf(src, sizeof(src), "%s/src.bin", b.dir);
	snprintf(dst, sizeof(dst), "%s/dst.bin", b.dir);
	fill(data, sizeof(data), 2);
	CHECK(write_file(src, data, sizeof(data)));
	CHECK(wsync_store_put_file(b.store, "runs/1/model.delta", src, on_done, &g) == 0);
	CHECK(wsync_store_wait(b.store) == 0);
	CHECK(g.calls == 1 && g.err == 0);
	CHECK(strcmp(g.etag, etag1) != 0);	/* a new version, a new ETag */
	got_clear(&g);
	CHECK(write_file(dst, "old", 3));
	CHECK(get_file(&b, "runs/1/model.delta", dst, &gopt, &g) == 0);
	CHECK(file_is(dst, data, sizeof(data)));
	CHECK_EQ_U64(g.size, sizeof(data));
	CHECK(g.data == NULL);
	got_clear(&g);

	/* an empty object */
	CHECK(put_buf(&b, "empty", NULL, 0, &g) == 0);
	got_clear(&g);
	CHECK(get_buf(&b, "empty", NULL, &g) == 0);
	CHECK(g.size == 0 && g.data_len == 0);
	got_clear(&g);

	/* delete, then it is gone; deleting again is fine */
	CHECK(del(&b, "runs/1/model.delta") == 0);
	CHECK(head(&b, "runs/1/model.delta", &h) == -ENOENT);
	got_clear(&h);
	CHECK(del(&b, "runs/1/model.delta") == 0);
	CHECK(temps_under(b.dir) == 0);
	bucket_close(&b);
}

/* S3's ranges: inside, to the end, clamped at the end; a start at or past
 * the end is -EINVAL; res.size stays the object's size. */
static void test_ranges(void)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	struct bucket b = { 0 };
	struct got g = { 0 };
	uint8_t data[1000];
	char dst[128];

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	fill(data, sizeof(data), 3);
	CHECK(put_buf(&b, "obj", data, sizeof(data), &g) == 0);
	got_clear(&g);

	o.offset = 10;
	o.length = 20;
	CHECK(get_buf(&b, "obj", &o, &g) == 0);
	CHECK(got_data_is(&g, data + 10, 20));
	CHECK_EQ_U64(g.size, 1000);
	got_clear(&g);

	o.offset = 990;
	o.length = 0;
	CHECK(get_buf(&b, "obj", &o, &g) == 0);
	CHECK(got_data_is(&g, data + 990, 10));
	got_clear(&g);

	o.offset = 995;
	o.length = 100;
	CHECK(get_buf(&b, "obj", &o, &g) == 0);
	CHECK(got_data_is(&g, data + 995, 5));
	got_clear(&g);

	o.offset = 0;
	o.length = 1;
	CHECK(get_buf(&b, "obj", &o, &g) == 0);
	CHECK(got_data_is(&g, data, 1));
	got_clear(&g);

	o.offset = 1000;
	o.length = 0;
	CHECK(get_buf(&b, "obj", &o, &g) == -EINVAL);
	CHECK_CONTAINS(g.msg, "past the end");
	CHECK(g.data == NULL);
	got_clear(&g);

	/* a range into a file */
	snprintf(dst, sizeof(dst), "%s/part", b.dir);
	o.offset = 100;
	o.length = 300;
	CHECK(get_file(&b, "obj", dst, &o, &g) == 0);
	CHECK(file_is(dst, data + 100, 300));
	got_clear(&g);

	/* an empty object has no byte 0 */
	CHECK(put_buf(&b, "empty", "", 0, &g) == 0);
	got_clear(&g);
	o.offset = 0;
	o.length = 5;
	CHECK(get_buf(&b, "empty", &o, &g) == -EINVAL);
	got_clear(&g);

	/* offset + length overflowing is refused at once */
	o.offset = UINT64_MAX - 1;
	o.length = 10;
	CHECK(wsync_store_get_buf(b.store, "obj", &o, on_done, &g) == -EINVAL);
	CHECK(g.calls == 0);
	bucket_close(&b);
}

/* put_link: the object is the file handed over, linked in (the same
 * inode: no byte copied), whole and with its own bytes; the source keeps
 * its name; a second put of it replaces the key again, and no temp is
 * left; a missing source fails with the object as it was. */
static void test_put_link(void)
{
	struct bucket b = { 0 };
	struct got g = { 0 };
	uint8_t data[5000];
	char src[128], obj[160];
	struct stat s1, s2;
	int fd;

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	CHECK(wsync_store_links(b.store));
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 1);
	snprintf(src, sizeof(src), "%s/chunk.0", b.dir);
	fd = open(src, O_WRONLY | O_CREAT | O_EXCL, 0644);
	CHECK(fd >= 0 && write(fd, data, sizeof(data)) == (ssize_t)sizeof(data));
	if (fd >= 0)
		close(fd);
	CHECK(wsync_store_put_link(b.store, "v/1.anchor.c/1", src, on_done, &g) == 0);
	CHECK(wsync_store_wait(b.store) == 0);
	CHECK(g.calls == 1 && g.err == 0);
	CHECK_EQ_U64(g.size, sizeof(data));
	got_clear(&g);
	snprintf(obj, sizeof(obj), "%s/v/1.anchor.c/1", b.root);
	CHECK(stat(src, &s1) == 0 && stat(obj, &s2) == 0);
	CHECK(s1.st_ino == s2.st_ino && s1.st_dev == s2.st_dev && s2.st_nlink == 2);
	CHECK(file_is(obj, data, sizeof(data)));
	CHECK(get_buf(&b, "v/1.anchor.c/1", NULL, &g) == 0);
	CHECK(got_data_is(&g, data, sizeof(data)));
	got_clear(&g);
	/* again: the key replaced, still one link more, no temp */
	CHECK(wsync_store_put_link(b.store, "v/1.anchor.c/1", src, on_done, &g) == 0);
	CHECK(wsync_store_wait(b.store) == 0);
	CHECK(g.calls == 1 && g.err == 0);
	got_clear(&g);
	CHECK(stat(src, &s1) == 0 && s1.st_nlink == 2);
	{
		char dir[160];
		DIR *d;
		struct dirent *de;
		int n = 0;

		snprintf(dir, sizeof(dir), "%s/v/1.anchor.c", b.root);
		d = opendir(dir);
		CHECK(d != NULL);
		while (d && (de = readdir(d)))
			n += de->d_name[0] != '.';
		CHECK(n == 1);
		CHECK(d && !readdir(d));
		if (d)
			closedir(d);
		d = opendir(dir);
		while (d && (de = readdir(d)))
			CHECK(strncmp(de->d_name, ".wsync-tmp.", 11) != 0);
		if (d)
			closedir(d);
	}
	/* the source gone: refused, the object kept */
	CHECK(unlink(src) == 0);
	CHECK(wsync_store_put_link(b.store, "v/1.anchor.c/1", src, on_done, &g) == 0);
	CHECK(wsync_store_wait(b.store) == 0);
	CHECK(g.calls == 1 && g.err == -ENOENT);
	got_clear(&g);
	CHECK(file_is(obj, data, sizeof(data)));
	bucket_close(&b);
}

/* if_none_match: the same ETag is "not modified" (no data, no file
 * written), a new version is returned. */
static void test_if_none_match(void)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	struct bucket b = { 0 };
	struct got g = { 0 };
	char etag[80], dst[128];

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	CHECK(put_str(&b, "latest", "version 1") == 0);
	CHECK(get_buf(&b, "latest", NULL, &g) == 0);
	snprintf(etag, sizeof(etag), "%s", g.etag);
	got_clear(&g);

	o.if_none_match = etag;
	CHECK(get_buf(&b, "latest", &o, &g) == 0);
	CHECK(g.not_modified);
	CHECK(g.data == NULL);
	CHECK_STR(g.etag, etag);
	got_clear(&g);

	snprintf(dst, sizeof(dst), "%s/latest", b.dir);
	CHECK(get_file(&b, "latest", dst, &o, &g) == 0);
	CHECK(g.not_modified);
	CHECK(!exists(dst));
	got_clear(&g);

	/* the ETag is stable while the object is unchanged */
	CHECK(get_buf(&b, "latest", NULL, &g) == 0);
	CHECK_STR(g.etag, etag);
	got_clear(&g);

	CHECK(put_str(&b, "latest", "version 2") == 0);
	CHECK(get_buf(&b, "latest", &o, &g) == 0);
	CHECK(!g.not_modified);
	CHECK(got_data_is(&g, "version 2", 9));
	CHECK(strcmp(g.etag, etag) != 0);
	got_clear(&g);

	o.if_none_match = "\"something-else\"";
	CHECK(get_buf(&b, "latest", &o, &g) == 0);
	CHECK(!g.not_modified);
	got_clear(&g);
	bucket_close(&b);
}

/* expect_size and expect_xxh3: a mismatch is -EIO, nothing is handed
 * over, no file appears and no temp file stays. */
static void test_verification(void)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	struct wsync_hash128 h, bad;
	struct bucket b = { 0 };
	struct got g = { 0 };
	uint8_t data[3000];
	char dst[128];

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	fill(data, sizeof(data), 4);
	CHECK(put_buf(&b, "v/1.delta", data, sizeof(data), &g) == 0);
	got_clear(&g);
	wsync_hash_mem(data, sizeof(data), &h);
	bad = h;
	bad.b[15] ^= 1;
	snprintf(dst, sizeof(dst), "%s/out", b.dir);

	o.expect_size = 3000;
	o.expect_xxh3 = h.b;
	CHECK(get_buf(&b, "v/1.delta", &o, &g) == 0);
	CHECK(got_data_is(&g, data, sizeof(data)));
	got_clear(&g);
	CHECK(get_file(&b, "v/1.delta", dst, &o, &g) == 0);
	CHECK(file_is(dst, data, sizeof(data)));
	got_clear(&g);
	CHECK(unlink(dst) == 0);

	o.expect_size = 2999;
	CHECK(get_buf(&b, "v/1.delta", &o, &g) == -EIO);
	CHECK(g.data == NULL);
	CHECK_CONTAINS(g.msg, "v/1.delta: 3000 bytes, expected 2999");
	got_clear(&g);
	CHECK(get_file(&b, "v/1.delta", dst, &o, &g) == -EIO);
	CHECK(!exists(dst));
	got_clear(&g);

	o.expect_size = -1;
	o.expect_xxh3 = bad.b;
	CHECK(get_buf(&b, "v/1.delta", &o, &g) == -EIO);
	CHECK(g.data == NULL);
	CHECK_CONTAINS(g.msg, "content hash");
	got_clear(&g);
	CHECK(get_file(&b, "v/1.delta", dst, &o, &g) == -EIO);
	CHECK(!exists(dst));
	got_clear(&g);

	/* a file already there is left as it was */
	CHECK(write_file(dst, "keep", 4));
	CHECK(get_file(&b, "v/1.delta", dst, &o, &g) == -EIO);
	CHECK(file_is(dst, "keep", 4));
	got_clear(&g);

	/* with a range, size and hash are those of the bytes returned */
	wsync_hash_mem(data + 1000, 500, &h);
	o.offset = 1000;
	o.length = 500;
	o.expect_size = 500;
	o.expect_xxh3 = h.b;
	CHECK(get_buf(&b, "v/1.delta", &o, &g) == 0);
	CHECK(got_data_is(&g, data + 1000, 500));
	got_clear(&g);
	CHECK(get_file(&b, "v/1.delta", dst, &o, &g) == 0);
	CHECK(file_is(dst, data + 1000, 500));
	got_clear(&g);

	CHECK(temps_under(b.dir) == 0);
	bucket_close(&b);
}

/* A get refuses what is larger than max_size, into memory and into a
 * file (before writing any of it). */
static void test_max_size(void)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	struct bucket b = { 0 };
	struct got g = { 0 };
	uint8_t data[101];
	char dst[128];

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	snprintf(dst, sizeof(dst), "%s/out", b.dir);
	fill(data, sizeof(data), 5);
	CHECK(put_buf(&b, "big", data, sizeof(data), &g) == 0);
	got_clear(&g);
	o.max_size = 100;
	CHECK(get_buf(&b, "big", &o, &g) == -EFBIG);
	CHECK(g.data == NULL);
	CHECK_CONTAINS(g.msg, "big: 101 bytes, more than the 100");
	got_clear(&g);
	o.max_size = 101;
	CHECK(get_buf(&b, "big", &o, &g) == 0);
	CHECK(got_data_is(&g, data, sizeof(data)));
	got_clear(&g);
	/* a range within the limit is fine */
	o.max_size = 50;
	o.offset = 60;
	CHECK(get_buf(&b, "big", &o, &g) == 0);
	CHECK(got_data_is(&g, data + 60, 41));
	got_clear(&g);
	/* into a file */
	o.offset = 0;
	o.max_size = 100;
	CHECK(get_file(&b, "big", dst, &o, &g) == -EFBIG);
	CHECK_CONTAINS(g.msg, "big: 101 bytes, more than the 100");
	CHECK(!exists(dst));
	got_clear(&g);
	o.max_size = 101;
	CHECK(get_file(&b, "big", dst, &o, &g) == 0);
	CHECK(file_is(dst, data, sizeof(data)));
	got_clear(&g);
	CHECK(temps_under(b.dir) == 0);
	bucket_close(&b);
}

/* Missing objects are -ENOENT naming the key; "directories" are no objects;
 * a missing bucket directory is -ENXIO. */
static void test_missing(void)
{
	struct wsync_store_options opt = { .path_style = -1 };
	struct wsync_error err = { 0 };
	struct wsync_store *store = NULL;
	struct bucket b = { 0 };
	struct got g = { 0 };
	char dst[128], url[192];

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	CHECK(get_buf(&b, "no/such/key", NULL, &g) == -ENOENT);
	CHECK_CONTAINS(g.msg, "no/such/key: no such object");
	got_clear(&g);
	CHECK(head(&b, "nothing", &g) == -ENOENT);
	CHECK_CONTAINS(g.msg, "nothing");
	got_clear(&g);
	snprintf(dst, sizeof(dst), "%s/out", b.dir);
	CHECK(get_file(&b, "nothing", dst, NULL, &g) == -ENOENT);
	CHECK(!exists(dst));
	got_clear(&g);

	CHECK(put_str(&b, "dir/file", "x") == 0);
	CHECK(head(&b, "dir", &g) == -ENOENT);		/* a directory */
	got_clear(&g);
	CHECK(get_buf(&b, "dir/file/more", NULL, &g) == -ENOENT);	/* through a file */
	got_clear(&g);
	CHECK(del(&b, "dir") == 0);
	CHECK(del(&b, "dir/file/more") == 0);
	CHECK(head(&b, "dir/file", &g) == 0);
	got_clear(&g);

	/* a key through an existing file cannot be put */
	CHECK(put_str(&b, "dir/file/more", "y") == -ENOTDIR);
	/* nor over a directory */
	CHECK(put_str(&b, "dir", "y") == -EISDIR);
	CHECK(temps_under(b.dir) == 0);

	/* the bucket directory itself is missing */
	snprintf(url, sizeof(url), "file://%s/not-there", b.dir);
	opt.url = url;
	CHECK(wsync_store_new(NULL, &opt, &store, &err) == 0);
	CHECK(wsync_store_head(store, "x", on_done, &g) == 0);
	CHECK(wsync_store_wait(store) == 0);
	CHECK(g.err == -ENXIO);
	CHECK_CONTAINS(g.msg, "does not exist");
	got_clear(&g);
	wsync_store_free(store);
	bucket_close(&b);
}

/* Listing: S3's string-prefix semantics, bytewise order, sizes. */
static void test_list(void)
{
	static const char *const keys[] = {
		"v/000010.delta", "v/000001.delta", "v/000002.delta", "va", "v0",
		"anchor/1/model.safetensors", "Z", "v/sub/deep/x", "v.txt",
	};
	struct bucket b = { 0 };
	struct got g = { 0 };

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		CHECK(put_str(&b, keys[i], keys[i]) == 0);

	CHECK(list(&b, "", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 9);
	if (g.n_entries == 9) {
		/* bytewise: 'Z' < 'a', '.' < '/' < '0' */
		static const char *const want[] = {
			"Z", "anchor/1/model.safetensors", "v.txt", "v/000001.delta",
			"v/000002.delta", "v/000010.delta", "v/sub/deep/x", "v0", "va",
		};

		for (size_t i = 0; i < 9; i++) {
			CHECK_STR(g.keys[i], want[i]);
			CHECK_EQ_U64(g.sizes[i], strlen(want[i]));
		}
	}
	got_clear(&g);

	CHECK(list(&b, "v/", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 4);
	if (g.n_entries == 4) {
		CHECK_STR(g.keys[0], "v/000001.delta");
		CHECK_STR(g.keys[3], "v/sub/deep/x");
	}
	got_clear(&g);

	CHECK(list(&b, "v/00000", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 2);
	got_clear(&g);
	CHECK(list(&b, "v/0000", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 3);
	got_clear(&g);

	CHECK(list(&b, "v", &g) == 0);	/* v.txt, v/..., v0, va */
	CHECK_EQ_U64(g.n_entries, 7);
	got_clear(&g);

	CHECK(list(&b, "v/sub/deep/x", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 1);
	got_clear(&g);

	CHECK(list(&b, "nothing/", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 0);
	got_clear(&g);
	CHECK(list(&b, "v/000001.delta/", &g) == 0);	/* a file is no directory */
	CHECK_EQ_U64(g.n_entries, 0);
	got_clear(&g);

	/* bad prefixes are refused at once */
	CHECK(wsync_store_list(b.store, "/", on_done, &g) == -EINVAL);
	CHECK(wsync_store_list(b.store, "v//", on_done, &g) == -EINVAL);
	CHECK(wsync_store_list(b.store, "../", on_done, &g) == -EINVAL);
	CHECK(g.calls == 0);
	bucket_close(&b);
}

/* Temp files: never listed, never left behind by failures, and their
 * names cannot be used as keys. */
static void test_temp_files(void)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	struct bucket b = { 0 };
	struct got g = { 0 };
	char path[192];
	uint8_t wrong[16] = { 0 };

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	CHECK(put_str(&b, "v/1", "one") == 0);
	/* what a crash mid-put leaves */
	snprintf(path, sizeof(path), "%s/.wsync-tmp.AbC123", b.root);
	CHECK(write_file(path, "partial", 7));
	snprintf(path, sizeof(path), "%s/v/.wsync-tmp.xyz789", b.root);
	CHECK(write_file(path, "partial", 7));
	CHECK(list(&b, "", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 1);
	got_clear(&g);
	CHECK(list(&b, "v/", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 1);
	got_clear(&g);
	CHECK(wsync_store_put_buf(b.store, ".wsync-tmp.AbC123", "x", 1, on_done, &g) == -EINVAL);
	CHECK(wsync_store_get_buf(b.store, "v/.wsync-tmp.xyz789", NULL, on_done, &g) == -EINVAL);
	CHECK(g.calls == 0);
	CHECK(unlink(path) == 0);
	snprintf(path, sizeof(path), "%s/.wsync-tmp.AbC123", b.root);
	CHECK(unlink(path) == 0);

	/* failures clean up: a put onto a directory, a get that does not
	 * verify, a put from a file that does not exist */
	CHECK(put_str(&b, "v", "x") == -EISDIR);
	o.expect_xxh3 = wrong;
	snprintf(path, sizeof(path), "%s/out", b.dir);
	CHECK(get_file(&b, "v/1", path, &o, &g) == -EIO);
	got_clear(&g);
	snprintf(path, sizeof(path), "%s/no-such-source", b.dir);
	CHECK(wsync_store_put_file(b.store, "v/2", path, on_done, &g) == 0);
	CHECK(wsync_store_wait(b.store) == 0);
	CHECK(g.err == -ENOENT);
	CHECK_CONTAINS(g.msg, "no-such-source");
	got_clear(&g);
	CHECK(temps_under(b.dir) == 0);

	/* a reader never sees a partial object: many puts of two versions of
	 * 1 MiB race with gets of the same key; every get returns one of
	 * them whole */
	{
		enum { N = 12, SZ = 1 << 20 };
		static uint8_t v1[SZ], v2[SZ];
		struct got gets[N], puts[N];
		unsigned whole = 0;

		fill(v1, SZ, 7);
		fill(v2, SZ, 8);
		memset(gets, 0, sizeof(gets));
		memset(puts, 0, sizeof(puts));
		CHECK(put_buf(&b, "race", v1, SZ, &g) == 0);
		got_clear(&g);
		for (int i = 0; i < N; i++) {
			CHECK(wsync_store_put_buf(b.store, "race", i % 2 ? v1 : v2, SZ, on_done,
						  &puts[i]) == 0);
			CHECK(wsync_store_get_buf(b.store, "race", NULL, on_done, &gets[i]) == 0);
		}
		CHECK(wsync_store_wait(b.store) == 0);
		for (int i = 0; i < N; i++) {
			CHECK(puts[i].err == 0);
			CHECK(gets[i].err == 0);
			whole += gets[i].data_len == SZ && (memcmp(gets[i].data, v1, SZ) == 0 ||
							    memcmp(gets[i].data, v2, SZ) == 0);
			got_clear(&puts[i]);
			got_clear(&gets[i]);
		}
		CHECK(whole == N);
	}
	CHECK(temps_under(b.dir) == 0);
	bucket_close(&b);
}

/* Symlinks planted in the bucket are not followed: no write lands
 * outside, no read comes from outside; put replaces a link, delete
 * removes the link, not its target. */
static void test_symlinks(void)
{
	struct bucket b = { 0 };
	struct got g = { 0 };
	char outside[128], path[192], target[192];

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	snprintf(outside, sizeof(outside), "%s/outside", b.dir);
	CHECK(mkdir(outside, 0755) == 0);
	snprintf(target, sizeof(target), "%s/secret", outside);
	CHECK(write_file(target, "secret", 6));

	/* a directory link */
	snprintf(path, sizeof(path), "%s/evil", b.root);
	CHECK(symlink(outside, path) == 0);
	CHECK(put_str(&b, "evil/x", "written") == -ELOOP);
	snprintf(path, sizeof(path), "%s/x", outside);
	CHECK(!exists(path));
	CHECK(put_str(&b, "evil/new/deeper", "written") == -ELOOP);
	snprintf(path, sizeof(path), "%s/new", outside);
	CHECK(!exists(path));
	CHECK(get_buf(&b, "evil/secret", NULL, &g) == -ELOOP);
	CHECK(g.data == NULL);
	CHECK_CONTAINS(g.msg, "symbolic link");
	got_clear(&g);
	CHECK(del(&b, "evil/secret") == -ELOOP);
	CHECK(file_is(target, "secret", 6));

	/* a file link */
	snprintf(path, sizeof(path), "%s/link", b.root);
	CHECK(symlink(target, path) == 0);
	CHECK(get_buf(&b, "link", NULL, &g) == -ELOOP);
	got_clear(&g);
	CHECK(head(&b, "link", &g) == -ELOOP);
	got_clear(&g);

	/* listings skip both (and do not descend into evil/) */
	CHECK(put_str(&b, "real", "r") == 0);
	CHECK(list(&b, "", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 1);
	if (g.n_entries == 1)
		CHECK_STR(g.keys[0], "real");
	got_clear(&g);

	/* put over the link replaces the link itself */
	CHECK(put_str(&b, "link", "replaced") == 0);
	CHECK(file_is(target, "secret", 6));
	CHECK(file_is(path, "replaced", 8));
	/* a link planted again is removed by delete, its target stays */
	CHECK(unlink(path) == 0);
	CHECK(symlink(target, path) == 0);
	CHECK(del(&b, "link") == 0);
	CHECK(!exists(path));
	CHECK(file_is(target, "secret", 6));

	/* a dangling link where a directory would be made */
	snprintf(path, sizeof(path), "%s/dangling", b.root);
	CHECK(symlink("/nonexistent-wsync-dir", path) == 0);
	CHECK(put_str(&b, "dangling/x", "x") == -ELOOP);
	CHECK(!exists("/nonexistent-wsync-dir"));
	CHECK(temps_under(b.dir) == 0);
	bucket_close(&b);
}

/* if_absent: the first put of a key succeeds with the object's ETag, a put
 * onto an existing one is -EEXIST and changes nothing; a directory with
 * the name stays -EISDIR; opt NULL is a plain put. */
static void test_put_if_absent(void)
{
	const struct wsync_store_put_options absent = { .if_absent = true };
	struct bucket b = { 0 };
	struct got g = { 0 }, h = { 0 };
	char path[192];

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	CHECK(put_if(&b, "fence/HEAD", "first", &absent, &g) == 0);
	CHECK(g.etag[0] == '"');
	CHECK_EQ_U64(g.size, 5);
	CHECK(head(&b, "fence/HEAD", &h) == 0);
	CHECK_STR(g.etag, h.etag);
	got_clear(&g);
	got_clear(&h);
	snprintf(path, sizeof(path), "%s/fence/HEAD", b.root);
	CHECK(file_is(path, "first", 5));

	CHECK(put_if(&b, "fence/HEAD", "second", &absent, &g) == -EEXIST);
	CHECK_CONTAINS(g.msg, "fence/HEAD");
	CHECK_STR(g.etag, "");
	got_clear(&g);
	CHECK(file_is(path, "first", 5));

	CHECK(put_str(&b, "dir/x", "x") == 0);
	CHECK(put_if(&b, "dir", "x", &absent, &g) == -EISDIR);
	got_clear(&g);

	/* no condition: a plain put, over what is there */
	CHECK(put_if(&b, "fence/HEAD", "third", NULL, &g) == 0);
	got_clear(&g);
	CHECK(file_is(path, "third", 5));
	CHECK(temps_under(b.dir) == 0);
	bucket_close(&b);
}

/* if_match: with the ETag a head returned the put succeeds and returns
 * the new object's (another) ETag; with a stale one, or on a key with no
 * object, it is -ESTALE and nothing changes (no directory is made). */
static void test_put_if_match(void)
{
	struct wsync_store_put_options match = { 0 };
	struct bucket b = { 0 };
	struct got g = { 0 }, h = { 0 };
	char e1[80], path[192];

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	CHECK(put_str(&b, "HEAD", "version 1") == 0);
	CHECK(head(&b, "HEAD", &h) == 0);
	snprintf(e1, sizeof(e1), "%s", h.etag);
	got_clear(&h);

	match.if_match = e1;
	CHECK(put_if(&b, "HEAD", "version 2", &match, &g) == 0);
	CHECK(g.etag[0] == '"');
	CHECK(strcmp(g.etag, e1) != 0);
	CHECK(head(&b, "HEAD", &h) == 0);
	CHECK_STR(h.etag, g.etag);
	got_clear(&h);
	got_clear(&g);
	snprintf(path, sizeof(path), "%s/HEAD", b.root);
	CHECK(file_is(path, "version 2", 9));

	/* e1 is stale now */
	CHECK(put_if(&b, "HEAD", "version 3", &match, &g) == -ESTALE);
	CHECK_CONTAINS(g.msg, "HEAD");
	got_clear(&g);
	CHECK(file_is(path, "version 2", 9));

	/* gone: a missing key, a missing directory (not made) */
	CHECK(put_if(&b, "nothing", "x", &match, &g) == -ESTALE);
	got_clear(&g);
	CHECK(put_if(&b, "nodir/x", "x", &match, &g) == -ESTALE);
	got_clear(&g);
	snprintf(path, sizeof(path), "%s/nodir", b.root);
	CHECK(!exists(path));
	CHECK(del(&b, "HEAD") == 0);
	CHECK(put_if(&b, "HEAD", "x", &match, &g) == -ESTALE);
	got_clear(&g);
	CHECK(temps_under(b.dir) == 0);
	bucket_close(&b);
}

/* What a conditional put refuses at once (no callback). */
static void test_put_if_refused(void)
{
	struct wsync_store_put_options o = { 0 };
	struct bucket b = { 0 };
	struct got g = { 0 };

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	o.if_absent = true;
	o.if_match = "\"1-2-3\"";
	CHECK(wsync_store_put_buf_if(b.store, "k", "x", 1, &o, on_done, &g) == -EINVAL);
	o.if_absent = false;
	o.if_match = "";
	CHECK(wsync_store_put_buf_if(b.store, "k", "x", 1, &o, on_done, &g) == -EINVAL);
	o.if_match = "\"a\"\r\nx-amz-acl: public-read";
	CHECK(wsync_store_put_buf_if(b.store, "k", "x", 1, &o, on_done, &g) == -EINVAL);
	{
		char long_etag[WSYNC_STORE_ETAG_MAX + 2];

		memset(long_etag, 'e', sizeof(long_etag) - 1);
		long_etag[sizeof(long_etag) - 1] = '\0';
		o.if_match = long_etag;
		CHECK(wsync_store_put_buf_if(b.store, "k", "x", 1, &o, on_done, &g) ==
		      -EINVAL);
	}
	/* more than part_size (the data is never read) */
	o.if_match = NULL;
	o.if_absent = true;
	CHECK(wsync_store_put_buf_if(b.store, "k", "x", WSYNC_STORE_PART_SIZE_DEFAULT + 1, &o,
				     on_done, &g) == -EINVAL);
	CHECK(wsync_store_put_buf_if(b.store, "../k", "x", 1, &o, on_done, &g) == -EINVAL);
	CHECK(wsync_store_wait(b.store) == 0);
	CHECK(g.calls == 0);
	bucket_close(&b);
}

/* The bucket's lock: made by the first conditional put, never listed
 * (whatever the prefix), refused as a key; the same name deeper down is
 * an ordinary key. */
static void test_put_if_lock_file(void)
{
	const struct wsync_store_put_options absent = { .if_absent = true };
	struct bucket b = { 0 };
	struct got g = { 0 };
	char path[192];

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	CHECK(put_if(&b, "HEAD", "x", &absent, &g) == 0);
	got_clear(&g);
	snprintf(path, sizeof(path), "%s/.wsync-lock", b.root);
	CHECK(exists(path));
	CHECK(list(&b, "", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 1);
	if (g.n_entries == 1)
		CHECK_STR(g.keys[0], "HEAD");
	got_clear(&g);
	CHECK(list(&b, ".wsync", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 0);
	got_clear(&g);
	CHECK(wsync_store_put_buf(b.store, ".wsync-lock", "x", 1, on_done, &g) == -EINVAL);
	CHECK(wsync_store_put_buf_if(b.store, ".wsync-lock", "x", 1, &absent, on_done, &g) ==
	      -EINVAL);
	CHECK(wsync_store_get_buf(b.store, ".wsync-lock", NULL, on_done, &g) == -EINVAL);
	CHECK(wsync_store_head(b.store, ".wsync-lock", on_done, &g) == -EINVAL);
	CHECK(wsync_store_delete(b.store, ".wsync-lock", on_done, &g) == -EINVAL);
	CHECK(g.calls == 0);
	CHECK(exists(path));
	CHECK(put_str(&b, "sub/.wsync-lock", "an object") == 0);
	CHECK(list(&b, "", &g) == 0);
	CHECK_EQ_U64(g.n_entries, 2);
	got_clear(&g);
	bucket_close(&b);
}

/* Conditional puts of one key queued together, on parallel workers:
 * of the if_absent ones exactly one lands, of the if_match ones naming
 * the same ETag exactly one; the object is the winner's bytes. */
static void test_put_if_race(void)
{
	enum { N = 8 };
	const struct wsync_store_put_options absent = { .if_absent = true };
	struct wsync_store_put_options match = { 0 };
	struct bucket b = { 0 };
	struct got g[N], h = { 0 };
	char data[N][16], etag[80], path[192];
	int ok, exist, stale, winner;

	if (!bucket_open(&b, N)) {
		CHECK(!"bucket");
		return;
	}
	snprintf(path, sizeof(path), "%s/HEAD", b.root);
	memset(g, 0, sizeof(g));
	for (int i = 0; i < N; i++) {
		snprintf(data[i], sizeof(data[i]), "writer %d", i);
		CHECK(wsync_store_put_buf_if(b.store, "HEAD", data[i], strlen(data[i]), &absent,
					     on_done, &g[i]) == 0);
	}
	CHECK(wsync_store_wait(b.store) == 0);
	ok = exist = 0;
	winner = -1;
	for (int i = 0; i < N; i++) {
		CHECK(g[i].calls == 1);
		ok += g[i].err == 0;
		exist += g[i].err == -EEXIST;
		if (g[i].err == 0)
			winner = i;
		got_clear(&g[i]);
	}
	CHECK(ok == 1 && exist == N - 1);
	CHECK(winner >= 0 && file_is(path, data[winner], strlen(data[winner])));

	CHECK(head(&b, "HEAD", &h) == 0);
	snprintf(etag, sizeof(etag), "%s", h.etag);
	got_clear(&h);
	match.if_match = etag;
	for (int i = 0; i < N; i++)
		CHECK(wsync_store_put_buf_if(b.store, "HEAD", data[i], strlen(data[i]), &match,
					     on_done, &g[i]) == 0);
	CHECK(wsync_store_wait(b.store) == 0);
	ok = stale = 0;
	winner = -1;
	for (int i = 0; i < N; i++) {
		ok += g[i].err == 0;
		stale += g[i].err == -ESTALE;
		if (g[i].err == 0)
			winner = i;
		got_clear(&g[i]);
	}
	CHECK(ok == 1 && stale == N - 1);
	CHECK(winner >= 0 && file_is(path, data[winner], strlen(data[winner])));
	CHECK(temps_under(b.dir) == 0);
	bucket_close(&b);
}

struct lock_holder {
	int fd;
	unsigned ms;
};

static void *release_later(void *arg)
{
	struct lock_holder *l = arg;
	struct timespec ts = { .tv_sec = l->ms / 1000, .tv_nsec = (l->ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
	(void)close(l->fd);
	return NULL;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Another holder of the bucket's lock (a publisher in another process
 * would be one): unconditional puts go on, a conditional put waits for
 * it. */
static void test_put_if_waits_for_lock(void)
{
	const struct wsync_store_put_options absent = { .if_absent = true };
	struct lock_holder l = { .fd = -1, .ms = 300 };
	struct bucket b = { 0 };
	struct got g = { 0 };
	char path[192];
	pthread_t t;
	double t0;

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	snprintf(path, sizeof(path), "%s/.wsync-lock", b.root);
	l.fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	CHECK(l.fd >= 0 && flock(l.fd, LOCK_EX) == 0);
	t0 = now_ms();
	CHECK(put_str(&b, "plain", "x") == 0);
	CHECK(now_ms() - t0 < 250);
	CHECK(pthread_create(&t, NULL, release_later, &l) == 0);
	t0 = now_ms();
	CHECK(put_if(&b, "HEAD", "x", &absent, &g) == 0);
	CHECK(now_ms() - t0 >= 250);
	got_clear(&g);
	CHECK(pthread_join(t, NULL) == 0);
	bucket_close(&b);
}

/* Bad keys are refused before anything is queued: no callback. */
static void test_bad_keys(void)
{
	static const char *const bad[] = {
		"", "/abs", "a//b", "../up", "a/../b", "a/./b", "dir/", "back\\slash", "ctl\x01",
	};
	struct bucket b = { 0 };
	struct got g = { 0 };

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(wsync_store_put_buf(b.store, bad[i], "x", 1, on_done, &g) == -EINVAL);
		CHECK(wsync_store_get_buf(b.store, bad[i], NULL, on_done, &g) == -EINVAL);
		CHECK(wsync_store_head(b.store, bad[i], on_done, &g) == -EINVAL);
		CHECK(wsync_store_delete(b.store, bad[i], on_done, &g) == -EINVAL);
	}
	CHECK(wsync_store_put_buf(b.store, NULL, "x", 1, on_done, &g) == -EINVAL);
	CHECK(wsync_store_put_buf(b.store, "k", NULL, 1, on_done, &g) == -EINVAL);
	CHECK(wsync_store_put_file(b.store, "k", NULL, on_done, &g) == -EINVAL);
	CHECK(wsync_store_get_file(b.store, "k", "", NULL, on_done, &g) == -EINVAL);
	CHECK(wsync_store_wait(b.store) == 0);
	CHECK(g.calls == 0);
	CHECK(exists(b.root));
	bucket_close(&b);
}

/* Options: defaults, bad values, the wait of a store on a caller's loop. */
static void test_options(void)
{
	struct wsync_store_options opt = { .path_style = -1 };
	struct wsync_error err = { 0 };
	struct wsync_store *store = NULL;
	uv_loop_t loop;

	opt.url = "/tmp/not-a-url";
	CHECK(wsync_store_new(NULL, &opt, &store, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "not a URL");
	CHECK(store == NULL);
	opt.url = "file:///tmp";
	opt.part_size = 1 << 20;
	CHECK(wsync_store_new(NULL, &opt, &store, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "part_size");
	opt.part_size = 0;
	opt.max_concurrency = 5000;
	CHECK(wsync_store_new(NULL, &opt, &store, &err) == -EINVAL);
	opt.max_concurrency = 0;
	opt.path_style = 7;
	CHECK(wsync_store_new(NULL, &opt, &store, &err) == -EINVAL);
	opt.path_style = -1;
	CHECK(wsync_store_new(NULL, NULL, &store, &err) == -EINVAL);

	CHECK(uv_loop_init(&loop) == 0);
	opt.url = "file:///tmp//wsync-x/";
	CHECK(wsync_store_new(&loop, &opt, &store, &err) == 0);
	CHECK_STR(wsync_store_describe(store), "file:///tmp/wsync-x");
	CHECK(wsync_store_wait(store) == -EINVAL);
	wsync_store_free(store);
	CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0);
	CHECK(uv_loop_close(&loop) == 0);
	wsync_store_free(NULL);
	CHECK_STR(wsync_store_describe(NULL), "(no store)");
}

/* 100 puts queued at once (more than max_concurrency), then one wait:
 * every callback once, every object whole. */
static void test_many_queued(void)
{
	enum { N = 100, SZ = 70000 };
	struct bucket b = { 0 };
	struct got *g = calloc(N, sizeof(*g)), l = { 0 };
	uint8_t *data = malloc((size_t)N * SZ);
	char key[64];
	int ok = 0;

	if (!g || !data || !bucket_open(&b, 8)) {
		CHECK(!"setup");
		free(g);
		free(data);
		bucket_close(&b);
		return;
	}
	for (int i = 0; i < N; i++) {
		fill(data + (size_t)i * SZ, SZ, 100 + (unsigned)i);
		snprintf(key, sizeof(key), "many/%03d/obj", i);
		CHECK(wsync_store_put_buf(b.store, key, data + (size_t)i * SZ, SZ, on_done,
					  &g[i]) == 0);
	}
	CHECK(wsync_store_wait(b.store) == 0);
	for (int i = 0; i < N; i++) {
		ok += g[i].calls == 1 && g[i].err == 0 && g[i].size == SZ;
		got_clear(&g[i]);
	}
	CHECK(ok == N);
	/* and 100 gets at once */
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof(key), "many/%03d/obj", i);
		CHECK(wsync_store_get_buf(b.store, key, NULL, on_done, &g[i]) == 0);
	}
	CHECK(wsync_store_wait(b.store) == 0);
	ok = 0;
	for (int i = 0; i < N; i++) {
		ok += g[i].calls == 1 && g[i].err == 0 && g[i].data_len == SZ &&
		      memcmp(g[i].data, data + (size_t)i * SZ, SZ) == 0;
		got_clear(&g[i]);
	}
	CHECK(ok == N);
	CHECK(list(&b, "many/", &l) == 0);
	CHECK_EQ_U64(l.n_entries, N);
	got_clear(&l);
	free(g);
	free(data);
	bucket_close(&b);
}

struct cancel_ctx {
	int calls, ok, cancelled, other;
};

static void on_cancel_test(struct wsync_store_result *res, void *userdata)
{
	struct cancel_ctx *c = userdata;

	c->calls++;
	if (res->err == 0)
		c->ok++;
	else if (res->err == -ECANCELED)
		c->cancelled++;
	else
		c->other++;
}

/* Every object there is whole: a cancelled put leaves the old one or
 * none, never a part. */
static bool objects_whole(const char *root, int n, size_t sz)
{
	char path[256];
	bool ok = true;

	for (int i = 0; i < n; i++) {
		struct stat st;

		snprintf(path, sizeof(path), "%s/c/%03d", root, i);
		if (stat(path, &st) == 0 && (size_t)st.st_size != sz) {
			printf("# %s: %lld bytes\n", path, (long long)st.st_size);
			ok = false;
		}
	}
	return ok;
}

/* Freeing a store with requests in flight, private loop: every callback
 * runs before wsync_store_free() returns, with -ECANCELED or success; no
 * temp file stays, nothing leaks. */
static void test_cancel_private_loop(void)
{
	enum { N = 100, SZ = 1 << 20 };
	struct cancel_ctx c = { 0 };
	struct bucket b = { 0 };
	uint8_t *data = malloc(SZ);
	char key[32];

	if (!data || !bucket_open(&b, 16)) {
		CHECK(!"setup");
		free(data);
		return;
	}
	fill(data, SZ, 9);
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof(key), "c/%03d", i);
		CHECK(wsync_store_put_buf(b.store, key, data, SZ, on_cancel_test, &c) == 0);
	}
	wsync_store_free(b.store);
	b.store = NULL;
	printf("# %d ok, %d cancelled, %d other\n", c.ok, c.cancelled, c.other);
	CHECK(c.calls == N);
	CHECK(c.ok + c.cancelled == N);
	CHECK(c.cancelled > 0);
	CHECK(temps_under(b.dir) == 0);
	CHECK(objects_whole(b.root, N, SZ));
	free(data);
	bucket_close(&b);
}

/* The same on the caller's loop, after part of the work ran: callbacks
 * come while the loop runs on, the loop closes cleanly. */
static void test_cancel_caller_loop(void)
{
	enum { N = 100, SZ = 1 << 20 };
	struct wsync_store_options opt = { .path_style = -1, .max_concurrency = 4 };
	struct wsync_error err = { 0 };
	struct cancel_ctx c = { 0 };
	struct wsync_store *store;
	struct bucket b = { 0 };
	uint8_t *data = malloc(SZ);
	uv_loop_t loop;
	char key[32];

	if (!data || !bucket_open(&b, 0) || uv_loop_init(&loop) != 0) {
		CHECK(!"setup");
		free(data);
		return;
	}
	opt.url = b.url;
	CHECK(wsync_store_new(&loop, &opt, &store, &err) == 0);
	fill(data, SZ, 10);
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof(key), "c/%03d", i);
		CHECK(wsync_store_put_buf(store, key, data, SZ, on_cancel_test, &c) == 0);
	}
	while (c.calls < 10)
		(void)uv_run(&loop, UV_RUN_ONCE);
	wsync_store_free(store);
	CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0);
	CHECK(uv_loop_close(&loop) == 0);
	printf("# %d ok, %d cancelled, %d other\n", c.ok, c.cancelled, c.other);
	CHECK(c.calls == N);
	CHECK(c.ok >= 10);
	CHECK(c.ok + c.cancelled == N);
	CHECK(temps_under(b.dir) == 0);
	CHECK(objects_whole(b.root, N, SZ));
	free(data);
	bucket_close(&b);
}

struct free_in_cb {
	struct wsync_store *store;
	int calls, cancelled;
	bool submit_refused;
};

static void on_free_in_cb(struct wsync_store_result *res, void *userdata)
{
	struct free_in_cb *f = userdata;

	f->calls++;
	f->cancelled += res->err == -ECANCELED;
	if (f->store) {
		struct wsync_store *s = f->store;

		f->store = NULL;
		wsync_store_free(s);
		/* the store is gone for us: nothing more may be queued, and
		 * what was queued still ends */
	}
}

/* wsync_store_free() from inside a callback, on both kinds of loop. */
static void test_free_in_callback(void)
{
	struct wsync_store_options opt = { .path_style = -1, .max_concurrency = 1 };
	struct wsync_error err = { 0 };
	struct free_in_cb f = { 0 };
	struct bucket b = { 0 };
	uv_loop_t loop;
	char key[32];

	if (!bucket_open(&b, 1)) {
		CHECK(!"bucket");
		return;
	}
	/* private loop: the free happens inside wsync_store_wait() */
	f.store = b.store;
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "f/%d", i);
		CHECK(wsync_store_put_buf(b.store, key, "data", 4, on_free_in_cb, &f) == 0);
	}
	CHECK(wsync_store_wait(b.store) == 0);	/* frees the store on its way out */
	b.store = NULL;
	CHECK(f.calls == 5);
	CHECK(f.cancelled == 4);

	/* caller's loop */
	memset(&f, 0, sizeof(f));
	CHECK(uv_loop_init(&loop) == 0);
	opt.url = b.url;
	CHECK(wsync_store_new(&loop, &opt, &f.store, &err) == 0);
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "f/%d", i);
		CHECK(wsync_store_put_buf(f.store, key, "data", 4, on_free_in_cb, &f) == 0);
	}
	CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0);
	CHECK(uv_loop_close(&loop) == 0);
	CHECK(f.calls == 5);
	CHECK(f.cancelled == 4);
	CHECK(temps_under(b.dir) == 0);
	bucket_close(&b);
}

struct chain {
	struct wsync_store *store;
	int step;
	int err;
};

static void on_chain(struct wsync_store_result *res, void *userdata)
{
	struct chain *c = userdata;

	if (res->err) {
		c->err = res->err;
		return;
	}
	if (++c->step < 3 && wsync_store_put_buf(c->store, "chained", "x", 1, on_chain, c) < 0)
		c->err = -1;
}

/* A callback may queue the next request; wait goes on until it is done. */
static void test_chained_requests(void)
{
	struct bucket b = { 0 };
	struct chain c = { 0 };

	if (!bucket_open(&b, 0)) {
		CHECK(!"bucket");
		return;
	}
	c.store = b.store;
	CHECK(wsync_store_put_buf(b.store, "chained", "x", 1, on_chain, &c) == 0);
	CHECK(wsync_store_wait(b.store) == 0);
	CHECK(c.step == 3);
	CHECK(c.err == 0);
	bucket_close(&b);
}

/* Ranges of up to WSYNC_STORE_RANGE_KEPT come in buffers the store keeps:
 * the same few, one after another, aligned; a bigger one, or one more
 * than it keeps, in a buffer of its own; each let go with
 * wsync_store_data_free (the leak checker sees the rest freed). */
static void test_kept_range_buffers(void)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	struct bucket b = { 0 };
	struct got g = { 0 };
	size_t n = 3u << 20;
	uint8_t *data = malloc(n);
	void *first, *p[6];
	bool seen = false;

	if (!data || !bucket_open(&b, 0)) {
		CHECK(!"bucket");
		free(data);
		return;
	}
	fill(data, n, 5);
	CHECK(put_buf(&b, "big", data, n, &g) == 0);
	got_clear(&g);
	o.offset = 4096;
	o.length = 2u << 20;	/* read around the cache: a kept buffer */
	CHECK(get_buf(&b, "big", &o, &g) == 0);
	CHECK(got_data_is(&g, data + 4096, 2u << 20));
	first = g.data;
	CHECK(((uintptr_t)first & (WSYNC_STORE_RANGE_ALIGN - 1)) == 0);
	got_clear(&g);	/* back to the store */
	CHECK(get_buf(&b, "big", &o, &g) == 0);
	CHECK(got_data_is(&g, data + 4096, 2u << 20));
	CHECK(g.data == first);	/* the same buffer, its pages mapped already */
	got_clear(&g);
	/* more at once than it keeps: the rest are buffers of their own,
	 * and each is let go the same way */
	for (int i = 0; i < 6; i++) {
		p[i] = wsync_store_range_buf(1u << 20, 8192);
		CHECK(p[i] != NULL);
		seen = seen || p[i] == first;
	}
	CHECK(seen);
	for (int i = 0; i < 6; i++)
		wsync_store_data_free(p[i]);
	p[0] = wsync_store_range_buf(WSYNC_STORE_RANGE_KEPT + 1, 8192);
	CHECK(p[0] != NULL && p[0] != first);
	wsync_store_data_free(p[0]);
	wsync_store_data_free(NULL);
	bucket_close(&b);
	free(data);
}

int main(void)
{
	TEST(test_round_trip);
	TEST(test_ranges);
	TEST(test_put_link);
	TEST(test_if_none_match);
	TEST(test_verification);
	TEST(test_max_size);
	TEST(test_missing);
	TEST(test_list);
	TEST(test_temp_files);
	TEST(test_symlinks);
	TEST(test_put_if_absent);
	TEST(test_put_if_match);
	TEST(test_put_if_refused);
	TEST(test_put_if_lock_file);
	TEST(test_put_if_race);
	TEST(test_put_if_waits_for_lock);
	TEST(test_bad_keys);
	TEST(test_options);
	TEST(test_many_queued);
	TEST(test_cancel_private_loop);
	TEST(test_cancel_caller_loop);
	TEST(test_free_in_callback);
	TEST(test_chained_requests);
	TEST(test_kept_range_buffers);
	return tap_done();
}
