/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_float_loops.h -- the inner loops of the float coder, included
 * once per instruction set (plain in codec_float.c; AVX2 and GFNI +
 * AVX-512 in codec_float_x86.c), after codec_float_internal.h, with
 * LOOP_NAME(x) naming this instantiation's functions, LOOP_BLOCK its
 * elements per block (32 or 64) and LOOP_MASK_T a mask of a block's
 * elements, LOOP_BLOCK_COUNTS counting one block's classes, LOOP_CLASSES /
 * LOOP_CLASS_MASK giving a block's classes (of type LOOP_CLS_T) and the
 * members of one of them, LOOP_CHANGED_MASK, LOOP_SELECT and LOOP_WIDEN
 * (a block's byte counters to 16-bit lanes), and optionally LOOP_ENTRY
 * (the entry points' type and name, below).  Not a public header: it
 * only makes sense inside those two files, and it undefines those macros
 * at its end, ready for the next instantiation.
 */

static ALWAYS_INLINE int LOOP_NAME(enc_loop)(struct wsync_float_lane *lanes,
				  const uint8_t *tab, unsigned lo, const uint8_t *base,
				  const uint8_t *target, uint64_t n, uint64_t *changed,
				  unsigned width, unsigned shift, unsigned mask)
{
	struct class_counts cc;
	uint64_t start[NCLS], ch = 0;
	u128 inc[256];
	int r;

	for (unsigned c = 0; c < NCLS; c++)
		start[c] = lanes[c].count;
	counts_init(&cc, start);
	class_incs(tab, mask, inc);
	for (uint64_t i = 0; i < n; i += LOOP_BLOCK) {
		unsigned k = n - i < LOOP_BLOCK ? (unsigned)(n - i) : LOOP_BLOCK;
		const uint8_t *bp = base + i * width, *tp = target + i * width;
		u128 bytes = LOOP_BLOCK_COUNTS(bp, k, inc, width, shift, mask, lo);

		if (k == LOOP_BLOCK && !block_differs(bp, tp, (size_t)LOOP_BLOCK * width)) {
			counts_add_block(&cc, bytes);
			continue;
		}
		/* Slow path: rank each changed element within its class. */
		LOOP_MASK_T chg = LOOP_CHANGED_MASK(bp, tp, k, width);
		LOOP_CLS_T cls;

		LOOP_CLASSES(bp, k, tab, width, shift, mask, lo, cls);
		for (; chg; chg &= chg - 1) {
			unsigned j = (unsigned)__builtin_ctzll(chg);
			uint32_t o = load(bp + j * width, width);
			uint32_t t = load(tp + j * width, width);
			unsigned c = tab[(o >> shift) & mask];

			r = emit_change(&lanes[c],
					counts_get(&cc, c) +
						(unsigned)__builtin_popcountll(LOOP_CLASS_MASK(cls, c) &
									       (((LOOP_MASK_T)1 << j) - 1)),
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

#ifndef LOOP_OWN_DECODER
static ALWAYS_INLINE int LOOP_NAME(dec_loop)(struct wsync_float_dec_lane *lanes,
				  const uint8_t *tab, unsigned lo, const uint8_t *base,
				  uint8_t *out, uint64_t n, struct wsync_error *err,
				  unsigned width, unsigned shift, unsigned mask)
{
	struct class_counts cc;
	unsigned clamped;	/* classes whose distance is a lower bound */
	v16i16 dist;
	u128 inc[256];

	lanes_open(lanes, &cc, &dist, &clamped);
	class_incs(tab, mask, inc);
	/*
	 * Unchanged elements are the base's.  A batch of blocks is counted
	 * and copied first, with no branch on the data, so the counts of a
	 * block are ready when it is looked at (a branch waiting on the
	 * counting's long chain of instructions costs the whole chain when
	 * mispredicted, and about half the blocks hold a change at RL
	 * densities).  Then each block's changes are patched in.  Between
	 * blocks that hold a change only the distances move: every class's
	 * count grew by what its distance fell (cc.acc += synced - dist),
	 * brought up to date where a count is needed.
	 */
	for (uint64_t i0 = 0; i0 < n; i0 += (uint64_t)DEC_BATCH * LOOP_BLOCK) {
		uint64_t bn = n - i0 < (uint64_t)DEC_BATCH * LOOP_BLOCK
				      ? n - i0
				      : (uint64_t)DEC_BATCH * LOOP_BLOCK;
		unsigned nblk = (unsigned)((bn + LOOP_BLOCK - 1) / LOOP_BLOCK);
		v16i16 wides[DEC_BATCH], synced;

		for (unsigned b = 0; b < nblk; b++) {
			uint64_t i = i0 + (uint64_t)b * LOOP_BLOCK;
			const uint8_t *bp = base + i * width;
			uint8_t *op = out + i * width;

			if (n - i >= LOOP_BLOCK) {	/* constant sizes: vector moves */
				LOOP_WIDEN(LOOP_BLOCK_COUNTS(bp, LOOP_BLOCK, inc, width, shift,
							     mask, lo),
					   &wides[b]);
				memcpy(op, bp, (size_t)LOOP_BLOCK * width);
			} else {
				unsigned k = (unsigned)(n - i);

				LOOP_WIDEN(LOOP_BLOCK_COUNTS(bp, k, inc, width, shift, mask, lo),
					   &wides[b]);
				memcpy(op, bp, (size_t)k * width);
			}
		}
		if (cc.blocks + nblk > FLUSH_BLOCKS)	/* before a lane could overflow */
			counts_flush(&cc);
		cc.blocks += nblk;
		synced = dist;
		for (unsigned b = 0; b < nblk; b++) {
			uint64_t i = i0 + (uint64_t)b * LOOP_BLOCK;
			unsigned k = n - i < LOOP_BLOCK ? (unsigned)(n - i) : LOOP_BLOCK;
			const uint8_t *bp = base + i * width;
			uint8_t *op = out + i * width;
			v16i16 wide = wides[b];
			unsigned hits = block_hits(&wide, &dist);

			if (!hits) {	/* the common case: nothing changes here */
				dist -= wide;
				continue;
			}
			cc.acc += (v16u16)(synced - dist);	/* counts up to this block */
			/* Class c's next change is its dist[c]-th member here
			 * (counted from 0), unless its distance was only a lower
			 * bound. */
			v16i16 after = dist - wide;	/* right for the classes not hit */
			LOOP_CLS_T cls;

			LOOP_CLASSES(bp, k, tab, width, shift, mask, lo, cls);
			for (unsigned m = hits; m; m &= m - 1) {
				unsigned c = (unsigned)__builtin_ctz(m);
				struct wsync_float_dec_lane *l = &lanes[c];
				uint64_t d = (uint64_t)dist[c], here = (uint64_t)wide[c];
				uint64_t seen = counts_get(&cc, c);

				if (!lane_hit(l, c, seen, here, &d, &after, &clamped))
					continue;
				LOOP_MASK_T cm = LOOP_CLASS_MASK(cls, c);

				do {
					int r = lane_patch(l, bp, op, LOOP_SELECT(cm, (unsigned)d), i,
							   &d, width, err);

					if (r < 0)
						return r;
				} while (d < here);
				lane_next(l, c, seen, here, d, &after, &clamped);
			}
			cc.acc += (v16u16)wide;
			dist = synced = after;
		}
		cc.acc += (v16u16)(synced - dist);
	}
	lanes_close(lanes, &cc, &dist, clamped);
	return 0;
}


#endif /* LOOP_OWN_DECODER */

/* Entry points of this instantiation: one loop per family, its element
 * width, exponent shift and mask constants there (BY_FAMILY).  Static,
 * named by LOOP_NAME, unless LOOP_ENTRY(x) gives the return type and name
 * (codec_float_x86.c's, called from codec_float.c). */
#ifndef LOOP_ENTRY
#define LOOP_ENTRY(x) static int LOOP_NAME(x)
#endif
LOOP_ENTRY(enc_piece)(struct wsync_float_lane *lanes, const uint8_t *tab, unsigned lo,
		      const uint8_t *base, const uint8_t *target, uint64_t n,
		      enum wsync_float_family f, uint64_t *changed)
{
	BY_FAMILY(f, -EINVAL, LOOP_NAME(enc_loop), lanes, tab, lo, base, target, n,
		  changed);
}

#ifndef LOOP_OWN_DECODER
LOOP_ENTRY(dec_piece)(struct wsync_float_dec_lane *lanes, const uint8_t *tab, unsigned lo,
		      const uint8_t *base, uint8_t *out, uint64_t n, enum wsync_float_family f,
		      struct wsync_error *err)
{
	BY_FAMILY(f, wsync_error_set(err, -EINVAL, "bad float family %d", (int)f),
		  LOOP_NAME(dec_loop), lanes, tab, lo, base, out, n, err);
}

#endif

#undef LOOP_NAME
#undef LOOP_ENTRY
#undef LOOP_BLOCK
#undef LOOP_MASK_T
#undef LOOP_CLS_T
#undef LOOP_CLASSES
#undef LOOP_CLASS_MASK
#undef LOOP_CHANGED_MASK
#undef LOOP_SELECT
#undef LOOP_WIDEN
#undef LOOP_BLOCK_COUNTS
#undef LOOP_OWN_DECODER
