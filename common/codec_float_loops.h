/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_float_loops.h -- the inner loops of codec_float.c, included there
 * once per instruction set (plain, and AVX2 where the compiler and the
 * machine have it), with LOOP_NAME(x) naming this instantiation's
 * functions and LOOP_BLOCK_COUNTS counting one block's classes.  Not a
 * public header: it only makes sense inside codec_float.c.
 */

static ALWAYS_INLINE int LOOP_NAME(enc_loop)(struct wsync_float_lane *lanes,
				  const uint8_t *tab, unsigned lo, const uint8_t *base,
				  const uint8_t *target, uint64_t n,
				  unsigned width, unsigned shift, unsigned mask,
				  uint64_t *changed)
{
	struct class_counts cc;
	uint64_t start[NCLS], ch = 0;
	u128 inc[256];
	int r;

	for (unsigned c = 0; c < NCLS; c++)
		start[c] = lanes[c].count;
	counts_init(&cc, start);
	class_incs(tab, mask, inc);
	for (uint64_t i = 0; i < n; i += BLOCK) {
		unsigned k = n - i < BLOCK ? (unsigned)(n - i) : BLOCK;
		const uint8_t *bp = base + i * width, *tp = target + i * width;
		u128 bytes = LOOP_BLOCK_COUNTS(bp, k, inc, width, shift, mask, lo);

		if (k == BLOCK && !block_differs(bp, tp, (size_t)BLOCK * width)) {
			counts_add_block(&cc, bytes);
			continue;
		}
		/* Slow path: rank each changed element within its class. */
		uint32_t cm[NCLS], chg = LOOP_CHANGED_MASK(bp, tp, k, width);

		LOOP_CLASS_MASKS(bp, k, tab, width, shift, mask, lo, cm);
		for (; chg; chg &= chg - 1) {
			unsigned j = (unsigned)__builtin_ctz(chg);
			uint32_t o = load(bp + j * width, width);
			uint32_t t = load(tp + j * width, width);
			unsigned c = tab[(o >> shift) & mask];

			r = emit_change(&lanes[c],
					counts_get(&cc, c) +
						(unsigned)__builtin_popcount(cm[c] & ((1u << j) - 1)),
					to_key(t, width) - to_key(o, width));
			if (r < 0)
				return r;
			ch++;
		}
		counts_add_block(&cc, bytes);
	}
	counts_flush(&cc);
	for (unsigned c = 0; c < NCLS; c++)
		lanes[c].count = cc.base[c];
	*changed = ch;
	return 0;
}

static ALWAYS_INLINE int LOOP_NAME(dec_loop)(struct wsync_float_dec_lane *lanes,
				  const uint8_t *tab, unsigned lo, const uint8_t *base,
				  uint8_t *out, uint64_t n, unsigned width,
				  unsigned shift, unsigned mask,
				  struct wsync_error *err)
{
	struct class_counts cc;
	uint64_t start[NCLS];
	union bytes16 dist, bytes;
	u128 inc[256];

	for (unsigned c = 0; c < NCLS; c++)
		start[c] = lanes[c].count;
	counts_init(&cc, start);
	class_incs(tab, mask, inc);
	for (unsigned c = 0; c < NCLS; c++)
		dist.b[c] = distance(&lanes[c], &cc, c);
	/* Unchanged elements are the base's: each block is copied as its
	 * classes are counted (one read of the base), then only the changes
	 * are patched in. */
	for (uint64_t i = 0; i < n; i += BLOCK) {
		unsigned k = n - i < BLOCK ? (unsigned)(n - i) : BLOCK;
		const uint8_t *bp = base + i * width;
		uint8_t *op = out + i * width;
		unsigned hits;

		bytes.v = LOOP_BLOCK_COUNTS(bp, k, inc, width, shift, mask, lo);
		if (k == BLOCK)	/* a constant size: a few vector moves */
			memcpy(op, bp, (size_t)BLOCK * width);
		else
			memcpy(op, bp, (size_t)k * width);
		hits = block_hits(&bytes, &dist);
		if (!hits) {	/* the common case: nothing changes here */
			dist.vec -= bytes.vec;
			counts_add_block(&cc, bytes.v);
			continue;
		}
		/* A hit may only mean a clamped distance ran low: refresh.  The
		 * class counts at the block's start are read once. */
		uint64_t cnt[NCLS];
		unsigned maybe = hits;

		for (unsigned m = maybe; m; m &= m - 1) {
			unsigned c = (unsigned)__builtin_ctz(m);

			uint8_t d;

			cnt[c] = counts_get(&cc, c);
			d = distance_from(&lanes[c], cnt[c]);
			dist.vec = set_byte(dist.vec, c, d);
			if (bytes.b[c] <= d)
				hits &= ~(1u << c);
		}
		/* Patch the changes of each class that has one here. */
		if (hits) {
			uint32_t cm[NCLS];

			LOOP_CLASS_MASKS(bp, k, tab, width, shift, mask, lo, cm);
			for (unsigned m = hits; m; m &= m - 1) {
				unsigned c = (unsigned)__builtin_ctz(m);
				uint64_t pos0 = cnt[c];
				uint32_t mm = cm[c];
				uint64_t end = pos0 + (unsigned)__builtin_popcount(mm);
				struct wsync_float_dec_lane *l = &lanes[c];

				/* Jump straight to each change among this class's
				 * members in the block: the (next - pos0)-th set bit
				 * of its mask.  next never falls behind pos0: every
				 * change of an earlier block was taken there. */
				while (l->next < end) {
					uint64_t pos = l->next;
					unsigned j;
					uint32_t o, t;

					if (pos < pos0)
						return wsync_error_set(err, -EINVAL,
								       "corrupt gap stream "
								       "(element %llu)",
								       (unsigned long long)i);
					j = LOOP_SELECT(mm, (unsigned)(pos - pos0));
					o = load(bp + j * width, width);
					l->count = pos;
					if (!take_step(l, o, width, &t))
						return wsync_error_set(err, -EINVAL,
								       "corrupt step stream "
								       "(element %llu)",
								       (unsigned long long)(i + j));
					store(op + j * width, t, width);
				}
			}
		}
		dist.vec -= bytes.vec;	/* no wrap: bytes <= dist outside hits */
		for (unsigned m = hits; m; m &= m - 1) {
			unsigned c = (unsigned)__builtin_ctz(m);

			dist.vec = set_byte(dist.vec, c,
					    distance_from(&lanes[c], cnt[c] + bytes.b[c]));
		}
		counts_add_block(&cc, bytes.v);
	}
	counts_flush(&cc);
	for (unsigned c = 0; c < NCLS; c++)
		lanes[c].count = cc.base[c];
	return 0;
}


/* Entry points of this instantiation, one per element width. */
static int LOOP_NAME(enc_piece)(struct wsync_float_lane *lanes, const uint8_t *tab,
				unsigned lo, const uint8_t *base, const uint8_t *target,
				uint64_t n, const struct family_info *fi,
				uint64_t *changed)
{
	if (fi->width == 2)
		return LOOP_NAME(enc_loop)(lanes, tab, lo, base, target, n, 2,
					   fi->exp_shift, fi->exp_mask, changed);
	return LOOP_NAME(enc_loop)(lanes, tab, lo, base, target, n, 4, fi->exp_shift,
				   fi->exp_mask, changed);
}

static int LOOP_NAME(dec_piece)(struct wsync_float_dec_lane *lanes, const uint8_t *tab,
				unsigned lo, const uint8_t *base, uint8_t *out,
				uint64_t n, const struct family_info *fi,
				struct wsync_error *err)
{
	if (fi->width == 2)
		return LOOP_NAME(dec_loop)(lanes, tab, lo, base, out, n, 2,
					   fi->exp_shift, fi->exp_mask, err);
	return LOOP_NAME(dec_loop)(lanes, tab, lo, base, out, n, 4, fi->exp_shift,
				   fi->exp_mask, err);
}
