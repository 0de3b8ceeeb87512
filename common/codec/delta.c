/* SPDX-License-Identifier: Apache-2.0 */
/*
 * delta.c -- the delta container (common/codec/FORMAT.md §1, §2, §6, §7).
 */
#include "delta.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "buf.h"
#include "io.h"
#include "path.h"

/* Writer buffer: records smaller than this are gathered, bigger ones go
 * straight to the file after what is buffered.  In a huge page
 * (wsync_buf_scratch): its 256 4 KiB pages would each cost a fault. */
#define WRITE_BUFFER (1u << 20)
/* Reader window for verifying big payloads' checksums. */
#define READ_WINDOW (256u << 10)
/* Payloads read whole from this size on go to a huge-page scratch. */
#define SCRATCH_MIN (1u << 20)
/* WSYNC_DELTA_READ_AROUND: reads of this many bytes or more go around */
#define AROUND_MIN (1u << 20)

/* ---- little-endian stores ---- */

static bool hash_is_zero(const struct wsync_hash128 *h)
{
	for (int i = 0; i < 16; i++)
		if (h->b[i])
			return false;
	return true;
}

const char *wsync_delta_op_name(enum wsync_delta_op op)
{
	switch (op) {
	case WSYNC_DELTA_KEEP:
		return "KEEP";
	case WSYNC_DELTA_WRITE:
		return "WRITE";
	case WSYNC_DELTA_DELETE:
		return "DELETE";
	}
	return "?";
}

/* ---- FILE records ---- */

/* The rules of §2 that do not depend on the path or the records around. */
static int file_check(const struct wsync_delta_file *f, struct wsync_error *err)
{
	bool has_base = f->flags & WSYNC_DELTA_FILE_HAS_BASE;

	if ((unsigned)f->op > WSYNC_DELTA_DELETE)
		return wsync_error_set(err, -EINVAL, "unknown op %u", (unsigned)f->op);
	if ((unsigned)f->kind > WSYNC_DELTA_KIND_SAFETENSORS)
		return wsync_error_set(err, -EINVAL, "unknown kind %u",
				       (unsigned)f->kind);
	if (f->flags & ~(WSYNC_DELTA_FILE_HAS_BASE | WSYNC_DELTA_FILE_REPLACE))
		return wsync_error_set(err, -EINVAL, "unknown flags 0x%x",
				       (unsigned)f->flags);
	if ((f->flags & WSYNC_DELTA_FILE_REPLACE) && (has_base || f->op != WSYNC_DELTA_WRITE))
		return wsync_error_set(err, -EINVAL, "REPLACE on a file that is not a WRITE "
				       "without a base");
	if (f->mode & ~07777u)
		return wsync_error_set(err, -EINVAL, "mode 0%o has bits beyond 07777",
				       (unsigned)f->mode);
	if (!has_base && (f->base_size || !hash_is_zero(&f->base_hash)))
		return wsync_error_set(err, -EINVAL,
				       "base size or hash set without HAS_BASE");
	switch (f->op) {
	case WSYNC_DELTA_KEEP:
		if (!has_base || f->n_segments ||
		    f->base_size != f->target_size ||
		    !wsync_hash_equal(&f->base_hash, &f->target_hash))
			return wsync_error_set(err, -EINVAL,
				"KEEP needs a base equal to the target and no segments");
		break;
	case WSYNC_DELTA_DELETE:
		if (!has_base || f->n_segments)
			return wsync_error_set(err, -EINVAL,
					       "DELETE needs a base and no segments");
		break;
	case WSYNC_DELTA_WRITE:
		/* Each segment covers at least one byte. */
		if ((f->target_size == 0) != (f->n_segments == 0) ||
		    f->n_segments > f->target_size)
			return wsync_error_set(err, -EINVAL,
				"%" PRIu64 " segments cannot tile %" PRIu64 " bytes",
				f->n_segments, f->target_size);
		break;
	}
	return 0;
}

int wsync_delta_file_encode(const struct wsync_delta_file *f,
			    struct wsync_buf *out, struct wsync_error *err)
{
	size_t plen = f->path ? strlen(f->path) : 0;
	uint8_t *p;
	int r;

	r = wsync_path_check(f->path ? f->path : "", plen, err);
	if (r < 0)
		return r;
	r = file_check(f, err);
	if (r < 0) {
		wsync_error_prefix(err, "%s", f->path);
		return r;
	}
	r = wsync_buf_reserve(out, WSYNC_DELTA_FILE_FIXED_LEN + plen);
	if (r < 0)
		return wsync_error_set(err, r, "out of memory");
	p = out->data + out->len;
	wsync_st16(p, (uint16_t)plen);
	memcpy(p + 2, f->path, plen);
	p += 2 + plen;
	p[0] = (uint8_t)f->op;
	p[1] = (uint8_t)f->kind;
	wsync_st16(p + 2, f->flags);
	wsync_st32(p + 4, f->mode);
	wsync_st64(p + 8, f->base_size);
	memcpy(p + 16, f->base_hash.b, 16);
	wsync_st64(p + 32, f->target_size);
	memcpy(p + 40, f->target_hash.b, 16);
	wsync_st64(p + 56, f->n_segments);
	wsync_st64(p + 64, f->changed);
	wsync_st64(p + 72, f->elements);
	out->len += WSYNC_DELTA_FILE_FIXED_LEN + plen;
	return 0;
}

int wsync_delta_file_decode(const uint8_t *p, size_t len,
			    struct wsync_delta_file *f, struct wsync_error *err)
{
	size_t plen;
	int r;

	memset(f, 0, sizeof(*f));
	if (len < 2)
		return wsync_error_set(err, -EINVAL, "FILE record of %zu bytes", len);
	plen = wsync_le16(p);
	if (len != WSYNC_DELTA_FILE_FIXED_LEN + plen)
		return wsync_error_set(err, -EINVAL,
			"FILE record of %zu bytes for a path of %zu (expected %zu)",
			len, plen, (size_t)WSYNC_DELTA_FILE_FIXED_LEN + plen);
	r = wsync_path_check((const char *)p + 2, plen, err);
	if (r < 0)
		return r;
	p += 2 + plen;
	f->op = (enum wsync_delta_op)p[0];
	f->kind = (enum wsync_delta_kind)p[1];
	f->flags = wsync_le16(p + 2);
	f->mode = wsync_le32(p + 4);
	f->base_size = wsync_le64(p + 8);
	memcpy(f->base_hash.b, p + 16, 16);
	f->target_size = wsync_le64(p + 32);
	memcpy(f->target_hash.b, p + 40, 16);
	f->n_segments = wsync_le64(p + 56);
	f->changed = wsync_le64(p + 64);
	f->elements = wsync_le64(p + 72);
	r = file_check(f, err);
	if (r < 0) {
		wsync_error_prefix(err, "%.*s", (int)plen, (const char *)p - plen);
		return r;
	}
	f->path = strndup((const char *)p - plen, plen);
	if (!f->path)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	return 0;
}

void wsync_delta_file_clear(struct wsync_delta_file *f)
{
	if (!f)
		return;
	free(f->path);
	f->path = NULL;
}

/* ---- FILE_END records ---- */

void wsync_delta_file_end_encode(const struct wsync_delta_file_end *fe,
				 uint8_t out[WSYNC_DELTA_FILE_END_LEN])
{
	memcpy(out, fe->base_hash.b, 16);
	memcpy(out + 16, fe->target_hash.b, 16);
	wsync_st64(out + 32, fe->changed);
	wsync_st64(out + 40, fe->elements);
}

int wsync_delta_file_end_decode(const uint8_t *p, size_t len, const struct wsync_delta_file *f,
				struct wsync_delta_file_end *fe, struct wsync_error *err)
{
	if (len != WSYNC_DELTA_FILE_END_LEN)
		return wsync_error_set(err, -EINVAL, "%s: FILE_END record of %zu bytes "
				       "(not %d)", f->path, len, WSYNC_DELTA_FILE_END_LEN);
	memcpy(fe->base_hash.b, p, 16);
	memcpy(fe->target_hash.b, p + 16, 16);
	fe->changed = wsync_le64(p + 32);
	fe->elements = wsync_le64(p + 40);
	if (!(f->flags & WSYNC_DELTA_FILE_HAS_BASE) && !hash_is_zero(&fe->base_hash))
		return wsync_error_set(err, -EINVAL, "%s: FILE_END gives a base hash to a "
				       "file without a base", f->path);
	/* an element is at least a byte, and changes at most once */
	if (fe->elements > f->target_size || fe->changed > fe->elements)
		return wsync_error_set(err, -EINVAL, "%s: FILE_END counts %" PRIu64 " changed "
				       "of %" PRIu64 " elements in %" PRIu64 " bytes", f->path,
				       fe->changed, fe->elements, f->target_size);
	return 0;
}

void wsync_delta_file_end_apply(struct wsync_delta_file *f, const struct wsync_delta_file_end *fe)
{
	f->base_hash = fe->base_hash;
	f->target_hash = fe->target_hash;
	f->changed = fe->changed;
	f->elements = fe->elements;
}

/* What a version 4 WRITE's FILE record leaves to its FILE_END. */
static bool file_end_fields_zero(const struct wsync_delta_file *f)
{
	return hash_is_zero(&f->base_hash) && hash_is_zero(&f->target_hash) &&
	       f->changed == 0 && f->elements == 0;
}

/* ---- writer ---- */

struct wsync_delta_writer {
	int fd;
	uint64_t flushed;		/* bytes already in the file */
	struct wsync_buf buf;		/* bytes after them */
	struct wsync_buf scratch;	/* FILE payloads */
	bool failed;			/* a write failed: refuse the rest */
	bool finished;
	/* the current file, for the order checks */
	bool in_file;
	bool need_end;			/* a WRITE without its FILE_END yet */
	struct wsync_delta_file cur;	/* cur.path owned */
	uint64_t segs_seen, next_offset;
	uint64_t n_files, write_bytes;
	wsync_delta_tap_fn tap;		/* sees each byte written (or NULL) */
	void *tap_arg;
};

static int pwrite_all(int fd, const uint8_t *p, size_t len, uint64_t off,
		      struct wsync_error *err)
{
	int r = wsync_pwrite_all(fd, p, len, off);

	return r < 0 ? wsync_error_set(err, r, "writing the delta: %s", strerror(-r)) : 0;
}

/* Write len bytes at the end of what is in the file, and show them to
 * the tap. */
static int writer_put(struct wsync_delta_writer *w, const uint8_t *p, size_t len,
		      struct wsync_error *err)
{
	int r = w->fd >= 0 ? pwrite_all(w->fd, p, len, w->flushed, err) : 0;

	if (r == 0 && w->tap)
		r = w->tap(w->tap_arg, p, len, err);
	if (r < 0) {
		w->failed = true;
		return r;
	}
	w->flushed += len;
	return 0;
}

static int writer_flush(struct wsync_delta_writer *w, struct wsync_error *err)
{
	int r;

	if (w->buf.len == 0)
		return 0;
	r = writer_put(w, w->buf.data, w->buf.len, err);
	if (r == 0)
		wsync_buf_reset(&w->buf);
	return r;
}

int wsync_delta_writer_flush(struct wsync_delta_writer *w, struct wsync_error *err)
{
	if (w->failed)
		return wsync_error_set(err, -EIO, "writing the delta: an earlier write failed");
	return writer_flush(w, err);
}

void wsync_delta_record_header(uint8_t h[WSYNC_DELTA_RECORD_HEADER_LEN], uint32_t type,
			       const uint8_t *payload, size_t len)
{
	wsync_st32(h, type);
	wsync_st32(h + 4, 0);
	wsync_st64(h + 8, len);
	wsync_st64(h + 16, XXH3_64bits(payload, len));
}

/* Append one record (header and payload) to the delta. */
static int writer_emit(struct wsync_delta_writer *w, uint32_t type,
		       const uint8_t *payload, size_t len, struct wsync_error *err)
{
	uint8_t h[WSYNC_DELTA_RECORD_HEADER_LEN];
	int r;

	if (w->failed)
		return wsync_error_set(err, -EIO, "writing the delta: an earlier write failed");
	if ((uint64_t)len > WSYNC_DELTA_PAYLOAD_MAX)
		return wsync_error_set(err, -EINVAL, "record payload of %zu bytes "
				       "over the 1 GiB limit", len);
	wsync_delta_record_header(h, type, payload, len);
	if (w->buf.len + sizeof(h) + len > WRITE_BUFFER) {
		r = writer_flush(w, err);
		if (r < 0)
			return r;
	}
	if (wsync_buf_append(&w->buf, h, sizeof(h)) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	if (sizeof(h) + len <= WRITE_BUFFER) {
		if (wsync_buf_append(&w->buf, payload, len) < 0)
			return wsync_error_set(err, -ENOMEM, "out of memory");
		return 0;
	}
	r = writer_flush(w, err);
	if (r < 0)
		return r;
	return writer_put(w, payload, len, err);
}

void wsync_delta_preamble(uint8_t out[WSYNC_DELTA_PREAMBLE_LEN])
{
	memcpy(out, WSYNC_DELTA_MAGIC, 8);
	wsync_st32(out + 8, WSYNC_DELTA_VERSION);
	wsync_st32(out + 12, 0);
}

void wsync_delta_end_record(uint8_t out[WSYNC_DELTA_END_RECORD_LEN], uint64_t files,
			    uint64_t write_bytes)
{
	uint8_t *end = out + WSYNC_DELTA_RECORD_HEADER_LEN;

	wsync_st64(end, files);
	wsync_st64(end + 8, write_bytes);
	wsync_delta_record_header(out, WSYNC_DELTA_REC_END, end, WSYNC_DELTA_END_LEN);
}

int wsync_delta_writer_new(int fd, struct wsync_delta_writer **ret,
			   struct wsync_error *err)
{
	struct wsync_delta_writer *w = calloc(1, sizeof(*w));
	uint8_t pre[WSYNC_DELTA_PREAMBLE_LEN];

	*ret = NULL;
	if (!w || wsync_buf_scratch(&w->buf, WRITE_BUFFER) < 0) {
		free(w);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	w->fd = fd;
	wsync_delta_preamble(pre);
	(void)wsync_buf_append(&w->buf, pre, sizeof(pre)); /* reserved above */
	*ret = w;
	return 0;
}

void wsync_delta_writer_tap(struct wsync_delta_writer *w, wsync_delta_tap_fn fn, void *arg)
{
	w->tap = fn;
	w->tap_arg = arg;
}

void wsync_delta_writer_free(struct wsync_delta_writer *w)
{
	if (!w)
		return;
	wsync_buf_free(&w->buf);
	wsync_buf_free(&w->scratch);
	free(w->cur.path);
	free(w);
}

/* The current file must have had all its segments; a finished delta
 * takes nothing more. */
static int writer_close_file(struct wsync_delta_writer *w, struct wsync_error *err)
{
	if (w->finished)
		return wsync_error_set(err, -EINVAL, "delta already finished");
	if (!w->in_file)
		return 0;
	if (w->segs_seen != w->cur.n_segments)
		return wsync_error_set(err, -EINVAL,
			"%s: %" PRIu64 " segments written, %" PRIu64 " announced",
			w->cur.path, w->segs_seen, w->cur.n_segments);
	if (w->need_end)
		return wsync_error_set(err, -EINVAL, "%s: no FILE_END record", w->cur.path);
	w->in_file = false;
	return 0;
}

int wsync_delta_writer_file(struct wsync_delta_writer *w,
			    const struct wsync_delta_file *f,
			    struct wsync_error *err)
{
	struct wsync_delta_file rec = *f;
	char *path;
	int r;

	r = writer_close_file(w, err);
	if (r < 0)
		return r;
	if (w->n_files >= WSYNC_DELTA_FILES_MAX)
		return wsync_error_set(err, -EINVAL, "more than %d files in one delta",
				       WSYNC_DELTA_FILES_MAX);
	if (w->cur.path && f->path && strcmp(w->cur.path, f->path) >= 0)
		return wsync_error_set(err, -EINVAL,
			"%s: paths must be unique and in byte order (after %s)",
			f->path, w->cur.path);
	if (f->op == WSYNC_DELTA_WRITE) {
		/* known at the file's end: its FILE_END record gives them */
		memset(&rec.base_hash, 0, sizeof(rec.base_hash));
		memset(&rec.target_hash, 0, sizeof(rec.target_hash));
		rec.changed = rec.elements = 0;
	}
	wsync_buf_reset(&w->scratch);
	r = wsync_delta_file_encode(&rec, &w->scratch, err);
	if (r < 0)
		return r;
	path = strdup(f->path);
	if (!path)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	r = writer_emit(w, WSYNC_DELTA_REC_FILE, w->scratch.data, w->scratch.len, err);
	if (r < 0) {
		free(path);
		return r;
	}
	free(w->cur.path);
	w->cur = rec;
	w->cur.path = path;
	w->in_file = true;
	w->need_end = f->op == WSYNC_DELTA_WRITE;
	w->segs_seen = 0;
	w->next_offset = 0;
	w->n_files++;
	if (f->op == WSYNC_DELTA_WRITE)
		w->write_bytes += f->target_size;
	return 0;
}

int wsync_delta_writer_file_end(struct wsync_delta_writer *w,
				const struct wsync_delta_file_end *fe,
				struct wsync_error *err)
{
	uint8_t p[WSYNC_DELTA_FILE_END_LEN];
	struct wsync_error ignored;

	if (!w->in_file || !w->need_end)
		return wsync_error_set(err, -EINVAL, "%s: FILE_END for a file that is not a "
				       "WRITE or has one already",
				       w->cur.path ? w->cur.path : "(none)");
	if (w->segs_seen != w->cur.n_segments)
		return wsync_error_set(err, -EINVAL, "%s: FILE_END after %" PRIu64 " of %"
				       PRIu64 " segments", w->cur.path, w->segs_seen,
				       w->cur.n_segments);
	wsync_delta_file_end_encode(fe, p);
	/* what a reader would refuse */
	if (wsync_delta_file_end_decode(p, sizeof(p), &w->cur, &(struct wsync_delta_file_end){ 0 },
					&ignored) < 0)
		return wsync_error_set(err, -EINVAL, "%s: a base hash for a file without a base",
				       w->cur.path);
	w->need_end = false;
	return writer_emit(w, WSYNC_DELTA_REC_FILE_END, p, sizeof(p), err);
}

int wsync_delta_writer_segment(struct wsync_delta_writer *w,
			       const uint8_t *payload, size_t len,
			       struct wsync_error *err)
{
	uint64_t off, tlen;
	int r;

	if (!w->in_file || w->segs_seen >= w->cur.n_segments)
		return wsync_error_set(err, -EINVAL, "%s: SEGMENT beyond the %" PRIu64
				       " announced", w->cur.path ? w->cur.path : "(none)",
				       w->cur.n_segments);
	if (len < 24)
		return wsync_error_set(err, -EINVAL, "%s: SEGMENT of %zu bytes",
				       w->cur.path, len);
	off = wsync_le64(payload);
	tlen = wsync_le64(payload + 8);
	if (off != w->next_offset || tlen == 0 ||
	    tlen > WSYNC_DELTA_SEGMENT_TARGET_MAX || tlen > w->cur.target_size - off ||
	    (w->segs_seen + 1 == w->cur.n_segments && off + tlen != w->cur.target_size))
		return wsync_error_set(err, -EINVAL,
			"%s: segment [%" PRIu64 ", +%" PRIu64 ") does not continue "
			"the tiling at %" PRIu64 " of %" PRIu64, w->cur.path, off,
			tlen, w->next_offset, w->cur.target_size);
	r = writer_emit(w, WSYNC_DELTA_REC_SEGMENT, payload, len, err);
	if (r < 0)
		return r;
	w->segs_seen++;
	w->next_offset = off + tlen;
	return 0;
}

int wsync_delta_writer_finish(struct wsync_delta_writer *w,
			      struct wsync_error *err)
{
	uint8_t end[WSYNC_DELTA_END_LEN];
	int r;

	r = writer_close_file(w, err);
	if (r < 0)
		return r;
	wsync_st64(end, w->n_files);
	wsync_st64(end + 8, w->write_bytes);
	r = writer_emit(w, WSYNC_DELTA_REC_END, end, sizeof(end), err);
	if (r < 0)
		return r;
	r = writer_flush(w, err);
	if (r < 0)
		return r;
	w->finished = true;
	return 0;
}

uint64_t wsync_delta_writer_size(const struct wsync_delta_writer *w)
{
	return w->flushed + w->buf.len;
}

/* ---- reader ---- */

/* src_get around the page cache (WSYNC_DELTA_READ_AROUND): into scratch,
 * aligned and with the slack a read around it needs, the bytes moved to
 * its start when they land past it. */
static int src_get_around(const struct wsync_delta_reader *r, uint64_t off, size_t len,
			  struct wsync_buf *scratch, const uint8_t **ret,
			  struct wsync_error *err)
{
	const uint8_t *at;
	int rc;

	if (wsync_buf_scratch(scratch, len + WSYNC_ONCE_SLACK) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory (%zu bytes)", len);
	rc = wsync_once_read(r->once, scratch->data, len, off, &at);
	if (rc == -ENODATA)
		return wsync_error_set(err, -EINVAL, "truncated: the delta ends before %" PRIu64
				       " (it shrank while being read)", off + len);
	if (rc < 0)
		return wsync_error_set(err, rc, "reading the delta: %s", strerror(-rc));
	if (at != scratch->data)
		memmove(scratch->data, at, len);
	scratch->len = len;
	*ret = scratch->data;
	return 0;
}

/* Bytes [off, off+len) of the delta: a pointer into memory, or read into
 * scratch.  The caller has checked the range against r->size. */
static int src_get(const struct wsync_delta_reader *r, uint64_t off, size_t len,
		   struct wsync_buf *scratch, const uint8_t **ret,
		   struct wsync_error *err)
{
	size_t got = 0;

	if (r->mem) {
		*ret = r->mem + off;
		return 0;
	}
	if (r->once && len >= AROUND_MIN && len <= SIZE_MAX - WSYNC_ONCE_SLACK)
		return src_get_around(r, off, len, scratch, ret, err);
	wsync_buf_reset(scratch);
	/* a big payload into huge pages: a fresh buffer of MiBs faulted in
	 * 4 KiB at a time costs a fault per page */
	if ((len >= SCRATCH_MIN ? wsync_buf_scratch(scratch, len)
				: wsync_buf_reserve(scratch, len)) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory (%zu bytes)", len);
	while (got < len) {
		ssize_t n = pread(r->fd, scratch->data + got, len - got,
				  (off_t)(off + got));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return wsync_error_set(err, -errno, "reading the delta: %s",
					       strerror(errno));
		}
		if (n == 0)
			return wsync_error_set(err, -EINVAL,
				"truncated: the delta ends at %" PRIu64
				" (it shrank while being read)", off + got);
		got += (size_t)n;
	}
	scratch->len = len;
	*ret = scratch->data;
	return 0;
}

/* XXH3-64 of [off, off+len), reading through a bounded window. */
static int src_hash64(const struct wsync_delta_reader *r, uint64_t off,
		      uint64_t len, struct wsync_buf *scratch, uint64_t *ret,
		      struct wsync_error *err)
{
	XXH3_state_t *st;
	const uint8_t *p;
	int rc = 0;

	if (r->mem) {
		*ret = XXH3_64bits(r->mem + off, (size_t)len);
		return 0;
	}
	st = XXH3_createState();
	if (!st)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	(void)XXH3_64bits_reset(st);
	while (len) {
		size_t n = len > READ_WINDOW ? READ_WINDOW : (size_t)len;

		rc = src_get(r, off, n, scratch, &p, err);
		if (rc < 0)
			break;
		(void)XXH3_64bits_update(st, p, n);
		off += n;
		len -= n;
	}
	if (rc == 0)
		*ret = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return rc;
}

struct walk {
	struct wsync_delta_reader *r;
	struct wsync_buf scratch;
	uint64_t pos;
	size_t cap_files;
	size_t cap_segs;		/* of the current file's array */
	struct wsync_delta_entry *cur;	/* expecting its segments */
	uint64_t segs_seen, next_offset;
	bool need_end;			/* cur is a WRITE waiting for its FILE_END */
	uint64_t write_bytes;
};

static int walk_segment(struct walk *w, uint64_t hdr_off, uint64_t len,
			uint64_t sum, struct wsync_error *err)
{
	struct wsync_delta_entry *e = w->cur;
	struct wsync_delta_segment *s;
	const uint8_t *p;
	uint64_t off, tlen;
	int r;

	if (!e || w->segs_seen >= e->file.n_segments)
		return wsync_error_set(err, -EINVAL,
			"record at offset %" PRIu64 ": SEGMENT without a FILE "
			"record expecting it", hdr_off);
	if (len < 24)
		return wsync_error_set(err, -EINVAL,
			"record at offset %" PRIu64 ": SEGMENT of %" PRIu64 " bytes",
			hdr_off, len);
	r = src_get(w->r, hdr_off + WSYNC_DELTA_RECORD_HEADER_LEN, 16,
		    &w->scratch, &p, err);
	if (r < 0)
		return r;
	off = wsync_le64(p);
	tlen = wsync_le64(p + 8);
	if (off != w->next_offset || tlen == 0 ||
	    tlen > WSYNC_DELTA_SEGMENT_TARGET_MAX ||
	    tlen > e->file.target_size - off ||
	    (w->segs_seen + 1 == e->file.n_segments && off + tlen != e->file.target_size))
		return wsync_error_set(err, -EINVAL,
			"%s: segment %" PRIu64 " covers [%" PRIu64 ", +%" PRIu64
			") but must continue at %" PRIu64 " of %" PRIu64
			" bytes (at most 64 MiB, tiling the file)", e->file.path,
			w->segs_seen, off, tlen, w->next_offset, e->file.target_size);
	if (WSYNC_GROW(e->segments, w->cap_segs, w->segs_seen, 16) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	s = &e->segments[w->segs_seen];
	s->payload_offset = hdr_off + WSYNC_DELTA_RECORD_HEADER_LEN;
	s->payload_len = len;
	s->checksum = sum;
	s->target_offset = off;
	s->target_len = tlen;
	w->segs_seen++;
	w->next_offset = off + tlen;
	e->delta_bytes += WSYNC_DELTA_RECORD_HEADER_LEN + len;
	return 0;
}

static int walk_file(struct walk *w, uint64_t hdr_off, const uint8_t *p,
		     uint64_t len, struct wsync_error *err)
{
	struct wsync_delta_reader *r = w->r;
	struct wsync_delta_entry *e;
	int rc;

	if (r->n_files >= WSYNC_DELTA_FILES_MAX)
		return wsync_error_set(err, -EINVAL, "more than %d files",
				       WSYNC_DELTA_FILES_MAX);
	if (WSYNC_GROW(r->files, w->cap_files, r->n_files, 16) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	e = &r->files[r->n_files];
	memset(e, 0, sizeof(*e));
	rc = wsync_delta_file_decode(p, (size_t)len, &e->file, err);
	if (rc < 0) {
		wsync_error_prefix(err, "FILE record at offset %" PRIu64, hdr_off);
		return rc;
	}
	r->n_files++; /* owned by the reader from here on */
	if (r->version >= WSYNC_DELTA_VERSION_FILE_END && e->file.op == WSYNC_DELTA_WRITE &&
	    !file_end_fields_zero(&e->file))
		return wsync_error_set(err, -EINVAL,
			"%s: FILE record at offset %" PRIu64 " gives hashes or counts "
			"(version %" PRIu32 " has them in FILE_END)", e->file.path, hdr_off,
			r->version);
	if (r->n_files > 1 && strcmp(r->files[r->n_files - 2].file.path,
				     e->file.path) >= 0)
		return wsync_error_set(err, -EINVAL,
			"%s: paths are not unique and in byte order (after %s)",
			e->file.path, r->files[r->n_files - 2].file.path);
	e->record_offset = hdr_off;
	e->delta_bytes = WSYNC_DELTA_RECORD_HEADER_LEN + len;
	if (e->file.op == WSYNC_DELTA_WRITE) {
		if (e->file.target_size > UINT64_MAX - w->write_bytes)
			return wsync_error_set(err, -EINVAL,
					       "target sizes add up past 2^64");
		w->write_bytes += e->file.target_size;
	}
	w->cur = e;
	w->cap_segs = 0;
	w->segs_seen = 0;
	w->next_offset = 0;
	w->need_end = r->version >= WSYNC_DELTA_VERSION_FILE_END &&
		      e->file.op == WSYNC_DELTA_WRITE;
	return 0;
}

/* The current file must have received all its segments (and its
 * FILE_END, version 4). */
static int walk_close_file(struct walk *w, struct wsync_error *err)
{
	if (w->cur && w->segs_seen != w->cur->file.n_segments)
		return wsync_error_set(err, -EINVAL,
			"%s: %" PRIu64 " segments announced, %" PRIu64 " found",
			w->cur->file.path, w->cur->file.n_segments, w->segs_seen);
	if (w->cur && w->need_end)
		return wsync_error_set(err, -EINVAL, "%s: no FILE_END record after its "
				       "segments", w->cur->file.path);
	w->cur = NULL;
	return 0;
}

static int walk_file_end(struct walk *w, uint64_t hdr_off, const uint8_t *p,
			 uint64_t len, struct wsync_error *err)
{
	struct wsync_delta_entry *e = w->cur;
	struct wsync_delta_file_end fe;
	int rc;

	if (!e || !w->need_end || w->segs_seen != e->file.n_segments)
		return wsync_error_set(err, -EINVAL,
			"record at offset %" PRIu64 ": FILE_END %s", hdr_off,
			!e ? "without a FILE record" :
			!w->need_end ? "after a KEEP or DELETE, or a second one" :
			"before the file's last SEGMENT");
	rc = wsync_delta_file_end_decode(p, (size_t)len, &e->file, &fe, err);
	if (rc < 0)
		return rc;
	wsync_delta_file_end_apply(&e->file, &fe);
	e->delta_bytes += WSYNC_DELTA_RECORD_HEADER_LEN + len;
	w->need_end = false;
	return 0;
}

static int walk_end(struct walk *w, uint64_t hdr_off, const uint8_t *p,
		    uint64_t len, struct wsync_error *err)
{
	struct wsync_delta_reader *r = w->r;
	uint64_t n, bytes;
	int rc = walk_close_file(w, err);

	if (rc < 0)
		return rc;
	if (len != WSYNC_DELTA_END_LEN)
		return wsync_error_set(err, -EINVAL, "END record of %" PRIu64 " bytes",
				       len);
	n = wsync_le64(p);
	bytes = wsync_le64(p + 8);
	if (n != r->n_files || bytes != w->write_bytes)
		return wsync_error_set(err, -EINVAL,
			"END record says %" PRIu64 " files and %" PRIu64
			" bytes written, the delta has %zu and %" PRIu64, n, bytes,
			r->n_files, w->write_bytes);
	if (hdr_off + WSYNC_DELTA_RECORD_HEADER_LEN + len != r->size)
		return wsync_error_set(err, -EINVAL,
			"%" PRIu64 " bytes after the END record",
			r->size - (hdr_off + WSYNC_DELTA_RECORD_HEADER_LEN + len));
	r->write_bytes = bytes;
	return 0;
}

static int walk_all(struct walk *w, struct wsync_error *err)
{
	struct wsync_delta_reader *r = w->r;
	const uint8_t *p;
	uint32_t version, flags;
	int rc;

	if (r->size < WSYNC_DELTA_PREAMBLE_LEN)
		return wsync_error_set(err, -EINVAL,
			"not a wsync delta (%" PRIu64 " bytes)", r->size);
	rc = src_get(r, 0, WSYNC_DELTA_PREAMBLE_LEN, &w->scratch, &p, err);
	if (rc < 0)
		return rc;
	if (memcmp(p, WSYNC_DELTA_MAGIC, 8) != 0)
		return wsync_error_set(err, -EINVAL, "not a wsync delta (bad magic)");
	version = wsync_le32(p + 8);
	flags = wsync_le32(p + 12);
	if (version < WSYNC_DELTA_VERSION_MIN || version > WSYNC_DELTA_VERSION)
		return wsync_error_set(err, -EINVAL, "unsupported delta version %" PRIu32,
				       version);
	r->version = version;
	if (flags)
		return wsync_error_set(err, -EINVAL,
				       "unsupported delta flags 0x%" PRIx32, flags);
	w->pos = WSYNC_DELTA_PREAMBLE_LEN;
	for (;;) {
		uint64_t hdr_off = w->pos, len, sum, got = 0;
		uint32_t type;

		if (hdr_off == r->size)
			return wsync_error_set(err, -EINVAL, "truncated: no END record");
		if (r->size - hdr_off < WSYNC_DELTA_RECORD_HEADER_LEN)
			return wsync_error_set(err, -EINVAL,
				"truncated: a record header is cut at offset %" PRIu64,
				hdr_off);
		rc = src_get(r, hdr_off, WSYNC_DELTA_RECORD_HEADER_LEN, &w->scratch,
			     &p, err);
		if (rc < 0)
			return rc;
		type = wsync_le32(p);
		len = wsync_le64(p + 8);
		sum = wsync_le64(p + 16);
		if (type < WSYNC_DELTA_REC_FILE ||
		    type > (version >= WSYNC_DELTA_VERSION_FILE_END ? WSYNC_DELTA_REC_FILE_END
								    : WSYNC_DELTA_REC_END))
			return wsync_error_set(err, -EINVAL,
				"record at offset %" PRIu64 ": unknown type %" PRIu32,
				hdr_off, type);
		if (wsync_le32(p + 4))
			return wsync_error_set(err, -EINVAL,
				"record at offset %" PRIu64 ": reserved field not zero",
				hdr_off);
		if (len > WSYNC_DELTA_PAYLOAD_MAX)
			return wsync_error_set(err, -EINVAL,
				"record at offset %" PRIu64 ": payload of %" PRIu64
				" bytes over the 1 GiB limit", hdr_off, len);
		if (len > r->size - hdr_off - WSYNC_DELTA_RECORD_HEADER_LEN)
			return wsync_error_set(err, -EINVAL,
				"truncated: the record at offset %" PRIu64
				" runs past the end of the delta", hdr_off);
		if (type == WSYNC_DELTA_REC_SEGMENT && r->segments_later)
			got = sum;	/* wsync_delta_reader_segment checks it */
		else
			rc = src_hash64(r, hdr_off + WSYNC_DELTA_RECORD_HEADER_LEN, len,
					&w->scratch, &got, err);
		if (rc < 0)
			return rc;
		if (got != sum)
			return wsync_error_set(err, -EINVAL,
				"record at offset %" PRIu64 ": checksum mismatch "
				"(the delta is damaged)", hdr_off);
		w->pos = hdr_off + WSYNC_DELTA_RECORD_HEADER_LEN + len;
		if (type == WSYNC_DELTA_REC_SEGMENT) {
			rc = walk_segment(w, hdr_off, len, sum, err);
			if (rc < 0)
				return rc;
			continue;
		}
		/* FILE and END payloads are small (checked before reading). */
		if (type == WSYNC_DELTA_REC_FILE &&
		    len > WSYNC_DELTA_FILE_FIXED_LEN + WSYNC_DELTA_PATH_MAX)
			return wsync_error_set(err, -EINVAL,
				"FILE record at offset %" PRIu64 " of %" PRIu64 " bytes: "
				"more than a path of at most %d bytes allows",
				hdr_off, len, WSYNC_DELTA_PATH_MAX);
		if (type == WSYNC_DELTA_REC_END && len != WSYNC_DELTA_END_LEN)
			return wsync_error_set(err, -EINVAL,
				"END record of %" PRIu64 " bytes", len);
		if (type == WSYNC_DELTA_REC_FILE_END && len != WSYNC_DELTA_FILE_END_LEN)
			return wsync_error_set(err, -EINVAL,
				"record at offset %" PRIu64 ": FILE_END of %" PRIu64 " bytes",
				hdr_off, len);
		rc = src_get(r, hdr_off + WSYNC_DELTA_RECORD_HEADER_LEN, (size_t)len,
			     &w->scratch, &p, err);
		if (rc < 0)
			return rc;
		if (type == WSYNC_DELTA_REC_END)
			return walk_end(w, hdr_off, p, len, err);
		if (type == WSYNC_DELTA_REC_FILE_END) {
			rc = walk_file_end(w, hdr_off, p, len, err);
			if (rc < 0)
				return rc;
			continue;
		}
		rc = walk_close_file(w, err);
		if (rc < 0)
			return rc;
		rc = walk_file(w, hdr_off, p, len, err);
		if (rc < 0)
			return rc;
	}
}

static int reader_open(struct wsync_delta_reader *r, struct wsync_delta_reader **ret,
		       struct wsync_error *err)
{
	struct walk w = { .r = r };
	int rc = walk_all(&w, err);

	wsync_buf_free(&w.scratch);
	if (rc < 0) {
		wsync_delta_reader_free(r);
		return rc;
	}
	*ret = r;
	return 0;
}

int wsync_delta_reader_open_fd(int fd, struct wsync_delta_reader **ret,
			       struct wsync_error *err)
{
	return wsync_delta_reader_open_fd_as(fd, 0, ret, err);
}

int wsync_delta_reader_open_fd_as(int fd, unsigned flags, struct wsync_delta_reader **ret,
				  struct wsync_error *err)
{
	struct wsync_delta_reader *r;
	struct stat st;

	*ret = NULL;
	if (fstat(fd, &st) < 0)
		return wsync_error_set(err, -errno, "delta: %s", strerror(errno));
	if (!S_ISREG(st.st_mode))
		return wsync_error_set(err, -EINVAL, "delta: not a regular file");
	r = calloc(1, sizeof(*r));
	if (!r)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	r->fd = fd;
	r->size = (uint64_t)st.st_size;
	r->segments_later = (flags & WSYNC_DELTA_SEGMENTS_LATER) != 0;
	if (flags & WSYNC_DELTA_READ_AROUND) {
		int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);	/* the once file owns it */

		if (dup_fd >= 0 && (r->once = malloc(sizeof(*r->once))))
			wsync_once_open(r->once, dup_fd, r->size, true);
		else if (dup_fd >= 0)
			(void)close(dup_fd);	/* through the cache, then */
	}
	return reader_open(r, ret, err);
}

int wsync_delta_reader_open_mem(const void *data, size_t len,
				struct wsync_delta_reader **ret,
				struct wsync_error *err)
{
	/* A valid non-NULL pointer even for an empty input. */
	static const uint8_t empty[1];
	struct wsync_delta_reader *r;

	*ret = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	r->fd = -1;
	r->mem = data ? data : empty;
	r->size = data ? len : 0;
	return reader_open(r, ret, err);
}

void wsync_delta_reader_free(struct wsync_delta_reader *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_files; i++) {
		wsync_delta_file_clear(&r->files[i].file);
		free(r->files[i].segments);
	}
	free(r->files);
	if (r->once) {
		wsync_once_close(r->once);
		free(r->once);
	}
	free(r);
}

int wsync_delta_reader_view(const struct wsync_delta_reader *d, const bool *keep,
			    struct wsync_delta_reader *v)
{
	*v = *d;
	v->n_files = 0;
	v->write_bytes = 0;
	v->files = malloc((d->n_files ? d->n_files : 1) * sizeof(*v->files));
	if (!v->files)
		return -ENOMEM;
	for (size_t i = 0; i < d->n_files; i++) {
		if (!keep[i])
			continue;
		v->files[v->n_files++] = d->files[i];
		if (d->files[i].file.op == WSYNC_DELTA_WRITE)
			v->write_bytes += d->files[i].file.target_size;
	}
	return 0;
}

void wsync_delta_view_free(struct wsync_delta_reader *v)
{
	free(v->files);
	v->files = NULL;
	v->n_files = 0;
}

int wsync_delta_reader_segment(const struct wsync_delta_reader *r,
			       const struct wsync_delta_segment *s,
			       struct wsync_buf *out, struct wsync_error *err)
{
	const uint8_t *p;
	int rc;

	if (s->payload_offset > r->size || s->payload_len > r->size - s->payload_offset)
		return wsync_error_set(err, -EINVAL, "segment outside the delta");
	if (r->mem) {
		/* The caller wants an owned copy, as with a file. */
		wsync_buf_reset(out);
		if (wsync_buf_append(out, r->mem + s->payload_offset,
				     (size_t)s->payload_len) < 0)
			return wsync_error_set(err, -ENOMEM, "out of memory");
	} else {
		rc = src_get(r, s->payload_offset, (size_t)s->payload_len, out, &p, err);
		if (rc < 0)
			return rc;
	}
	if (XXH3_64bits(out->data, out->len) != s->checksum)
		return wsync_error_set(err, -EINVAL,
			"segment at offset %" PRIu64 ": checksum mismatch "
			"(the delta changed or is damaged)",
			s->payload_offset - WSYNC_DELTA_RECORD_HEADER_LEN);
	return 0;
}

int wsync_delta_record_at(int fd, uint64_t off, uint64_t end, uint32_t *type, uint64_t *len,
			  struct wsync_error *err)
{
	uint8_t h[WSYNC_DELTA_RECORD_HEADER_LEN];
	int r;

	if (off > end || end - off < sizeof(h))
		return wsync_error_set(err, -EINVAL, "a record header is cut at offset %" PRIu64,
				       off);
	r = wsync_pread_all(fd, h, sizeof(h), off);
	if (r < 0)
		return wsync_error_set(err, r == -ENODATA ? -EINVAL : r,
				       "reading the delta at %" PRIu64 ": %s", off,
				       r == -ENODATA ? "it is shorter" : strerror(-r));
	*type = wsync_le32(h);
	*len = wsync_le64(h + 8);
	if (*type < WSYNC_DELTA_REC_FILE || *type > WSYNC_DELTA_REC_FILE_END || wsync_le32(h + 4))
		return wsync_error_set(err, -EINVAL, "record at offset %" PRIu64 ": unknown type "
				       "%" PRIu32 " or reserved field not zero", off, *type);
	if (*len > WSYNC_DELTA_PAYLOAD_MAX || *len > end - off - sizeof(h))
		return wsync_error_set(err, -EINVAL, "record at offset %" PRIu64 ": payload of "
				       "%" PRIu64 " bytes past the end or the limit", off, *len);
	return 0;
}

int wsync_delta_record_payload(int fd, uint64_t off, uint64_t len, size_t small,
			       struct wsync_buf *out, struct wsync_error *err)
{
	uint8_t h[WSYNC_DELTA_RECORD_HEADER_LEN];
	int r;

	if (len > small)
		return wsync_error_set(err, -EINVAL, "record at offset %" PRIu64 ": payload of "
				       "%" PRIu64 " bytes, more than its type allows", off, len);
	wsync_buf_reset(out);
	if (wsync_buf_reserve(out, (size_t)len + 1) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	r = wsync_pread_all(fd, h, sizeof(h), off);
	if (r == 0)
		r = wsync_pread_all(fd, out->data, (size_t)len, off + sizeof(h));
	if (r < 0)
		return wsync_error_set(err, r == -ENODATA ? -EINVAL : r,
				       "reading the delta at %" PRIu64 ": %s", off,
				       r == -ENODATA ? "it is shorter" : strerror(-r));
	out->len = (size_t)len;
	if (XXH3_64bits(out->data, out->len) != wsync_le64(h + 16))
		return wsync_error_set(err, -EINVAL, "record at offset %" PRIu64 ": checksum "
				       "mismatch (the delta is damaged)", off);
	return 0;
}

int wsync_delta_segment_at(int fd, uint64_t off, uint64_t len, struct wsync_delta_segment *s,
			   struct wsync_error *err)
{
	uint8_t h[WSYNC_DELTA_RECORD_HEADER_LEN + 16];
	int r;

	if (len < 24)
		return wsync_error_set(err, -EINVAL, "record at offset %" PRIu64 ": SEGMENT of "
				       "%" PRIu64 " bytes", off, len);
	r = wsync_pread_all(fd, h, sizeof(h), off);
	if (r < 0)
		return wsync_error_set(err, r == -ENODATA ? -EINVAL : r,
				       "reading the delta at %" PRIu64 ": %s", off,
				       r == -ENODATA ? "it is shorter" : strerror(-r));
	if (wsync_le32(h) != WSYNC_DELTA_REC_SEGMENT || wsync_le64(h + 8) != len)
		return wsync_error_set(err, -EINVAL, "record at offset %" PRIu64 ": not the "
				       "SEGMENT expected", off);
	s->payload_offset = off + WSYNC_DELTA_RECORD_HEADER_LEN;
	s->payload_len = len;
	s->checksum = wsync_le64(h + 16);
	s->target_offset = wsync_le64(h + WSYNC_DELTA_RECORD_HEADER_LEN);
	s->target_len = wsync_le64(h + WSYNC_DELTA_RECORD_HEADER_LEN + 8);
	return 0;
}

int wsync_delta_reader_open_records(int fd, struct wsync_delta_reader **ret,
				    struct wsync_error *err)
{
	struct wsync_delta_reader *r = calloc(1, sizeof(*r));

	*ret = r;
	if (!r)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	r->fd = fd;
	/* the file grows as records arrive: a read past its end is
	 * "truncated" (src_get) */
	r->size = UINT64_MAX;
	r->version = WSYNC_DELTA_VERSION;
	return 0;
}

bool wsync_delta_is_delta(const uint8_t *p, size_t len)
{
	return len >= 8 && memcmp(p, WSYNC_DELTA_MAGIC, 8) == 0;
}
