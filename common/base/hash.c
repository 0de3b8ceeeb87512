/* SPDX-License-Identifier: Apache-2.0 */
#include "hash.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu.h"
#include "io.h"

/*
 * xxHash is compiled in here rather than called in the shared library:
 * Debian builds libxxhash for baseline x86-64 (SSE2), whose XXH3 loop runs
 * at well under half the speed of its AVX2 one, and hashing both sides of
 * every file is a fixed part of diff and apply.  The AVX2 and AVX-512
 * loops are xxHash's own (its XXH_DISPATCH_AVX2 and XXH_DISPATCH_AVX512
 * hooks, as its xxh_x86dispatch.c uses), picked at run time at the codec's
 * level (cpu.h, so WSYNC_CODEC_ISA=plain|avx2 caps both): AVX-512 where
 * the codec takes its GFNI/AVX-512 loops, where it is a little faster
 * again than AVX2.  The speeds are in scripts/BENCHMARKS.md.
 */
#define XXH_INLINE_ALL
#if defined(__x86_64__) && defined(__GNUC__)
#define XXH_DISPATCH_AVX2 1
#define XXH_DISPATCH_AVX512 1
#define XXH_TARGET_AVX2 __attribute__((target("avx2")))
#define XXH_TARGET_AVX512 __attribute__((target("avx512f")))
#define XXH_ACC_ALIGN 64	/* the AVX-512 loop's alignment, as the dispatcher sets */
#define HAVE_XXH_AVX2 1
#include <immintrin.h>
#endif
/* The streaming update keeps the accumulators in a local copy (xxHash's
 * XXH3_STREAM_USE_STACK, its default with gcc): worked on in the state in
 * place, every 64-byte stripe stores them back and reloads them, at well
 * under half the speed.  XXH_ACC_ALIGN 64 above aligns that copy for the AVX2 and
 * AVX-512 loads (xxHash's default for an SSE2 build is 16, which crashed
 * the AVX2 loop where the stack fell wrong). */
#define XXH3_STREAM_USE_STACK 1
#include <xxhash.h>

struct wsync_hasher {
	XXH3_state_t st;	/* first: XXH3 wants it 64-byte aligned */
};

#ifdef HAVE_XXH_AVX2
static __attribute__((noinline)) XXH_TARGET_AVX2 void
update_avx2(XXH3_state_t *st, const void *p, size_t len)
{
	(void)XXH3_update(st, (const xxh_u8 *)p, len, XXH3_accumulate_512_avx2,
			  XXH3_scrambleAcc_avx2);
}

static __attribute__((noinline)) XXH_TARGET_AVX512 void
update_avx512(XXH3_state_t *st, const void *p, size_t len)
{
	(void)XXH3_update(st, (const xxh_u8 *)p, len, XXH3_accumulate_512_avx512,
			  XXH3_scrambleAcc_avx512);
}
#endif

int wsync_hasher_new(struct wsync_hasher **ret)
{
	void *p;

	*ret = NULL;
	if (posix_memalign(&p, 64, sizeof(struct wsync_hasher)))
		return -ENOMEM;
	*ret = p;
	(void)XXH3_128bits_reset(&(*ret)->st);
	return 0;
}

void wsync_hasher_update(struct wsync_hasher *h, const void *p, size_t len)
{
#ifdef HAVE_XXH_AVX2
	switch (wsync_cpu_level()) {
	case WSYNC_CPU_AVX512:
		update_avx512(&h->st, p, len);
		return;
	case WSYNC_CPU_AVX2:
		update_avx2(&h->st, p, len);
		return;
	case WSYNC_CPU_PLAIN:
		break;
	}
#endif
	(void)XXH3_128bits_update(&h->st, p, len);
}

void wsync_hasher_copy(struct wsync_hasher *dst, const struct wsync_hasher *src)
{
	XXH3_copyState(&dst->st, &src->st);
}

void wsync_hasher_free(struct wsync_hasher *h)
{
	free(h);
}

static void canonical(XXH128_hash_t h, struct wsync_hash128 *ret)
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, h);
	memcpy(ret->b, c.digest, sizeof(ret->b));
}

void wsync_hash_mem(const void *p, size_t len, struct wsync_hash128 *ret)
{
#ifdef HAVE_XXH_AVX2
	/* xxHash's one-shot call is its baseline (SSE2) loop: objects of the
	 * store (deltas, anchors) take the vector loops above, the same
	 * digest */
	if (len >= (64u << 10) && wsync_cpu_level() >= WSYNC_CPU_AVX2) {
		struct wsync_hasher h;	/* 64-byte aligned: its type says so */

		(void)XXH3_128bits_reset(&h.st);
		wsync_hasher_update(&h, p, len);
		wsync_hasher_digest(&h, ret);
		return;
	}
#endif
	canonical(XXH3_128bits(p, len), ret);
}

void wsync_hasher_digest(const struct wsync_hasher *h, struct wsync_hash128 *ret)
{
	canonical(XXH3_128bits_digest(&h->st), ret);
}

int wsync_hasher_update_fd(struct wsync_hasher *h, int fd, uint64_t off, uint64_t len)
{
	size_t cap = len < WSYNC_HASH_WINDOW ? (size_t)len : WSYNC_HASH_WINDOW;
	uint8_t *buf;
	int r = 0;

	if (len == 0)
		return 0;
	buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	while (r == 0 && len > 0) {
		size_t n = len < cap ? (size_t)len : cap;

		r = wsync_pread_all(fd, buf, n, off);
		if (r == 0) {
			wsync_hasher_update(h, buf, n);
			off += n;
			len -= n;
		}
	}
	free(buf);
	return r;
}

int wsync_hash_fd(int fd, const char *what, struct wsync_hash128 *ret,
		  uint64_t *size_ret, struct wsync_error *err)
{
	struct wsync_hasher *st = NULL;
	uint8_t *buf = NULL;
	uint64_t off = 0;
	int r = 0;

	if (!what)
		what = "file";
	buf = malloc(WSYNC_HASH_WINDOW);
	if (wsync_hasher_new(&st) < 0 || !buf) {
		r = wsync_error_set(err, -ENOMEM, "%s: out of memory", what);
		goto out;
	}
	/* pread into one reused buffer, not a mapping: several times the speed
	 * of hashing mapped page-cache pages (4 KiB pages cost a TLB miss
	 * each, dear under virtualisation), and the buffer stays cached. */
	/* A hint only: readahead helps, a failure costs nothing. */
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (;;) {
		ssize_t n = pread(fd, buf, WSYNC_HASH_WINDOW, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = wsync_error_set(err, -errno, "%s: read: %s", what,
					    strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		wsync_hasher_update(st, buf, (size_t)n);
		off += (uint64_t)n;
	}
	wsync_hasher_digest(st, ret);
	if (size_ret)
		*size_ret = off;
out:
	free(buf);
	wsync_hasher_free(st);
	return r;
}

int wsync_hash_file(const char *path, struct wsync_hash128 *ret,
		    uint64_t *size_ret, struct wsync_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	int r;

	if (fd < 0)
		return wsync_error_set(err, -errno, "%s: %s", path, strerror(errno));
	r = wsync_hash_fd(fd, path, ret, size_ret, err);
	(void)close(fd);
	return r;
}

const char *wsync_hash_hex(const struct wsync_hash128 *h, char *buf, size_t len)
{
	static const char digits[] = "0123456789abcdef";

	if (len < WSYNC_HASH_HEX_LEN + 1) {
		if (len)
			buf[0] = '\0';
		return buf;
	}
	for (int i = 0; i < 16; i++) {
		buf[2 * i] = digits[h->b[i] >> 4];
		buf[2 * i + 1] = digits[h->b[i] & 15];
	}
	buf[WSYNC_HASH_HEX_LEN] = '\0';
	return buf;
}
