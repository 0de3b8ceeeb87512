/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_apply.c -- one step of the subscriber's plan, on the jobs
 * thread: a downloaded delta (or anchor) applied onto target_dir, checked
 * against the manifest of the version it reaches, then state.json.
 *
 * The order, and why:
 *  1. The object was verified by size and XXH3-128 on download (store.h
 *     expect_*) against a manifest whose signature (if any) was checked.
 *     The delta's own index must now describe exactly the manifest's files
 *     (same paths, sizes, hashes), so what apply verifies -- each result's
 *     hash -- is what the manifest promised.  An anchor must create every
 *     file from nothing.
 *  2. No symbolic link may sit on a path the step writes or deletes
 *     (apply refuses links on the way already; this also refuses a link at
 *     the last component, which a rename would silently replace).
 *  2b. Free space: the files the step writes (each is built beside the
 *     old one before the rename) plus a margin must fit on target_dir's
 *     file system, else -ENOSPC before anything is written.
 *  3. wsync_apply: bases checked first, temps built and verified, renamed
 *     at the end, all or nothing (apply.h).  A delta applies in place.  An
 *     anchor applies "from" an empty directory "into" target_dir (out_dir):
 *     its files must not exist in the base but may exist in the target,
 *     where they are replaced by rename like any other.
 *  4. Anchor only: the files the previous state listed and the new
 *     manifest does not are deleted (only those: other files in target_dir
 *     are none of our business).
 *  5. Every file of the manifest must now be there, regular, with its
 *     size.  Their mtimes go into the new state.
 *  layout = symlink (subscriber_layout.c): the step is built in a new
 *  version directory (a delta: over hardlinks of the current version; an
 *  anchor: from nothing), its state written there, then target_dir's link
 *  is flipped to it and old version directories pruned.
 *  A staged plan (sub_plan_staged: a rebuild, or an anchor not above the
 *  version held, then deltas -- versions readers must not see) is built
 *  out of sight and shown at once, so the target goes from its version
 *  straight to the plan's last: with layout = inplace, the anchor is
 *  applied from the empty directory into target_dir/.wsync/rebuild (ours,
 *  opened through sub_meta_open's descriptor; on target_dir's file system,
 *  so the free-space check of 2b covers the whole model there), each
 *  delta in place on it, each step verified as above (1 to 5) but no
 *  state written; the last step then renames every file of the version
 *  into target_dir (4': the paths checked first, each directory fsynced),
 *  deletes what the target's version had and this one has not, saves
 *  state.json (6) and removes the staging directory.  A crash leaves each
 *  file old or new, as an apply's renames do, and state.json the old
 *  version's; the start removes the staging directory.  With layout =
 *  symlink the steps are built in the last version's directory, in place
 *  after the first, and only the last step flips the link.  The floor of
 *  the state written is the target's before the plan.
 *  6. .wsync/state.json, durably, through a descriptor of .wsync opened
 *     without following a link and checked to be our own directory
 *     (sub_meta_open): a link planted meanwhile is refused, one planted
 *     after the check is never written through.  apply has fsynced its
 *     files and directories, so the state never describes data that could
 *     still be lost.
 *
 * sub_apply_work runs it in three parts: verify_object (the object against
 * its signed manifest, opened as a delta), apply_step (1 to 3) and
 * finish_step (4 to 6).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "durable.h"
#include "io.h"
#include "delta_index.h"
#include "io.h"
#include "sign.h"
#include "subscriber_local.h"

/* Every chunk of j's object against its SHA-256, where it lies in fd,
 * but those that end by j->checked_upto (checked as they came). */
static int check_chunks_sha256(struct sub_apply_job *j, int fd)
{
	uint64_t off = 0;

	for (size_t i = 0; i < j->obj->n_chunks; i++) {
		const struct wsync_manifest_chunk *c = &j->obj->chunks[i];
		uint8_t got[WSYNC_SHA256_LEN];
		int r;

		if (off + c->size <= j->checked_upto) {
			off += c->size;
			continue;
		}
		r = wsync_sha256_fd_range(fd, off, c->size, j->object_path, got, &j->err);

		if (r == 0 && memcmp(got, c->sha256, sizeof(got)) != 0) {
			j->verify_failed = true;
			return wsync_error_set(&j->err, -EINVAL, "its chunk %s: SHA-256 is not "
					       "the manifest's", c->key);
		}
		if (r < 0)
			return r;
		off += c->size;
	}
	return 0;
}

/* Copy len bytes at off of in to at of out, through b. */
static int copy_range(int in, uint64_t off, int out, uint64_t at, uint64_t len,
		      struct wsync_buf *b)
{
	int r = wsync_buf_scratch(b, 1u << 20);

	while (r == 0 && len) {
		size_t n = len < (1u << 20) ? (size_t)len : 1u << 20;

		r = wsync_pread_all(in, b->data, n, off);
		if (r == 0)
			r = wsync_pwrite_all(out, b->data, n, at);
		off += n;
		at += n;
		len -= n;
	}
	return r == -ENODATA ? -EINVAL : r;
}

/* 0. A partial subscriber's step from an indexed object: the head and the
 * ranges of the files taken, one after another, each piece as the signed
 * manifest says; *len gets their length. */
static int check_pieces(struct sub_apply_job *j, int fd, uint64_t *len)
{
	const struct wsync_manifest_index *ix = j->obj->index;
	uint8_t got[WSYNC_SHA256_LEN];
	uint64_t at = 0;
	size_t flat = 0;	/* the piece's index in j->piece_ok */
	struct stat st;
	int r;

	for (size_t k = 0; k <= j->n_sel; k++) {
		const struct wsync_manifest_piece *pc = k == 0 ? &ix->head : NULL;
		size_t n = k == 0 ? 1 : j->sel[k - 1]->n_pieces;

		for (size_t p = 0; p < n; p++) {
			if (k > 0)
				pc = &j->sel[k - 1]->pieces[p];
			if (j->piece_ok && j->piece_ok[flat++]) {
				at += pc->length;
				continue;
			}
			r = wsync_sha256_fd_range(fd, at, pc->length, j->object_path, got, &j->err);
			if (r == -ENODATA)
				r = -EINVAL;
			if (r == 0 && memcmp(got, pc->sha256, sizeof(got)) != 0)
				r = wsync_error_set(&j->err, -EINVAL, "%s: %s %zu of %s (%" PRIu64
						    " bytes) does not match its SHA-256",
						    j->obj->ref.key, k ? "a piece" : "the head", p,
						    k ? j->sel[k - 1]->path : "the object", pc->length);
			if (r < 0) {
				if (r == -EINVAL)
					j->verify_failed = true;
				return r;
			}
			at += pc->length;
		}
	}
	if (fstat(fd, &st) < 0)
		return wsync_error_set(&j->err, -errno, "%s: %s", j->object_path, strerror(errno));
	if ((uint64_t)st.st_size != at) {
		j->verify_failed = true;
		return wsync_error_set(&j->err, -EINVAL, "%s: %" PRIu64 " bytes fetched, the "
				       "index says %" PRIu64, j->obj->ref.key, (uint64_t)st.st_size,
				       at);
	}
	*len = at;
	return 0;
}

/* 0. ... and each range the records of the file the index names there,
 * exactly: one FILE record of that path and its SEGMENT records. */
static int check_ranges_hold(struct sub_apply_job *j, const struct wsync_delta_reader *d)
{
	for (size_t k = 0; k < j->n_sel || k < d->n_files; k++) {
		const struct wsync_manifest_range *x = k < j->n_sel ? j->sel[k] : NULL;
		const struct wsync_delta_entry *e = k < d->n_files ? &d->files[k] : NULL;

		if (x && e && strcmp(x->path, e->file.path) == 0 && x->length == e->delta_bytes)
			continue;
		j->verify_failed = true;
		if (x && e && strcmp(x->path, e->file.path) == 0)
			return wsync_error_set(&j->err, -EINVAL, "%s: the index's range of %s "
					       "is %" PRIu64 " bytes, its records %" PRIu64,
					       j->obj->ref.key, x->path, x->length, e->delta_bytes);
		if (x && e)
			return wsync_error_set(&j->err, -EINVAL, "%s: the index's range of %s "
					       "holds the records of %s", j->obj->ref.key, x->path,
					       e->file.path);
		return wsync_error_set(&j->err, -EINVAL, "%s: the index's ranges of %zu files "
				       "hold %zu FILE records", j->obj->ref.key, j->n_sel,
				       d->n_files);
	}
	return 0;
}

/* How the job reads an object: its segments as it applies them, around
 * the page cache (a download written around it, read once) unless
 * page_cache = through. */
static unsigned open_flags(const struct sub_apply_job *j)
{
	return WSYNC_DELTA_SEGMENTS_LATER | (j->cached_io ? 0 : WSYNC_DELTA_READ_AROUND);
}

/* 0. A partial subscriber's step from a whole object, checked (one
 * without an index, or one built ahead from its chunks): its preamble
 * and the records of the files taken, cut into a file of their own,
 * which takes the object's place (*fd).  With whole (not NULL), the
 * object stays open there, *whole_fd, and its reader in *whole: what was
 * built ahead goes on from it. */
static int cut_files(struct sub_apply_job *j, int *fd, int *whole_fd,
		     struct wsync_delta_reader **whole)
{
	struct wsync_delta_reader *d = NULL;
	struct wsync_buf b = { 0 };
	char *part = NULL;
	uint64_t at;
	int out = -1, r;

	r = wsync_delta_reader_open_fd_as(*fd, open_flags(j), &d, &j->err);
	if (r == -EINVAL)
		j->verify_failed = true;
	if (r < 0)
		return r;
	if (asprintf(&part, "%s.part", j->object_path) < 0) {
		part = NULL;
		r = wsync_error_set(&j->err, -ENOMEM, "out of memory");
		goto done;
	}
	out = open(part, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0) {
		r = wsync_error_set(&j->err, -errno, "%s: %s", part, strerror(errno));
		goto done;
	}
	at = WSYNC_DELTA_PREAMBLE_LEN;
	r = copy_range(*fd, 0, out, 0, at, &b);
	for (size_t i = 0; r == 0 && i < d->n_files; i++) {
		const struct wsync_delta_entry *e = &d->files[i];

		if (!wsync_file_filter_match(j->filter, e->file.path))
			continue;
		r = copy_range(*fd, e->record_offset, out, at, e->delta_bytes, &b);
		at += e->delta_bytes;
	}
	if (r < 0)
		r = wsync_error_set(&j->err, r, "%s: %s", part, strerror(-r));
	if (r == 0)
		r = wsync_delta_end_partial(out, at, &j->err);
	if (r == 0 && rename(part, j->object_path) < 0)
		r = wsync_error_set(&j->err, -errno, "%s: %s", part, strerror(errno));
	if (r == 0) {
		if (whole) {
			*whole_fd = *fd;
			*whole = d;
			d = NULL;
		} else {
			(void)close(*fd);
		}
		*fd = out;
		out = -1;
	}
done:
	if (out >= 0) {
		(void)close(out);
		(void)unlink(part);
	}
	free(part);
	wsync_buf_free(&b);
	wsync_delta_reader_free(d);
	return r;
}

/* 1. The delta's index against the manifest. */
static int check_delta_matches(struct sub_apply_job *j, const struct wsync_delta_reader *d,
			       const struct wsync_manifest_file **mf)
{
	const struct wsync_manifest *m = j->m;
	size_t k = 0;

	for (size_t i = 0; i < d->n_files; i++) {
		const struct wsync_delta_file *f = &d->files[i].file;
		const struct wsync_manifest_file *want;

		if (j->is_anchor && (f->op != WSYNC_DELTA_WRITE ||
				     (f->flags & WSYNC_DELTA_FILE_HAS_BASE)))
			return wsync_error_set(&j->err, -EINVAL,
				"anchor of version %llu: %s is not a new file",
				(unsigned long long)m->version, f->path);
		if (sub_is_meta_path(f->path))
			return wsync_error_set(&j->err, -EINVAL,
				"version %llu: %s is inside the subscriber's own " SUB_META_DIR
				"/ (refused)", (unsigned long long)m->version, f->path);
		if (f->op == WSYNC_DELTA_DELETE)
			continue;
		/* Both in strcmp order: walk them side by side. */
		if (k >= m->n_files || strcmp(f->path, mf[k]->path) != 0) {
			want = bsearch(f->path, mf, m->n_files, sizeof(*mf), sub_cmp_path_mfile);
			return wsync_error_set(&j->err, -EINVAL,
				"the object of version %llu does not match its manifest: "
				"%s %s", (unsigned long long)m->version, f->path,
				want ? "out of order" : "is not in the manifest's files");
		}
		want = mf[k++];
		if (want->size != f->target_size ||
		    !wsync_hash_equal(&want->hash, &f->target_hash))
			return wsync_error_set(&j->err, -EINVAL,
				"the object of version %llu does not match its manifest: "
				"%s has another size or hash", (unsigned long long)m->version,
				f->path);
	}
	if (k != m->n_files)
		return wsync_error_set(&j->err, -EINVAL,
			"the object of version %llu does not match its manifest: "
			"%s is missing from it", (unsigned long long)m->version,
			mf[k]->path);
	return 0;
}

/* The previous state's files that the new manifest drops (anchor only). */
static bool dropped(const struct sub_file *f, const struct wsync_manifest_file **mf, size_t n)
{
	return !bsearch(f->path, mf, n, sizeof(*mf), sub_cmp_path_mfile);
}

/* 2. No symlink where the step writes or deletes. */
static int check_symlinks(struct sub_apply_job *j, int root, const struct wsync_delta_reader *d,
			  const struct wsync_manifest_file **mf)
{
	for (size_t i = 0; i < d->n_files; i++) {
		const struct wsync_delta_file *f = &d->files[i].file;
		int r;

		if (f->op == WSYNC_DELTA_KEEP)
			continue;
		r = sub_path_check_no_symlink(root, f->path);
		if (r == -ELOOP)
			return wsync_error_set(&j->err, -EINVAL,
				"%s: a symbolic link on the path (refused: nothing is "
				"written outside the target)", f->path);
		if (r < 0)
			return wsync_error_set(&j->err, r, "%s: %s", f->path, strerror(-r));
	}
	if (j->is_anchor && j->prev)
		for (size_t i = 0; i < j->prev->n_files; i++) {
			const struct sub_file *f = &j->prev->files[i];
			const char *name;
			int dfd;

			if (!dropped(f, mf, j->m->n_files))
				continue;
			dfd = sub_open_parent(root, f->path, &name);
			if (dfd == -ELOOP)
				return wsync_error_set(&j->err, -EINVAL,
					"%s: a symbolic link on the path (refused)", f->path);
			if (dfd >= 0)
				(void)close(dfd);
		}
	return 0;
}

/* Remove the now-empty directories above rel (best effort: rmdir refuses
 * non-empty ones, so nothing of anyone else's goes). */
static void prune_parents(int root, const char *rel)
{
	char *p = strdup(rel), *slash;

	if (!p)
		return;
	while ((slash = strrchr(p, '/'))) {
		const char *name;
		int dfd;

		*slash = '\0';
		dfd = sub_open_parent(root, p, &name);
		if (dfd < 0)
			break;
		if (unlinkat(dfd, name, AT_REMOVEDIR) < 0) {
			(void)close(dfd);
			break;
		}
		(void)wsync_fsync(dfd);
		(void)close(dfd);
	}
	free(p);
}

/* 4. Delete what the previous version had and this one has not. */
static int delete_dropped(struct sub_apply_job *j, int root,
			  const struct wsync_manifest_file **mf)
{
	for (size_t i = 0; j->prev && i < j->prev->n_files; i++) {
		const struct sub_file *f = &j->prev->files[i];
		const char *name;
		int dfd;

		if (!dropped(f, mf, j->m->n_files) || sub_is_meta_path(f->path))
			continue;
		dfd = sub_open_parent(root, f->path, &name);
		if (dfd == -ENOENT)
			continue;
		if (dfd < 0)
			return wsync_error_set(&j->err, dfd, "%s: %s", f->path, strerror(-dfd));
		if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT) {
			int e = errno;

			(void)close(dfd);
			return wsync_error_set(&j->err, -e, "%s: removing: %s", f->path,
					       strerror(e));
		}
		(void)wsync_fsync(dfd);
		(void)close(dfd);
		j->deleted++;
		prune_parents(root, f->path);
	}
	return 0;
}

/* What the three parts of a step share (sub_apply_work owns it). */
struct step_run {
	int fd;				/* the object (-1: not open) */
	struct wsync_delta_reader *d;	/* over it */
	/* a partial subscriber's step built ahead: the whole object (fd
	 * holds its files cut out) and its reader (-1, NULL: none) */
	int whole_fd;
	struct wsync_delta_reader *whole;
	const char *dir;		/* where the step is written: target_dir,
					 * or build */
	char *build;			/* symlink layout: the version directory
					 * being built */
	bool built;			/* build exists and is not current: removed
					 * if the step fails */
	int root;			/* dir, open (-1: not open) */
	const struct wsync_manifest_file **mf;	/* the manifest's files by path */
	/* a staged plan, layout = inplace: target_dir/.wsync (-1: not
	 * open), its SUB_STAGE_DIR (-1) and the name dir gets for it */
	int meta, stage_fd;
	char stage_path[40];
};

/* ---- building ahead of the commit (subscriber_ahead.c) ---- */

/*
 * A delta of the whole FILE records in ranges (in object order) of the
 * object in in (its head first, an END record counting them last),
 * written to part_path and opened; the caller frees *d, then closes *fd
 * (the reader reads through it).  The records come from chunks each
 * checked against the SHA-256 that a signed NEXT or manifest gives.
 */
static int open_part(int in, const struct sub_range *ranges, size_t n, const char *part_path,
		     struct wsync_delta_reader **d, int *fdp, struct wsync_error *err)
{
	struct wsync_buf b = { 0 };
	uint64_t at = WSYNC_DELTA_PREAMBLE_LEN;
	int fd, r;

	*d = NULL;
	*fdp = fd = open(part_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return wsync_error_set(err, -errno, "%s: %s", part_path, strerror(errno));
	r = copy_range(in, 0, fd, 0, WSYNC_DELTA_PREAMBLE_LEN, &b);
	for (size_t i = 0; r == 0 && i < n; i++) {
		r = copy_range(in, ranges[i].off, fd, at, ranges[i].len, &b);
		at += ranges[i].len;
	}
	wsync_buf_free(&b);
	if (r < 0)
		r = wsync_error_set(err, r, "%s: %s", part_path, strerror(-r));
	if (r == 0)
		r = wsync_delta_end_partial(fd, at, err);
	if (r == 0)
		r = wsync_delta_reader_open_fd_as(fd, WSYNC_DELTA_SEGMENTS_LATER, d, err);
	(void)unlink(part_path);	/* open: gone once closed */
	return r;
}

/* Build the files of the object's records in ranges as temps beside
 * their destinations in dir (each checked against its hash), staged.
 * budget: the bytes of temps they may take -- past it nothing is built
 * (-EFBIG, *over_budget set): a NEXT's few compressed bytes can name
 * files of any size. */
static int stage_part(int in, const struct sub_range *ranges, size_t n, const char *part_path,
		      const char *dir, const struct wsync_apply_opts *ao, uint64_t budget,
		      struct wsync_apply_staged **staged, struct wsync_apply_stats *stats,
		      bool *verify_failed, bool *over_budget, struct wsync_error *err)
{
	struct wsync_delta_reader *d;
	int fd, r = open_part(in, ranges, n, part_path, &d, &fd, err);

	if (r == -EINVAL)
		*verify_failed = true;
	if (r < 0) {
		if (fd >= 0)
			(void)close(fd);
		return r;
	}
	if (d->write_bytes > budget) {
		*over_budget = true;
		r = wsync_error_set(err, -EFBIG, "the next files would take %" PRIu64 " bytes, "
				    "%" PRIu64 " more than ahead_max leaves", d->write_bytes,
				    d->write_bytes - budget);
	} else {
		r = sub_space_check(dir, d->write_bytes, "the files built ahead", err);
	}
	if (r == 0)
		r = wsync_apply_stage(d, dir, ao, staged, stats, err);
	if (r == -EINVAL)
		*verify_failed = true;
	wsync_delta_reader_free(d);
	(void)close(fd);
	return r;
}

/*
 * Go on building the file of pw (apply.h: piece by piece) from the
 * object's record at *pos up to end (a record boundary of bytes checked
 * against a signed SHA-256): each SEGMENT record decoded into its temp,
 * and at its FILE_END the temp verified and staged into *staged (*done
 * set).  *pos moves past every record taken.  0, or the failure (-EINVAL:
 * the records or the result are not what they must be).
 */
static int piece_advance(struct wsync_apply_piecewise *pw, int fd, uint64_t *pos, uint64_t end,
			 struct wsync_apply_staged **staged, struct wsync_apply_stats *stats,
			 bool *done, struct wsync_error *err)
{
	struct wsync_buf b = { 0 };
	int r = 0;

	*done = false;
	while (r == 0 && !*done && *pos < end) {
		struct wsync_delta_segment sg;
		struct wsync_delta_file_end fe;
		uint64_t len;
		uint32_t type;

		r = wsync_delta_record_at(fd, *pos, end, &type, &len, err);
		if (r < 0)
			break;
		if (type == WSYNC_DELTA_REC_SEGMENT) {
			r = wsync_delta_segment_at(fd, *pos, len, &sg, err);
			if (r == 0)
				r = wsync_apply_piece_segment(pw, &sg, err);
		} else if (type == WSYNC_DELTA_REC_FILE_END) {
			r = wsync_delta_record_payload(fd, *pos, len, WSYNC_DELTA_FILE_END_LEN, &b,
						       err);
			if (r == 0)
				r = wsync_delta_file_end_decode(b.data, b.len,
								wsync_apply_piece_file(pw), &fe, err);
			if (r == 0)
				r = wsync_apply_piece_finish(pw, &fe, staged, stats, err);
			*done = r == 0;
		} else {
			r = wsync_error_set(err, -EINVAL, "%s: a record of type %" PRIu32 " at %"
					    PRIu64 " among its segments",
					    wsync_apply_piece_file(pw)->path, type, *pos);
		}
		if (r == 0)
			*pos += WSYNC_DELTA_RECORD_HEADER_LEN + len;
	}
	wsync_buf_free(&b);
	return r;
}

/* Begin building piece by piece the file whose FILE record is at at, if
 * it is a WRITE with segments whose target fits budget (else nothing:
 * *pw stays NULL, built after the commit); *pos after its record. */
static int piece_begin(int fd, uint64_t at, const char *dir, const struct wsync_apply_opts *ao,
		       uint64_t budget, const struct wsync_apply_staged *staged,
		       struct wsync_apply_piecewise **pw, uint64_t *pos, struct wsync_error *err)
{
	struct wsync_delta_file f = { 0 };
	struct wsync_buf b = { 0 };
	uint64_t len;
	uint32_t type;
	int r;

	*pw = NULL;
	r = wsync_delta_record_at(fd, at, UINT64_MAX, &type, &len, err);
	if (r == 0 && type != WSYNC_DELTA_REC_FILE)
		r = wsync_error_set(err, -EINVAL, "no FILE record at %" PRIu64, at);
	if (r == 0)
		r = wsync_delta_record_payload(fd, at, len, WSYNC_DELTA_FILE_FIXED_LEN +
					       WSYNC_DELTA_PATH_MAX, &b, err);
	if (r == 0)
		r = wsync_delta_file_decode(b.data, b.len, &f, err);
	wsync_buf_free(&b);
	if (r < 0)
		return r;
	*pos = at + WSYNC_DELTA_RECORD_HEADER_LEN + len;
	if (f.op == WSYNC_DELTA_WRITE && f.n_segments && f.target_size <= budget)
		r = sub_space_check(dir, f.target_size, "the files built ahead", err);
	if (r == 0 && f.op == WSYNC_DELTA_WRITE && f.n_segments && f.target_size <= budget)
		r = wsync_apply_piece_begin(dir, &f, fd, ao, staged, pw, err);
	if (r < 0) {
		wsync_apply_piece_free(*pw);
		*pw = NULL;
	}
	wsync_delta_file_clear(&f);
	return r;
}

void sub_ahead_build_work(void *data)
{
	struct sub_ahead_build *j = data;
	struct wsync_apply_opts ao = { .threads = j->threads, .memory_limit = j->memory_limit,
				       .cached_io = j->cached_io };
	struct wsync_apply_stats st = { 0 };
	double t0 = wsync_monotonic_seconds();
	int in = open(j->object_path, O_RDONLY | O_CLOEXEC);
	uint64_t budget = j->budget, bytes;
	int r = 0;

	wsync_error_clear(&j->err);
	memset(&j->stats, 0, sizeof(j->stats));
	j->verify_failed = j->over_budget = j->piece_done = false;
	j->piece_bytes = 0;
	if (in < 0) {
		j->r = wsync_error_set(&j->err, -errno, "%s: %s", j->object_path, strerror(errno));
		return;
	}
	if (j->make_dir) {
		/* layout = symlink: the version's directory, as the commit's
		 * step would make it -- never the one the link names */
		char *build = NULL;

		r = sub_layout_begin(j->layout_target, j->target_dir, j->from_current, &build,
				     &j->err);
		if (r == 0 && strcmp(build, j->target_dir) != 0) {
			(void)wsync_rm_rf(build);
			r = wsync_error_set(&j->err, -EEXIST, "%s: the version the link names",
					    j->target_dir);
		}
		free(build);
		if (r < 0) {
			j->r = r;
			(void)close(in);
			return;
		}
		j->made = true;
	}
	/* the file being built piece by piece: its records that came */
	if (*j->piece) {
		r = piece_advance(*j->piece, in, &j->piece_pos, j->piece_end, j->staged, &st,
				  &j->piece_done, &j->err);
		if (j->piece_done) {
			j->cont_end = j->piece_pos;
			j->cont_bytes = st.bytes_written;
			wsync_apply_piece_free(*j->piece);
			*j->piece = NULL;
		}
	}
	/* whole files */
	if (r == 0 && j->n_ranges) {
		r = stage_part(in, j->ranges, j->n_ranges, j->part_path, j->target_dir, &ao,
			       budget, j->staged, &st, &j->verify_failed, &j->over_budget,
			       &j->err);
		j->stats.bytes_written += st.bytes_written;
		budget -= st.bytes_written < budget ? st.bytes_written : budget;
	}
	/* and the first records of the next, begun */
	if (r == 0 && j->begin_at && !*j->piece) {
		r = piece_begin(in, j->begin_at, j->target_dir, &ao, budget, *j->staged, j->piece,
				&j->piece_pos, &j->err);
		if (r == 0 && *j->piece) {
			bool done;	/* not before piece_end: the file is not whole */

			r = piece_advance(*j->piece, in, &j->piece_pos, j->piece_end, j->staged,
					  &st, &done, &j->err);
			if (r == 0 && done)
				r = wsync_error_set(&j->err, -EINVAL, "a file's FILE_END came "
						    "before its records were whole");
		}
	}
	if (*j->piece) {
		(void)wsync_apply_piece_segments(*j->piece, &bytes);
		j->piece_bytes = bytes;
	}
	if (r == -EINVAL)
		j->verify_failed = true;
	j->r = r;
	(void)close(in);
	j->stats.seconds = wsync_monotonic_seconds() - t0;	/* the apply's, before the commit */
}

/* The staged files are exactly what d (the whole object) makes of the
 * target: each FILE record's path, operation and result. */
static int check_staged(struct sub_apply_job *j, const struct wsync_delta_reader *d)
{
	size_t n;
	const struct wsync_apply_staged_file *sf = wsync_apply_staged_files(*j->staged, &n);

	if (n != d->n_files)
		return wsync_error_set(&j->err, -EINVAL, "%zu files built for a delta of %zu",
				       n, d->n_files);
	for (size_t i = 0; i < n; i++) {
		const struct wsync_delta_file *f = &d->files[i].file;

		if (strcmp(sf[i].path, f->path) != 0 || sf[i].op != f->op ||
		    (f->op != WSYNC_DELTA_DELETE &&
		     (sf[i].size != f->target_size || !wsync_hash_equal(&sf[i].hash,
									 &f->target_hash))))
			return wsync_error_set(&j->err, -EINVAL, "%s: what was built ahead is "
					       "not what the version makes", f->path);
	}
	return 0;
}

/* The commit of a version built ahead: what is not built yet (records
 * from staged_upto to the END record; a partial subscriber's, of its
 * files), then every temp renamed in.  d is what the step makes (a
 * partial subscriber's files cut out); the records are read from the
 * whole object the build ahead read. */
static int apply_staged(struct sub_apply_job *j, const struct step_run *run,
			const struct wsync_apply_opts *ao)
{
	const struct wsync_delta_reader *d = run->d, *w = run->whole ? run->whole : run->d;
	int fd = run->whole ? run->whole_fd : run->fd;
	struct stat st;
	uint64_t end, from;
	int r;

	if (fstat(fd, &st) < 0)
		return wsync_error_set(&j->err, -errno, "%s: %s", j->object_path, strerror(errno));
	end = (uint64_t)st.st_size - WSYNC_DELTA_RECORD_HEADER_LEN - WSYNC_DELTA_END_LEN;
	from = j->staged_upto;
	if (j->piece && *j->piece) {
		/* the file begun piece by piece: its last records */
		struct wsync_apply_stats ps = { 0 };
		bool done = false;

		from = j->piece_pos;
		r = piece_advance(*j->piece, fd, &from, end, j->staged, &ps, &done, &j->err);
		if (r == 0 && !done)
			r = wsync_error_set(&j->err, -EINVAL, "%s: no FILE_END record",
					    wsync_apply_piece_file(*j->piece)->path);
		if (r < 0) {
			j->verify_failed = r == -EINVAL;
			return r;
		}
		wsync_apply_piece_free(*j->piece);
		*j->piece = NULL;
	}
	if (from < end) {
		/* the files after them, read where they lie in the object: a
		 * view of its reader, nothing copied out */
		struct wsync_delta_reader rest;
		bool *keep = calloc(w->n_files + 1, sizeof(*keep));

		if (!keep)
			return wsync_error_set(&j->err, -ENOMEM, "out of memory");
		for (size_t i = 0; i < w->n_files; i++)
			keep[i] = w->files[i].record_offset >= from &&
				  (!j->filter ||
				   wsync_file_filter_match(j->filter, w->files[i].file.path));
		r = wsync_delta_reader_view(w, keep, &rest);
		free(keep);
		if (r < 0)
			return wsync_error_set(&j->err, r, "out of memory");
		r = sub_space_check(run->dir, rest.write_bytes, "the files built ahead", &j->err);
		if (r == 0 && rest.n_files)
			r = wsync_apply_stage(&rest, run->dir, ao, j->staged, &j->stats, &j->err);
		wsync_delta_view_free(&rest);
		if (r == -EINVAL)
			j->verify_failed = true;
		if (r < 0)
			return r;
	}
	r = check_staged(j, d);
	if (r < 0) {
		j->verify_failed = true;
		return r;
	}
	j->stats.files = d->n_files;
	j->stats.written = j->stats.kept = j->stats.deleted = 0;
	for (size_t i = 0; i < d->n_files; i++) {
		enum wsync_delta_op op = d->files[i].file.op;

		j->stats.written += op == WSYNC_DELTA_WRITE;
		j->stats.kept += op == WSYNC_DELTA_KEEP;
		j->stats.deleted += op == WSYNC_DELTA_DELETE;
	}
	return wsync_apply_staged_commit(*j->staged, &j->err);
}

/* 5. and the new state's file list. */
static int check_result(struct sub_apply_job *j, int root)
{
	const struct wsync_manifest *m = j->m;
	struct sub_local *s = &j->next;

	s->files = calloc(m->n_files + 1, sizeof(*s->files));
	if (!s->files)
		return wsync_error_set(&j->err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < m->n_files; i++) {
		const struct wsync_manifest_file *f = &m->files[i];
		struct stat st;
		int r = sub_stat_rel(root, f->path, &st);

		if (r < 0)
			return wsync_error_set(&j->err, -EINVAL,
				"after applying version %llu: %s: %s",
				(unsigned long long)m->version, f->path, strerror(-r));
		if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size)
			return wsync_error_set(&j->err, -EINVAL,
				"after applying version %llu: %s is not a file of %llu bytes",
				(unsigned long long)m->version, f->path,
				(unsigned long long)f->size);
		s->files[i].path = strdup(f->path);
		if (!s->files[i].path)
			return wsync_error_set(&j->err, -ENOMEM, "out of memory");
		s->n_files++;
		s->files[i].size = f->size;
		s->files[i].hash = f->hash;
		s->files[i].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 +
				       st.st_mtim.tv_nsec;
	}
	s->version = m->version;
	s->step = m->step;
	s->manifest_hash = j->manifest_hash;
	s->applied = (int64_t)time(NULL);
	s->floor = j->prev ? sub_local_floor(j->prev) : 0;	/* kept through a rebuild */
	/* accepted under this key: the trust epoch it starts or continues */
	snprintf(s->key_id, sizeof(s->key_id), "%s", j->key_id ? j->key_id : "");
	if (sub_local_set_filter(s, j->include, j->exclude) < 0)
		return wsync_error_set(&j->err, -ENOMEM, "out of memory");
	return 0;
}

/* A staged plan's steps are built where no reader looks -- anything
 * else is served as it is renamed in. */
static bool staged_inplace(const struct sub_apply_job *j)
{
	return j->stage && !j->symlink_layout;
}

/*
 * A staged plan (layout = inplace): its directory, target_dir/.wsync/
 * rebuild, made afresh by the first step (what a plan cut short left is
 * removed), opened by the others -- through .wsync's descriptor
 * (sub_meta_open: our own directory, not a link) without following a
 * link -- and named for wsync_apply by that descriptor (/proc/self/fd/N),
 * so that a .wsync renamed or swapped for a link meanwhile is never
 * written through.  Inside target_dir, so on its file system: the last
 * step renames the files in.
 */
static int stage_open(struct sub_apply_job *j, struct step_run *run)
{
	int r = 0;

	run->meta = sub_meta_open(j->target_dir, true, NULL, &j->err);
	if (run->meta < 0)
		return run->meta;
	if (j->stage_first) {
		r = wsync_rm_rf_at(run->meta, SUB_STAGE_DIR);
		if (r == 0 && mkdirat(run->meta, SUB_STAGE_DIR, 0700) < 0)
			r = -errno;
		if (r == 0)
			r = wsync_fsync(run->meta);
		if (r < 0)
			return wsync_error_set(&j->err, r, "%s/" SUB_META_DIR "/" SUB_STAGE_DIR
					       ": %s", j->target_dir, strerror(-r));
	}
	run->stage_fd = openat(run->meta, SUB_STAGE_DIR,
			       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (run->stage_fd < 0)
		return wsync_error_set(&j->err, -errno, "%s/" SUB_META_DIR "/" SUB_STAGE_DIR
				       ": %s%s", j->target_dir, strerror(errno),
				       j->stage_first ? "" : " (the plan's steps before "
				       "were built there)");
	(void)snprintf(run->stage_path, sizeof(run->stage_path), "/proc/self/fd/%d",
		       run->stage_fd);
	run->dir = run->stage_path;
	return 0;
}

/* A directory on the way of a file moved in, made (and its entry made
 * durable) where missing. */
static int make_dir(void *arg, int dfd, const char *comp, const char *rel, size_t len)
{
	(void)arg;
	(void)rel;
	(void)len;
	if (mkdirat(dfd, comp, 0755) < 0)
		return errno == EEXIST ? 0 : -errno;
	return wsync_fsync(dfd);
}

/*
 * 4'. A staged plan's last step (layout = inplace): every file of the
 * version, built and verified in the staging directory, renamed into
 * target_dir, each one's directory fsynced -- all the paths checked
 * first (no symbolic link on the way or at the end, no directory where a
 * file goes), so that a refusal leaves the target as it was -- then what
 * the target's version had and this one has not deleted, as an anchor
 * does.  A crash in between leaves each file old or new, as an apply's
 * renames do; state.json still names the old version.
 */
static int move_in(struct sub_apply_job *j, struct step_run *run, int troot)
{
	const struct wsync_manifest *m = j->m;

	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < m->n_files; i++) {
			const char *path = m->files[i].path, *name, *sname;
			struct stat st;
			int dfd, sfd, r = 0;

			dfd = wsync_open_parent(troot, path, &name, NULL, pass ? make_dir : NULL,
						NULL);
			if (pass == 0 && dfd == -ENOENT)
				continue;	/* made in the second pass */
			if (dfd == -ELOOP)
				return wsync_error_set(&j->err, -EINVAL, "%s: a symbolic link on "
						       "the path (refused: nothing is written "
						       "outside the target)", path);
			if (dfd < 0)
				return wsync_error_set(&j->err, dfd, "%s: %s", path,
						       strerror(-dfd));
			if (pass == 0) {
				if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
				    !S_ISREG(st.st_mode))
					r = wsync_error_set(&j->err, -EINVAL, "%s: %s (refused: "
							    "nothing is written outside the "
							    "target)", path,
							    S_ISLNK(st.st_mode) ?
							    "a symbolic link on the path" :
							    "not a file in the target");
				(void)close(dfd);
				if (r < 0)
					return r;
				continue;
			}
			sfd = sub_open_parent(run->root, path, &sname);
			r = sfd;
			if (sfd >= 0)
				r = renameat(sfd, sname, dfd, name) < 0 ? -errno : 0;
			if (r == 0)
				r = wsync_fsync(dfd);
			if (sfd >= 0)
				(void)close(sfd);
			(void)close(dfd);
			if (r < 0)
				return wsync_error_set(&j->err, r, "%s: moving it in from the "
						       "staging directory: %s", path,
						       strerror(-r));
		}
	return delete_dropped(j, troot, run->mf);
}

/*
 * 1. Verify the object: open it and check it against what the signed
 * manifest says -- the SHA-256 of the whole, of each chunk (an object of
 * parts), or of each piece fetched by the index -- cut a partial
 * subscriber's files out of a whole object, and open it as a delta.
 * The object was checked against its manifest's size and xxh3 when it
 * came, and wsync_apply checks each segment as it reads it; the SHA-256
 * is what binds it to a signed manifest (XXH3 is no defence against a
 * bucket writer who can forge one).  0, or a negative errno with j->err
 * set (and j->verify_failed when the object is at fault).
 */
static int verify_object(struct sub_apply_job *j, struct step_run *run)
{
	int r;

	run->fd = open(j->object_path, (j->filter ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (run->fd < 0)
		return wsync_error_set(&j->err, -errno, "%s: %s", j->object_path,
				       strerror(errno));
	if (j->filter && j->sel) {
		uint64_t len = 0;

		r = check_pieces(j, run->fd, &len);
		if (r == 0) {
			/* ranges whose bytes are not whole FILE and SEGMENT
			 * records: the index lies about the object */
			r = wsync_delta_end_partial(run->fd, len, &j->err);
			if (r == -EINVAL)
				j->verify_failed = true;
		}
		if (r < 0)
			return r;
	} else if (j->obj && j->obj->has_sha256 && !(j->obj->n_chunks && j->checked_upto)) {
		uint8_t got[WSYNC_SHA256_LEN];

		r = wsync_sha256_fd(run->fd, j->object_path, got, &j->err);
		if (r == 0 && memcmp(got, j->obj->sha256, sizeof(got)) != 0) {
			r = wsync_error_set(&j->err, -EINVAL, "its SHA-256 is not the manifest's");
			j->verify_failed = true;
		}
		if (r < 0)
			return r;
	} else if (j->obj && j->obj->n_chunks) {
		/* an object of parts (BUCKET.md §7): no hash of the whole,
		 * each chunk's SHA-256 binds it; an object fetched ahead in
		 * part: its chunks' SHA-256 bind it as the whole's does (they
		 * add up to it, the manifest checks), and those that came
		 * ahead were checked as they came */
		r = check_chunks_sha256(j, run->fd);
		if (r < 0)
			return r;
	}
	if (j->filter && !j->sel) {	/* a whole object: keep the files taken */
		r = cut_files(j, &run->fd, &run->whole_fd, j->staged ? &run->whole : NULL);
		if (r < 0)
			return r;
	}
	r = wsync_delta_reader_open_fd_as(run->fd, open_flags(j), &run->d, &j->err);
	if (r == -EINVAL)
		j->verify_failed = true;
	if (r == 0 && j->filter && j->sel)
		r = check_ranges_hold(j, run->d);
	return r;
}

/*
 * 2. Apply: into target_dir, or (symlink layout) a version directory made
 * for it; the delta checked against the manifest and the target's paths
 * against symbolic links first, the room for what it writes checked, then
 * wsync_apply (or the files built ahead renamed in).  A delta refused on
 * the data asks whether the target itself was damaged.  0, or a negative
 * errno with j->err set.
 */
static int apply_step(struct sub_apply_job *j, struct step_run *run)
{
	struct wsync_apply_opts ao = { .threads = j->threads,
				       .memory_limit = j->memory_limit,
				       .cached_io = j->cached_io };
	struct wsync_delta_reader *d = run->d;
	int r;

	if (staged_inplace(j)) {
		r = stage_open(j, run);
		if (r < 0)
			return r;
	} else if (j->symlink_layout && j->stage && !j->stage_first) {
		/* a staged plan: each step in place in the directory its
		 * first step made, the link not flipped to it yet */
		run->build = strdup(j->stage_build);
		if (!run->build)
			return wsync_error_set(&j->err, -ENOMEM, "out of memory");
		run->built = true;
		run->dir = run->build;
	} else if (j->symlink_layout && j->ahead_dir) {
		/* built ahead: the version's directory is there, its temps in
		 * it, the link not flipped to it yet */
		run->build = strdup(j->ahead_dir);
		if (!run->build)
			return wsync_error_set(&j->err, -ENOMEM, "out of memory");
		run->built = true;
		run->dir = run->build;
	} else if (j->symlink_layout) {
		/* a partial subscriber's version carries the files it does not
		 * take along, an anchor too */
		r = sub_layout_begin(j->target_dir, j->version_dir, !j->is_anchor || j->filter,
				     &run->build, &j->err);
		if (r < 0)
			return r;
		run->built = true;
		run->dir = run->build;
	}
	if (j->pause_ms)	/* tests: what readers see meanwhile (test_hooks.h) */
		(void)usleep((useconds_t)j->pause_ms * 1000);
	run->mf = sub_sorted_files(j->m);
	run->root = open(run->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!run->mf || run->root < 0)
		return !run->mf ? wsync_error_set(&j->err, -ENOMEM, "out of memory") :
				  wsync_error_set(&j->err, -errno, "%s: %s", run->dir,
						  strerror(errno));
	r = check_delta_matches(j, d, run->mf);
	if (r == 0)
		r = check_symlinks(j, run->root, d, run->mf);
	if (r == -EINVAL)
		j->verify_failed = true;
	if (r < 0)
		return r;

	if (j->staged) {
		double t0 = wsync_monotonic_seconds();

		r = apply_staged(j, run, &ao);
		j->stats.seconds = wsync_monotonic_seconds() - t0;
		goto applied;
	}
	{
		uint64_t need = 0;
		char what[64];

		for (size_t i = 0; i < d->n_files; i++)
			if (d->files[i].file.op == WSYNC_DELTA_WRITE)
				need += d->files[i].file.target_size;
		snprintf(what, sizeof(what), "version %llu", (unsigned long long)j->m->version);
		r = sub_space_check(run->dir, need, what, &j->err);
		if (r < 0)
			return r;
	}
	if (j->is_anchor) {
		ao.out_dir = run->dir;
		r = wsync_apply(d, j->empty_dir, &ao, &j->stats, &j->err);
	} else {
		r = wsync_apply(d, run->dir, &ao, &j->stats, &j->err);
		/* Refused: the delta's fault or the target's?  Only damage to
		 * the target justifies rebuilding it from an older anchor (which
		 * serves older versions on the way); a bad delta leaves the
		 * target alone until the bucket has something better. */
		if (r == -EINVAL && j->prev && j->prev->version > 0 && !j->stage) {
			char why[512];

			j->local_damaged = sub_local_full_check(run->dir, j->prev, why,
								sizeof(why)) != 0;
			if (j->local_damaged)
				wsync_error_prefix(&j->err, "the target was damaged (%s)", why);
			else	/* the files are those applied: the delta is
				 * not from them (another history) */
				j->base_mismatch = true;
		}
	}
applied:
	if (r == -EINVAL)
		j->verify_failed = true;
	return r;
}

/*
 * 3. Finish the step: an anchor's files the version no longer has
 * deleted, the result checked against the manifest, state.json saved
 * (durably, after the data it describes), and with the symlink layout the
 * link flipped to the new version and old versions pruned.  0, or a
 * negative errno with j->err set.
 */
static int finish_step(struct sub_apply_job *j, struct step_run *run)
{
	int r = 0, troot = -1;

	/* a fresh version dir, or staging dir, has nothing to drop */
	if (j->is_anchor && !staged_inplace(j) && (!j->symlink_layout || j->filter))
		r = delete_dropped(j, run->root, run->mf);
	if (r == 0 && j->stage && !j->stage_last) {
		/* a staged plan's step before the last: checked, not shown */
		r = check_result(j, run->root);
		if (r == -EINVAL)
			j->verify_failed = true;
		if (r == 0 && j->symlink_layout) {
			if (j->stage_first) {
				j->stage_build_out = run->build;	/* the next steps' */
				run->build = NULL;
			}
			run->built = false;
		}
		return r;
	}
	if (r == 0 && staged_inplace(j)) {
		troot = open(j->target_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		r = troot < 0 ? wsync_error_set(&j->err, -errno, "%s: %s", j->target_dir,
						strerror(errno)) : move_in(j, run, troot);
		if (r == 0)
			r = check_result(j, troot);
		if (troot >= 0)
			(void)close(troot);
	} else if (r == 0) {
		r = check_result(j, run->root);
	}
	if (r == -EINVAL)
		j->verify_failed = true;
	if (r == 0)
		r = sub_state_save(staged_inplace(j) ? j->target_dir : run->dir, &j->next,
				   &j->err);
	if (r == 0 && staged_inplace(j))
		(void)wsync_rm_rf_at(run->meta, SUB_STAGE_DIR);	/* emptied by the moves */
	if (r == 0 && j->symlink_layout) {
		r = sub_layout_commit(j->target_dir, run->build, j->version_dir, &j->err);
		if (r == 0) {
			run->built = false;	/* it is the current version now */
			(void)sub_layout_prune(j->target_dir, j->m->version);
		}
	}
	return r;
}

void sub_apply_work(void *data)
{
	struct sub_apply_job *j = data;
	struct step_run run = { .fd = -1, .root = -1, .dir = j->target_dir, .meta = -1,
				.stage_fd = -1, .whole_fd = -1 };
	int r;

	wsync_error_clear(&j->err);
	j->verify_failed = false;
	j->local_damaged = false;
	j->base_mismatch = false;
	if (!j->stage && !j->symlink_layout)
		(void)sub_stage_remove(j->target_dir);	/* a staged plan cut short */
	r = verify_object(j, &run);
	if (r == 0)
		r = apply_step(j, &run);
	if (r == 0)
		r = finish_step(j, &run);
	if (run.built && r < 0)
		(void)wsync_rm_rf(run.build);	/* the link still names the old version */
	if (r < 0 && run.meta >= 0 && staged_inplace(j))
		(void)wsync_rm_rf_at(run.meta, SUB_STAGE_DIR);	/* target_dir untouched */
	free(run.build);
	if (r < 0)
		sub_local_free(&j->next);
	j->r = r;
	wsync_delta_reader_free(run.d);
	wsync_delta_reader_free(run.whole);
	if (run.whole_fd >= 0)
		(void)close(run.whole_fd);
	free(run.mf);
	if (run.root >= 0)
		(void)close(run.root);
	if (run.stage_fd >= 0)
		(void)close(run.stage_fd);
	if (run.meta >= 0)
		(void)close(run.meta);
	if (run.fd >= 0)
		(void)close(run.fd);
	/* The download has served its purpose (or failed it): never apply it twice. */
	(void)unlink(j->object_path);
}
