/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_parts_assign.c -- which files and which steps are a part's
 * (publisher_local.h, BUCKET.md §7): the assignment rule every instance
 * computes alike from the same listing, a part's share of a checkpoint,
 * and the order of (run, step) by which parts move forward together.
 * The rule is the contract between instances: it must not change
 * without a format version.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_scan.h"
#include "publisher_local.h"
#include "url.h"

static bool is_shard(const char *path)
{
	size_t n = strlen(path);

	return n > 12 && strcmp(path + n - 12, ".safetensors") == 0;
}

struct by_size {
	const struct ckscan_file *f;
	size_t i;
};

static int cmp_by_size(const void *a, const void *b)
{
	const struct by_size *x = a, *y = b;

	if (x->f->size != y->f->size)
		return x->f->size > y->f->size ? -1 : 1;
	return strcmp(x->f->path, y->f->path);
}

int pub_parts_assign(const struct ckscan_tree *t, unsigned parts, unsigned *owner)
{
	uint64_t *load = calloc(parts ? parts : 1, sizeof(*load));
	struct by_size *s = malloc((t->n ? t->n : 1) * sizeof(*s));
	size_t n = 0;

	if (!load || !s) {
		free(load);
		free(s);
		return -ENOMEM;
	}
	for (size_t i = 0; i < t->n; i++) {
		if (is_shard(t->files[i].path)) {
			s[n++] = (struct by_size){ &t->files[i], i };
		} else {
			owner[i] = 1;
			load[0] += t->files[i].size;
		}
	}
	/* the largest first, each to the part with the least so far (the
	 * lowest number of those): every instance gets the same answer from
	 * the same listing */
	qsort(s, n, sizeof(*s), cmp_by_size);
	for (size_t k = 0; k < n; k++) {
		unsigned best = 0;

		for (unsigned q = 1; q < parts; q++)
			if (load[q] < load[best])
				best = q;
		owner[s[k].i] = best + 1;
		load[best] += s[k].f->size;
	}
	free(load);
	free(s);
	return 0;
}

void pub_parts_others_free(char **others, size_t n)
{
	for (size_t i = 0; others && i < n; i++)
		free(others[i]);
	free(others);
}

size_t pub_parts_select(struct ckscan_tree *t, unsigned part, unsigned parts,
			const struct wsync_file_filter *part_filter, char ***others,
			size_t *n_others)
{
	unsigned *owner = NULL;
	size_t kept = 0, no = 0;
	char **o = NULL;

	if (others) {
		*others = NULL;
		*n_others = 0;
	}
	if (parts <= 1)
		return t->n;
	if (others && !(o = malloc((t->n ? t->n : 1) * sizeof(*o))))
		return 0;
	if (!part_filter) {
		owner = malloc((t->n ? t->n : 1) * sizeof(*owner));
		if (!owner || pub_parts_assign(t, parts, owner) < 0) {
			free(owner);
			free(o);
			return 0;
		}
	}
	t->total_bytes = 0;
	for (size_t i = 0; i < t->n; i++) {
		bool mine = owner ? owner[i] == part :
				    wsync_file_filter_match(part_filter, t->files[i].path);

		if (!mine) {
			if (o)
				o[no++] = t->files[i].path;	/* tree order: sorted */
			else
				free(t->files[i].path);
			continue;
		}
		t->total_bytes += t->files[i].size;
		t->files[kept++] = t->files[i];
	}
	t->n = kept;
	free(owner);
	if (others) {
		*others = o;
		*n_others = no;
	}
	return kept;
}

/* ---- what part 1 takes from another part (BUCKET.md §7) ---- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_file_path(const void *key, const void *f)
{
	return strcmp(key, ((const struct wsync_manifest_file *)f)->path);
}

int pub_parts_check_keys(const struct wsync_part_record *r, unsigned k, uint64_t version,
			 struct wsync_error *err)
{
	for (size_t i = 0; i < r->n_objects; i++) {
		const struct wsync_part_object *o = &r->objects[i];
		char want[WSYNC_PART_KEY_MAX];
		size_t wl;

		/* parts/<V>/<K>-<F>-00000.wsd: everything but the number is
		 * fixed by the version, the part, its flight and the role */
		wsync_part_chunk_key(version, k, r->flight, o->role, 0, want);
		wl = strlen(want);
		for (size_t c = 0; c < o->n_chunks; c++) {
			const char *key = o->chunks[c].key;
			struct wsync_error e = { 0 };
			unsigned n = 0;
			bool ok = wsync_url_check_key(key, &e) == 0 && strlen(key) == wl &&
				  memcmp(key, want, wl - 9) == 0 &&
				  strcmp(key + wl - 4, want + wl - 4) == 0;

			for (size_t d = wl - 9; ok && d < wl - 4; d++) {
				ok = key[d] >= '0' && key[d] <= '9';
				n = n * 10 + (unsigned)(key[d] - '0');
			}
			/* 00001 would be the part's preamble, never uploaded */
			if (!ok || n < 2)
				return wsync_error_set(err, -EINVAL, "chunk key \"%.80s\" is not one "
						       "of part %u's own for its flight (%.*sNNNNN%s, "
						       "from 00002)", key, k, (int)(wl - 9), want,
						       want + wl - 4);
		}
	}
	return 0;
}

int pub_parts_check_share(const struct wsync_part_record *r, unsigned k, char *const *theirs,
			  const unsigned *theirs_part, size_t n, struct wsync_error *err)
{
	for (size_t i = 0; i < r->n_files; i++) {
		const char *path = r->files[i].path;
		char *const *at = n ? bsearch(&path, theirs, n, sizeof(*theirs), cmp_str) : NULL;

		if (!at)
			return wsync_error_set(err, -EINVAL, "%.200s is not part %u's (by the rule "
					       "it is part 1's, or the checkpoint has no such "
					       "file)", path, k);
		if (theirs_part[at - theirs] != k)
			return wsync_error_set(err, -EINVAL, "%.200s is not part %u's (by the rule "
					       "it is part %u's)", path, k,
					       theirs_part[at - theirs]);
	}
	for (size_t i = 0; i < r->n_objects; i++)
		for (size_t c = 0; c < r->objects[i].n_chunks; c++) {
			const char *path = r->objects[i].chunks[c].path;

			if (!bsearch(path, r->files, r->n_files, sizeof(*r->files), cmp_file_path))
				return wsync_error_set(err, -EINVAL, "its chunk of %.200s is of no "
						       "file it names", path);
		}
	return 0;
}

/* ---- runs and steps ---- */

uint64_t pub_parts_run_of(const struct wsync_manifest *hm, int64_t step)
{
	if (!hm->version)
		return 0;
	/* a step below the one committed: the trainer went back (it resumed
	 * from an older checkpoint), a new run.  The same step is the same
	 * run: the committed checkpoint itself, seen again (a part that lost
	 * its state), and published already. */
	return step < hm->step ? hm->run + 1 : hm->run;
}

int pub_parts_cmp(uint64_t r1, int64_t s1, uint64_t r2, int64_t s2)
{
	if (r1 != r2)
		return r1 < r2 ? -1 : 1;
	return s1 < s2 ? -1 : s1 > s2;
}

/* ---- the mode's questions of a checkpoint ---- */

static const struct wsync_file_filter *part_filter(const struct wsync_publisher *p)
{
	return p->part_explicit ? &p->part_filter : NULL;
}

size_t pub_parts_narrow(struct wsync_publisher *p, struct ckscan_tree *t, bool *own_only)
{
	*own_only = p->part_explicit;
	/* a part naming its files judges only them; one by the rule judges
	 * the whole (every part sees it) and takes its share after */
	if (!p->part_explicit)
		return t->n;
	return pub_parts_select(t, p->part, p->parts, part_filter(p), NULL, NULL);
}

int pub_parts_take(struct wsync_publisher *p, struct candidate *c, int dfd, char *why,
		   size_t why_len)
{
	const struct wsync_manifest *hm = &p->head_manifest;
	uint64_t run;

	if (!p->part_explicit && p->part == 1) {
		/* part 1 keeps whose each other file is: it checks that every
		 * part sends its own share only (pub_parts_check_share) */
		unsigned *owner = malloc((c->tree.n ? c->tree.n : 1) * sizeof(*owner));
		size_t no = 0;

		free(c->others_part);
		c->others_part = NULL;
		if (!owner || pub_parts_assign(&c->tree, p->parts, owner) < 0) {
			free(owner);
			snprintf(why, why_len, "nothing: out of memory");
			return 0;
		}
		for (size_t i = 0; i < c->tree.n; i++)
			if (owner[i] != 1)
				owner[no++] = owner[i];	/* in tree order, as others */
		c->others_part = owner;
	}
	if (!p->part_explicit &&
	    pub_parts_select(&c->tree, p->part, p->parts, NULL, &c->others, &c->n_others) == 0) {
		snprintf(why, why_len, "no file of it is this part's (more parts than weight "
			 "shards?)");
		return 0;
	}
	if (p->inplace) {
		int64_t gs;

		/* parts match steps by number: a counter of our own would not
		 * agree with the other parts' */
		if (ckscan_read_global_step(dfd, &gs) < 0) {
			snprintf(why, why_len, "a step number: publisher parts in place need "
				 "trainer_state.json's global_step");
			return 0;
		}
	}
	run = pub_parts_run_of(hm, c->step);
	if (hm->version && c->step == hm->step && run == hm->run) {
		why[0] = '\0';	/* HEAD's own step: published */
		return 0;
	}
	if (p->has_target && pub_parts_cmp(run, c->step, p->target_run, p->target_step) < 0) {
		snprintf(why, why_len, "nothing: step %" PRId64 " is behind the parts' step "
			 "%" PRId64, c->step, p->target_step);
		return 0;
	}
	return 1;
}
