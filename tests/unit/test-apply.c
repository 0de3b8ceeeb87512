/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-apply: applying is all or nothing where the command line cannot
 * easily reach -- a delta whose segments decode but whose result fails the
 * target hash, one whose segment reads outside its base, a later file
 * failing after earlier ones were built, new directories, a file that is
 * also a directory of another -- each leaves the target directory exactly
 * as it was: no file replaced, no temp file, no directory created.  And a
 * good delta built the same way applies.
 *
 * Stage then commit (wsync_apply_stage): deltas of disjoint parts of one
 * version, made by wsync_diff, staged one after another and committed
 * together give the version; dropped instead, they leave the target as it
 * was; a stage that fails or repeats a path takes back only its own
 * temps and directories.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apply.h"
#include "buf.h"
#include "delta.h"
#include "diff.h"
#include "hash.h"
#include "segment.h"
#include "tap.h"

static char root[64];

static void write_file(const char *dir, const char *name, const char *content)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (f) {
		fputs(content, f);
		fclose(f);
	}
}

/* "name=content;" for every entry under dir, sorted, recursively. */
static void listing(const char *dir, const char *prefix, char *out, size_t len)
{
	struct dirent **names;
	int n = scandir(dir, &names, NULL, alphasort);

	for (int i = 0; i < n; i++) {
		const char *nm = names[i]->d_name;
		char path[512], rel[512], buf[256] = "";
		struct stat st;

		if (strcmp(nm, ".") && strcmp(nm, "..")) {
			snprintf(path, sizeof(path), "%s/%s", dir, nm);
			snprintf(rel, sizeof(rel), "%s%s", prefix, nm);
			if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
				size_t l = strlen(out);

				snprintf(out + l, len - l, "%s/;", rel);
				strcat(rel, "/");
				listing(path, rel, out, len);
			} else {
				FILE *f = fopen(path, "r");
				size_t l = strlen(out), got = 0;

				if (f) {
					got = fread(buf, 1, sizeof(buf) - 1, f);
					fclose(f);
				}
				buf[got] = '\0';
				snprintf(out + l, len - l, "%s=%s;", rel, buf);
			}
		}
		free(names[i]);
	}
	free(names);
}

static void make_root(void)
{
	snprintf(root, sizeof(root), "/tmp/test-apply.XXXXXX");
	if (!mkdtemp(root))
		root[0] = '\0';
	write_file(root, "a.txt", "alpha");
	write_file(root, "b.txt", "bravo");
}

static void remove_tree(const char *dir)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", dir);
}

/* One WRITE file: the new content as one LITERAL segment. */
struct fdesc {
	const char *path;
	const char *base;	/* NULL: a new file */
	const char *target;
	bool forge_hash;	/* lie about the target hash */
	bool bad_base_offset;	/* a COPY piece outside the base */
	bool copy;		/* target == base, sent as one COPY piece */
	size_t copy_prefix;	/* the target's first bytes COPY from the base's,
				 * the rest LITERAL (one segment) */
	unsigned segments;	/* LITERAL segments the target is cut in (0: 1) */
};

static unsigned apply_threads = 2;

static int build_delta(const struct fdesc *files, size_t n, int fd)
{
	struct wsync_delta_writer *w = NULL;
	struct wsync_error err = { 0 };
	struct wsync_buf seg = { 0 };
	int r = wsync_delta_writer_new(fd, &w, &err);

	for (size_t i = 0; r == 0 && i < n; i++) {
		const struct fdesc *d = &files[i];
		struct wsync_delta_file_end fe = { 0 };
		size_t tl = strlen(d->target);
		unsigned nseg = d->segments ? d->segments : 1;
		struct wsync_delta_file f = { .path = (char *)d->path,
					      .op = WSYNC_DELTA_WRITE, .mode = 0640,
					      .target_size = tl, .n_segments = nseg };
		struct wsync_piece_in in = { .method = WSYNC_PIECE_LITERAL,
					     .target = (const uint8_t *)d->target,
					     .len = tl };

		if (d->base) {
			f.flags = WSYNC_DELTA_FILE_HAS_BASE;
			f.base_size = strlen(d->base);
			wsync_hash_mem(d->base, f.base_size, &f.base_hash);
		}
		wsync_hash_mem(d->target, tl, &f.target_hash);
		if (d->forge_hash)
			f.target_hash.b[0] ^= 1;
		if (d->copy) {
			in.method = WSYNC_PIECE_COPY;
			in.base = (const uint8_t *)d->base;
		}
		if (d->bad_base_offset) {
			in.method = WSYNC_PIECE_COPY;
			in.base = (const uint8_t *)d->target;
			in.base_offset = 1000;
		}
		if (d->copy_prefix) {
			struct wsync_piece_in two[2] = {
				{ .method = WSYNC_PIECE_COPY, .target = in.target,
				  .base = (const uint8_t *)d->base, .len = d->copy_prefix },
				{ .method = WSYNC_PIECE_LITERAL,
				  .target = in.target + d->copy_prefix,
				  .len = tl - d->copy_prefix },
			};

			wsync_buf_reset(&seg);
			r = wsync_segment_encode(two, 2, 0, NULL, &seg, NULL, &err);
			if (r == 0)
				r = wsync_delta_writer_file(w, &f, &err);
			if (r == 0)
				r = wsync_delta_writer_segment(w, seg.data, seg.len, &err);
			goto end;
		}
		if (nseg == 1) {
			wsync_buf_reset(&seg);
			r = wsync_segment_encode(&in, 1, 0, NULL, &seg, NULL, &err);
			if (r == 0)
				r = wsync_delta_writer_file(w, &f, &err);
			if (r == 0)
				r = wsync_delta_writer_segment(w, seg.data, seg.len, &err);
			goto end;
		}
		/* several LITERAL segments tiling the target */
		r = wsync_delta_writer_file(w, &f, &err);
		for (unsigned k = 0; r == 0 && k < nseg; k++) {
			size_t from = tl * k / nseg, to = tl * (k + 1) / nseg;
			struct wsync_piece_in part = { .method = WSYNC_PIECE_LITERAL,
						       .target = (const uint8_t *)d->target + from,
						       .len = to - from };

			wsync_buf_reset(&seg);
			r = wsync_segment_encode(&part, 1, from, NULL, &seg, NULL, &err);
			if (r == 0)
				r = wsync_delta_writer_segment(w, seg.data, seg.len, &err);
		}
end:
		fe.base_hash = f.base_hash;
		fe.target_hash = f.target_hash;
		if (r == 0)
			r = wsync_delta_writer_file_end(w, &fe, &err);
	}
	if (r == 0)
		r = wsync_delta_writer_finish(w, &err);
	if (r < 0)
		printf("# build_delta: %s\n", wsync_error_str(&err));
	wsync_delta_writer_free(w);
	wsync_buf_free(&seg);
	return r;
}

/* Apply files to the sample root; returns the result, message in err. */
static int apply(const struct fdesc *files, size_t n, const char *out_dir,
		 struct wsync_error *err)
{
	struct wsync_delta_reader *d = NULL;
	struct wsync_apply_opts opts = { .threads = apply_threads, .out_dir = out_dir };
	int fd = memfd_create("delta", MFD_CLOEXEC), r;

	wsync_error_clear(err);
	r = build_delta(files, n, fd);
	if (r == 0)
		r = wsync_delta_reader_open_fd(fd, &d, err);
	if (r == 0)
		r = wsync_apply(d, root, &opts, NULL, err);
	wsync_delta_reader_free(d);
	close(fd);
	return r;
}

/* Apply and expect -EINVAL with needle and the root exactly as before. */
static void expect_untouched(const struct fdesc *files, size_t n, const char *needle)
{
	char before[4096] = "", after[4096] = "";
	struct wsync_error err;

	make_root();
	listing(root, "", before, sizeof(before));
	CHECK(apply(files, n, NULL, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, needle);
	listing(root, "", after, sizeof(after));
	CHECK_STR(after, before);
	remove_tree(root);
}

static void test_good_delta_applies(void)
{
	static const struct fdesc files[] = {
		{ .path = "a.txt", .base = "alpha", .target = "ALPHA!" },
		{ .path = "new/deep/c.txt", .base = NULL, .target = "charlie" },
	};
	char after[4096] = "";
	struct wsync_error err;
	struct stat st;
	char path[128];

	make_root();
	CHECK(apply(files, 2, NULL, &err) == 0);
	listing(root, "", after, sizeof(after));
	CHECK_STR(after, "a.txt=ALPHA!;b.txt=bravo;new/;new/deep/;new/deep/c.txt=charlie;");
	snprintf(path, sizeof(path), "%s/a.txt", root);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0640);
	remove_tree(root);
}

static void test_forged_target_hash(void)
{
	static const struct fdesc files[] = {
		{ .path = "a.txt", .base = "alpha", .target = "ALPHA!", .forge_hash = true },
	};

	expect_untouched(files, 1, "does not match the delta's target");
}

/* The first file is built and verified, the second fails: the first must
 * not have been renamed in, and the new directories must be gone. */
static void test_later_file_fails(void)
{
	static const struct fdesc files[] = {
		{ .path = "a.txt", .base = "alpha", .target = "ALPHA!" },
		{ .path = "b.txt", .base = "bravo", .target = "BRAVO!", .forge_hash = true },
		{ .path = "c/d/e.txt", .base = NULL, .target = "echo" },
	};
	static const struct fdesc files2[] = {
		{ .path = "a.txt", .base = "alpha", .target = "ALPHA!" },
		{ .path = "c/d/e.txt", .base = NULL, .target = "echo", .forge_hash = true },
	};

	expect_untouched(files, 3, "b.txt: the rebuilt file does not match");
	expect_untouched(files2, 2, "c/d/e.txt: the rebuilt file does not match");
}

static void test_segment_outside_base(void)
{
	static const struct fdesc files[] = {
		{ .path = "a.txt", .base = "alpha", .target = "ALPHA!", .bad_base_offset = true },
	};

	expect_untouched(files, 1, "outside the base");
}

static void test_wrong_base(void)
{
	static const struct fdesc files[] = {
		{ .path = "a.txt", .base = "alpha", .target = "ALPHA!" },
		{ .path = "b.txt", .base = "BRAVO", .target = "bravo!" },
	};
	static const struct fdesc exists[] = {
		{ .path = "b.txt", .base = NULL, .target = "new" },
	};
	static const struct fdesc missing[] = {
		{ .path = "zulu.txt", .base = "zulu", .target = "ZULU" },
	};

	/* a base of the right size that decodes into the wrong target: the
	 * base is what is reported (hashed when the result does not match) */
	static const struct fdesc copied[] = {
		{ .path = "a.txt", .base = "alpha", .target = "alpha", .copy = true },
		{ .path = "b.txt", .base = "BRAVO", .target = "BRAVO", .copy = true },
	};

	expect_untouched(files, 2, "b.txt: base does not match the delta (expected size 5");
	expect_untouched(copied, 2, "b.txt: base does not match the delta (expected size 5 "
			 "xxh128");
	expect_untouched(exists, 1, "b.txt: base does not match the delta (the delta creates");
	expect_untouched(missing, 1, "zulu.txt: base does not match the delta (expected size 4");
}

/*
 * A rebuilt file's base is vouched for by the result only when the pieces
 * read all of it: damage where no piece reads still fails the apply, by
 * the base's own hash, though the result would match.
 */
static void test_base_partly_read(void)
{
	static const struct fdesc files[] = {
		{ .path = "b.txt", .base = "bravo", .target = "braXYZ", .copy_prefix = 3 },
	};
	char before[4096] = "", after[4096] = "";
	struct wsync_error err;

	make_root();
	CHECK(apply(files, 1, NULL, &err) == 0);
	listing(root, "", after, sizeof(after));
	CHECK_STR(after, "a.txt=alpha;b.txt=braXYZ;");
	remove_tree(root);

	make_root();
	write_file(root, "b.txt", "braWO");	/* only bytes 3-4 differ */
	listing(root, "", before, sizeof(before));
	after[0] = '\0';
	CHECK(apply(files, 1, NULL, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "b.txt: base does not match the delta (expected size 5");
	listing(root, "", after, sizeof(after));
	CHECK_STR(after, before);
	remove_tree(root);
}

static void test_file_and_directory_of_same_name(void)
{
	static const struct fdesc files[] = {
		{ .path = "x", .base = NULL, .target = "file" },
		{ .path = "x/y", .base = NULL, .target = "under it" },
	};

	expect_untouched(files, 2, "both as a file and as a directory");
}

/* -o into a directory that does not exist yet: created on success,
 * removed again on failure; the target is never touched. */
static void test_out_dir(void)
{
	static const struct fdesc good[] = { { .path = "a.txt", .base = "alpha", .target = "ALPHA!" } };
	static const struct fdesc bad[] = { { .path = "a.txt", .base = "alpha", .target = "ALPHA!", .forge_hash = true } };
	char before[4096] = "", after[4096] = "", out[128], got[4096] = "";
	struct wsync_error err;
	struct stat st;

	make_root();
	listing(root, "", before, sizeof(before));
	snprintf(out, sizeof(out), "%s.out", root);
	CHECK(apply(bad, 1, out, &err) == -EINVAL);
	CHECK(stat(out, &st) < 0 && errno == ENOENT);
	CHECK(apply(good, 1, out, &err) == 0);
	listing(out, "", got, sizeof(got));
	CHECK_STR(got, "a.txt=ALPHA!;");
	listing(root, "", after, sizeof(after));
	CHECK_STR(after, before);
	remove_tree(out);
	remove_tree(root);
}

/*
 * Many files of several segments, on 1 to 5 workers (workers each take a
 * file of their own, then join the one with the most segments left): the
 * same result every time; a failing file in the middle fails the apply
 * with its own error and nothing renamed; with two failing files the
 * first in delta order is the one reported, whatever the worker count.
 */
static void test_many_files_on_workers(void)
{
	static char texts[7][200];
	struct fdesc files[7], bad[7];
	char want[4096] = "", got[4096] = "";
	struct wsync_error err;

	for (int i = 0; i < 7; i++) {
		static char paths[7][32];

		for (int k = 0; k < 150 + 7 * i; k++)
			texts[i][k] = (char)('a' + (i * 31 + k * 7) % 26);
		snprintf(paths[i], sizeof(paths[i]), i % 2 ? "f%d/x.txt" : "f%d.txt", i);
		files[i] = (struct fdesc){ .path = paths[i], .base = NULL, .target = texts[i],
					   .segments = 1 + (unsigned)(i * 3) % 5 };
	}
	files[0].base = "alpha";	/* a.txt replaced too */
	files[0].path = "a.txt";
	for (unsigned t = 1; t <= 5; t++) {
		apply_threads = t;
		make_root();
		CHECK(apply(files, 7, NULL, &err) == 0);
		got[0] = '\0';
		listing(root, "", got, sizeof(got));
		if (t == 1)
			memcpy(want, got, sizeof(want));
		CHECK_STR(got, want);
		CHECK_CONTAINS(got, texts[6]);
		remove_tree(root);

		memcpy(bad, files, sizeof(bad));
		bad[4].forge_hash = true;
		expect_untouched(bad, 7, "f4.txt: the rebuilt file does not match");
		bad[2].forge_hash = true;
		expect_untouched(bad, 7, "f2.txt: the rebuilt file does not match");
	}
	apply_threads = 2;
}

/* ---- stage then commit ---- */

/* Write rel under dir, making its directories. */
static void put_file(const char *dir, const char *rel, const char *content)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	for (char *s = strchr(path + strlen(dir) + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		(void)mkdir(path, 0755);
		*s = '/';
	}
	write_file(dir, rel, content);
}

/* Make dir holding the files of spec ("path=content;...") whose path is
 * in subset ("path;path;"; NULL: all of them). */
static void make_tree(const char *dir, const char *spec, const char *subset)
{
	char copy[1024], among[1024], *save = NULL;

	(void)mkdir(dir, 0755);
	snprintf(copy, sizeof(copy), "%s", spec);
	snprintf(among, sizeof(among), ";%s", subset ? subset : "");
	for (char *e = strtok_r(copy, ";", &save); e; e = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(e, '='), want[256];

		*eq = '\0';
		snprintf(want, sizeof(want), ";%s;", e);
		if (!subset || strstr(among, want))
			put_file(dir, e, eq + 1);
	}
}

/* One version cut in two parts.  Part 1: a.txt rebuilt, b.txt kept, a new
 * file in new directories; part 2: sub/c.txt rebuilt, gone/d.txt deleted
 * (and its directory with it). */
static const char old_spec[] = "a.txt=alpha;b.txt=bravo;gone/d.txt=delta;sub/c.txt=charlie;";
static const char new_spec[] = "a.txt=ALPHA!;b.txt=bravo;new/deep/e.txt=echo;sub/c.txt=CHARLIE;";
static const char part1[] = "a.txt;b.txt;new/deep/e.txt;";
static const char part2[] = "gone/d.txt;sub/c.txt;";

static char stage_root[64];

/* Under a fresh stage_root: old/ and new/ (the whole version), oldN/ and
 * newN/ (part N of each), and target/, a copy of old/. */
static void make_version(void)
{
	char dir[128];

	snprintf(stage_root, sizeof(stage_root), "/tmp/test-apply-stage.XXXXXX");
	if (!mkdtemp(stage_root))
		stage_root[0] = '\0';
	snprintf(dir, sizeof(dir), "%s/old", stage_root);
	make_tree(dir, old_spec, NULL);
	snprintf(dir, sizeof(dir), "%s/new", stage_root);
	make_tree(dir, new_spec, NULL);
	snprintf(dir, sizeof(dir), "%s/target", stage_root);
	make_tree(dir, old_spec, NULL);
	for (int k = 1; k <= 2; k++) {
		snprintf(dir, sizeof(dir), "%s/old%d", stage_root, k);
		make_tree(dir, old_spec, k == 1 ? part1 : part2);
		snprintf(dir, sizeof(dir), "%s/new%d", stage_root, k);
		make_tree(dir, new_spec, k == 1 ? part1 : part2);
	}
}

/* listing() of stage_root's sub into out (emptied first). */
static void list_sub(const char *sub, char *out, size_t len)
{
	char dir[128];

	snprintf(dir, sizeof(dir), "%s/%s", stage_root, sub);
	out[0] = '\0';
	listing(dir, "", out, len);
}

/* Stage the delta in fd (closed then) onto stage_root's target/, its
 * reader freed at once: the staged set must not need it.  r: how making
 * the delta went. */
static int stage_fd(int r, int fd, struct wsync_apply_staged **staged,
		    struct wsync_error *err)
{
	struct wsync_apply_opts opts = { .threads = apply_threads };
	struct wsync_delta_reader *d = NULL;
	char target[128];

	snprintf(target, sizeof(target), "%s/target", stage_root);
	if (r == 0)
		r = wsync_delta_reader_open_fd(fd, &d, err);
	if (r == 0)
		r = wsync_apply_stage(d, target, &opts, staged, NULL, err);
	wsync_delta_reader_free(d);
	close(fd);
	return r;
}

/* Stage the delta from stage_root's old to new (subdirectories), made by
 * wsync_diff; message in err. */
static int stage_diff(const char *old, const char *new, struct wsync_apply_staged **staged,
		      struct wsync_error *err)
{
	int fd = memfd_create("delta", MFD_CLOEXEC);
	char o[128], n[128];

	snprintf(o, sizeof(o), "%s/%s", stage_root, old);
	snprintf(n, sizeof(n), "%s/%s", stage_root, new);
	wsync_error_clear(err);
	return stage_fd(wsync_diff(o, n, fd, NULL, NULL, err), fd, staged, err);
}

/* How many entries of a listing are temps. */
static int temps_in(const char *list)
{
	int n = 0;

	for (const char *p = strstr(list, ".wsync-"); p; p = strstr(p + 1, ".wsync-"))
		n++;
	return n;
}

/* (a) Two deltas of disjoint parts of one version, staged one after the
 * other, then committed: the target is the new version, no temp left; on
 * one to three workers. */
static void test_stage_two_parts_then_commit(void)
{
	char want[4096], got[4096], staged[4096];
	struct wsync_apply_staged *s = NULL;
	struct wsync_error err;

	for (unsigned t = 1; t <= 3; t++) {
		apply_threads = t;
		make_version();
		CHECK(stage_diff("old1", "new1", &s, &err) == 0);
		CHECK(s != NULL);
		CHECK(stage_diff("old2", "new2", &s, &err) == 0);
		list_sub("target", staged, sizeof(staged));
		CHECK(temps_in(staged) == 3);	/* a.txt, e.txt, c.txt wait */
		CHECK_CONTAINS(staged, "gone/d.txt=delta;");
		CHECK(wsync_apply_staged_commit(s, &err) == 0);
		wsync_apply_staged_free(s);
		s = NULL;
		list_sub("new", want, sizeof(want));
		list_sub("target", got, sizeof(got));
		CHECK_STR(got, want);
		remove_tree(stage_root);
	}
	apply_threads = 2;
}

/* (a') One delta of the whole version, staged as two views of its reader
 * (wsync_delta_reader_view: part 1's files, then the others), the reader
 * freed only after: the same as one apply; an empty view stages nothing. */
static void test_stage_views_of_one_delta(void)
{
	char want[4096], got[4096], o[128], n[128], target[128], staged[4096];
	struct wsync_apply_opts opts = { .threads = 2 };
	struct wsync_delta_reader *d = NULL, v;
	struct wsync_apply_staged *s = NULL;
	struct wsync_error err = { 0 };
	int fd = memfd_create("delta", MFD_CLOEXEC);
	bool keep[16] = { false };
	size_t ones = 0;

	make_version();
	snprintf(o, sizeof(o), "%s/old", stage_root);
	snprintf(n, sizeof(n), "%s/new", stage_root);
	snprintf(target, sizeof(target), "%s/target", stage_root);
	CHECK(wsync_diff(o, n, fd, NULL, NULL, &err) == 0);
	CHECK(wsync_delta_reader_open_fd_as(fd, WSYNC_DELTA_SEGMENTS_LATER, &d, &err) == 0);
	CHECK(d && d->n_files <= 16);
	if (!d || d->n_files > 16)
		return;
	for (size_t i = 0; i < d->n_files; i++) {
		char want_path[300];

		snprintf(want_path, sizeof(want_path), ";%s;", d->files[i].file.path);
		keep[i] = strstr(";a.txt;b.txt;new/deep/e.txt;", want_path) != NULL;
		ones += keep[i];
	}
	CHECK(ones == 3);
	CHECK(wsync_delta_reader_view(d, keep, &v) == 0);
	CHECK(v.n_files == 3 && v.files[0].record_offset == d->files[0].record_offset);
	CHECK(wsync_apply_stage(&v, target, &opts, &s, NULL, &err) == 0);
	wsync_delta_view_free(&v);
	list_sub("target", staged, sizeof(staged));
	CHECK(temps_in(staged) == 2);	/* a.txt, e.txt */
	for (size_t i = 0; i < d->n_files; i++)
		keep[i] = !keep[i];
	CHECK(wsync_delta_reader_view(d, keep, &v) == 0);
	CHECK(v.n_files == d->n_files - 3);
	CHECK(wsync_apply_stage(&v, target, &opts, &s, NULL, &err) == 0);
	wsync_delta_view_free(&v);
	CHECK(v.files == NULL && v.n_files == 0);
	memset(keep, 0, sizeof(keep));
	CHECK(wsync_delta_reader_view(d, keep, &v) == 0 && v.n_files == 0);
	wsync_delta_view_free(&v);
	CHECK(wsync_apply_staged_commit(s, &err) == 0);
	wsync_apply_staged_free(s);
	wsync_delta_reader_free(d);
	close(fd);
	list_sub("new", want, sizeof(want));
	list_sub("target", got, sizeof(got));
	CHECK_STR(got, want);
	remove_tree(stage_root);
}

/* (b) Staged, then freed without a commit: the target is the old version,
 * no temp and no directory made for one left -- whichever stage made the
 * directories (the first makes the set, a later one is merged into it). */
static void test_stage_then_free(void)
{
	char want[4096], got[4096];
	struct wsync_error err;

	for (int first = 1; first <= 2; first++) {
		struct wsync_apply_staged *s = NULL;

		make_version();
		CHECK(stage_diff(first == 1 ? "old1" : "old2", first == 1 ? "new1" : "new2",
				 &s, &err) == 0);
		CHECK(stage_diff(first == 1 ? "old2" : "old1", first == 1 ? "new2" : "new1",
				 &s, &err) == 0);
		list_sub("target", got, sizeof(got));
		CHECK_CONTAINS(got, "new/deep/");
		wsync_apply_staged_free(s);
		list_sub("old", want, sizeof(want));
		list_sub("target", got, sizeof(got));
		CHECK_STR(got, want);
		remove_tree(stage_root);
	}
	wsync_apply_staged_free(NULL);
}

/* A stage that returned r was refused, -EINVAL with needle in err, and
 * left target/ as listed in before. */
static void expect_refused(int r, const struct wsync_error *err, const char *needle,
			   const char *before)
{
	char got[4096];

	CHECK(r == -EINVAL);
	CHECK_CONTAINS(err->msg, needle);
	list_sub("target", got, sizeof(got));
	CHECK_STR(got, before);
}

/* A fresh version (make_version) with part 1 staged into *s, and
 * target/ then listed into before. */
static void stage_part1(struct wsync_apply_staged **s, char *before, size_t len)
{
	struct wsync_error err;

	make_version();
	CHECK(stage_diff("old1", "new1", s, &err) == 0);
	list_sub("target", before, len);
}

/* (c) A path staged twice, or a file of one delta that is a directory in
 * another: -EINVAL before anything is written, and what was staged stays
 * and commits. */
static void test_stage_path_twice(void)
{
	char before[4096], got[4096], dir[128];
	struct wsync_apply_staged *s = NULL;
	struct wsync_error err;

	stage_part1(&s, before, sizeof(before));
	expect_refused(stage_diff("old1", "new1", &s, &err), &err, "a.txt: staged already",
		       before);

	/* "new" is a directory of part 1's new/deep/e.txt: a file here */
	snprintf(dir, sizeof(dir), "%s/empty", stage_root);
	make_tree(dir, "", NULL);
	snprintf(dir, sizeof(dir), "%s/clash", stage_root);
	make_tree(dir, "new=a file;", NULL);
	expect_refused(stage_diff("empty", "clash", &s, &err), &err,
		       "names new both as a file and as a directory (of new/deep/e.txt)",
		       before);

	CHECK(wsync_apply_staged_commit(s, &err) == 0);
	list_sub("target", got, sizeof(got));
	CHECK_STR(got, "a.txt=ALPHA!;b.txt=bravo;gone/;gone/d.txt=delta;new/;new/deep/;"
		  "new/deep/e.txt=echo;sub/;sub/c.txt=charlie;");
	/* committed: nothing more to stage or commit */
	CHECK(wsync_apply_staged_commit(s, &err) == -EINVAL);
	CHECK(stage_diff("old2", "new2", &s, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "committed already");
	wsync_apply_staged_free(s);
	remove_tree(stage_root);
}

/* Stage files (build_delta's) onto stage_root's target/. */
static int stage_built(const struct fdesc *files, size_t n, struct wsync_apply_staged **staged,
		       struct wsync_error *err)
{
	int fd = memfd_create("delta", MFD_CLOEXEC);

	wsync_error_clear(err);
	return stage_fd(build_delta(files, n, fd), fd, staged, err);
}

/* (d) A stage that fails -- a rebuilt file that does not match, after a
 * new file in new directories was built; a base that does not match --
 * removes its own temps and directories, and the earlier stage's stay
 * and commit. */
static void test_stage_failure_keeps_earlier(void)
{
	static const struct fdesc forged[] = {
		{ .path = "more/x/f.txt", .base = NULL, .target = "foxtrot" },
		{ .path = "sub/c.txt", .base = "charlie", .target = "CHARLIE", .forge_hash = true },
	};
	char before[4096], got[4096], dir[128];
	struct wsync_apply_staged *s = NULL;
	struct wsync_error err;

	stage_part1(&s, before, sizeof(before));
	expect_refused(stage_built(forged, 2, &s, &err), &err,
		       "sub/c.txt: the rebuilt file does not match", before);

	/* the target's sub/c.txt is not part 2's base */
	snprintf(dir, sizeof(dir), "%s/target", stage_root);
	write_file(dir, "sub/c.txt", "chArlie");
	list_sub("target", before, sizeof(before));
	expect_refused(stage_diff("old2", "new2", &s, &err), &err,
		       "sub/c.txt: base does not match the delta", before);
	CHECK(temps_in(before) == 2);	/* part 1's a.txt and e.txt */

	CHECK(wsync_apply_staged_commit(s, &err) == 0);
	wsync_apply_staged_free(s);
	list_sub("target", got, sizeof(got));
	CHECK_STR(got, "a.txt=ALPHA!;b.txt=bravo;gone/;gone/d.txt=delta;new/;new/deep/;"
		  "new/deep/e.txt=echo;sub/;sub/c.txt=chArlie;");
	remove_tree(stage_root);
}

/* (e) KEEP and DELETE records are staged and listed, in path order across
 * both deltas, with their op, size and hash; the commit removes the
 * deleted file and the directory it leaves empty. */
static void test_stage_lists_keep_and_delete(void)
{
	static const struct {
		const char *path;
		enum wsync_delta_op op;
		const char *content;	/* whose size and hash */
	} want[] = {
		{ "a.txt", WSYNC_DELTA_WRITE, "ALPHA!" },
		{ "b.txt", WSYNC_DELTA_KEEP, "bravo" },
		{ "gone/d.txt", WSYNC_DELTA_DELETE, "delta" },	/* the base's hash */
		{ "new/deep/e.txt", WSYNC_DELTA_WRITE, "echo" },
		{ "sub/c.txt", WSYNC_DELTA_WRITE, "CHARLIE" },
	};
	const struct wsync_apply_staged_file *f;
	struct wsync_apply_staged *s = NULL;
	struct wsync_error err;
	char got[4096];
	size_t n;

	make_version();
	/* part 2 first: the listing is sorted whatever the order of stages */
	CHECK(stage_diff("old2", "new2", &s, &err) == 0);
	CHECK(stage_diff("old1", "new1", &s, &err) == 0);
	f = wsync_apply_staged_files(s, &n);
	CHECK_EQ_U64(n, 5);
	for (size_t i = 0; i < n && i < 5; i++) {
		struct wsync_hash128 h;
		bool gone = want[i].op == WSYNC_DELTA_DELETE;

		wsync_hash_mem(want[i].content, strlen(want[i].content), &h);
		CHECK_STR(f[i].path, want[i].path);
		CHECK_EQ_U64(f[i].op, want[i].op);
		CHECK_EQ_U64(f[i].size, gone ? 0 : strlen(want[i].content));
		CHECK(wsync_hash_equal(&f[i].hash, &h));
	}
	CHECK(wsync_apply_staged_files(NULL, &n) == NULL && n == 0);
	CHECK(wsync_apply_staged_commit(s, &err) == 0);
	wsync_apply_staged_free(s);
	list_sub("target", got, sizeof(got));
	CHECK(strstr(got, "gone") == NULL);
	CHECK_STR(got, "a.txt=ALPHA!;b.txt=bravo;new/;new/deep/;new/deep/e.txt=echo;sub/;"
		  "sub/c.txt=CHARLIE;");
	remove_tree(stage_root);
}

/* Staging is in place, into one directory: an out_dir, a file target or
 * another directory than the first stage's is -EINVAL, nothing staged. */
static void test_stage_refuses_other_targets(void)
{
	struct wsync_apply_opts opts = { .threads = 1 };
	struct wsync_apply_staged *s = NULL;
	struct wsync_delta_reader *d = NULL;
	int fd = memfd_create("delta", MFD_CLOEXEC);
	char old[128], new[128], out[128];
	struct wsync_error err;

	make_version();
	snprintf(old, sizeof(old), "%s/old1", stage_root);
	snprintf(new, sizeof(new), "%s/new1", stage_root);
	snprintf(out, sizeof(out), "%s/out", stage_root);
	CHECK(wsync_diff(old, new, fd, NULL, NULL, &err) == 0);
	CHECK(wsync_delta_reader_open_fd(fd, &d, &err) == 0);
	opts.out_dir = out;
	CHECK(wsync_apply_stage(d, old, &opts, &s, NULL, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "in place only");
	opts.out_dir = NULL;
	snprintf(out, sizeof(out), "%s/old1/a.txt", stage_root);
	CHECK(wsync_apply_stage(d, out, &opts, &s, NULL, &err) == -EINVAL);
	CHECK(s == NULL);
	CHECK(stage_diff("old2", "new2", &s, &err) == 0);
	CHECK(wsync_apply_stage(d, old, &opts, &s, NULL, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "not the directory of the files staged before");
	wsync_apply_staged_free(s);
	wsync_delta_reader_free(d);
	close(fd);
	remove_tree(stage_root);
}

/*
 * A file built piece by piece (wsync_apply_piece_*), as a subscriber
 * building ahead does: each SEGMENT record found with
 * wsync_delta_segment_at decoded into the temp as it comes, nothing
 * replaced before the commit; at its FILE_END the temp is verified and
 * staged, and the commit gives the target.  Hostile cases each fail by
 * name and, freed, leave the target as it was without a temp: a segment
 * out of order, FILE_END before the last segment, a forged target hash,
 * a base that is not the delta's; and one dropped half built.
 */
enum piece_case { PC_GOOD, PC_SKIP, PC_EARLY, PC_FORGED, PC_WRONG_BASE, PC_DROP };

static int piecewise(enum piece_case c, char *during, size_t during_len,
		     struct wsync_error *err)
{
	static const struct fdesc files[] = {
		{ .path = "a.txt", .base = "alpha", .target = "ALPHA-ALPHA-ALPHA-ALPHA!",
		  .segments = 4 },
	};
	struct wsync_apply_opts opts = { .threads = 1 };
	struct wsync_delta_reader *d = NULL;
	struct wsync_apply_piecewise *pw = NULL;
	struct wsync_apply_staged *staged = NULL;
	struct wsync_delta_file f;
	struct wsync_delta_file_end fe;
	int fd = memfd_create("delta", MFD_CLOEXEC), r;
	uint64_t bytes = 0;

	wsync_error_clear(err);
	r = build_delta(files, 1, fd);
	if (r == 0)
		r = wsync_delta_reader_open_fd(fd, &d, err);
	if (r < 0)
		goto out;
	f = d->files[0].file;
	fe = (struct wsync_delta_file_end){ .base_hash = f.base_hash,
					    .target_hash = f.target_hash };
	/* what a version 4 FILE record holds */
	memset(&f.base_hash, 0, sizeof(f.base_hash));
	memset(&f.target_hash, 0, sizeof(f.target_hash));
	if (c == PC_FORGED)
		fe.target_hash.b[3] ^= 1;
	if (c == PC_WRONG_BASE)
		write_file(root, "a.txt", "alphx");
	r = wsync_apply_piece_begin(root, &f, fd, &opts, NULL, &pw, err);
	for (uint64_t k = 0; r == 0 && k < f.n_segments; k++) {
		const struct wsync_delta_segment *rs = &d->files[0].segments[k];
		struct wsync_delta_segment sg;

		if ((c == PC_SKIP && k == 1) || (c == PC_EARLY && k == 3))
			continue;
		if (c == PC_DROP && k == 2)
			goto out;	/* dropped half built: freed, not finished */
		r = wsync_delta_segment_at(fd, rs->payload_offset - WSYNC_DELTA_RECORD_HEADER_LEN,
					   rs->payload_len, &sg, err);
		if (r == 0)
			r = wsync_apply_piece_segment(pw, &sg, err);
	}
	if (r == 0 && c == PC_GOOD) {
		CHECK_EQ_U64(wsync_apply_piece_segments(pw, &bytes), 4);
		CHECK_EQ_U64(bytes, strlen(files[0].target));
		listing(root, "", during, during_len);
	}
	if (r == 0)
		r = wsync_apply_piece_finish(pw, &fe, &staged, NULL, err);
	if (r == 0)
		r = wsync_apply_staged_commit(staged, err);
out:
	wsync_apply_piece_free(pw);
	wsync_apply_staged_free(staged);
	wsync_delta_reader_free(d);
	close(fd);
	return r;
}

static void test_piecewise(void)
{
	static const struct { enum piece_case c; const char *needle; } bad[] = {
		{ PC_SKIP, "must continue at" },
		{ PC_EARLY, "FILE_END after 3 of 4 segments" },
		{ PC_FORGED, "does not match the delta's target" },
		{ PC_WRONG_BASE, "a.txt: base does not match the delta" },
	};
	char during[4096] = "", after[4096] = "", before[4096];
	struct wsync_error err;

	make_root();
	CHECK(piecewise(PC_GOOD, during, sizeof(during), &err) == 0);
	if (err.msg[0])
		printf("# %s\n", err.msg);
	/* before the commit: a.txt as it was, a temp beside it */
	CHECK(strstr(during, "a.txt=alpha;") != NULL);
	CHECK(strstr(during, ".a.txt.wsync-") != NULL);
	listing(root, "", after, sizeof(after));
	CHECK_STR(after, "a.txt=ALPHA-ALPHA-ALPHA-ALPHA!;b.txt=bravo;");
	remove_tree(root);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		make_root();
		if (bad[i].c == PC_WRONG_BASE)
			write_file(root, "a.txt", "alphx");
		before[0] = after[0] = '\0';
		listing(root, "", before, sizeof(before));
		CHECK(piecewise(bad[i].c, NULL, 0, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, bad[i].needle);
		listing(root, "", after, sizeof(after));
		CHECK_STR(after, before);
		remove_tree(root);
	}
	make_root();
	before[0] = after[0] = '\0';
	listing(root, "", before, sizeof(before));
	CHECK(piecewise(PC_DROP, NULL, 0, &err) == 0);
	listing(root, "", after, sizeof(after));
	CHECK_STR(after, before);
	remove_tree(root);
}

int main(void)
{
	TEST(test_good_delta_applies);
	TEST(test_forged_target_hash);
	TEST(test_later_file_fails);
	TEST(test_segment_outside_base);
	TEST(test_wrong_base);
	TEST(test_base_partly_read);
	TEST(test_file_and_directory_of_same_name);
	TEST(test_out_dir);
	TEST(test_many_files_on_workers);
	TEST(test_stage_two_parts_then_commit);
	TEST(test_stage_views_of_one_delta);
	TEST(test_stage_then_free);
	TEST(test_stage_path_twice);
	TEST(test_stage_failure_keeps_earlier);
	TEST(test_stage_lists_keep_and_delete);
	TEST(test_stage_refuses_other_targets);
	TEST(test_piecewise);
	return tap_done();
}
