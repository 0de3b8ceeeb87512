/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-delta: the delta container of common/codec/FORMAT.md round-trips through
 * the writer and the reader (file and memory), and the reader refuses
 * every damaged or rule-breaking delta: any single flipped byte, any
 * truncation, an unknown version, FILE records with bad paths (the rule
 * itself: test-path.c), records out of order and every limit of §6.  Also: XXH3-128 of files equals that of memory across
 * the 4 MiB read window.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <xxhash.h>

#include "buf.h"
#include "delta.h"
#include "delta_index.h"
#include "hash.h"
#include "tap.h"

/* ---- helpers ---- */

static int memfd(void)
{
	return memfd_create("test-delta", MFD_CLOEXEC);
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A fake SEGMENT payload: the container only looks at its first 16 bytes
 * (target offset and length); the rest is opaque to it. */
static void fake_segment(struct wsync_buf *b, uint64_t off, uint64_t len,
			 size_t extra)
{
	wsync_buf_reset(b);
	(void)wsync_buf_put_u64(b, off);
	(void)wsync_buf_put_u64(b, len);
	(void)wsync_buf_put_u32(b, 1);
	(void)wsync_buf_put_u32(b, 0);
	for (size_t i = 0; i < extra; i++)
		(void)wsync_buf_put_u8(b, (uint8_t)(i * 31 + off));
}

static struct wsync_delta_file file(const char *path, enum wsync_delta_op op,
				    uint64_t base_size, uint64_t target_size,
				    uint64_t segs)
{
	struct wsync_delta_file f = { .path = (char *)path, .op = op, .mode = 0644 };

	if (op != WSYNC_DELTA_WRITE || base_size) {
		f.flags = WSYNC_DELTA_FILE_HAS_BASE;
		f.base_size = base_size;
		wsync_hash_mem(path, strlen(path), &f.base_hash);
	}
	if (op != WSYNC_DELTA_DELETE) {
		f.target_size = target_size;
		if (op == WSYNC_DELTA_KEEP)
			f.target_hash = f.base_hash;
		else
			wsync_hash_mem(&target_size, sizeof(target_size), &f.target_hash);
	}
	f.n_segments = segs;
	return f;
}

/* The FILE_END record of the WRITE file f: its hashes, and counts. */
static int end_file(struct wsync_delta_writer *w, const struct wsync_delta_file *f,
		    uint64_t changed, uint64_t elements, struct wsync_error *err)
{
	struct wsync_delta_file_end fe = { .base_hash = f->base_hash,
					   .target_hash = f->target_hash,
					   .changed = changed, .elements = elements };

	return wsync_delta_writer_file_end(w, &fe, err);
}

/* The delta every round-trip test starts from, in a memfd; returns its
 * size and leaves the bytes in *img. */
static size_t sample_delta(uint8_t **img)
{
	struct wsync_delta_writer *w = NULL;
	struct wsync_buf seg = { 0 };
	struct wsync_error err = { 0 };
	struct wsync_delta_file f;
	int fd = memfd(), r;
	off_t size;

	r = wsync_delta_writer_new(fd, &w, &err);
	f = file("config.json", WSYNC_DELTA_KEEP, 671, 671, 0);
	r |= wsync_delta_writer_file(w, &f, &err);
	f = file("model-00001-of-00002.safetensors", WSYNC_DELTA_WRITE, 1000, 100, 2);
	f.kind = WSYNC_DELTA_KIND_SAFETENSORS;
	r |= wsync_delta_writer_file(w, &f, &err);
	fake_segment(&seg, 0, 60, 40);
	r |= wsync_delta_writer_segment(w, seg.data, seg.len, &err);
	fake_segment(&seg, 60, 40, 10);
	r |= wsync_delta_writer_segment(w, seg.data, seg.len, &err);
	r |= end_file(w, &f, 7, 50, &err);
	f = file("new/empty", WSYNC_DELTA_WRITE, 0, 0, 0);
	r |= wsync_delta_writer_file(w, &f, &err);
	r |= end_file(w, &f, 0, 0, &err);
	f = file("old.bin", WSYNC_DELTA_DELETE, 5, 0, 0);
	r |= wsync_delta_writer_file(w, &f, &err);
	r |= wsync_delta_writer_finish(w, &err);
	if (r)
		printf("# sample_delta: %s\n", wsync_error_str(&err));
	wsync_delta_writer_free(w);
	wsync_buf_free(&seg);
	size = lseek(fd, 0, SEEK_END);
	*img = malloc((size_t)size);
	if (pread(fd, *img, (size_t)size, 0) != size)
		size = 0;
	close(fd);
	return (size_t)size;
}

/* Open len bytes with the memory reader; returns the result, message in err. */
static int open_mem(const uint8_t *p, size_t len, struct wsync_error *err)
{
	struct wsync_delta_reader *r = NULL;
	int rc;

	wsync_error_clear(err);
	rc = wsync_delta_reader_open_mem(p, len, &r, err);
	if ((rc < 0) != (r == NULL))
		rc = -999; /* a failure must not hand out a reader, nor success omit it */
	wsync_delta_reader_free(r);
	return rc;
}

static void expect_refused(const uint8_t *p, size_t len, const char *needle)
{
	struct wsync_error err;
	int rc = open_mem(p, len, &err);

	CHECK(rc == -EINVAL);
	CHECK_CONTAINS(err.msg, needle);
}

/* Raw records, to build deltas the writer would refuse to write. */
static void raw_preamble(struct wsync_buf *b, uint32_t version)
{
	wsync_buf_reset(b);
	(void)wsync_buf_append(b, WSYNC_DELTA_MAGIC, 8);
	(void)wsync_buf_put_u32(b, version);
	(void)wsync_buf_put_u32(b, 0);
}

static void raw_record(struct wsync_buf *b, uint32_t type, const void *p, size_t len)
{
	(void)wsync_buf_put_u32(b, type);
	(void)wsync_buf_put_u32(b, 0);
	(void)wsync_buf_put_u64(b, len);
	(void)wsync_buf_put_u64(b, XXH3_64bits(p, len));
	(void)wsync_buf_append(b, p, len);
}

static void raw_file(struct wsync_buf *b, const struct wsync_delta_file *f)
{
	struct wsync_buf p = { 0 };
	struct wsync_error err;

	if (wsync_delta_file_encode(f, &p, &err) < 0)
		printf("# raw_file: %s\n", err.msg);
	raw_record(b, WSYNC_DELTA_REC_FILE, p.data, p.len);
	wsync_buf_free(&p);
}

static void raw_end(struct wsync_buf *b, uint64_t files, uint64_t bytes)
{
	uint8_t e[16];

	put64(e, files);
	put64(e + 8, bytes);
	raw_record(b, WSYNC_DELTA_REC_END, e, sizeof(e));
}

/* ---- FILE records ---- */

static void test_file_record_round_trip(void)
{
	struct wsync_delta_file f = file("a/b.safetensors", WSYNC_DELTA_WRITE, 5ULL << 32,
					 (5ULL << 32) + 3, 161), g;
	struct wsync_buf b = { 0 };
	struct wsync_error err;

	f.kind = WSYNC_DELTA_KIND_SAFETENSORS;
	f.mode = 04755;
	f.changed = 123456789012ULL;
	f.elements = 987654321098ULL;
	CHECK(wsync_delta_file_encode(&f, &b, &err) == 0);
	CHECK_EQ_U64(b.len, WSYNC_DELTA_FILE_FIXED_LEN + strlen(f.path));
	CHECK(wsync_delta_file_decode(b.data, b.len, &g, &err) == 0);
	CHECK_STR(g.path, f.path);
	CHECK(g.op == f.op && g.kind == f.kind && g.flags == f.flags && g.mode == f.mode);
	CHECK_EQ_U64(g.base_size, f.base_size);
	CHECK_EQ_U64(g.target_size, f.target_size);
	CHECK(wsync_hash_equal(&g.base_hash, &f.base_hash));
	CHECK(wsync_hash_equal(&g.target_hash, &f.target_hash));
	CHECK_EQ_U64(g.n_segments, 161);
	CHECK_EQ_U64(g.changed, f.changed);
	CHECK_EQ_U64(g.elements, f.elements);
	wsync_delta_file_clear(&g);
	/* One byte short or long is refused. */
	CHECK(wsync_delta_file_decode(b.data, b.len - 1, &g, &err) == -EINVAL);
	CHECK(g.path == NULL);
	wsync_buf_free(&b);
}

static void refuse_file(struct wsync_delta_file f, const char *needle)
{
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };

	CHECK(wsync_delta_file_encode(&f, &b, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, needle);
	wsync_buf_free(&b);
}

static void test_file_record_rules(void)
{
	struct wsync_delta_file f;

	f = file("k", WSYNC_DELTA_KEEP, 10, 10, 1);
	refuse_file(f, "KEEP");
	f = file("k", WSYNC_DELTA_KEEP, 10, 10, 0);
	f.target_size = 11;
	refuse_file(f, "KEEP");
	f = file("d", WSYNC_DELTA_DELETE, 10, 0, 2);
	refuse_file(f, "DELETE");
	f = file("w", WSYNC_DELTA_WRITE, 10, 10, 11);
	refuse_file(f, "cannot tile");
	f = file("w", WSYNC_DELTA_WRITE, 10, 10, 0);
	refuse_file(f, "cannot tile");
	f = file("w", WSYNC_DELTA_WRITE, 10, 10, 1);
	f.mode = 010644;
	refuse_file(f, "mode");
	f.mode = 0644;
	f.flags |= 4;
	refuse_file(f, "flags");
	f.flags = WSYNC_DELTA_FILE_HAS_BASE | WSYNC_DELTA_FILE_REPLACE;	/* only without a base */
	refuse_file(f, "REPLACE");
	f = file("w", WSYNC_DELTA_WRITE, 0, 10, 1);
	f.flags = WSYNC_DELTA_FILE_REPLACE;	/* a WRITE without a base: fine */
	{
		struct wsync_buf b = { 0 };
		struct wsync_error err = { 0 };

		CHECK(wsync_delta_file_encode(&f, &b, &err) == 0);
		wsync_buf_free(&b);
	}
	f = file("w", WSYNC_DELTA_WRITE, 0, 10, 1);
	f.base_size = 3;
	refuse_file(f, "without HAS_BASE");
	f = file("w", WSYNC_DELTA_WRITE, 10, 10, 1);
	f.op = (enum wsync_delta_op)3;
	refuse_file(f, "op");
	f = file("../w", WSYNC_DELTA_WRITE, 10, 10, 1);
	refuse_file(f, "\"..\"");
}

/* ---- writer and reader ---- */

static void check_sample(const struct wsync_delta_reader *r)
{
	const struct wsync_delta_entry *e;
	struct wsync_buf seg = { 0 }, want = { 0 };
	struct wsync_error err;

	CHECK_EQ_U64(r->n_files, 4);
	if (r->n_files != 4)
		return;
	CHECK_STR(r->files[0].file.path, "config.json");
	CHECK(r->files[0].file.op == WSYNC_DELTA_KEEP);
	CHECK_STR(r->files[3].file.path, "old.bin");
	CHECK(r->files[3].file.op == WSYNC_DELTA_DELETE);
	CHECK_STR(r->files[2].file.path, "new/empty");
	CHECK(!(r->files[2].file.flags & WSYNC_DELTA_FILE_HAS_BASE));
	e = &r->files[1];
	CHECK(e->file.kind == WSYNC_DELTA_KIND_SAFETENSORS);
	CHECK_EQ_U64(e->file.changed, 7);	/* from FILE_END, after the segments */
	CHECK_EQ_U64(e->file.elements, 50);
	CHECK_EQ_U64(e->file.n_segments, 2);
	CHECK_EQ_U64(e->segments[0].target_offset, 0);
	CHECK_EQ_U64(e->segments[0].target_len, 60);
	CHECK_EQ_U64(e->segments[1].target_offset, 60);
	CHECK_EQ_U64(e->segments[1].target_len, 40);
	CHECK_EQ_U64(r->write_bytes, 100);
	CHECK(wsync_delta_reader_segment(r, &e->segments[1], &seg, &err) == 0);
	fake_segment(&want, 60, 40, 10);
	CHECK(seg.len == want.len && memcmp(seg.data, want.data, seg.len) == 0);
	CHECK_EQ_U64(e->delta_bytes, 24 + 82 + strlen(e->file.path) + 24 + 64 + 24 + 34 +
				     24 + WSYNC_DELTA_FILE_END_LEN);
	wsync_buf_free(&seg);
	wsync_buf_free(&want);
}

static void test_round_trip_fd_and_mem(void)
{
	struct wsync_delta_reader *r = NULL;
	struct wsync_error err = { 0 };
	uint8_t *img;
	size_t len = sample_delta(&img);
	int fd = memfd();

	CHECK(len > 100);
	CHECK(memcmp(img, "WSYNCDLT\x04\0\0\0\0\0\0\0", 16) == 0);
	CHECK(pwrite(fd, img, len, 0) == (ssize_t)len);
	CHECK(wsync_delta_reader_open_fd(fd, &r, &err) == 0);
	if (r) {
		CHECK_EQ_U64(r->size, len);
		check_sample(r);
	}
	wsync_delta_reader_free(r);
	r = NULL;
	CHECK(wsync_delta_reader_open_mem(img, len, &r, &err) == 0);
	if (r)
		check_sample(r);
	wsync_delta_reader_free(r);
	close(fd);
	free(img);
}

/* The index of the sample: head, four files' ranges tiling the records,
 * one piece per record with its SHA-256; the object's hashes as the
 * one-pass functions give them.  Then a delta of two of its files, from
 * the head and their ranges with END appended, reads as those two. */
static void test_index_and_partial(void)
{
	struct wsync_delta_object o;
	struct wsync_delta_reader *r = NULL;
	struct wsync_error err = { 0 };
	struct wsync_hash128 h;
	uint8_t *img, sha[32];
	size_t len = sample_delta(&img);
	uint64_t size = 0, at;
	int fd = memfd(), part = memfd();

	CHECK(pwrite(fd, img, len, 0) == (ssize_t)len);
	CHECK(wsync_delta_index(fd, "sample", &o, &err) == 0);
	if (!o.index) {
		printf("# %s\n", err.msg);
		goto out;
	}
	CHECK_EQ_U64(o.size, len);
	CHECK(wsync_hash_fd(fd, "sample", &h, &size, &err) == 0);
	CHECK(wsync_hash_equal(&h, &o.hash));
	CHECK(wsync_sha256_fd(fd, "sample", sha, &err) == 0);
	CHECK(memcmp(sha, o.sha256, 32) == 0);
	CHECK_EQ_U64(o.index->head.length, 16);
	CHECK_EQ_U64(o.index->n_files, 4);
	at = 16;
	for (size_t i = 0; i < o.index->n_files; i++) {
		const struct wsync_manifest_range *f = &o.index->files[i];
		uint64_t p = f->offset;

		CHECK_EQ_U64(f->offset, at);
		for (size_t k = 0; k < f->n_pieces; k++) {
			CHECK(wsync_sha256_mem(img + p, f->pieces[k].length, sha) == 0);
			CHECK(memcmp(sha, f->pieces[k].sha256, 32) == 0);
			p += f->pieces[k].length;
		}
		CHECK_EQ_U64(p, f->offset + f->length);
		at = p;
	}
	CHECK_STR(o.index->files[1].path, "model-00001-of-00002.safetensors");
	CHECK_EQ_U64(o.index->files[1].n_pieces, 4);	/* FILE, two SEGMENTs, FILE_END */
	CHECK_STR(o.index->files[3].path, "old.bin");
	CHECK_EQ_U64(at + 24 + 16, len);		/* then END */

	/* A delta of the model and the deleted file alone. */
	{
		const struct wsync_manifest_range *a = &o.index->files[1], *b = &o.index->files[3];
		uint64_t n = 16;

		CHECK(pwrite(part, img, 16, 0) == 16);
		CHECK(pwrite(part, img + a->offset, a->length, (off_t)n) == (ssize_t)a->length);
		n += a->length;
		CHECK(pwrite(part, img + b->offset, b->length, (off_t)n) == (ssize_t)b->length);
		n += b->length;
		CHECK(wsync_delta_end_partial(part, n, &err) == 0);
		CHECK(wsync_delta_reader_open_fd(part, &r, &err) == 0);
		if (r) {
			CHECK_EQ_U64(r->n_files, 2);
			CHECK_STR(r->files[0].file.path, "model-00001-of-00002.safetensors");
			CHECK(r->files[1].file.op == WSYNC_DELTA_DELETE);
			CHECK_EQ_U64(r->write_bytes, 100);
		}
		wsync_delta_reader_free(r);
		/* records that do not follow one another are refused */
		CHECK(wsync_delta_end_partial(part, n - 1, &err) == -EINVAL);
	}
	/* not a delta wsync wrote: cut short, or bytes after END */
	CHECK_EQ_U64(o.n_files, 3);	/* the files it makes: not old.bin, deleted */
	for (size_t i = 0; i < o.n_files; i++)
		CHECK(strcmp(o.files[i].path, "old.bin") != 0);

	/* Indexed while written, a byte more each time, cut into chunks:
	 * the same index and hashes, the chunks tile it with their SHA-256. */
	{
		struct wsync_delta_indexer *x = NULL;
		struct wsync_delta_object o2;
		struct wsync_delta_chunk c;
		int grow = memfd();
		uint64_t chunked = 0, cuts = 0;

		CHECK(wsync_delta_indexer_new(grow, "growing", &x, &err) == 0);
		for (size_t n = 1; x && n <= len; n++) {
			CHECK(pwrite(grow, img + n - 1, 1, (off_t)n - 1) == 1);
			CHECK(wsync_delta_indexer_advance(x, n, &err) == 0);
			CHECK(wsync_delta_indexer_offset(x) <= n);
			if (wsync_delta_indexer_offset(x) - chunked >= 40 &&
			    wsync_delta_indexer_cut(x, &c, &err) == 0) {
				CHECK_EQ_U64(c.offset, chunked);
				CHECK(wsync_sha256_mem(img + c.offset, c.size, sha) == 0);
				CHECK(memcmp(sha, c.sha256, 32) == 0);
				chunked += c.size;
				cuts++;
			}
		}
		CHECK(cuts >= 2);
		CHECK(x && wsync_delta_indexer_finish(x, &o2, &err) == 0);
		CHECK(x && wsync_delta_indexer_cut(x, &c, &err) == 0 && c.offset + c.size == len);
		CHECK_EQ_U64(o2.size, len);
		CHECK(memcmp(o2.sha256, o.sha256, 32) == 0 && wsync_hash_equal(&o2.hash, &o.hash));
		CHECK(o2.index && o2.index->n_files == o.index->n_files && o2.n_files == 3);
		wsync_delta_object_free(&o2);
		wsync_delta_indexer_free(x);
		close(grow);
	}
	CHECK(ftruncate(fd, (off_t)len - 1) == 0);
	wsync_delta_object_free(&o);
	CHECK(wsync_delta_index(fd, "cut", &o, &err) == -EINVAL && o.index == NULL);
	CHECK(pwrite(fd, img + len - 1, 1, (off_t)len - 1) == 1 &&
	      pwrite(fd, "x", 1, (off_t)len) == 1);
	CHECK(wsync_delta_index(fd, "long", &o, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "after the END record");
out:
	close(fd);
	close(part);
	free(img);
}


/* Chunks a cut_files indexer hands over, in order. */
struct cuts {
	struct wsync_delta_chunk c[16];
	size_t n;
};

static int collect_cut(void *arg, const struct wsync_delta_chunk *c, struct wsync_error *err)
{
	struct cuts *k = arg;

	(void)err;
	if (k->n < 16)
		k->c[k->n] = *c;
	k->n++;
	return 0;
}

/* What a tap sees: the bytes, and an indexer fed with them. */
struct tapped {
	struct wsync_buf seen;
	struct wsync_delta_indexer *x;
};

static int on_tap(void *arg, const uint8_t *data, size_t len, struct wsync_error *err)
{
	struct tapped *t = arg;

	if (wsync_buf_append(&t->seen, data, len) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	return wsync_delta_indexer_feed(t->x, data, len, err);
}

/* The records of test_index_fed_by_writer, written to fd (or -1: to the
 * tap alone) through t's tap: a segment over the writer's 1 MiB buffer
 * (written straight from its payload), a small one, a FILE_END, a KEEP. */
static int write_tapped(int fd, struct tapped *t, struct wsync_error *err)
{
	struct wsync_delta_writer *w = NULL;
	struct wsync_buf seg = { 0 };
	struct wsync_delta_file f;
	int r = wsync_delta_writer_new(fd, &w, err);

	if (r < 0)
		return r;
	wsync_delta_writer_tap(w, on_tap, t);
	f = file("a.safetensors", WSYNC_DELTA_WRITE, 0, 5000000, 2);
	r |= wsync_delta_writer_file(w, &f, err);
	fake_segment(&seg, 0, 4000000, 3u << 20);
	r |= wsync_delta_writer_segment(w, seg.data, seg.len, err);
	fake_segment(&seg, 4000000, 1000000, 100);
	r |= wsync_delta_writer_segment(w, seg.data, seg.len, err);
	r |= end_file(w, &f, 1, 2, err);
	f = file("b.bin", WSYNC_DELTA_KEEP, 9, 9, 0);
	r |= wsync_delta_writer_file(w, &f, err);
	r |= wsync_delta_writer_finish(w, err);
	wsync_delta_writer_free(w);
	wsync_buf_free(&seg);
	return r ? -EIO : 0;
}

static bool same_index(const struct wsync_manifest_index *a, const struct wsync_manifest_index *b)
{
	if (!a || !b || a->n_files != b->n_files || a->head.length != b->head.length ||
	    memcmp(a->head.sha256, b->head.sha256, 32) != 0)
		return false;
	for (size_t i = 0; i < a->n_files; i++) {
		const struct wsync_manifest_range *f = &a->files[i], *g = &b->files[i];

		if (strcmp(f->path, g->path) != 0 || f->offset != g->offset ||
		    f->length != g->length || f->n_pieces != g->n_pieces)
			return false;
		for (size_t k = 0; k < f->n_pieces; k++)
			if (f->pieces[k].length != g->pieces[k].length ||
			    memcmp(f->pieces[k].sha256, g->pieces[k].sha256, 32) != 0)
				return false;
	}
	return true;
}

/*
 * Indexed from the writer's tap, as the publisher does (nothing read
 * back): the tap sees exactly the file's bytes, once and in order -- a
 * segment over the writer's 1 MiB buffer (written straight from its
 * payload) included -- and the index, hashes and per-file chunks are
 * those of reading the file.  Fed a few bytes at a time, a cut in the
 * middle of a record is refused; bytes after END are refused; advance
 * will not read on from the middle of a record fed.
 */
static void test_index_fed_by_writer(void)
{
	struct wsync_delta_indexer *y = NULL;
	struct wsync_delta_object fed = { 0 }, read = { 0 };
	struct wsync_delta_chunk c;
	struct wsync_buf back = { 0 };
	struct wsync_error err = { 0 };
	struct tapped t = { 0 }, nofile = { 0 };
	struct cuts kf = { 0 }, kr = { 0 };
	int fd = memfd(), r = 0;
	uint8_t *img = NULL;
	size_t len, midcuts = 0, okcuts = 0;

	CHECK(wsync_delta_indexer_new(fd, "fed", &t.x, &err) == 0);
	if (!t.x)
		goto out;
	wsync_delta_indexer_cut_files(t.x, collect_cut, &kf);
	r = write_tapped(fd, &t, &err);
	CHECK(r == 0);
	if (r)
		printf("# %s\n", wsync_error_str(&err));
	len = (size_t)lseek(fd, 0, SEEK_END);
	CHECK_EQ_U64(t.seen.len, len);
	CHECK(wsync_buf_scratch(&back, len) == 0 &&
	      pread(fd, back.data, len, 0) == (ssize_t)len &&
	      memcmp(back.data, t.seen.data, len) == 0);
	CHECK(wsync_delta_indexer_finish(t.x, &fed, &err) == 0);

	/* the same from the file */
	CHECK(wsync_delta_indexer_new(fd, "read", &y, &err) == 0);
	if (y) {
		wsync_delta_indexer_cut_files(y, collect_cut, &kr);
		CHECK(wsync_delta_indexer_finish(y, &read, &err) == 0);
	}
	CHECK(same_index(fed.index, read.index));
	CHECK_EQ_U64(fed.size, len);
	CHECK(read.size == fed.size && memcmp(read.sha256, fed.sha256, 32) == 0 &&
	      wsync_hash_equal(&read.hash, &fed.hash));
	CHECK(fed.n_files == 2 && read.n_files == 2 &&
	      wsync_hash_equal(&fed.files[0].hash, &read.files[0].hash));
	CHECK_EQ_U64(kf.n, 4);	/* preamble, a, b, END */
	CHECK(kf.n == kr.n && memcmp(kf.c, kr.c, (kf.n < 16 ? kf.n : 16) * sizeof(kf.c[0])) == 0);
	wsync_delta_indexer_free(y);
	y = NULL;

	/* The chunks' SHA-256 alone: the same chunks, the same files */
	{
		struct wsync_delta_object only = { 0 };
		struct cuts ko = { 0 };

		CHECK(wsync_delta_indexer_new(fd, "chunks only", &y, &err) == 0);
		if (y) {
			wsync_delta_indexer_chunks_only(y);
			wsync_delta_indexer_cut_files(y, collect_cut, &ko);
			CHECK(wsync_delta_indexer_finish(y, &only, &err) == 0);
			CHECK(ko.n == kr.n && memcmp(ko.c, kr.c, (ko.n < 16 ? ko.n : 16) *
						     sizeof(ko.c[0])) == 0);
			CHECK(only.index && only.index->n_files == read.index->n_files &&
			      only.index->files[1].offset == read.index->files[1].offset &&
			      only.index->files[1].length == read.index->files[1].length &&
			      strcmp(only.index->files[1].path, read.index->files[1].path) == 0);
			CHECK(only.size == read.size && only.n_files == read.n_files);
		}
		wsync_delta_object_free(&only);
		wsync_delta_indexer_free(y);
		y = NULL;
	}

	/* Fed seven bytes at a time: cuts between records only. */
	img = t.seen.data;
	CHECK(wsync_delta_indexer_new(fd, "sevens", &y, &err) == 0);
	for (size_t at = 0; y && at < len; at += 7) {
		CHECK(wsync_delta_indexer_feed(y, img + at, len - at < 7 ? len - at : 7, &err) == 0);
		if (wsync_delta_indexer_cut(y, &c, &err) == 0)
			okcuts++;
		else
			midcuts++;
	}
	CHECK(okcuts >= 1 && midcuts > 100);
	if (y) {
		wsync_delta_object_free(&read);
		CHECK(wsync_delta_indexer_finish(y, &read, &err) == 0);
		CHECK(same_index(fed.index, read.index));
		CHECK(wsync_delta_indexer_feed(y, img, 1, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "after the END record");
	}
	wsync_delta_indexer_free(y);
	y = NULL;

	/* Half a record fed, then advance: refused, and stays so. */
	CHECK(wsync_delta_indexer_new(fd, "mixed", &y, &err) == 0);
	if (y) {
		CHECK(wsync_delta_indexer_feed(y, img, 20, &err) == 0);
		CHECK(wsync_delta_indexer_advance(y, len, &err) == -EINVAL);
		CHECK(wsync_delta_indexer_feed(y, img + 20, 4, &err) == -EINVAL);
	}
out:
	wsync_delta_indexer_free(y);
	wsync_delta_object_free(&fed);
	wsync_delta_object_free(&read);
	wsync_delta_indexer_free(t.x);
	wsync_buf_free(&t.seen);
	wsync_buf_free(&back);
	close(fd);

	/* No file at all (fd -1): the tap alone gets the same bytes, and the
	 * indexer, fed them, finishes without one. */
	CHECK(wsync_delta_indexer_new(-1, "no file", &nofile.x, &err) == 0);
	if (nofile.x) {
		struct tapped again = { 0 };
		int fd2 = memfd();

		CHECK(write_tapped(-1, &nofile, &err) == 0);
		CHECK(wsync_delta_indexer_finish(nofile.x, &fed, &err) == 0);
		CHECK(wsync_delta_indexer_new(fd2, "again", &again.x, &err) == 0);
		CHECK(again.x && write_tapped(fd2, &again, &err) == 0);
		CHECK(again.seen.len == nofile.seen.len &&
		      memcmp(again.seen.data, nofile.seen.data, again.seen.len) == 0);
		CHECK_EQ_U64(fed.size, nofile.seen.len);
		CHECK(lseek(fd2, 0, SEEK_END) == (off_t)nofile.seen.len);
		wsync_delta_object_free(&fed);
		wsync_delta_indexer_free(again.x);
		wsync_buf_free(&again.seen);
		close(fd2);
	}
	wsync_delta_indexer_free(nofile.x);
	wsync_buf_free(&nofile.seen);
}

/* A delta of one file of 64 MiB whose one segment's payload (in seg) is
 * len bytes, written to fd. */
static void write_big(int fd, struct wsync_buf *seg, size_t len)
{
	struct wsync_delta_writer *w = NULL;
	struct wsync_error err = { 0 };
	struct wsync_delta_file f = file("big", WSYNC_DELTA_WRITE, 0, 64ULL << 20, 1);

	CHECK(wsync_delta_writer_new(fd, &w, &err) == 0);
	CHECK(wsync_delta_writer_file(w, &f, &err) == 0);
	fake_segment(seg, 0, 64ULL << 20, len);
	CHECK(wsync_delta_writer_segment(w, seg->data, seg->len, &err) == 0);
	CHECK(end_file(w, &f, 1, 2, &err) == 0);
	CHECK(wsync_delta_writer_finish(w, &err) == 0);
	wsync_delta_writer_free(w);
}

/* Two files of big and small segments (records of several MiB and of a
 * few bytes), written to fd. */
static void write_mixed(int fd)
{
	struct wsync_delta_writer *w = NULL;
	struct wsync_error err = { 0 };
	struct wsync_buf seg = { 0 };
	struct wsync_delta_file a = file("a", WSYNC_DELTA_WRITE, 0, 64ULL << 20, 2);
	struct wsync_delta_file b = file("b", WSYNC_DELTA_WRITE, 0, 64ULL << 20, 3);

	CHECK(wsync_delta_writer_new(fd, &w, &err) == 0);
	CHECK(wsync_delta_writer_file(w, &a, &err) == 0);
	fake_segment(&seg, 0, 32ULL << 20, (3u << 20) + 11);
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == 0);
	fake_segment(&seg, 32ULL << 20, 32ULL << 20, 100);
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == 0);
	CHECK(end_file(w, &a, 1, 2, &err) == 0);
	CHECK(wsync_delta_writer_file(w, &b, &err) == 0);
	fake_segment(&seg, 0, 16ULL << 20, 7);
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == 0);
	fake_segment(&seg, 16ULL << 20, 16ULL << 20, (2u << 20) + 5);
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == 0);
	fake_segment(&seg, 32ULL << 20, 32ULL << 20, 1u << 20);
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == 0);
	CHECK(end_file(w, &b, 1, 2, &err) == 0);
	CHECK(wsync_delta_writer_finish(w, &err) == 0);
	wsync_delta_writer_free(w);
	wsync_buf_free(&seg);
}

/* Feed img (len bytes, indexed as ix) to x in feeds that end, record by
 * record, at its start, 5 bytes into it (in its header) or 7 bytes into
 * it (the feed before holds a whole record and a piece of this one),
 * cutting where it can after each; the chunks into k (each checked
 * against the image's bytes; NULL: no cuts) and the object into o. */
static void feed_and_cut(struct wsync_delta_indexer *x, const uint8_t *img, size_t len,
			 const struct wsync_manifest_index *ix, struct cuts *k,
			 struct wsync_delta_object *o)
{
	struct wsync_error err = { 0 };
	struct wsync_delta_chunk c;
	uint64_t starts[64], at = 0;
	size_t n = 0;
	uint8_t sha[32];

	/* where each record after the preamble begins: each file's pieces
	 * in turn, then END */
	starts[n++] = ix->head.length;
	for (size_t i = 0; i < ix->n_files; i++)
		for (size_t p = 0; p < ix->files[i].n_pieces && n < 64; p++, n++)
			starts[n] = starts[n - 1] + ix->files[i].pieces[p].length;
	for (size_t j = 0; j <= n; j++) {
		uint64_t to = j == n ? len : starts[j] + (j % 3 == 1 ? 5 : j % 3 == 2 ? 7 : 0);

		if (to > len)
			to = len;
		if (to <= at)
			continue;
		CHECK(wsync_delta_indexer_feed(x, img + at, (size_t)(to - at), &err) == 0);
		at = to;
		if (k && k->n < sizeof(k->c) / sizeof(k->c[0]) &&
		    wsync_delta_indexer_cut(x, &c, &err) == 0 && c.size) {
			CHECK(wsync_sha256_mem(img + c.offset, c.size, sha) == 0);
			CHECK(memcmp(sha, c.sha256, 32) == 0);
			k->c[k->n++] = c;
		}
	}
	CHECK(wsync_delta_indexer_finish(x, o, &err) == 0);
}

/*
 * The side threads (wsync_delta_indexer_side_threads) hash the object's
 * and the chunks' SHA-256 over each big feed beside the caller: fed the
 * same bytes the same way, an indexer with them makes the same chunks,
 * index, SHA-256 and XXH3 as one without, and both those of reading the
 * file -- feeds ending inside headers on either side of the bound
 * included.  Hashing for the chunks alone, too.
 */
static void test_index_side_threads(void)
{
	struct wsync_delta_object ref = { 0 }, alone = { 0 }, side = { 0 };
	struct wsync_delta_indexer *x = NULL, *y = NULL;
	struct wsync_error err = { 0 };
	struct cuts ka = { 0 }, ks = { 0 };
	uint8_t *img = NULL, sha[32];
	int fd = memfd();
	off_t len;

	write_mixed(fd);
	len = lseek(fd, 0, SEEK_END);
	CHECK(len > (off_t)(6u << 20));
	img = malloc((size_t)len);
	CHECK(img && pread(fd, img, (size_t)len, 0) == len);
	if (!img || len <= 0)
		goto out;
	CHECK(wsync_delta_index(fd, "read", &ref, &err) == 0);
	CHECK(wsync_sha256_mem(img, (size_t)len, sha) == 0);
	CHECK(memcmp(sha, ref.sha256, 32) == 0);

	CHECK(wsync_delta_indexer_new(fd, "alone", &x, &err) == 0);
	CHECK(wsync_delta_indexer_new(fd, "side", &y, &err) == 0);
	CHECK(y && wsync_delta_indexer_side_threads(y) == 0);
	if (!x || !y)
		goto out;
	feed_and_cut(x, img, (size_t)len, ref.index, &ka, &alone);
	feed_and_cut(y, img, (size_t)len, ref.index, &ks, &side);
	CHECK(ka.n >= 3 && ka.n == ks.n);
	for (size_t i = 0; i < ka.n && i < ks.n; i++)
		CHECK(ka.c[i].offset == ks.c[i].offset && ka.c[i].size == ks.c[i].size &&
		      memcmp(ka.c[i].sha256, ks.c[i].sha256, 32) == 0);
	CHECK(memcmp(side.sha256, ref.sha256, 32) == 0 && wsync_hash_equal(&side.hash, &ref.hash));
	CHECK(memcmp(alone.sha256, ref.sha256, 32) == 0 && wsync_hash_equal(&alone.hash, &ref.hash));
	CHECK(same_index(side.index, ref.index) && same_index(alone.index, ref.index));
	CHECK(side.n_files == 2 && side.size == (uint64_t)len);
	wsync_delta_indexer_free(y);

	/* cut by files: the object's SHA-256 aside, the chunks as without */
	{
		struct wsync_delta_indexer *f1 = NULL, *f2 = NULL;
		struct wsync_delta_object o1 = { 0 }, o2 = { 0 };
		struct cuts k1 = { 0 }, k2 = { 0 };

		CHECK(wsync_delta_indexer_new(fd, "files", &f1, &err) == 0);
		CHECK(wsync_delta_indexer_new(fd, "files aside", &f2, &err) == 0);
		if (f1 && f2) {
			wsync_delta_indexer_cut_files(f1, collect_cut, &k1);
			wsync_delta_indexer_cut_files(f2, collect_cut, &k2);
			CHECK(wsync_delta_indexer_side_threads(f2) == 0);
			feed_and_cut(f1, img, (size_t)len, ref.index, NULL, &o1);
			feed_and_cut(f2, img, (size_t)len, ref.index, NULL, &o2);
			/* the preamble, a chunk per file, END */
			CHECK(k1.n == 4 && k2.n == k1.n);
			for (size_t i = 0; i < k1.n && i < k2.n; i++)
				CHECK(k1.c[i].offset == k2.c[i].offset &&
				      k1.c[i].size == k2.c[i].size &&
				      memcmp(k1.c[i].sha256, k2.c[i].sha256, 32) == 0 &&
				      wsync_sha256_mem(img + k2.c[i].offset, k2.c[i].size,
						       sha) == 0 &&
				      memcmp(sha, k2.c[i].sha256, 32) == 0);
			CHECK(memcmp(o2.sha256, ref.sha256, 32) == 0 &&
			      memcmp(o1.sha256, ref.sha256, 32) == 0);
			CHECK(same_index(o2.index, ref.index));
		}
		wsync_delta_object_free(&o1);
		wsync_delta_object_free(&o2);
		wsync_delta_indexer_free(f1);
		wsync_delta_indexer_free(f2);
	}

	/* chunks alone: the same chunks */
	CHECK(wsync_delta_indexer_new(fd, "chunks only", &y, &err) == 0);
	if (y) {
		struct wsync_delta_object only = { 0 };
		struct cuts ko = { 0 };

		wsync_delta_indexer_chunks_only(y);
		CHECK(wsync_delta_indexer_side_threads(y) == 0);
		feed_and_cut(y, img, (size_t)len, ref.index, &ko, &only);
		CHECK(ko.n == ka.n);
		for (size_t i = 0; i < ka.n && i < ko.n; i++)
			CHECK(memcmp(ka.c[i].sha256, ko.c[i].sha256, 32) == 0);
		wsync_delta_object_free(&only);
	}
out:
	wsync_delta_indexer_free(x);
	wsync_delta_indexer_free(y);
	wsync_delta_object_free(&ref);
	wsync_delta_object_free(&alone);
	wsync_delta_object_free(&side);
	free(img);
	close(fd);
}

/* A big payload goes around the writer's buffer and through the reader's
 * window; the counts patch then lands in the file, not the buffer. */
static void test_big_segment(void)
{
	struct wsync_delta_reader *r = NULL;
	struct wsync_buf seg = { 0 }, back = { 0 };
	struct wsync_error err = { 0 };
	int fd = memfd();

	write_big(fd, &seg, 9u << 20);
	CHECK(wsync_delta_reader_open_fd(fd, &r, &err) == 0);
	if (r) {
		CHECK_EQ_U64(r->files[0].file.changed, 1);
		CHECK_EQ_U64(r->files[0].file.elements, 2);
		CHECK(wsync_delta_reader_segment(r, &r->files[0].segments[0], &back, &err) == 0);
		CHECK(back.len == seg.len && memcmp(back.data, seg.data, seg.len) == 0);
	}
	wsync_delta_reader_free(r);
	/* The file changing under the reader is caught on the second read. */
	CHECK(wsync_delta_reader_open_fd(fd, &r, &err) == 0);
	CHECK(pwrite(fd, "x", 1, 5u << 20) == 1);
	if (r) {
		CHECK(wsync_delta_reader_segment(r, &r->files[0].segments[0], &back,
						 &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "checksum");
	}
	wsync_delta_reader_free(r);
	wsync_buf_free(&seg);
	wsync_buf_free(&back);
	close(fd);
}

/* WSYNC_DELTA_READ_AROUND: a big payload at an unaligned offset of a file
 * on a disk's file system, its pages dropped from the cache, read around
 * it (O_DIRECT where the file system takes it) is the same; a file cut
 * short under the reader is an error, not a short payload. */
static void test_read_around(void)
{
	struct wsync_delta_reader *r = NULL;
	struct wsync_buf seg = { 0 }, back = { 0 };
	struct wsync_error err = { 0 };
	char path[] = "/var/tmp/wsync-test-delta.XXXXXX";
	int fd = mkstemp(path);

	if (fd < 0) {
		CHECK(!"a file in /var/tmp");
		return;
	}
	(void)unlink(path);
	write_big(fd, &seg, (3u << 20) + 123);
	CHECK(fdatasync(fd) == 0);
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	CHECK(wsync_delta_reader_open_fd_as(fd, WSYNC_DELTA_SEGMENTS_LATER |
					    WSYNC_DELTA_READ_AROUND, &r, &err) == 0);
	if (r) {
		CHECK(r->once != NULL);
		CHECK(r->files[0].segments[0].payload_offset % 4096 != 0);
		CHECK(wsync_delta_reader_segment(r, &r->files[0].segments[0], &back, &err) == 0);
		CHECK(back.len == seg.len && memcmp(back.data, seg.data, seg.len) == 0);
		/* again, the pages dropped again: the same bytes */
		(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		CHECK(wsync_delta_reader_segment(r, &r->files[0].segments[0], &back, &err) == 0);
		CHECK(back.len == seg.len && memcmp(back.data, seg.data, seg.len) == 0);
		CHECK(ftruncate(fd, 1u << 20) == 0);
		CHECK(wsync_delta_reader_segment(r, &r->files[0].segments[0], &back,
						 &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "truncated");
	}
	wsync_delta_reader_free(r);
	wsync_buf_free(&seg);
	wsync_buf_free(&back);
	close(fd);
}

/*
 * Version 4: a WRITE's FILE record leaves its hashes and counts zero, its
 * FILE_END record after the last segment gives them, and the reader shows
 * them on the file.  Every byte the writer wrote stays as it was: what it
 * flushed after each record is a prefix of the finished delta (so it can
 * be uploaded, and cut, as it grows).  The writer refuses a FILE_END out
 * of place and a file or finish without one.
 */
static void test_writer_file_end(void)
{
	struct wsync_delta_writer *w = NULL;
	struct wsync_delta_reader *r = NULL;
	struct wsync_buf seg = { 0 };
	struct wsync_error err = { 0 };
	struct wsync_delta_file a = file("a", WSYNC_DELTA_WRITE, 100, 100, 2);
	struct wsync_delta_file k = file("b", WSYNC_DELTA_KEEP, 100, 100, 0);
	struct wsync_delta_file c = file("c", WSYNC_DELTA_WRITE, 0, 100, 1);
	struct wsync_delta_file_end fe = { 0 };
	uint8_t *snap[8] = { 0 };
	size_t snap_len[8] = { 0 }, n_snap = 0;
	int fd = memfd();

	CHECK(wsync_delta_writer_new(fd, &w, &err) == 0);
	CHECK(wsync_delta_writer_file_end(w, &fe, &err) == -EINVAL);	/* no file */
	CHECK(wsync_delta_writer_file(w, &a, &err) == 0);
	fake_segment(&seg, 0, 60, 2u << 20);	/* past the buffer: flushed */
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == 0);
	CHECK(end_file(w, &a, 1, 2, &err) == -EINVAL);		/* a segment to come */
	CHECK_CONTAINS(err.msg, "1 of 2 segments");
	fake_segment(&seg, 60, 40, 30);
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == 0);
	CHECK(wsync_delta_writer_file(w, &k, &err) == -EINVAL);	/* no FILE_END */
	CHECK_CONTAINS(err.msg, "no FILE_END");
	for (int step = 0; step < 4; step++) {
		off_t len;

		if (step == 0)
			CHECK(end_file(w, &a, 7, 50, &err) == 0);
		if (step == 1) {
			CHECK(end_file(w, &a, 7, 50, &err) == -EINVAL);	/* twice */
			CHECK(wsync_delta_writer_file(w, &k, &err) == 0);
			CHECK(end_file(w, &k, 0, 0, &err) == -EINVAL);	/* a KEEP */
		}
		if (step == 2) {
			CHECK(wsync_delta_writer_file(w, &c, &err) == 0);
			fake_segment(&seg, 0, 100, 8);
			CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == 0);
			CHECK(wsync_delta_writer_finish(w, &err) == -EINVAL); /* no FILE_END */
			fe.target_hash = c.target_hash;
			wsync_hash_mem("x", 1, &fe.base_hash);	/* c has no base */
			CHECK(wsync_delta_writer_file_end(w, &fe, &err) == -EINVAL);
			CHECK(end_file(w, &c, 0, 0, &err) == 0);
		}
		if (step == 3)
			CHECK(wsync_delta_writer_finish(w, &err) == 0);
		else
			CHECK(wsync_delta_writer_flush(w, &err) == 0);
		len = lseek(fd, 0, SEEK_END);
		snap[n_snap] = malloc((size_t)len);
		snap_len[n_snap] = (size_t)len;
		CHECK(pread(fd, snap[n_snap], (size_t)len, 0) == len);
		n_snap++;
	}
	wsync_delta_writer_free(w);
	for (size_t i = 0; i + 1 < n_snap; i++)
		CHECK(snap_len[i] <= snap_len[i + 1] &&
		      memcmp(snap[i], snap[n_snap - 1], snap_len[i]) == 0);
	CHECK(wsync_delta_reader_open_fd(fd, &r, &err) == 0);
	if (r) {
		CHECK_EQ_U64(r->version, 4);
		CHECK_EQ_U64(r->n_files, 3);
		CHECK(wsync_hash_equal(&r->files[0].file.base_hash, &a.base_hash));
		CHECK(wsync_hash_equal(&r->files[0].file.target_hash, &a.target_hash));
		CHECK_EQ_U64(r->files[0].file.changed, 7);
		CHECK_EQ_U64(r->files[0].file.elements, 50);
		/* FILE + 2 SEGMENT + FILE_END records */
		CHECK_EQ_U64(r->files[0].delta_bytes,
			     4 * WSYNC_DELTA_RECORD_HEADER_LEN + WSYNC_DELTA_FILE_FIXED_LEN + 1 +
			     (24 + (2u << 20)) + (24 + 30) + WSYNC_DELTA_FILE_END_LEN);
		CHECK(r->files[1].file.op == WSYNC_DELTA_KEEP);
		CHECK(wsync_hash_equal(&r->files[2].file.target_hash, &c.target_hash));
	} else {
		printf("# %s\n", wsync_error_str(&err));
	}
	wsync_delta_reader_free(r);
	for (size_t i = 0; i < n_snap; i++)
		free(snap[i]);
	wsync_buf_free(&seg);
	close(fd);
}

/* A FILE_END payload for raw deltas. */
static void raw_file_end(struct wsync_buf *b, const struct wsync_delta_file *f, size_t len)
{
	struct wsync_delta_file_end fe = { .base_hash = f->base_hash,
					   .target_hash = f->target_hash };
	uint8_t p[WSYNC_DELTA_FILE_END_LEN + 1] = { 0 };

	wsync_delta_file_end_encode(&fe, p);
	raw_record(b, WSYNC_DELTA_REC_FILE_END, p, len);
}

/* The FILE record of a version 4 WRITE: hashes and counts zero. */
static void raw_file_v4(struct wsync_buf *b, const struct wsync_delta_file *f)
{
	struct wsync_delta_file z = *f;

	memset(&z.base_hash, 0, sizeof(z.base_hash));
	memset(&z.target_hash, 0, sizeof(z.target_hash));
	raw_file(b, &z);
}

/*
 * A hostile FILE_END (or its absence) is refused by name: missing (before
 * the next FILE, before END), twice, before the last segment, after a
 * KEEP, of another length, with a base hash for a file without a base, in
 * a version 3 delta; and a version 4 WRITE whose FILE record gives hashes.
 * The same records well placed are accepted, so each case fails for the
 * reason named.  A version 3 delta (hashes in the FILE record, no
 * FILE_END) still reads.
 */
static void test_file_end_rules(void)
{
	struct wsync_buf b = { 0 }, seg = { 0 };
	struct wsync_delta_file w = file("w", WSYNC_DELTA_WRITE, 100, 100, 2);
	struct wsync_delta_file n = file("n", WSYNC_DELTA_WRITE, 0, 100, 1);
	struct wsync_delta_file k = file("k", WSYNC_DELTA_KEEP, 5, 5, 0);
	struct wsync_delta_file x = file("x", WSYNC_DELTA_WRITE, 0, 100, 1);
	struct wsync_delta_reader *r = NULL;
	struct wsync_error err;

	/* for each case: the FILE_END placement */
	for (int c = 0; c < 10; c++) {
		raw_preamble(&b, c == 8 ? 3 : 4);
		if (c == 5) {
			raw_file(&b, &k);
			raw_file_end(&b, &k, WSYNC_DELTA_FILE_END_LEN);	/* after a KEEP */
		}
		if (c == 9)
			raw_file(&b, &w);	/* v4 FILE record with hashes */
		else
			raw_file_v4(&b, &w);
		fake_segment(&seg, 0, 60, 8);
		raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
		if (c == 3)
			raw_file_end(&b, &w, WSYNC_DELTA_FILE_END_LEN);	/* too early */
		fake_segment(&seg, 60, 40, 8);
		raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
		if (c != 1 && c != 2)
			raw_file_end(&b, &w, c == 6 ? 47 : WSYNC_DELTA_FILE_END_LEN);
		if (c == 4)
			raw_file_end(&b, &w, WSYNC_DELTA_FILE_END_LEN);	/* twice */
		if (c != 2) {
			raw_file_v4(&b, &x);
			fake_segment(&seg, 0, 100, 8);
			raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
			if (c == 7) {
				struct wsync_delta_file bad = x;

				wsync_hash_mem("x", 1, &bad.base_hash);
				raw_file_end(&b, &bad, WSYNC_DELTA_FILE_END_LEN);
			} else {
				raw_file_end(&b, &x, WSYNC_DELTA_FILE_END_LEN);
			}
		}
		raw_end(&b, (c == 5) + (c != 2) + 1, (c != 2) * 100 + 100);
		switch (c) {
		case 0:
			wsync_error_clear(&err);
			CHECK(wsync_delta_reader_open_mem(b.data, b.len, &r, &err) == 0);
			if (r) {
				CHECK(wsync_hash_equal(&r->files[0].file.target_hash,
						       &w.target_hash));
				CHECK(wsync_hash_equal(&r->files[0].file.base_hash,
						       &w.base_hash));
				CHECK(wsync_hash_equal(&r->files[1].file.target_hash,
						       &x.target_hash));
			} else {
				printf("# %s\n", err.msg);
			}
			wsync_delta_reader_free(r);
			r = NULL;
			break;
		case 1:
			expect_refused(b.data, b.len, "w: no FILE_END record");
			break;
		case 2:
			expect_refused(b.data, b.len, "w: no FILE_END record");
			break;
		case 3:
			expect_refused(b.data, b.len, "before the file's last SEGMENT");
			break;
		case 4:
			expect_refused(b.data, b.len, "or a second one");
			break;
		case 5:
			expect_refused(b.data, b.len, "after a KEEP or DELETE");
			break;
		case 6:
			expect_refused(b.data, b.len, "FILE_END of 47 bytes");
			break;
		case 7:
			expect_refused(b.data, b.len, "base hash to a file without a base");
			break;
		case 8:
			expect_refused(b.data, b.len, "unknown type 4");
			break;
		case 9:
			expect_refused(b.data, b.len, "has them in FILE_END");
			break;
		}
	}
	/* counts beyond what the file can hold */
	for (int c = 0; c < 2; c++) {
		struct wsync_delta_file_end fe = { .target_hash = x.target_hash,
						   .changed = c ? 5 : 0, .elements = c ? 4 : 101 };
		uint8_t p[WSYNC_DELTA_FILE_END_LEN];

		raw_preamble(&b, 4);
		raw_file_v4(&b, &x);
		fake_segment(&seg, 0, 100, 8);
		raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
		wsync_delta_file_end_encode(&fe, p);
		raw_record(&b, WSYNC_DELTA_REC_FILE_END, p, sizeof(p));
		raw_end(&b, 1, 100);
		expect_refused(b.data, b.len, c ? "5 changed of 4 elements" : "of 101 elements in 100 bytes");
	}
	/* version 3: hashes in the FILE record, no FILE_END */
	raw_preamble(&b, 3);
	raw_file(&b, &n);
	fake_segment(&seg, 0, 100, 8);
	raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
	raw_end(&b, 1, 100);
	CHECK(wsync_delta_reader_open_mem(b.data, b.len, &r, &err) == 0);
	if (r)
		CHECK(wsync_hash_equal(&r->files[0].file.target_hash, &n.target_hash));
	wsync_delta_reader_free(r);
	wsync_buf_free(&b);
	wsync_buf_free(&seg);
}

static void test_writer_refuses_disorder(void)
{
	struct wsync_delta_writer *w = NULL;
	struct wsync_buf seg = { 0 };
	struct wsync_error err = { 0 };
	struct wsync_delta_file f;
	int fd = memfd();

	CHECK(wsync_delta_writer_new(fd, &w, &err) == 0);
	f = file("b", WSYNC_DELTA_WRITE, 0, 100, 2);
	CHECK(wsync_delta_writer_file(w, &f, &err) == 0);
	fake_segment(&seg, 0, 50, 8);
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == 0);
	fake_segment(&seg, 60, 40, 8);		/* a gap */
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == -EINVAL);
	fake_segment(&seg, 50, 40, 8);		/* last one short of the end */
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == -EINVAL);
	f = file("c", WSYNC_DELTA_KEEP, 1, 1, 0);
	CHECK(wsync_delta_writer_file(w, &f, &err) == -EINVAL); /* 1 segment missing */
	CHECK_CONTAINS(err.msg, "announced");
	fake_segment(&seg, 50, 50, 8);
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == 0);
	CHECK(wsync_delta_writer_segment(w, seg.data, seg.len, &err) == -EINVAL);
	f = file("b", WSYNC_DELTA_WRITE, 0, 100, 2);
	CHECK(end_file(w, &f, 0, 0, &err) == 0);
	f = file("a", WSYNC_DELTA_KEEP, 1, 1, 0);
	CHECK(wsync_delta_writer_file(w, &f, &err) == -EINVAL);	/* order */
	CHECK_CONTAINS(err.msg, "byte order");
	f = file("b", WSYNC_DELTA_KEEP, 1, 1, 0);
	CHECK(wsync_delta_writer_file(w, &f, &err) == -EINVAL);	/* duplicate */
	CHECK(wsync_delta_writer_finish(w, &err) == 0);
	CHECK(wsync_delta_writer_finish(w, &err) == -EINVAL);
	wsync_delta_writer_free(w);
	wsync_buf_free(&seg);
	close(fd);
}

/* ---- corruption ---- */

/* Every single flipped byte anywhere is refused: the preamble's fields,
 * each record header's fields and the checksummed payloads leave no byte
 * unguarded.  The one exception is a version flipped into another version
 * readers read (3 -> 2, 3 -> 1): the same bytes mean the same there, and
 * the sample uses no part of the format those versions lack. */
static void test_every_flipped_byte_refused(void)
{
	struct wsync_error err;
	uint8_t *img;
	size_t len = sample_delta(&img);
	size_t accepted = 0, checksum_msgs = 0, versions = 0;

	for (size_t i = 0; i < len; i++) {
		for (int bit = 0; bit < 8; bit += 7) {
			img[i] ^= (uint8_t)(1u << bit);
			if (i == 8 && img[i] >= WSYNC_DELTA_VERSION_MIN &&
			    img[i] < WSYNC_DELTA_VERSION) {
				CHECK(open_mem(img, len, &err) == 0);
				versions++;
			} else if (open_mem(img, len, &err) != -EINVAL) {
				accepted++;
				printf("# flipping bit %d of byte %zu was accepted\n", bit, i);
			}
			checksum_msgs += strstr(err.msg, "checksum mismatch") != NULL;
			img[i] ^= (uint8_t)(1u << bit);
		}
	}
	CHECK_EQ_U64(accepted, 0);
	/* bit 0: 4 -> 5, bit 7: 132; a version 1 to 3 reader refuses the
	 * FILE_END records */
	CHECK_EQ_U64(versions, 0);
	CHECK(checksum_msgs > len); /* most flips hit payloads or checksums */
	CHECK(open_mem(img, len, &err) == 0);
	free(img);
}

/* Opened with WSYNC_DELTA_SEGMENTS_LATER, a flipped byte of a SEGMENT
 * payload passes the open (but for its target range, read there) and is
 * refused by wsync_delta_reader_segment, with the same message; any other
 * flipped byte is still refused at open. */
static int open_later_and_read(const uint8_t *img, size_t len, bool *at_open,
			       struct wsync_error *err)
{
	struct wsync_delta_reader *r = NULL;
	struct wsync_buf payload = { 0 };
	int fd = memfd(), rc;

	CHECK(write(fd, img, len) == (ssize_t)len);
	wsync_error_clear(err);
	rc = wsync_delta_reader_open_fd_as(fd, WSYNC_DELTA_SEGMENTS_LATER, &r, err);
	*at_open = rc < 0;
	for (size_t i = 0; rc == 0 && i < r->n_files; i++)
		for (uint64_t k = 0; rc == 0 && k < r->files[i].file.n_segments; k++)
			rc = wsync_delta_reader_segment(r, &r->files[i].segments[k], &payload,
							err);
	wsync_buf_free(&payload);
	wsync_delta_reader_free(r);
	close(fd);
	return rc;
}

static void test_segments_checked_later(void)
{
	struct wsync_error err;
	uint8_t *img;
	size_t len = sample_delta(&img);
	size_t accepted = 0, later = 0, later_msgs = 0;
	bool at_open;

	CHECK(open_later_and_read(img, len, &at_open, &err) == 0);
	for (size_t i = 0; i < len; i++) {
		if (i == 8)	/* the version byte: see above */
			continue;
		img[i] ^= 0x80;
		if (open_later_and_read(img, len, &at_open, &err) != -EINVAL) {
			accepted++;
			printf("# flipping byte %zu was accepted\n", i);
		} else if (!at_open) {
			later++;
			later_msgs += strstr(err.msg, "checksum mismatch") != NULL;
		}
		img[i] ^= 0x80;
	}
	CHECK_EQ_U64(accepted, 0);
	CHECK(later > 0);		/* payload bytes past the target range */
	CHECK_EQ_U64(later_msgs, later);
	free(img);
}

static void test_every_truncation_refused(void)
{
	struct wsync_error err;
	uint8_t *img;
	size_t len = sample_delta(&img), accepted = 0;

	for (size_t n = 0; n < len; n++)
		if (open_mem(img, n, &err) != -EINVAL)
			accepted++;
	CHECK_EQ_U64(accepted, 0);
	/* Cut exactly before END: the message says what is missing. */
	expect_refused(img, len - 24 - 16, "truncated: no END record");
	expect_refused(img, len - 1, "truncated");
	expect_refused(img, 7, "not a wsync delta");
	free(img);
}

static void test_trailing_bytes_refused(void)
{
	uint8_t *img;
	size_t len = sample_delta(&img);
	uint8_t *more = calloc(1, len + 3);

	memcpy(more, img, len);
	expect_refused(more, len + 3, "after the END record");
	free(more);
	free(img);
}

static void test_version_and_flags(void)
{
	uint8_t *img;
	size_t len = sample_delta(&img);

	img[8] = 5;
	expect_refused(img, len, "unsupported delta version 5");
	img[8] = 3;	/* a version 3 reader knows no FILE_END */
	expect_refused(img, len, "unknown type 4");
	img[8] = 0;
	expect_refused(img, len, "unsupported delta version 0");
	img[11] = 1;
	expect_refused(img, len, "unsupported delta version 16777216");
	img[8] = 4;
	img[11] = 0;
	img[12] = 4;
	expect_refused(img, len, "flags");
	img[12] = 0;
	img[0] = 'X';
	expect_refused(img, len, "bad magic");
	free(img);
}

/* A FILE record with the given path bytes (bypassing the encoder). */
static void raw_file_path(struct wsync_buf *b, const char *path, size_t plen)
{
	uint8_t fixed[WSYNC_DELTA_FILE_FIXED_LEN - 2] = { 0 };
	struct wsync_buf p = { 0 };

	(void)wsync_buf_put_u16(&p, (uint16_t)plen);
	(void)wsync_buf_append(&p, path, plen);
	fixed[0] = WSYNC_DELTA_WRITE;	/* new empty file: everything else 0 */
	(void)wsync_buf_append(&p, fixed, sizeof(fixed));
	raw_record(b, WSYNC_DELTA_REC_FILE, p.data, p.len);
	wsync_buf_free(&p);
}

static void expect_bad_path(const char *path, size_t plen, const char *needle)
{
	struct wsync_buf b = { 0 };

	raw_preamble(&b, 1);
	raw_file_path(&b, path, plen);
	raw_end(&b, 1, 0);
	expect_refused(b.data, b.len, needle);
	wsync_buf_free(&b);
}

static void test_bad_paths_in_delta(void)
{
	char *over = malloc(WSYNC_DELTA_PATH_MAX + 1);
	struct wsync_buf b = { 0 };
	struct wsync_error err;

	expect_bad_path("../x", 4, "\"..\"");
	expect_bad_path("/abs", 4, "absolute");
	expect_bad_path("a\0b", 3, "NUL");
	expect_bad_path("a\\b", 3, "backslash");
	memset(over, 'x', WSYNC_DELTA_PATH_MAX + 1);
	expect_bad_path(over, WSYNC_DELTA_PATH_MAX + 1, "FILE record");
	expect_bad_path(over, WSYNC_DELTA_NAME_MAX + 1, "segment of 256 bytes");
	/* The longest path is fine (in components a file system takes). */
	for (size_t i = 199; i < WSYNC_DELTA_PATH_MAX; i += 200)
		over[i] = '/';
	raw_preamble(&b, 1);
	raw_file_path(&b, over, WSYNC_DELTA_PATH_MAX);
	raw_end(&b, 1, 0);
	CHECK(open_mem(b.data, b.len, &err) == 0);
	free(over);
	wsync_buf_free(&b);
}

static void test_order_rules(void)
{
	struct wsync_buf b = { 0 }, seg = { 0 };
	struct wsync_delta_file f;

	/* Paths out of order, and twice the same path. */
	raw_preamble(&b, 1);
	raw_file_path(&b, "b", 1);
	raw_file_path(&b, "a", 1);
	raw_end(&b, 2, 0);
	expect_refused(b.data, b.len, "byte order");
	raw_preamble(&b, 1);
	raw_file_path(&b, "a", 1);
	raw_file_path(&b, "a", 1);
	raw_end(&b, 2, 0);
	expect_refused(b.data, b.len, "unique");

	/* A SEGMENT with no FILE expecting it. */
	raw_preamble(&b, 1);
	fake_segment(&seg, 0, 10, 8);
	raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
	raw_end(&b, 0, 0);
	expect_refused(b.data, b.len, "SEGMENT without a FILE");

	/* Fewer segments than announced. */
	f = file("w", WSYNC_DELTA_WRITE, 0, 100, 2);
	raw_preamble(&b, 1);
	raw_file(&b, &f);
	fake_segment(&seg, 0, 50, 8);
	raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
	raw_end(&b, 1, 100);
	expect_refused(b.data, b.len, "2 segments announced, 1 found");

	/* Segments that overlap, leave a gap, or stop short. */
	raw_preamble(&b, 1);
	raw_file(&b, &f);
	raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
	fake_segment(&seg, 40, 60, 8);
	raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
	raw_end(&b, 1, 100);
	expect_refused(b.data, b.len, "must continue at 50");
	raw_preamble(&b, 1);
	raw_file(&b, &f);
	fake_segment(&seg, 0, 50, 8);
	raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
	fake_segment(&seg, 50, 40, 8);
	raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
	raw_end(&b, 1, 100);
	expect_refused(b.data, b.len, "tiling");

	/* END that disagrees. */
	raw_preamble(&b, 1);
	raw_file_path(&b, "a", 1);
	raw_end(&b, 2, 0);
	expect_refused(b.data, b.len, "END record says 2 files");

	/* Unknown record type, reserved field. */
	raw_preamble(&b, 1);
	raw_record(&b, 4, "x", 1);
	expect_refused(b.data, b.len, "unknown type 4");
	raw_preamble(&b, 1);
	raw_end(&b, 0, 0);
	b.data[16 + 4] = 1;
	expect_refused(b.data, b.len, "reserved");
	wsync_buf_free(&b);
	wsync_buf_free(&seg);
}

static void test_limits(void)
{
	struct wsync_buf b = { 0 }, seg = { 0 };
	struct wsync_delta_file f;
	struct wsync_error err;
	uint8_t hdr[24] = { 2 };

	/* A payload over 1 GiB is refused from its header alone. */
	raw_preamble(&b, 1);
	put64(hdr + 8, (1ULL << 30) + 1);
	(void)wsync_buf_append(&b, hdr, sizeof(hdr));
	expect_refused(b.data, b.len, "1 GiB");
	/* Exactly 1 GiB is allowed by the limit (then it is simply missing). */
	put64(b.data + 16 + 8, 1ULL << 30);
	expect_refused(b.data, b.len, "runs past the end");

	/* A segment over 64 MiB of target. */
	f = file("w", WSYNC_DELTA_WRITE, 0, 1ULL << 32, 1);
	raw_preamble(&b, 1);
	raw_file(&b, &f);
	fake_segment(&seg, 0, (64ULL << 20) + 1, 8);
	raw_record(&b, WSYNC_DELTA_REC_SEGMENT, seg.data, seg.len);
	raw_end(&b, 1, 1ULL << 32);
	expect_refused(b.data, b.len, "64 MiB");

	/* One file more than 1,000,000. */
	raw_preamble(&b, 1);
	for (unsigned i = 0; i <= WSYNC_DELTA_FILES_MAX; i++) {
		char name[16];

		snprintf(name, sizeof(name), "%07u", i);
		raw_file_path(&b, name, 7);
	}
	raw_end(&b, WSYNC_DELTA_FILES_MAX + 1, 0);
	wsync_error_clear(&err);
	CHECK(open_mem(b.data, b.len, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "more than 1000000 files");
	wsync_buf_free(&b);
	wsync_buf_free(&seg);
}

/* ---- hashing ---- */

static void test_hash_file_equals_memory(void)
{
	static const size_t sizes[] = { 0, 1, 4095, WSYNC_HASH_WINDOW,
					WSYNC_HASH_WINDOW + 3, 3 * WSYNC_HASH_WINDOW - 1 };
	struct wsync_error err;
	uint8_t *buf = malloc(3 * WSYNC_HASH_WINDOW);

	for (size_t i = 0; i < 3 * WSYNC_HASH_WINDOW; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct wsync_hash128 hf, hm;
		uint64_t size = 99;
		int fd = memfd();

		CHECK(write(fd, buf, sizes[k]) == (ssize_t)sizes[k]);
		CHECK(wsync_hash_fd(fd, "memfd", &hf, &size, &err) == 0);
		wsync_hash_mem(buf, sizes[k], &hm);
		CHECK(wsync_hash_equal(&hf, &hm));
		CHECK_EQ_U64(size, sizes[k]);
		close(fd);
	}
	free(buf);
}

static void test_hash_hex(void)
{
	struct wsync_hash128 h;
	char hex[WSYNC_HASH_HEX_LEN + 1];
	XXH128_hash_t x = XXH3_128bits("abc", 3);
	char want[40];

	wsync_hash_mem("abc", 3, &h);
	/* Canonical order: the high 64 bits first, as xxh128sum prints. */
	snprintf(want, sizeof(want), "%016llx%016llx", (unsigned long long)x.high64,
		 (unsigned long long)x.low64);
	CHECK_STR(wsync_hash_hex(&h, hex, sizeof(hex)), want);
	CHECK(wsync_hash_hex(&h, hex, 10)[0] == '\0');
}

int main(void)
{
	TEST(test_file_record_round_trip);
	TEST(test_file_record_rules);
	TEST(test_round_trip_fd_and_mem);
	TEST(test_index_and_partial);
	TEST(test_index_fed_by_writer);
	TEST(test_index_side_threads);
	TEST(test_big_segment);
	TEST(test_read_around);
	TEST(test_writer_file_end);
	TEST(test_file_end_rules);
	TEST(test_writer_refuses_disorder);
	TEST(test_every_flipped_byte_refused);
	TEST(test_segments_checked_later);
	TEST(test_every_truncation_refused);
	TEST(test_trailing_bytes_refused);
	TEST(test_version_and_flags);
	TEST(test_bad_paths_in_delta);
	TEST(test_order_rules);
	TEST(test_limits);
	TEST(test_hash_file_equals_memory);
	TEST(test_hash_hex);
	return tap_done();
}
