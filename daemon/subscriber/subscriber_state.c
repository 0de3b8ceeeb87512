/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_state.c -- the subscriber's record of what target_dir holds
 * (.wsync/state.json, see subscriber_local.h for its fields), the cheap
 * check of target_dir against it, safe path walking inside target_dir,
 * and the free-space check before a step.
 *
 * Runs on the jobs thread (saving, checking, cleaning) or before the loop
 * starts (loading): everything here may block.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "durable.h"
#include "hash.h"
#include "io.h"
#include "path.h"
#include "subscriber_local.h"

#define STATE_FORMAT "wsync-subscriber-state"
#define STATE_FORMAT_VERSION 1
#define STATE_NAME "state.json"
#define STATE_TMP "state.json.tmp"

void sub_local_free(struct sub_local *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n_files; i++)
		free(s->files[i].path);
	free(s->files);
	free(s->include);
	free(s->exclude);
	memset(s, 0, sizeof(*s));
}

int sub_local_set_filter(struct sub_local *s, const char *include, const char *exclude)
{
	free(s->include);
	free(s->exclude);
	s->include = s->exclude = NULL;
	if (!include || !exclude)
		return 0;
	s->include = strdup(include);
	s->exclude = strdup(exclude);
	return s->include && s->exclude ? 0 : -ENOMEM;
}

static int hex_to_hash(const char *hex, struct wsync_hash128 *h)
{
	if (!hex || strlen(hex) != 2 * sizeof(h->b))
		return -EINVAL;
	for (size_t i = 0; i < sizeof(h->b); i++) {
		unsigned v = 0;

		for (int k = 0; k < 2; k++) {
			char c = hex[2 * i + (size_t)k];

			v <<= 4;
			if (c >= '0' && c <= '9')
				v |= (unsigned)(c - '0');
			else if (c >= 'a' && c <= 'f')
				v |= (unsigned)(c - 'a' + 10);
			else
				return -EINVAL;
		}
		h->b[i] = (uint8_t)v;
	}
	return 0;
}

static int get_u64(json_t *o, const char *k, uint64_t *v)
{
	json_t *j = json_object_get(o, k);

	if (!json_is_integer(j) || json_integer_value(j) < 0)
		return -EINVAL;
	*v = (uint64_t)json_integer_value(j);
	return 0;
}

int sub_local_parse(const char *buf, size_t len, const char *path, struct sub_local *out,
		    struct wsync_error *err)
{
	json_error_t je;
	json_t *root, *files, *j;
	uint64_t v;
	int r = -EINVAL;

	memset(out, 0, sizeof(*out));
	if (len > SUB_STATE_MAX)
		return wsync_error_set(err, -EFBIG, "%s: larger than %llu bytes", path,
				       (unsigned long long)SUB_STATE_MAX);
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	/* Where, never what: jansson's text quotes the bytes it stopped at,
	 * and those are whatever the file holds. */
	if (!root)
		return wsync_error_set(err, -EINVAL, "%s: not valid JSON (line %d, column %d)",
				       path, je.line, je.column);
	j = json_object_get(root, "format");
	if (!json_is_string(j) || strcmp(json_string_value(j), STATE_FORMAT) != 0 ||
	    get_u64(root, "format_version", &v) < 0 || v != STATE_FORMAT_VERSION) {
		wsync_error_set(err, -EINVAL, "%s: not a wsync subscriber state (version 1)", path);
		goto out;
	}
	if (get_u64(root, "version", &out->version) < 0 || out->version == 0 ||
	    out->version > WSYNC_MANIFEST_VERSION_MAX ||
	    !json_is_integer(json_object_get(root, "step")) ||
	    hex_to_hash(json_string_value(json_object_get(root, "manifest_xxh128")),
			&out->manifest_hash) < 0) {
		wsync_error_set(err, -EINVAL, "%s: bad version, step or manifest_xxh128", path);
		goto out;
	}
	out->step = (int64_t)json_integer_value(json_object_get(root, "step"));
	{
		json_t *inc = json_object_get(root, "include"), *exc = json_object_get(root, "exclude");

		if ((inc && !json_is_string(inc)) || (exc && !json_is_string(exc)) || !inc != !exc) {
			wsync_error_set(err, -EINVAL, "%s: bad include or exclude", path);
			goto out;
		}
		if (inc && (!(out->include = strdup(json_string_value(inc))) ||
			    !(out->exclude = strdup(json_string_value(exc))))) {
			r = wsync_error_set(err, -ENOMEM, "out of memory");
			goto out;
		}
	}
	j = json_object_get(root, "key_id");
	if (j && (!json_is_string(j) || json_string_length(j) != WSYNC_SIGN_KEY_ID_LEN ||
		  strspn(json_string_value(j), "0123456789abcdef") != WSYNC_SIGN_KEY_ID_LEN)) {
		wsync_error_set(err, -EINVAL, "%s: bad key_id", path);
		goto out;
	}
	if (j)
		memcpy(out->key_id, json_string_value(j), WSYNC_SIGN_KEY_ID_LEN + 1);
	j = json_object_get(root, "applied");
	out->applied = json_is_integer(j) ? (int64_t)json_integer_value(j) : 0;
	j = json_object_get(root, "floor");
	out->floor = json_is_integer(j) && json_integer_value(j) > 0 &&
		     (uint64_t)json_integer_value(j) <= WSYNC_MANIFEST_VERSION_MAX ?
		     (uint64_t)json_integer_value(j) : 0;
	files = json_object_get(root, "files");
	if (!json_is_array(files)) {
		wsync_error_set(err, -EINVAL, "%s: no files list", path);
		goto out;
	}
	out->files = calloc(json_array_size(files) + 1, sizeof(*out->files));
	if (!out->files) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < json_array_size(files); i++) {
		json_t *f = json_array_get(files, i), *p = json_object_get(f, "path"),
		       *mt = json_object_get(f, "mtime_ns");
		struct sub_file *sf = &out->files[i];
		struct wsync_error perr = { 0 };

		if (!json_is_string(p) ||
		    wsync_path_check(json_string_value(p), json_string_length(p), &perr) < 0 ||
		    get_u64(f, "size", &sf->size) < 0 || !json_is_integer(mt) ||
		    hex_to_hash(json_string_value(json_object_get(f, "xxh128")), &sf->hash) < 0) {
			wsync_error_set(err, -EINVAL, "%s: files[%zu] is malformed", path, i);
			goto out;
		}
		sf->path = strdup(json_string_value(p));
		if (!sf->path) {
			r = wsync_error_set(err, -ENOMEM, "out of memory");
			goto out;
		}
		sf->mtime_ns = (int64_t)json_integer_value(mt);
		out->n_files++;
	}
	r = 0;
out:
	json_decref(root);
	if (r < 0)
		sub_local_free(out);
	return r;
}

int sub_local_load_at(int dirfd, const char *name, const char *path, struct sub_local *out,
		      struct wsync_error *err)
{
	char *buf = NULL;
	size_t len = 0;
	int fd, r;

	memset(out, 0, sizeof(*out));
	/* No link followed (the state of whatever it names is not ours to
	 * read, nor its parse error to log), and a FIFO put there neither
	 * blocks the open nor passes the regular-file check that follows. */
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno == ELOOP)
		return wsync_error_set(err, -EINVAL, "%s is a symbolic link: refused", path);
	if (fd < 0)
		return wsync_error_set(err, -errno, "%s: %s", path, strerror(errno));
	r = wsync_read_fd(fd, path, SUB_STATE_MAX, &buf, &len, err);
	(void)close(fd);
	if (r < 0)
		return r;
	r = sub_local_parse(buf, len, path, out, err);
	free(buf);
	return r;
}

int sub_local_load(const char *path, struct sub_local *out, struct wsync_error *err)
{
	const char *slash = strrchr(path, '/');
	char *dir = !slash ? strdup(".") : slash == path ? strdup("/")
			   : strndup(path, (size_t)(slash - path));
	int dfd, r;

	memset(out, 0, sizeof(*out));
	if (!dir)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	r = dfd < 0 ? wsync_error_set(err, -errno, "%s: %s", path, strerror(errno)) :
		      sub_local_load_at(dfd, slash ? slash + 1 : path, path, out, err);
	if (dfd >= 0)
		(void)close(dfd);
	free(dir);
	return r;
}

int sub_local_save_at(int dirfd, const char *path, const struct sub_local *s,
		      struct wsync_error *err)
{
	char hex[WSYNC_HASH_HEX_LEN + 1], *text = NULL;
	json_t *root = json_object(), *files = json_array();
	struct wsync_atomic a;
	int r = -ENOMEM;

	if (!root || !files)
		goto fail;
	r = json_object_set_new(root, "format", json_string(STATE_FORMAT));
	r |= json_object_set_new(root, "format_version", json_integer(STATE_FORMAT_VERSION));
	r |= json_object_set_new(root, "version", json_integer((json_int_t)s->version));
	r |= json_object_set_new(root, "step", json_integer(s->step));
	r |= json_object_set_new(root, "manifest_xxh128",
				 json_string(wsync_hash_hex(&s->manifest_hash, hex, sizeof(hex))));
	r |= json_object_set_new(root, "applied", json_integer(s->applied));
	if (s->floor > s->version)
		r |= json_object_set_new(root, "floor", json_integer((json_int_t)s->floor));
	if (s->key_id[0])
		r |= json_object_set_new(root, "key_id", json_string(s->key_id));
	if (s->include && s->exclude) {
		r |= json_object_set_new(root, "include", json_string(s->include));
		r |= json_object_set_new(root, "exclude", json_string(s->exclude));
	}
	for (size_t i = 0; i < s->n_files && r == 0; i++) {
		const struct sub_file *f = &s->files[i];

		r = json_array_append_new(files, json_pack("{s:s, s:I, s:s, s:I}",
			"path", f->path, "size", (json_int_t)f->size,
			"xxh128", wsync_hash_hex(&f->hash, hex, sizeof(hex)),
			"mtime_ns", (json_int_t)f->mtime_ns));
	}
	if (r == 0)
		r = json_object_set(root, "files", files);
	if (r != 0 || !(text = json_dumps(root, JSON_INDENT(1) | JSON_COMPACT))) {
		r = -ENOMEM;
		goto fail;
	}
	/* The temp has a fixed name (the directory is ours: sub_meta_open),
	 * so the next save replaces what a killed one left. */
	r = wsync_atomic_begin(&a, dirfd, STATE_NAME, STATE_TMP, 0644, 0, err);
	if (r == 0 && ((r = wsync_write_all(a.fd, text, strlen(text))) < 0 ||
		       (r = wsync_write_all(a.fd, "\n", 1)) < 0))
		wsync_atomic_abort(&a);
	else if (r == 0)
		r = wsync_atomic_commit(&a, err);
fail:
	free(text);
	json_decref(files);
	json_decref(root);
	return r < 0 ? wsync_error_set(err, r, "%s: writing the state: %s", path, strerror(-r))
		     : 0;
}

int sub_state_save(const char *target, const struct sub_local *s, struct wsync_error *err)
{
	char *path = NULL;
	int meta, r;

	if (asprintf(&path, "%s/" SUB_META_DIR "/" STATE_NAME, target) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	meta = sub_meta_open(target, true, NULL, err);
	r = meta < 0 ? meta : sub_local_save_at(meta, path, s, err);
	if (meta >= 0)
		(void)close(meta);
	free(path);
	return r;
}

int sub_state_load(int meta, const char *target, struct sub_local *out,
		   struct wsync_error *err)
{
	char *path = NULL;
	int r;

	memset(out, 0, sizeof(*out));
	if (asprintf(&path, "%s/" SUB_META_DIR "/" STATE_NAME, target) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	r = sub_local_load_at(meta, STATE_NAME, path, out, err);
	free(path);
	return r;
}

void sub_state_remove_temp(const char *target)
{
	int meta = sub_meta_open(target, false, NULL, NULL);

	if (meta < 0)
		return;
	(void)unlinkat(meta, STATE_TMP, 0);
	(void)close(meta);
}

int sub_open_parent(int root, const char *rel, const char **name)
{
	return wsync_open_parent(root, rel, name, NULL, NULL, NULL);
}

int sub_stat_rel(int root, const char *rel, struct stat *st)
{
	const char *name;
	int dfd = sub_open_parent(root, rel, &name), r = 0;

	if (dfd < 0)
		return dfd;
	if (fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) < 0)
		r = -errno;
	(void)close(dfd);
	return r;
}

int sub_path_check_no_symlink(int root, const char *rel)
{
	struct stat st;
	int r = sub_stat_rel(root, rel, &st);

	if (r == -ENOENT)
		return 0;	/* missing on the way or at the end: created by apply */
	if (r < 0)
		return r;
	return S_ISLNK(st.st_mode) ? -ELOOP : 0;
}

int sub_local_quick_check(const char *target, const struct sub_local *s, char *why,
			  size_t why_len)
{
	int root = open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

	if (root < 0)
		return -errno;
	for (size_t i = 0; i < s->n_files; i++) {
		const struct sub_file *f = &s->files[i];
		struct stat st;
		int e = sub_stat_rel(root, f->path, &st);
		int64_t mt;

		if (e < 0) {
			snprintf(why, why_len, "%s: %s", f->path,
				 e == -ELOOP ? "a symbolic link on the way" : strerror(-e));
			r = 1;
			break;
		}
		mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
		if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size || mt != f->mtime_ns) {
			snprintf(why, why_len, "%s: %s", f->path,
				 !S_ISREG(st.st_mode) ? "not a regular file" :
				 (uint64_t)st.st_size != f->size ? "size changed" :
				 "modified since it was applied");
			r = 1;
			break;
		}
	}
	(void)close(root);
	return r;
}

int sub_local_full_check(const char *target, const struct sub_local *s, char *why,
			 size_t why_len)
{
	int root = open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

	if (root < 0)
		return -errno;
	for (size_t i = 0; i < s->n_files && r == 0; i++) {
		const struct sub_file *f = &s->files[i];
		struct wsync_error err = { 0 };
		struct wsync_hash128 h;
		const char *name;
		uint64_t size;
		int dfd = sub_open_parent(root, f->path, &name), fd = -1, e;

		if (dfd >= 0) {
			fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			e = fd < 0 ? -errno : 0;
			(void)close(dfd);
		} else {
			e = dfd;
		}
		if (e == 0)
			e = wsync_hash_fd(fd, f->path, &h, &size, &err);
		if (fd >= 0)
			(void)close(fd);
		if (e < 0) {
			snprintf(why, why_len, "%s: %s", f->path, strerror(-e));
			r = 1;
		} else if (size != f->size || !wsync_hash_equal(&h, &f->hash)) {
			snprintf(why, why_len, "%s: its content differs from the version applied",
				 f->path);
			r = 1;
		}
	}
	(void)close(root);
	return r;
}

/* ---- a manifest's files by path (here and subscriber_apply.c) ---- */

static int cmp_file_ptr(const void *a, const void *b)
{
	const struct wsync_manifest_file *const *x = a, *const *y = b;

	return strcmp((*x)->path, (*y)->path);
}

int sub_cmp_path_mfile(const void *key, const void *elem)
{
	const struct wsync_manifest_file *const *y = elem;

	return strcmp(key, (*y)->path);
}

const struct wsync_manifest_file **sub_sorted_files(const struct wsync_manifest *m)
{
	const struct wsync_manifest_file **v = calloc(m->n_files + 1, sizeof(*v));

	if (!v)
		return NULL;
	for (size_t i = 0; i < m->n_files; i++)
		v[i] = &m->files[i];
	qsort(v, m->n_files, sizeof(*v), cmp_file_ptr);
	return v;
}

int sub_local_adopt(const char *target, const struct sub_local *prev,
		    const struct wsync_manifest *m, const struct wsync_hash128 *manifest_hash,
		    struct sub_local *out, char *why, size_t why_len)
{
	const struct wsync_manifest_file **sorted = NULL;
	int root = open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

	memset(out, 0, sizeof(*out));
	if (root < 0)
		return -errno;
	sorted = sub_sorted_files(m);
	out->files = calloc(m->n_files + 1, sizeof(*out->files));
	if (!sorted || !out->files) {
		r = -ENOMEM;
		goto out;
	}
	/* what the apply deletes, deleted before its marker too */
	for (size_t i = 0; i < prev->n_files && r == 0; i++) {
		struct stat st;

		if (!bsearch(prev->files[i].path, sorted, m->n_files, sizeof(*sorted),
			     sub_cmp_path_mfile) &&
		    sub_stat_rel(root, prev->files[i].path, &st) != -ENOENT) {
			snprintf(why, why_len, "%s is still there", prev->files[i].path);
			r = 1;
		}
	}
	/* sizes first (cheap), then every file hashed */
	for (size_t i = 0; i < m->n_files && r == 0; i++) {
		const struct wsync_manifest_file *f = &m->files[i];
		struct sub_file *o = &out->files[i];
		struct stat st;

		if (sub_stat_rel(root, f->path, &st) < 0 || !S_ISREG(st.st_mode) ||
		    (uint64_t)st.st_size != f->size) {
			snprintf(why, why_len, "%s: not a file of %" PRIu64 " bytes", f->path,
				 f->size);
			r = 1;
			break;
		}
		if (!(o->path = strdup(f->path))) {
			r = -ENOMEM;
			break;
		}
		out->n_files++;
		o->size = f->size;
		o->hash = f->hash;
		o->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	}
	if (r == 0)
		r = sub_local_full_check(target, out, why, why_len);
	out->version = m->version;
	out->step = m->step;
	out->manifest_hash = *manifest_hash;
	out->applied = (int64_t)time(NULL);
	out->floor = prev ? sub_local_floor(prev) : 0;
out:
	if (r != 0)
		sub_local_free(out);
	free(sorted);
	(void)close(root);
	return r;
}

/* ".<up to 200 bytes>.wsync-XXXXXX": apply.c's temp names. */
static bool is_apply_temp(const char *n)
{
	size_t len = strlen(n);
	static const char tag[] = ".wsync-";

	if (n[0] != '.' || len < 1 + (sizeof(tag) - 1) + 6)
		return false;
	if (memcmp(n + len - 6 - (sizeof(tag) - 1), tag, sizeof(tag) - 1) != 0)
		return false;
	for (size_t i = len - 6; i < len; i++)
		if (!((n[i] >= 'A' && n[i] <= 'Z') || (n[i] >= 'a' && n[i] <= 'z') ||
		      (n[i] >= '0' && n[i] <= '9')))
			return false;
	return true;
}

static int remove_temps_in(int dfd, unsigned depth)
{
	DIR *d;
	struct dirent *de;
	int removed = 0;

	if (depth > 64) {
		(void)close(dfd);
		return 0;
	}
	d = fdopendir(dfd);
	if (!d) {
		(void)close(dfd);
		return -errno;
	}
	while ((de = readdir(d))) {
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub >= 0) {
				int n = remove_temps_in(sub, depth + 1);

				if (n > 0)
					removed += n;
			}
		} else if (S_ISREG(st.st_mode) && is_apply_temp(de->d_name) &&
			   unlinkat(dirfd(d), de->d_name, 0) == 0) {
			removed++;
		}
	}
	if (removed)
		(void)wsync_fsync(dirfd(d));
	(void)closedir(d);
	return removed;
}

int sub_remove_stray_temps(const char *target)
{
	int fd = open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	return remove_temps_in(fd, 0);
}

bool sub_is_meta_path(const char *rel)
{
	size_t n = strlen(SUB_META_DIR);

	return strncmp(rel, SUB_META_DIR, n) == 0 && (rel[n] == '\0' || rel[n] == '/');
}

int sub_meta_open(const char *target, bool create, struct wsync_dir_syncs *later,
		  struct wsync_error *err)
{
	int tfd = open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd = -1, r = 0, made = -1;
	struct stat st;

	if (tfd < 0)
		return wsync_error_set(err, -errno, "%s: %s", target, strerror(errno));
	if (create)
		made = mkdirat(tfd, SUB_META_DIR, 0755);
	if (create && made < 0 && errno != EEXIST) {
		r = wsync_error_set(err, -errno, "%s/" SUB_META_DIR ": cannot create: %s", target,
				    strerror(errno));
		goto out;
	}
	/* Made just now (always so in a new layout = symlink version
	 * directory, after apply synced it): its entry must be as durable as
	 * the state.json about to be written in it, or a power loss after the
	 * flip leaves a version without its marker. */
	if (made == 0 && later)
		r = wsync_dir_syncs_add(later, target);
	else if (made == 0)
		r = wsync_fsync(tfd);
	if (r < 0) {
		r = wsync_error_set(err, r, "%s: fsync: %s", target, strerror(-r));
		goto out;
	}
	/* The check and every later use are this one descriptor: what is
	 * renamed into the name afterwards is never written through. */
	fd = openat(tfd, SUB_META_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
		bool link = fstatat(tfd, SUB_META_DIR, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISLNK(st.st_mode);

		r = wsync_error_set(err, -ELOOP, "%s/" SUB_META_DIR " is %s, not a directory: "
				    "refused (the subscriber's state must stay inside the "
				    "target); remove it", target,
				    link ? "a symbolic link" : "a file");
	} else if (fd < 0) {
		r = wsync_error_set(err, -errno, "%s/" SUB_META_DIR ": %s", target,
				    strerror(errno));
	} else if (fstat(fd, &st) < 0) {
		r = wsync_error_set(err, -errno, "%s/" SUB_META_DIR ": %s", target,
				    strerror(errno));
	} else if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		/* Another user who may change what is inside could swap the
		 * state or the lock under us: only a folder of ours is used. */
		r = wsync_error_set(err, -EPERM, "%s/" SUB_META_DIR " %s: refused (the "
				    "subscriber's state must be its own); remove it", target,
				    st.st_uid != geteuid() ? "belongs to another user" :
				    "is writable by other users");
	}
out:
	if (r < 0 && fd >= 0)
		(void)close(fd);
	(void)close(tfd);
	return r < 0 ? r : fd;
}

uint64_t sub_space_margin(uint64_t need)
{
	return (16ull << 20) + need / 32;
}

int sub_space_check(const char *path, uint64_t need, const char *what,
		    struct wsync_error *err)
{
	struct statvfs sv;
	uint64_t avail, margin = sub_space_margin(need);

	if (statvfs(path, &sv) < 0)
		return wsync_error_set(err, -errno, "%s: statvfs: %s", path, strerror(errno));
	avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
	if (avail >= need && avail - need >= margin)
		return 0;
	return wsync_error_set(err, -ENOSPC,
			       "not enough free space on %s for %s: %llu bytes needed "
			       "plus a margin of %llu, %llu available",
			       path, what, (unsigned long long)need, (unsigned long long)margin,
			       (unsigned long long)avail);
}

int sub_stage_remove(const char *target)
{
	struct stat st;
	int meta = sub_meta_open(target, false, NULL, NULL), r = 0;

	if (meta < 0)
		return meta == -ENOENT ? 0 : meta;
	if (fstatat(meta, SUB_STAGE_DIR, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		r = wsync_rm_rf_at(meta, SUB_STAGE_DIR);
		if (r == 0)
			r = 1;
	}
	(void)close(meta);
	return r;
}
