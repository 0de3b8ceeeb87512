/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_parts_merge.c -- part 1's merge (publisher_local.h, BUCKET.md
 * §7): the records of every part of one version become the version's
 * objects -- for each of anchor and delta, a preamble of part 1's own,
 * every part's chunks in path order, and an END record counting its files --
 * and its files, by path.  A pure function of the records: no I/O, no
 * publisher state, so that it is tested alone (tests/unit/test-publisher.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "publisher_local.h"

/* A part's chunk, where it came: sorted by path, and a file's chunks in
 * the order the part listed them. */
struct placed {
	const struct wsync_part_chunk *c;
	unsigned part;
	size_t at;
};

static int cmp_placed(const void *a, const void *b)
{
	const struct placed *x = a, *y = b;
	int d = strcmp(x->c->path, y->c->path);

	if (d)
		return d;
	if (x->part != y->part)
		return x->part < y->part ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

static int cmp_file(const void *a, const void *b)
{
	return strcmp(((const struct wsync_manifest_file *)a)->path,
		      ((const struct wsync_manifest_file *)b)->path);
}

static const struct wsync_part_object *obj_of(const struct wsync_part_record *r,
					      enum wsync_manifest_role role)
{
	for (size_t i = 0; i < r->n_objects; i++)
		if (r->objects[i].role == role)
			return &r->objects[i];
	return NULL;
}

void pub_parts_merge_free(struct pub_merge *m)
{
	for (size_t i = 0; i < m->n_merged; i++) {
		struct wsync_manifest_object *o = &m->merged[i];

		for (size_t k = 0; k < o->n_chunks; k++)
			if (k == 0 || k + 1 == o->n_chunks)
				free(o->chunks[k].key);	/* ours; the rest borrowed */
		free(o->chunks);
		if (o->index)
			free(o->index->files);
		free(o->index);
		memset(o, 0, sizeof(*o));
		free(m->pieces[i]);
		m->pieces[i] = NULL;
	}
	m->n_merged = 0;
	free(m->files);
	m->files = NULL;
	m->n_files = 0;
}

/* One object of the version from every part's object of role: the
 * committer's preamble, every part's chunks in path order, its END. */
static int merge_object(const struct wsync_part_record *recs, unsigned parts,
			uint64_t version, const uint8_t *flight, const char *obj_key,
			enum wsync_manifest_role role, struct pub_merge *out,
			struct wsync_error *err)
{
	struct wsync_manifest_object *o = &out->merged[out->n_merged];
	struct wsync_manifest_piece *pieces;
	struct placed *all;
	struct wsync_manifest_index *ix;
	uint8_t *fr = out->frame[out->n_merged];
	size_t n = 0, at = 0, nf = 0, np = 0;
	uint64_t write_bytes = 0, off;
	char key[WSYNC_PART_KEY_MAX];

	for (unsigned k = 0; k < parts; k++) {
		const struct wsync_part_object *po = obj_of(&recs[k], role);

		n += po->n_chunks;
		for (size_t i = 0; i < po->n_chunks; i++)
			np += po->chunks[i].n_pieces;
	}
	if (n + 2 > WSYNC_MANIFEST_CHUNKS_MAX)
		return wsync_error_set(err, -EFBIG, "%zu chunks: more than a version of parts "
				       "holds (%u)", n, WSYNC_MANIFEST_CHUNKS_MAX - 2);
	all = malloc((n ? n : 1) * sizeof(*all));
	pieces = malloc((np ? np : 1) * sizeof(*pieces));
	o->chunks = calloc(n + 2, sizeof(*o->chunks));
	ix = calloc(1, sizeof(*ix));
	if (ix)
		ix->files = calloc(n ? n : 1, sizeof(*ix->files));
	if (!all || !pieces || !o->chunks || !ix || !ix->files) {
		free(all);
		free(pieces);
		free(o->chunks);
		o->chunks = NULL;
		if (ix)
			free(ix->files);
		free(ix);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	for (unsigned k = 0; k < parts; k++) {
		const struct wsync_part_object *po = obj_of(&recs[k], role);

		for (size_t i = 0; i < po->n_chunks; i++)
			all[at++] = (struct placed){ &po->chunks[i], k, i };
		write_bytes += po->write_bytes;
	}
	qsort(all, n, sizeof(*all), cmp_placed);
	for (size_t i = 1; i < n; i++)
		if (all[i - 1].part != all[i].part &&
		    strcmp(all[i - 1].c->path, all[i].c->path) == 0) {
			int r = wsync_error_set(err, -EINVAL, "%s is in the files of two parts "
						"(their part_files overlap)", all[i].c->path);

			free(all);
			free(pieces);
			free(ix->files);
			free(ix);
			free(o->chunks);
			o->chunks = NULL;
			return r;
		}
	/* a file whose records went in several chunks is one file */
	for (size_t i = 0; i < n; i++)
		nf += !i || strcmp(all[i - 1].c->path, all[i].c->path) != 0;
	out->pieces[out->n_merged] = pieces;
	out->n_merged++;
	o->role = role;
	o->hashless = true;
	o->index = ix;
	o->n_chunks = n + 2;
	wsync_delta_preamble(fr);
	wsync_delta_end_record(fr + WSYNC_DELTA_PREAMBLE_LEN, nf, write_bytes);
	o->chunks[0].key = strdup(wsync_part_chunk_key(version, 0, flight, role, 1, key));
	o->chunks[0].size = WSYNC_DELTA_PREAMBLE_LEN;
	(void)wsync_sha256_mem(fr, WSYNC_DELTA_PREAMBLE_LEN, o->chunks[0].sha256);
	o->chunks[n + 1].key = strdup(wsync_part_chunk_key(version, 0, flight, role, 2, key));
	o->chunks[n + 1].size = WSYNC_DELTA_END_RECORD_LEN;
	(void)wsync_sha256_mem(fr + WSYNC_DELTA_PREAMBLE_LEN, WSYNC_DELTA_END_RECORD_LEN,
			       o->chunks[n + 1].sha256);
	ix->head.length = WSYNC_DELTA_PREAMBLE_LEN;
	memcpy(ix->head.sha256, o->chunks[0].sha256, 32);
	off = WSYNC_DELTA_PREAMBLE_LEN;
	np = 0;
	for (size_t i = 0; i < n; i++) {
		const struct wsync_part_chunk *c = all[i].c;
		struct wsync_manifest_range *f = &ix->files[ix->n_files];

		o->chunks[i + 1] = (struct wsync_manifest_chunk){ .key = c->key,
								  .size = c->size };
		memcpy(o->chunks[i + 1].sha256, c->sha256, 32);
		if (!i || strcmp(all[i - 1].c->path, c->path) != 0) {
			*f = (struct wsync_manifest_range){ .path = c->path, .offset = off,
							    .pieces = pieces + np };
			ix->n_files++;
		} else {
			f = &ix->files[ix->n_files - 1];	/* its records go on */
		}
		memcpy(pieces + np, c->pieces, c->n_pieces * sizeof(*pieces));
		np += c->n_pieces;
		f->n_pieces += c->n_pieces;
		f->length += c->size;
		off += c->size;
	}
	o->ref.key = (char *)obj_key;
	o->ref.size = off + WSYNC_DELTA_END_RECORD_LEN;
	free(all);
	if (!o->chunks[0].key || !o->chunks[n + 1].key)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	return 0;
}

int pub_parts_merge(const struct wsync_part_record *recs, unsigned parts, uint64_t version,
		    const uint8_t flight[WSYNC_MANIFEST_FLIGHT_LEN], const char *delta_key,
		    const char *anchor_key, struct pub_merge *out, struct wsync_error *err)
{
	size_t nf = 0, at = 0;
	bool all_delta = true, all_anchor = true;
	int r = 0;

	for (unsigned k = 0; k < parts; k++) {
		all_delta = all_delta && obj_of(&recs[k], WSYNC_MANIFEST_ROLE_DELTA);
		all_anchor = all_anchor && obj_of(&recs[k], WSYNC_MANIFEST_ROLE_ANCHOR);
		nf += recs[k].n_files;
	}
	if (!all_delta && !all_anchor)
		return wsync_error_set(err, -EINVAL, "the parts sent neither all a delta nor "
				       "all an anchor");
	/* anchor first, as the single publisher lists them */
	if (all_anchor)
		r = merge_object(recs, parts, version, flight, anchor_key,
				 WSYNC_MANIFEST_ROLE_ANCHOR, out, err);
	if (r == 0 && all_delta && version > 1)
		r = merge_object(recs, parts, version, flight, delta_key,
				 WSYNC_MANIFEST_ROLE_DELTA, out, err);
	if (r < 0)
		return r;
	out->files = malloc((nf ? nf : 1) * sizeof(*out->files));
	if (!out->files)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	for (unsigned k = 0; k < parts; k++) {
		memcpy(out->files + at, recs[k].files, recs[k].n_files * sizeof(*recs[k].files));
		at += recs[k].n_files;
	}
	out->n_files = nf;
	qsort(out->files, nf, sizeof(*out->files), cmp_file);
	for (size_t i = 1; i < nf; i++)
		if (strcmp(out->files[i - 1].path, out->files[i].path) == 0)
			return wsync_error_set(err, -EINVAL, "%s is in the files of two parts "
					       "(their part_files overlap)", out->files[i].path);
	return 0;
}
