/* SPDX-License-Identifier: Apache-2.0 */
/*
 * delta_index.c -- an object's index, and a delta of some of its files
 * (delta_index.h).
 */
#include "delta_index.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "delta.h"
#include "io.h"

#define WINDOW (1u << 20)

/* One pass over the object: every byte read once goes into the object's
 * XXH3-128 and SHA-256 and the SHA-256 of the record it belongs to. */
struct pass {
	int fd;
	const char *what;
	uint64_t off, size;
	uint8_t *buf;
	struct wsync_hasher *xxh;
	struct wsync_sha256 *whole, *piece;
	struct wsync_error *err;
};

/* Take the next n bytes (into dst, when given). */
static int take(struct pass *p, uint8_t *dst, uint64_t n)
{
	while (n) {
		size_t k = n < WINDOW ? (size_t)n : WINDOW;
		int r;

		if (p->off + k > p->size)
			return wsync_error_set(p->err, -EINVAL, "%s: a record runs past the end "
					       "(%" PRIu64 " bytes)", p->what, p->size);
		r = wsync_pread_all(p->fd, p->buf, k, p->off);
		if (r < 0)
			return wsync_error_set(p->err, r, "%s: read: %s", p->what, strerror(-r));
		wsync_hasher_update(p->xxh, p->buf, k);
		if (wsync_sha256_update(p->whole, p->buf, k) < 0 ||
		    wsync_sha256_update(p->piece, p->buf, k) < 0)
			return wsync_error_set(p->err, -EIO, "%s: SHA-256 failed", p->what);
		if (dst) {
			memcpy(dst, p->buf, k);
			dst += k;
		}
		p->off += k;
		n -= k;
	}
	return 0;
}

/* The record just taken, from start, is a piece of range f (or the head). */
static int end_piece(struct pass *p, struct wsync_manifest_piece *pc, uint64_t start)
{
	pc->length = p->off - start;
	if (wsync_sha256_final(p->piece, pc->sha256) < 0)
		return wsync_error_set(p->err, -EIO, "%s: SHA-256 failed", p->what);
	return 0;
}

static int add_piece(struct pass *p, struct wsync_manifest_range *f, size_t *cap,
		     uint64_t start)
{
	if (f->n_pieces == *cap) {
		size_t nc = *cap ? *cap * 2 : 4;
		void *np = realloc(f->pieces, nc * sizeof(*f->pieces));

		if (!np)
			return wsync_error_set(p->err, -ENOMEM, "out of memory");
		f->pieces = np;
		*cap = nc;
	}
	return end_piece(p, &f->pieces[f->n_pieces++], start);
}

int wsync_delta_index(int fd, const char *what, struct wsync_delta_object *out,
		      struct wsync_error *err)
{
	struct pass p = { .fd = fd, .what = what, .err = err };
	struct wsync_manifest_index *ix = calloc(1, sizeof(*ix));
	struct wsync_manifest_range *f = NULL;
	uint8_t h[WSYNC_DELTA_RECORD_HEADER_LEN], *payload = NULL;
	size_t files_cap = 0, pieces_cap = 0;
	off_t end = lseek(fd, 0, SEEK_END);
	bool done = false;
	int r;

	memset(out, 0, sizeof(*out));
	p.buf = malloc(WINDOW);
	p.whole = wsync_sha256_new();
	p.piece = wsync_sha256_new();
	if (end < 0) {
		r = wsync_error_set(err, -errno, "%s: %s", what, strerror(errno));
		goto out;
	}
	p.size = (uint64_t)end;
	if (!ix || !p.buf || !p.whole || !p.piece || wsync_hasher_new(&p.xxh) < 0) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	r = take(&p, NULL, WSYNC_DELTA_PREAMBLE_LEN);
	if (r == 0)
		r = end_piece(&p, &ix->head, 0);
	while (r == 0 && !done) {
		uint64_t start = p.off, len;
		uint32_t type;

		r = take(&p, h, sizeof(h));
		if (r < 0)
			break;
		type = wsync_le32(h);
		len = wsync_le64(h + 8);
		if (len > WSYNC_DELTA_PAYLOAD_MAX) {
			r = wsync_error_set(err, -EINVAL, "%s: a record of %" PRIu64 " bytes",
					    what, len);
			break;
		}
		if (type == WSYNC_DELTA_REC_FILE) {
			void *nf;

			if (ix->n_files == files_cap) {
				files_cap = files_cap ? files_cap * 2 : 16;
				nf = realloc(ix->files, files_cap * sizeof(*ix->files));
				if (!nf) {
					r = wsync_error_set(err, -ENOMEM, "out of memory");
					break;
				}
				ix->files = nf;
			}
			free(payload);
			payload = malloc(len ? (size_t)len : 1);
			if (!payload) {
				r = wsync_error_set(err, -ENOMEM, "out of memory");
				break;
			}
			r = take(&p, payload, len);
			f = &ix->files[ix->n_files++];
			memset(f, 0, sizeof(*f));
			pieces_cap = 0;
			f->offset = start;
			if (r == 0) {
				struct wsync_delta_file df;

				r = wsync_delta_file_decode(payload, (size_t)len, &df, err);
				f->path = df.path;	/* taken: freed with the index */
				if (r < 0)
					wsync_error_prefix(err, "%s", what);
			}
		} else if (type == WSYNC_DELTA_REC_SEGMENT && f) {
			r = take(&p, NULL, len);
		} else if (type == WSYNC_DELTA_REC_END) {
			r = take(&p, NULL, len);
			done = true;
			break;
		} else {
			r = wsync_error_set(err, -EINVAL, "%s: a record of type %" PRIu32
					    " at %" PRIu64, what, type, start);
		}
		if (r == 0)
			r = add_piece(&p, f, &pieces_cap, start);
		if (r == 0)
			f->length = p.off - f->offset;
	}
	if (r == 0 && !done)
		r = wsync_error_set(err, -EINVAL, "%s: no END record", what);
	if (r == 0 && p.off != p.size)
		r = wsync_error_set(err, -EINVAL, "%s: %" PRIu64 " bytes after the END record",
				    what, p.size - p.off);
	if (r == 0 && ix->n_files == 0)
		r = wsync_error_set(err, -EINVAL, "%s: no file", what);
	if (r == 0 && wsync_sha256_final(p.whole, out->sha256) < 0)
		r = wsync_error_set(err, -EIO, "%s: SHA-256 failed", what);
	if (r == 0) {
		wsync_hasher_digest(p.xxh, &out->hash);
		out->size = p.size;
		out->index = ix;
		ix = NULL;
	}
out:
	wsync_delta_index_free(ix);
	wsync_hasher_free(p.xxh);
	wsync_sha256_free(p.whole);
	wsync_sha256_free(p.piece);
	free(p.buf);
	free(payload);
	return r;
}

void wsync_delta_index_free(struct wsync_manifest_index *index)
{
	if (!index)
		return;
	for (size_t i = 0; i < index->n_files; i++) {
		free(index->files[i].path);
		free(index->files[i].pieces);
	}
	free(index->files);
	free(index);
}

int wsync_delta_end_partial(int fd, uint64_t len, struct wsync_error *err)
{
	uint8_t h[WSYNC_DELTA_RECORD_HEADER_LEN], end[WSYNC_DELTA_END_LEN];
	uint64_t off = WSYNC_DELTA_PREAMBLE_LEN, files = 0, write_bytes = 0;
	struct wsync_buf payload = { 0 };
	int r = 0;

	while (r == 0 && off < len) {
		struct wsync_delta_file f;
		uint64_t plen;
		uint32_t type;

		if (len - off < sizeof(h)) {
			r = wsync_error_set(err, -EINVAL, "a record cut short at %" PRIu64, off);
			break;
		}
		r = wsync_pread_all(fd, h, sizeof(h), off);
		if (r < 0) {
			r = wsync_error_set(err, r, "read: %s", strerror(-r));
			break;
		}
		type = wsync_le32(h);
		plen = wsync_le64(h + 8);
		off += sizeof(h);
		if (plen > len - off || plen > WSYNC_DELTA_PAYLOAD_MAX ||
		    (type != WSYNC_DELTA_REC_FILE && type != WSYNC_DELTA_REC_SEGMENT) ||
		    (type == WSYNC_DELTA_REC_SEGMENT && files == 0)) {
			r = wsync_error_set(err, -EINVAL, "not a FILE or SEGMENT record that "
					    "fits at %" PRIu64, off - sizeof(h));
			break;
		}
		if (type == WSYNC_DELTA_REC_FILE) {
			wsync_buf_reset(&payload);
			r = wsync_buf_scratch(&payload, (size_t)plen);
			if (r == 0)
				r = wsync_pread_all(fd, payload.data, plen, off);
			if (r == 0)
				r = wsync_delta_file_decode(payload.data, (size_t)plen, &f, err);
			if (r < 0)
				break;
			files++;
			if (f.op == WSYNC_DELTA_WRITE)
				write_bytes += f.target_size;
			wsync_delta_file_clear(&f);
		}
		off += plen;
	}
	wsync_buf_free(&payload);
	if (r < 0)
		return r;
	wsync_st64(end, files);
	wsync_st64(end + 8, write_bytes);
	wsync_delta_record_header(h, WSYNC_DELTA_REC_END, end, sizeof(end));
	r = wsync_pwrite_all(fd, h, sizeof(h), len);
	if (r == 0)
		r = wsync_pwrite_all(fd, end, sizeof(end), len + sizeof(h));
	if (r < 0)
		return wsync_error_set(err, r, "write: %s", strerror(-r));
	return 0;
}
