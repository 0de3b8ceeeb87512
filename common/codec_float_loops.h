/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_float_loops.h -- the inner loops of codec_float.c, included there
 * once per instruction set (plain, AVX2, GFNI + AVX-512), with
 * LOOP_NAME(x) naming this instantiation's functions, LOOP_BLOCK_COUNTS
 * counting one block's classes, LOOP_CLASSES / LOOP_CLASS_MASK giving a
 * block's classes (of type LOOP_CLS_T) and the members of one of them,
 * LOOP_CHANGED_MASK and LOOP_SELECT.  Not a public header: it only makes
 * sense inside codec_float.c.
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
		uint32_t chg = LOOP_CHANGED_MASK(bp, tp, k, width);
		LOOP_CLS_T cls;

		LOOP_CLASSES(bp, k, tab, width, shift, mask, lo, cls);
		for (; chg; chg &= chg - 1) {
			unsigned j = (unsigned)__builtin_ctz(chg);
			uint32_t o = load(bp + j * width, width);
			uint32_t t = load(tp + j * width, width);
			unsigned c = tab[(o >> shift) & mask];

			r = emit_change(&lanes[c],
					counts_get(&cc, c) +
						(unsigned)__builtin_popcount(LOOP_CLASS_MASK(cls, c) &
									     ((1u << j) - 1)),
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
	unsigned clamped = 0;	/* classes whose distance is a lower bound */
	v16i16 dist = { 0 };
	u128 inc[256];

	for (unsigned c = 0; c < NCLS; c++) {
		start[c] = lanes[c].count;
		set_lane(&dist, c, dist_of(&lanes[c], start[c]));
		if (dist[c] == DIST_CLAMP)
			clamped |= 1u << c;
	}
	counts_init(&cc, start);
	class_incs(tab, mask, inc);
	/* Unchanged elements are the base's: each block is copied as its
	 * classes are counted (one read of the base), then only the changes
	 * are patched in. */
	for (uint64_t i = 0; i < n; i += BLOCK) {
		unsigned k = n - i < BLOCK ? (unsigned)(n - i) : BLOCK;
		const uint8_t *bp = base + i * width;
		uint8_t *op = out + i * width;
		v16i16 wide;
		unsigned hits;

		widen(LOOP_BLOCK_COUNTS(bp, k, inc, width, shift, mask, lo), &wide);
		if (k == BLOCK)	/* a constant size: a few vector moves */
			memcpy(op, bp, (size_t)BLOCK * width);
		else
			memcpy(op, bp, (size_t)k * width);
		hits = block_hits(&wide, &dist);
		if (!hits) {	/* the common case: nothing changes here */
			dist -= wide;
			counts_add_wide(&cc, (const v16u16 *)&wide);
			continue;
		}
		/* Class c's next change is its dist[c]-th member here (counted
		 * from 0), unless its distance was only a lower bound. */
		v16i16 after = dist - wide;	/* right for the classes not hit */
		LOOP_CLS_T cls;

		LOOP_CLASSES(bp, k, tab, width, shift, mask, lo, cls);
		for (unsigned m = hits; m; m &= m - 1) {
			unsigned c = (unsigned)__builtin_ctz(m);
			struct wsync_float_dec_lane *l = &lanes[c];
			uint64_t d = (uint64_t)dist[c], here = (uint64_t)wide[c];

			if (clamped & (1u << c)) {
				/* the lower bound ran out: the real distance */
				d = l->next - counts_get(&cc, c);
				if (d >= here) {
					set_lane(&after, c, dist_of(l, counts_get(&cc, c) + here));
					if (after[c] < DIST_CLAMP)
						clamped &= ~(1u << c);
					continue;
				}
				clamped &= ~(1u << c);
			}
			uint32_t cm = LOOP_CLASS_MASK(cls, c);

			do {
				unsigned j = LOOP_SELECT(cm, (unsigned)d);
				uint32_t t;
				uint64_t gap;

				if (!take_step(l, load(bp + j * width, width), width, &t, &gap))
					return wsync_error_set(err, -EINVAL,
							       "corrupt step or gap stream "
							       "(element %llu)",
							       (unsigned long long)(i + j));
				store(op + j * width, t, width);
				d = gap == UINT64_MAX ? UINT64_MAX : d + 1 + gap;
			} while (d < here);
			if (d - here < DIST_CLAMP) {	/* d is not UINT64_MAX */
				set_lane(&after, c, (int16_t)(d - here));
				continue;
			}
			/* the next change is too far for a lane (or there is
			 * none): kept in absolute terms */
			l->next = d == UINT64_MAX ? UINT64_MAX : counts_get(&cc, c) + d;
			set_lane(&after, c, DIST_CLAMP);
			clamped |= 1u << c;
		}
		dist = after;
		counts_add_wide(&cc, (const v16u16 *)&wide);
	}
	counts_flush(&cc);
	for (unsigned c = 0; c < NCLS; c++) {
		lanes[c].count = cc.base[c];
		if (!(clamped & (1u << c)))
			lanes[c].next = cc.base[c] + (uint64_t)dist[c];
	}
	return 0;
}


/* Entry points of this instantiation, one per element width. */
static int LOOP_NAME(enc_piece)(struct wsync_float_lane *lanes, const uint8_t *tab,
				unsigned lo, const uint8_t *base, const uint8_t *target,
				uint64_t n, const struct family_info *fi,
				uint64_t *changed)
{
	if (fi->width == 1)
		return LOOP_NAME(enc_loop)(lanes, tab, lo, base, target, n, 1,
					   fi->exp_shift, fi->exp_mask, changed);
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
	if (fi->width == 1)
		return LOOP_NAME(dec_loop)(lanes, tab, lo, base, out, n, 1,
					   fi->exp_shift, fi->exp_mask, err);
	if (fi->width == 2)
		return LOOP_NAME(dec_loop)(lanes, tab, lo, base, out, n, 2,
					   fi->exp_shift, fi->exp_mask, err);
	return LOOP_NAME(dec_loop)(lanes, tab, lo, base, out, n, 4, fi->exp_shift,
				   fi->exp_mask, err);
}
