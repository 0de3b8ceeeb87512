/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-peers OLD_DIR NEW_DIR --method xor-zstd|int32|uint16|io [--threads N]
 *             [--repeat N] [--write-dir DIR] [--json]
 *
 * The delta codecs RL users run today, implemented as plain C so that
 * scripts/bench-codec.sh can measure them on the same checkpoint pair as
 * wsync, in the same run (see /work/shared/REFERENCE.md, "the peers"):
 *
 *   xor-zstd  slime's disk delta: per changed tensor, one zstd level-1 frame
 *             of (new XOR old), fed in 4 MiB chunks; unchanged tensors cost
 *             nothing.  Apply: decompress, XOR into the old.
 *   int32     HF TRL delta weight sync: per changed tensor the int32 flat
 *             indices of the changed elements, then their new values.
 *   uint16    TRL's later revision: the index gaps as uint16, a gap over
 *             65535 escaped as a uint16 0 followed by the uint32 gap (so it
 *             costs 2+4 bytes), then the values.
 *   io        no codec: the reading and writing every delta codec does at
 *             least, for scale.  Encode reads OLD and NEW; apply reads
 *             NEW (as many bytes as an apply reads of OLD) 256 KiB at a
 *             time and, to files, writes them.  No delta; verify checks
 *             the bytes read.
 *
 * Each delta is a safetensors-like file: an 8-byte length, a JSON header
 * with one entry per stored blob (name, dtype, shape, data offsets, padded
 * to 8 bytes as safetensors writers do), then the blobs.  The header is
 * built for real with jansson and its bytes counted, so per-tensor overhead
 * is honest rather than estimated.  The blobs stay in memory: the codec is
 * measured, not the disk.
 *
 * Passes over the tensors, each spread over --threads workers that take
 * tensors biggest first:
 *   encode  (timed)    compare old and new, build each tensor's blob and
 *                      the header;
 *   apply   (timed)    rebuild every tensor of NEW (unchanged ones too, as
 *                      a file writer would) from OLD + delta into a
 *                      per-worker buffer;
 *   apply to files     with --write-dir, the same and then pwrite each
 *           (timed)    tensor into a fresh file per shard there: what wsync
 *                      apply does (on tmpfs, page allocation is most of it);
 *   verify  (untimed)  apply again, compare the result byte for byte with
 *                      NEW and count the changed elements independently;
 *                      any difference fails the run (exit 1), so a broken
 *                      peer cannot report figures.
 * --repeat N times each timed pass N times and keeps the fastest.  Tensors
 * are read with pread in 256 KiB blocks (see read_tensor), so peak RSS is
 * about the delta held in memory plus, per worker, one tensor (the apply
 * output buffer) and a 4 MiB chunk.
 *
 * An element is dtype-wide (2 bytes for BF16, 4 for F32; sub-byte dtypes
 * count bytes).  A tensor of NEW with no counterpart of the same dtype and
 * element count in OLD is coded against zeros.  Tensors only in OLD cost
 * nothing (a receiver would drop them).  Files other than safetensors
 * shards are not looked at.
 *
 * Output: one line of text, or with --json one object with method,
 * threads, tensors, changed_tensors, target_bytes (tensor bytes of NEW),
 * delta_bytes, header_bytes, elements, changed, density,
 * bytes_per_changed, encode_s, apply_s, encode_mb_per_s, apply_mb_per_s
 * (MB = 10^6 bytes of target per second), verified, peak_rss_kib, and
 * with --write-dir apply_files_s, apply_files_mb_per_s.
 * Exit codes: 0 ok, 1 failure or round-trip mismatch, 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zstd.h>

#include "checkpoint.h"
#include "dtype.h"
#include "safetensors.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the peers' formats are little-endian; this bench copies integers raw"
#endif

#define CHUNK (4u << 20)	/* slime's XOR chunk fed to zstd */
#define BLOCK (256u << 10)	/* read size: stays in L2 */
#define GAP_ESCAPE 0		/* a uint16 gap of 0 announces a uint32 gap */

enum method { M_XOR_ZSTD, M_INT32, M_UINT16, M_IO, M_COUNT };

static const char *const method_names[] = {
	[M_XOR_ZSTD] = "xor-zstd",
	[M_INT32] = "int32",
	[M_UINT16] = "uint16",
	[M_IO] = "io",
};

enum phase { PH_ENCODE, PH_APPLY, PH_VERIFY };

/* One tensor of NEW, its base and its coded delta. */
struct pair {
	const struct wsync_st_file *newf, *oldf; /* oldf NULL: zero base */
	const struct wsync_st_tensor *nt, *ot;
	size_t shard;		/* index of newf among NEW's shards */
	unsigned esize;		/* bytes per element */
	uint64_t nelem;		/* nt->size / esize */
	/* the delta of this tensor */
	bool changed;		/* false: nothing stored */
	uint8_t *blob;		/* xor-zstd: the frame; int32/uint16: indices or
				 * gaps, then values */
	size_t blob_len;
	uint64_t n_idx;		/* int32/uint16: entries stored */
	size_t gaps_len;	/* int32/uint16: bytes before the values */
};

struct vec {
	uint8_t *v;
	size_t n, cap;		/* bytes */
};

struct bench;

struct worker {
	struct bench *b;
	pthread_t tid;
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	uint8_t *ob, *nb;	/* BLOCK bytes each: old and new */
	uint8_t *chunk;		/* CHUNK bytes */
	uint8_t *out;		/* the rebuilt tensor (as big as the biggest) */
	struct vec idx, val;	/* int32/uint16 encode: indices, values */
	uint64_t changed;	/* verify pass: elements that differ */
};

struct bench {
	enum method method;
	unsigned threads;
	struct pair *pairs;	/* biggest first */
	size_t n_pairs;
	enum phase phase;
	atomic_size_t next;
	atomic_bool failed;
	pthread_mutex_t lock;
	char errmsg[1024];
	struct worker *workers;
	/* --write-dir: apply also writes each rebuilt tensor there */
	const struct wsync_checkpoint *newc;
	const char *write_dir;
	bool writing;		/* this apply pass writes */
	int *out_fds;		/* one per shard of NEW, while writing */
};

static void fail(struct bench *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Record the first failure; every worker stops taking tensors. */
static void fail(struct bench *b, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&b->lock);
	if (!atomic_load(&b->failed)) {
		va_start(ap, fmt);
		vsnprintf(b->errmsg, sizeof(b->errmsg), fmt, ap);
		va_end(ap);
		atomic_store(&b->failed, true);
	}
	pthread_mutex_unlock(&b->lock);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int vec_reserve(struct vec *v, size_t more)
{
	if (v->cap - v->n < more) {
		size_t ncap = v->cap ? v->cap : 1 << 16;
		uint8_t *nv;

		while (ncap - v->n < more)
			ncap *= 2;
		nv = realloc(v->v, ncap);
		if (!nv)
			return -ENOMEM;
		v->v = nv;
		v->cap = ncap;
	}
	return 0;
}

/*
 * Bytes [off, off+len) of the tensor into buf: pread through the file
 * descriptor the reader opened.  Read, not the reader's mmap: on this kind
 * of VM, faulting shmem pages in costs more than copying them (about
 * 2 GB/s against 7 GB/s), and the peers should be as fast as they can be.
 */
static int read_tensor(struct worker *w, const struct wsync_st_file *f,
		       const struct wsync_st_tensor *t, uint64_t off, size_t len,
		       uint8_t *buf)
{
	if (!f) {		/* no base: zeros */
		memset(buf, 0, len);
		return 0;
	}
	while (len) {
		ssize_t n = pread(f->fd, buf, len, (off_t)(t->offset + off));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fail(w->b, "%s: reading %s: %s", f->path, t->name,
			     n < 0 ? strerror(errno) : "unexpected end of file");
			return -EIO;
		}
		buf += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static inline int read_old(struct worker *w, const struct pair *p, uint64_t off,
			   size_t len, uint8_t *buf)
{
	return read_tensor(w, p->oldf, p->ot, off, len, buf);
}

static inline int read_new(struct worker *w, const struct pair *p, uint64_t off,
			   size_t len, uint8_t *buf)
{
	return read_tensor(w, p->newf, p->nt, off, len, buf);
}

static inline size_t block_len(uint64_t size, uint64_t off, size_t block)
{
	return size - off < block ? (size_t)(size - off) : block;
}

static inline bool elem_differs(const uint8_t *a, const uint8_t *b, unsigned esize)
{
	switch (esize) {
	case 1:
		return *a != *b;
	case 2: {
		uint16_t x, y;

		memcpy(&x, a, 2);
		memcpy(&y, b, 2);
		return x != y;
	}
	case 4: {
		uint32_t x, y;

		memcpy(&x, a, 4);
		memcpy(&y, b, 4);
		return x != y;
	}
	default:
		return memcmp(a, b, esize) != 0;
	}
}

static inline void put_elem(uint8_t *dst, const uint8_t *src, unsigned esize)
{
	switch (esize) {
	case 1:
		*dst = *src;
		break;
	case 2:
		memcpy(dst, src, 2);
		break;
	case 4:
		memcpy(dst, src, 4);
		break;
	case 8:
		memcpy(dst, src, 8);
		break;
	default:
		memcpy(dst, src, esize);
	}
}

static inline uint64_t load64(const uint8_t *p)
{
	uint64_t x;

	memcpy(&x, p, 8);
	return x;
}

/*
 * The elements of a and b (len bytes, whole elements of esize bytes) that
 * differ.  With idx and val, appends each one's flat index (first + its
 * position, as uint32) to idx and b's value to val.  Returns how many, or
 * -ENOMEM.  Skips 32 identical bytes at a time, which is almost everything
 * at RL densities (esize is 1, 2, 4 or 8: no element straddles a block).
 */
static int64_t diff_scan(const uint8_t *a, const uint8_t *b, size_t len,
			 unsigned esize, uint64_t first, struct vec *idx,
			 struct vec *val)
{
	const size_t blocks = len / 32;
	uint64_t count = 0;

	for (size_t k = 0; k <= blocks; k++) {
		const uint8_t *pa = a + k * 32, *pb = b + k * 32;
		size_t n = k < blocks ? 32 : len - k * 32;

		if (k < blocks && ((load64(pa) ^ load64(pb)) |
				   (load64(pa + 8) ^ load64(pb + 8)) |
				   (load64(pa + 16) ^ load64(pb + 16)) |
				   (load64(pa + 24) ^ load64(pb + 24))) == 0)
			continue;
		for (size_t o = 0; o < n; o += esize) {
			if (!elem_differs(pa + o, pb + o, esize))
				continue;
			count++;
			if (!idx)
				continue;
			uint32_t i = (uint32_t)(first + (k * 32 + o) / esize);

			if (vec_reserve(idx, 4) < 0 || vec_reserve(val, esize) < 0)
				return -ENOMEM;
			memcpy(idx->v + idx->n, &i, 4);
			idx->n += 4;
			put_elem(val->v + val->n, pb + o, esize);
			val->n += esize;
		}
	}
	return (int64_t)count;
}

/* ---- xor-zstd ------------------------------------------------------- */

static void xor_bytes(uint8_t *dst, const uint8_t *a, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = a[i] ^ b[i];
}

/* Whether any byte of the tensor differs from its base (stops at the first
 * differing block, which at RL densities is the first). -1 on read error. */
static int tensor_changed(struct worker *w, const struct pair *p)
{
	for (uint64_t off = 0; off < p->nt->size; off += BLOCK) {
		size_t n = block_len(p->nt->size, off, BLOCK);

		if (read_old(w, p, off, n, w->ob) < 0 || read_new(w, p, off, n, w->nb) < 0)
			return -1;
		if (memcmp(w->ob, w->nb, n) != 0)
			return 1;
	}
	return 0;
}

static int encode_xor_zstd(struct worker *w, struct pair *p)
{
	const uint64_t size = p->nt->size;
	ZSTD_outBuffer out;
	size_t r;
	int c = tensor_changed(w, p);

	if (c <= 0)
		return c < 0 ? -EIO : 0;	/* unchanged: costs nothing */
	p->changed = true;
	out.size = ZSTD_compressBound((size_t)size);
	out.dst = p->blob = malloc(out.size);
	out.pos = 0;
	if (!p->blob)
		return -ENOMEM;
	r = ZSTD_CCtx_reset(w->cctx, ZSTD_reset_session_only);
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setPledgedSrcSize(w->cctx, size);
	if (ZSTD_isError(r))
		goto zerr;
	for (uint64_t off = 0; off < size;) {
		size_t n = block_len(size, off, CHUNK);
		bool last = off + n == size;
		ZSTD_inBuffer in = { w->chunk, n, 0 };

		for (size_t o = 0; o < n; o += BLOCK) {
			size_t m = block_len(n, o, BLOCK);

			if (read_old(w, p, off + o, m, w->ob) < 0 ||
			    read_new(w, p, off + o, m, w->nb) < 0)
				return -EIO;
			xor_bytes(w->chunk + o, w->ob, w->nb, m);
		}
		do {
			r = ZSTD_compressStream2(w->cctx, &out, &in,
						 last ? ZSTD_e_end : ZSTD_e_continue);
			if (ZSTD_isError(r))
				goto zerr;
		} while (last ? r != 0 : in.pos < in.size);
		off += n;
	}
	p->blob_len = out.pos;
	/* shrink the bound-sized buffer to what the frame took */
	uint8_t *shrunk = realloc(p->blob, p->blob_len ? p->blob_len : 1);
	if (shrunk)
		p->blob = shrunk;
	return 0;
zerr:
	fail(w->b, "%s: zstd: %s", p->nt->name, ZSTD_getErrorName(r));
	return -EIO;
}

/* Decompress into a BLOCK-sized window and XOR it into the old tensor,
 * already in w->out. */
static int apply_xor_zstd(struct worker *w, const struct pair *p)
{
	const size_t size = (size_t)p->nt->size;
	ZSTD_inBuffer in = { p->blob, p->blob_len, 0 };
	size_t off = 0, r;

	if (!p->changed)
		return 0;
	r = ZSTD_DCtx_reset(w->dctx, ZSTD_reset_session_only);
	if (ZSTD_isError(r))
		goto zerr;
	for (;;) {
		ZSTD_outBuffer out = { w->nb, BLOCK, 0 };

		r = ZSTD_decompressStream(w->dctx, &out, &in);
		if (ZSTD_isError(r))
			goto zerr;
		if (out.pos > size - off) {
			fail(w->b, "%s: xor-zstd delta decodes past the tensor", p->nt->name);
			return -EIO;
		}
		xor_bytes(w->out + off, w->out + off, w->nb, out.pos);
		off += out.pos;
		if (r == 0)
			break;
		if (in.pos == in.size && out.pos < out.size) {
			fail(w->b, "%s: xor-zstd delta truncated", p->nt->name);
			return -EIO;
		}
	}
	if (off != size) {
		fail(w->b, "%s: xor-zstd delta decodes to %zu bytes, not %zu",
		     p->nt->name, off, size);
		return -EIO;
	}
	return 0;
zerr:
	fail(w->b, "%s: zstd: %s", p->nt->name, ZSTD_getErrorName(r));
	return -EIO;
}

/* ---- int32 indices / uint16 gaps ------------------------------------ */

static int encode_index(struct worker *w, struct pair *p, enum method m)
{
	const unsigned es = p->esize;
	const uint64_t size = p->nt->size;
	uint64_t n = 0;
	uint8_t *q;

	w->idx.n = w->val.n = 0;
	for (uint64_t off = 0; off < size; off += BLOCK) {
		size_t len = block_len(size, off, BLOCK);
		int64_t c;

		if (read_old(w, p, off, len, w->ob) < 0 || read_new(w, p, off, len, w->nb) < 0)
			return -EIO;
		c = diff_scan(w->ob, w->nb, len, es, off / es, &w->idx, &w->val);
		if (c < 0)
			return (int)c;
		n += (uint64_t)c;
	}
	if (n == 0)
		return 0;
	p->changed = true;
	p->n_idx = n;
	const uint32_t *iv = (const uint32_t *)(void *)w->idx.v;

	if (m == M_INT32) {
		p->gaps_len = (size_t)n * 4;
	} else {
		uint32_t prev = UINT32_MAX;	/* so the first gap is index + 1 */
		size_t len = 0;

		for (size_t k = 0; k < n; k++) {
			len += iv[k] - prev > 0xffff ? 6 : 2;
			prev = iv[k];
		}
		p->gaps_len = len;
	}
	p->blob_len = p->gaps_len + w->val.n;
	p->blob = q = malloc(p->blob_len);
	if (!p->blob)
		return -ENOMEM;
	if (m == M_INT32) {
		memcpy(q, iv, (size_t)n * 4);
		q += (size_t)n * 4;
	} else {
		uint32_t prev = UINT32_MAX;

		for (size_t k = 0; k < n; k++) {
			uint32_t gap = iv[k] - prev;

			if (gap > 0xffff) {
				uint16_t esc = GAP_ESCAPE;

				memcpy(q, &esc, 2);
				memcpy(q + 2, &gap, 4);
				q += 6;
			} else {
				uint16_t g = (uint16_t)gap;

				memcpy(q, &g, 2);
				q += 2;
			}
			prev = iv[k];
		}
	}
	memcpy(q, w->val.v, w->val.n);
	return 0;
}

/* Scatter the stored values into the old tensor, already in w->out. */
static int apply_index(struct worker *w, const struct pair *p, enum method m)
{
	const unsigned es = p->esize;
	const uint8_t *g, *gend, *val;
	uint32_t pos = UINT32_MAX;

	if (!p->changed)
		return 0;
	g = p->blob;
	gend = val = p->blob + p->gaps_len;
	for (uint64_t k = 0; k < p->n_idx; k++, val += es) {
		if (m == M_INT32) {
			int32_t i;

			memcpy(&i, g, 4);
			g += 4;
			pos = (uint32_t)i;
		} else {
			uint16_t s;
			uint32_t gap;

			if (gend - g < 2)
				goto bad;
			memcpy(&s, g, 2);
			g += 2;
			gap = s;
			if (s == GAP_ESCAPE) {
				if (gend - g < 4)
					goto bad;
				memcpy(&gap, g, 4);
				g += 4;
			}
			pos += gap;
		}
		if (pos >= p->nelem)
			goto bad;
		put_elem(w->out + (size_t)pos * es, val, es);
	}
	if (g != gend)
		goto bad;
	return 0;
bad:
	fail(w->b, "%s: %s delta indexes past the tensor or is malformed",
	     p->nt->name, method_names[m]);
	return -EIO;
}

/* Compare the rebuilt tensor with NEW, count the changed elements anew. */
static int verify(struct worker *w, const struct pair *p)
{
	const uint64_t size = p->nt->size;
	uint64_t changed = 0;

	for (uint64_t off = 0; off < size; off += BLOCK) {
		size_t len = block_len(size, off, BLOCK);

		if (read_old(w, p, off, len, w->ob) < 0 || read_new(w, p, off, len, w->nb) < 0)
			return -EIO;
		if (memcmp(w->out + off, w->nb, len) != 0) {
			size_t i = 0;

			while (w->out[off + i] == w->nb[i])
				i++;
			fail(w->b, "ROUND TRIP MISMATCH (%s): byte %" PRIu64 " of tensor "
			     "%s is 0x%02x after apply, 0x%02x in %s",
			     method_names[w->b->method], off + i, p->nt->name,
			     w->out[off + i], w->nb[i], p->newf->path);
			return -EIO;
		}
		changed += (uint64_t)diff_scan(w->ob, w->nb, len, p->esize, 0, NULL, NULL);
	}
	if ((w->b->method == M_INT32 || w->b->method == M_UINT16) && changed != p->n_idx) {
		fail(w->b, "%s: %s stored %" PRIu64 " elements, %" PRIu64 " changed",
		     p->nt->name, method_names[w->b->method], p->n_idx, changed);
		return -EIO;
	}
	if (w->b->method == M_XOR_ZSTD && p->changed != (changed != 0)) {
		fail(w->b, "%s: xor-zstd marked it %s", p->nt->name,
		     p->changed ? "changed" : "unchanged");
		return -EIO;
	}
	w->changed += changed;
	return 0;
}

/* ---- workers -------------------------------------------------------- */

/* len bytes of buf into p's shard file under --write-dir, at off. */
static int write_range(struct worker *w, const struct pair *p, const uint8_t *buf,
		       uint64_t off, size_t len)
{
	while (len) {
		ssize_t n = pwrite(w->b->out_fds[p->shard], buf, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fail(w->b, "%s/%s: %s", w->b->write_dir,
			     w->b->newc->shards[p->shard].name, strerror(errno));
			return -EIO;
		}
		buf += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

/* The rebuilt tensor into its shard's file under --write-dir, at the
 * offset it has in NEW (the shard's header is not written: a hole). */
static int write_tensor(struct worker *w, const struct pair *p)
{
	return write_range(w, p, w->out, p->nt->offset, (size_t)p->nt->size);
}

/* io's encode and apply, a block at a time through buffers that stay in
 * the cache as a codec's would: encode reads both sides; apply reads NEW
 * (as many bytes as an apply reads of OLD) and, when writing, writes it. */
static int io_pass(struct worker *w, const struct pair *p, enum phase ph)
{
	for (uint64_t off = 0; off < p->nt->size; off += BLOCK) {
		size_t len = block_len(p->nt->size, off, BLOCK);

		if ((ph == PH_ENCODE && read_old(w, p, off, len, w->ob) < 0) ||
		    read_new(w, p, off, len, w->nb) < 0 ||
		    (ph == PH_APPLY && w->b->writing &&
		     write_range(w, p, w->nb, p->nt->offset + off, len) < 0))
			return -EIO;
	}
	return 0;
}

static int do_pair(struct worker *w, struct pair *p, enum phase ph)
{
	struct bench *b = w->b;
	int r;

	if (b->method == M_IO && ph != PH_VERIFY) {
		r = io_pass(w, p, ph);
	} else if (ph == PH_ENCODE) {
		r = b->method == M_XOR_ZSTD ? encode_xor_zstd(w, p)
					    : encode_index(w, p, b->method);
	} else if (b->method == M_IO) {
		r = read_new(w, p, 0, (size_t)p->nt->size, w->out);
		if (r == 0)
			r = verify(w, p);
	} else {
		/* the old tensor into the output buffer, then the delta over it */
		r = read_old(w, p, 0, (size_t)p->nt->size, w->out);
		if (r == 0)
			r = b->method == M_XOR_ZSTD ? apply_xor_zstd(w, p)
						    : apply_index(w, p, b->method);
		if (r == 0 && b->writing)
			r = write_tensor(w, p);
		if (r == 0 && ph == PH_VERIFY)
			r = verify(w, p);
	}
	if (r == -ENOMEM)
		fail(b, "%s: out of memory", p->nt->name);
	return r;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct bench *b = w->b;

	while (!atomic_load(&b->failed)) {
		size_t i = atomic_fetch_add(&b->next, 1);

		if (i >= b->n_pairs)
			break;
		if (do_pair(w, &b->pairs[i], b->phase) < 0)
			break;
	}
	return NULL;
}

/* Forget the coded deltas, so encode can run again. */
static void reset_deltas(struct bench *b)
{
	for (size_t i = 0; i < b->n_pairs; i++) {
		struct pair *p = &b->pairs[i];

		free(p->blob);
		p->blob = NULL;
		p->blob_len = p->gaps_len = 0;
		p->n_idx = 0;
		p->changed = false;
	}
}

/*
 * --write-dir: (re)create one file per shard of NEW, empty, so every apply
 * pass allocates its pages afresh as a real apply would.  No fsync: the
 * codec is measured, not the disk.
 */
static int open_outputs(struct bench *b)
{
	for (size_t i = 0; i < b->newc->n_shards; i++) {
		char path[4096];

		snprintf(path, sizeof(path), "%s/%s", b->write_dir, b->newc->shards[i].name);
		b->out_fds[i] = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (b->out_fds[i] < 0) {
			fail(b, "%s: %s", path, strerror(errno));
			return -1;
		}
	}
	return 0;
}

static void close_outputs(struct bench *b)
{
	for (size_t i = 0; i < b->newc->n_shards; i++) {
		if (b->out_fds[i] >= 0 && close(b->out_fds[i]) < 0)
			fail(b, "%s/%s: close: %s", b->write_dir,
			     b->newc->shards[i].name, strerror(errno));
		b->out_fds[i] = -1;
	}
}

/* Unlink what open_outputs made. */
static void remove_outputs(const struct bench *b)
{
	for (size_t i = 0; b->out_fds && i < b->newc->n_shards; i++) {
		char path[4096];

		snprintf(path, sizeof(path), "%s/%s", b->write_dir, b->newc->shards[i].name);
		(void)unlink(path);
	}
}

/* Run one pass over every tensor on b->threads workers; wall seconds. */
static double run_phase(struct bench *b, enum phase ph)
{
	double t0;
	unsigned started = 0;

	b->phase = ph;
	atomic_store(&b->next, 0);
	t0 = now_s();
	if (b->writing && open_outputs(b) < 0)
		return 0;
	for (unsigned i = 0; i < b->threads; i++) {
		int r = pthread_create(&b->workers[i].tid, NULL, worker_main,
				       &b->workers[i]);
		if (r != 0) {
			fail(b, "pthread_create: %s", strerror(r));
			break;
		}
		started++;
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(b->workers[i].tid, NULL);
	if (b->writing)
		close_outputs(b);
	return now_s() - t0;
}

/* ---- setup ---------------------------------------------------------- */

static const struct wsync_st_tensor *find_in(const struct wsync_checkpoint *c,
					     const char *name,
					     const struct wsync_st_file **f)
{
	for (size_t i = 0; i < c->n_shards; i++) {
		const struct wsync_st_tensor *t = wsync_st_find(c->shards[i].file->hdr, name);

		if (t) {
			*f = c->shards[i].file;
			return t;
		}
	}
	return NULL;
}

static int cmp_size_desc(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;

	return x->nt->size < y->nt->size ? 1 : x->nt->size > y->nt->size ? -1 : 0;
}

static int make_pairs(struct bench *b, const struct wsync_checkpoint *oldc,
		      const struct wsync_checkpoint *newc, char *msg, size_t msglen)
{
	size_t n = 0;

	b->pairs = calloc(newc->n_tensors ? newc->n_tensors : 1, sizeof(*b->pairs));
	if (!b->pairs)
		return -ENOMEM;
	for (size_t s = 0; s < newc->n_shards; s++) {
		const struct wsync_st_file *nf = newc->shards[s].file;

		for (size_t i = 0; i < nf->hdr->n_tensors; i++) {
			struct pair *p = &b->pairs[n++];
			const struct wsync_st_tensor *nt = &nf->hdr->tensors[i], *ot;
			const struct wsync_st_file *of = NULL;
			unsigned bits = wsync_dtype_bits(nt->dtype);

			p->newf = nf;
			p->nt = nt;
			p->shard = s;
			p->esize = bits < 8 ? 1 : bits / 8;
			p->nelem = nt->size / p->esize;
			if ((b->method == M_INT32 || b->method == M_UINT16) &&
			    p->nelem > (b->method == M_INT32 ? (uint64_t)INT32_MAX
							      : (uint64_t)UINT32_MAX)) {
				snprintf(msg, msglen, "%s has %" PRIu64 " elements: more "
					 "than the %s peer's indices can address",
					 nt->name, p->nelem, method_names[b->method]);
				return -EFBIG;
			}
			ot = find_in(oldc, nt->name, &of);
			if (ot && ot->dtype == nt->dtype && ot->size == nt->size) {
				p->oldf = of;
				p->ot = ot;
			}
		}
	}
	b->n_pairs = n;
	qsort(b->pairs, n, sizeof(*b->pairs), cmp_size_desc);
	return 0;
}

/*
 * The delta's header as its writer would produce it: one entry per blob,
 * in tensor name order, offsets running through the data section.
 * Returns the bytes it takes (8-byte length + JSON padded to 8), or 0 on
 * out-of-memory.
 */
static int cmp_name(const void *a, const void *b)
{
	const struct pair *const *x = a, *const *y = b;

	return strcmp((*x)->nt->name, (*y)->nt->name);
}

static json_t *entry(const char *dtype, uint64_t n, uint64_t *off, uint64_t bytes)
{
	json_t *e = json_pack("{s:s, s:[I], s:[I,I]}", "dtype", dtype, "shape",
			      (json_int_t)n, "data_offsets", (json_int_t)*off,
			      (json_int_t)(*off + bytes));

	*off += bytes;
	return e;
}

static uint64_t header_bytes(struct bench *b)
{
	const struct pair **sorted = calloc(b->n_pairs ? b->n_pairs : 1, sizeof(*sorted));
	json_t *h = json_object();
	uint64_t off = 0, len = 0;
	size_t n = 0;
	char *text;

	if (!sorted || !h)
		goto out;
	for (size_t i = 0; i < b->n_pairs; i++)
		if (b->pairs[i].changed)
			sorted[n++] = &b->pairs[i];
	qsort(sorted, n, sizeof(*sorted), cmp_name);
	for (size_t i = 0; i < n; i++) {
		const struct pair *p = sorted[i];
		const char *name = p->nt->name;
		const char *vdt = wsync_dtype_bits(p->nt->dtype) < 8
				  ? "U8" : wsync_dtype_name(p->nt->dtype);
		char key[4096];

		if (b->method == M_XOR_ZSTD) {
			json_object_set_new(h, name, entry("U8", p->blob_len, &off,
							   p->blob_len));
			continue;
		}
		snprintf(key, sizeof(key), "%s.%s", name,
			 b->method == M_INT32 ? "indices" : "gaps");
		json_object_set_new(h, key, b->method == M_INT32
			? entry("I32", p->n_idx, &off, p->gaps_len)
			: entry("U16", p->gaps_len / 2, &off, p->gaps_len));
		snprintf(key, sizeof(key), "%s.values", name);
		json_object_set_new(h, key, entry(vdt, p->n_idx, &off,
						  p->blob_len - p->gaps_len));
	}
	text = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (text) {
		len = 8 + ((strlen(text) + 7) / 8) * 8;
		free(text);
	}
out:
	json_decref(h);
	free(sorted);
	return len;
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: bench-peers OLD_DIR NEW_DIR --method xor-zstd|int32|uint16|io\n"
		   "                   [--threads N] [--repeat N] [--write-dir DIR] [--json]\n\n"
		   "Encodes the delta OLD -> NEW the way a peer tool does, times\n"
		   "encode and apply, and checks the round trip byte for byte.\n\n"
		   "  -m, --method M   xor-zstd (slime), int32 (TRL), uint16 (TRL gaps),\n"
		   "                   io (no codec: reading and writing alone)\n"
		   "  -t, --threads N  workers, one tensor at a time each (default 1)\n"
		   "  -r, --repeat N   time each pass N times and keep the fastest\n"
		   "      --write-dir D  apply also writes the rebuilt tensors to files\n"
		   "                   in D (one per shard, removed at exit)\n"
		   "      --json       one JSON object instead of a line of text\n"
		   "  -h, --help       this text\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "method", required_argument, NULL, 'm' },
		{ "threads", required_argument, NULL, 't' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "write-dir", required_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct bench b = { .threads = 1, .method = (enum method)-1,
			   .lock = PTHREAD_MUTEX_INITIALIZER };
	struct wsync_checkpoint *oldc = NULL, *newc = NULL;
	struct wsync_error err = { 0 };
	bool json = false;
	unsigned repeat = 1;
	char msg[1024] = "";
	int c, r, rc = 1;

	while ((c = getopt_long(argc, argv, "m:t:r:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			for (int i = 0; i < M_COUNT; i++)
				if (strcmp(optarg, method_names[i]) == 0)
					b.method = (enum method)i;
			if ((int)b.method < 0) {
				fprintf(stderr, "bench-peers: unknown method \"%s\"\n", optarg);
				return 2;
			}
			break;
		case 't': {
			char *end;
			unsigned long t = strtoul(optarg, &end, 10);

			if (*end || t < 1 || t > 256) {
				fprintf(stderr, "bench-peers: --threads: 1 to 256, not \"%s\"\n",
					optarg);
				return 2;
			}
			b.threads = (unsigned)t;
			break;
		}
		case 'r': {
			char *end;
			unsigned long n = strtoul(optarg, &end, 10);

			if (*end || n < 1 || n > 100) {
				fprintf(stderr, "bench-peers: --repeat: 1 to 100, not \"%s\"\n",
					optarg);
				return 2;
			}
			repeat = (unsigned)n;
			break;
		}
		case 'w':
			b.write_dir = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 2 || (int)b.method < 0) {
		usage(stderr);
		return 2;
	}
	if ((r = wsync_checkpoint_open(argv[optind], &oldc, &err)) < 0 ||
	    (r = wsync_checkpoint_open(argv[optind + 1], &newc, &err)) < 0) {
		fprintf(stderr, "bench-peers: %s\n", wsync_error_str(&err));
		goto out;
	}
	r = make_pairs(&b, oldc, newc, msg, sizeof(msg));
	if (r < 0) {
		fprintf(stderr, "bench-peers: %s\n", msg[0] ? msg : strerror(-r));
		goto out;
	}
	b.newc = newc;
	if (b.write_dir) {
		b.out_fds = malloc(newc->n_shards * sizeof(*b.out_fds));
		if (!b.out_fds)
			goto oom;
		for (size_t i = 0; i < newc->n_shards; i++)
			b.out_fds[i] = -1;
	}

	size_t max_size = 0;

	for (size_t i = 0; i < b.n_pairs; i++)
		if (b.pairs[i].nt->size > max_size)
			max_size = (size_t)b.pairs[i].nt->size;
	b.workers = calloc(b.threads, sizeof(*b.workers));
	if (!b.workers)
		goto oom;
	for (unsigned i = 0; i < b.threads; i++) {
		struct worker *w = &b.workers[i];

		w->b = &b;
		w->ob = malloc(BLOCK);
		w->nb = malloc(BLOCK);
		w->chunk = malloc(CHUNK);
		w->out = malloc(max_size ? max_size : 1);
		w->cctx = ZSTD_createCCtx();
		w->dctx = ZSTD_createDCtx();
		if (!w->ob || !w->nb || !w->chunk || !w->out || !w->cctx || !w->dctx)
			goto oom;
		/* fault the buffers in now, not in the timed passes */
		memset(w->out, 0, max_size);
		memset(w->chunk, 0, CHUNK);
		if (ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx,
				ZSTD_c_compressionLevel, 1)))
			goto oom;
	}

	/* best of --repeat runs of each timed pass: the machine may be shared */
	double enc_s = 0, app_s = 0, wr_s = 0;
	uint64_t hdr = 0;

	for (unsigned k = 0; k < repeat && !atomic_load(&b.failed); k++) {
		double t0 = now_s(), t;

		if (k)
			reset_deltas(&b);
		(void)run_phase(&b, PH_ENCODE);
		if (atomic_load(&b.failed))
			break;
		hdr = header_bytes(&b);
		if (hdr == 0)
			goto oom;
		t = now_s() - t0;
		enc_s = k == 0 || t < enc_s ? t : enc_s;
	}
	for (unsigned k = 0; k < repeat && !atomic_load(&b.failed); k++) {
		double t = run_phase(&b, PH_APPLY);

		app_s = k == 0 || t < app_s ? t : app_s;
	}
	b.writing = b.write_dir != NULL;
	for (unsigned k = 0; b.writing && k < repeat && !atomic_load(&b.failed); k++) {
		double t = run_phase(&b, PH_APPLY);

		wr_s = k == 0 || t < wr_s ? t : wr_s;
	}
	b.writing = false;
	if (!atomic_load(&b.failed))
		(void)run_phase(&b, PH_VERIFY);
	if (atomic_load(&b.failed)) {
		fprintf(stderr, "bench-peers: %s\n", b.errmsg);
		goto out;
	}

	uint64_t delta = hdr, elements = 0, changed = 0, changed_tensors = 0;
	uint64_t target = 0;
	struct rusage ru;

	for (size_t i = 0; i < b.n_pairs; i++) {
		delta += b.pairs[i].blob_len;
		elements += b.pairs[i].nelem;
		changed_tensors += b.pairs[i].changed;
		target += b.pairs[i].nt->size;
	}
	for (unsigned i = 0; i < b.threads; i++)
		changed += b.workers[i].changed;
	getrusage(RUSAGE_SELF, &ru);

	double density = elements ? (double)changed / (double)elements : 0;
	double bpc = changed ? (double)delta / (double)changed : 0;
	double enc_mbs = enc_s > 0 ? (double)target / 1e6 / enc_s : 0;
	double app_mbs = app_s > 0 ? (double)target / 1e6 / app_s : 0;
	double wr_mbs = wr_s > 0 ? (double)target / 1e6 / wr_s : 0;

	if (json) {
		json_t *o = json_pack("{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I,"
				      " s:f, s:f, s:f, s:f, s:f, s:f, s:b, s:I}",
			"method", method_names[b.method], "threads", (int)b.threads,
			"tensors", (json_int_t)b.n_pairs,
			"changed_tensors", (json_int_t)changed_tensors,
			"target_bytes", (json_int_t)target,
			"delta_bytes", (json_int_t)delta,
			"header_bytes", (json_int_t)hdr,
			"elements", (json_int_t)elements,
			"changed", (json_int_t)changed,
			"density", density, "bytes_per_changed", bpc,
			"encode_s", enc_s, "apply_s", app_s,
			"encode_mb_per_s", enc_mbs, "apply_mb_per_s", app_mbs,
			"verified", 1, "peak_rss_kib", (json_int_t)ru.ru_maxrss);

		if (o && b.write_dir) {
			json_object_set_new(o, "apply_files_s", json_real(wr_s));
			json_object_set_new(o, "apply_files_mb_per_s", json_real(wr_mbs));
		}
		char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;

		if (!s) {
			json_decref(o);
			goto oom;
		}
		puts(s);
		free(s);
		json_decref(o);
	} else {
		printf("%s, %u thread%s: %" PRIu64 " of %" PRIu64 " elements changed "
		       "(%.3f%%), delta %" PRIu64 " bytes (%.3f per changed element), "
		       "encode %.3f s (%.0f MB/s), apply %.3f s (%.0f MB/s), ",
		       method_names[b.method], b.threads, b.threads == 1 ? "" : "s",
		       changed, elements, density * 100, delta, bpc, enc_s, enc_mbs,
		       app_s, app_mbs);
		if (b.write_dir)
			printf("apply to files %.3f s (%.0f MB/s), ", wr_s, wr_mbs);
		printf("round trip verified, peak RSS %ld KiB\n", ru.ru_maxrss);
	}
	rc = fflush(stdout) == 0 ? 0 : 1;
	goto out;
oom:
	fprintf(stderr, "bench-peers: out of memory\n");
out:
	for (unsigned i = 0; b.workers && i < b.threads; i++) {
		struct worker *w = &b.workers[i];

		free(w->ob);
		free(w->nb);
		free(w->chunk);
		free(w->out);
		free(w->idx.v);
		free(w->val.v);
		ZSTD_freeCCtx(w->cctx);
		ZSTD_freeDCtx(w->dctx);
	}
	free(b.workers);
	for (size_t i = 0; b.pairs && i < b.n_pairs; i++)
		free(b.pairs[i].blob);
	free(b.pairs);
	if (b.out_fds) {
		remove_outputs(&b);
		free(b.out_fds);
	}
	wsync_checkpoint_free(oldc);
	wsync_checkpoint_free(newc);
	return rc;
}
