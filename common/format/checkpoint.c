/* SPDX-License-Identifier: Apache-2.0 */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "buf.h"
#include "path.h"

static const char *const weight_exts[] = { ".safetensors", ".bin", ".pt", ".pth", ".gguf" };

const char *wsync_checkpoint_weight_ext(const char *name, size_t n)
{
	for (size_t i = 0; i < sizeof(weight_exts) / sizeof(weight_exts[0]); i++) {
		size_t k = strlen(weight_exts[i]);

		if (n > k && memcmp(name + n - k, weight_exts[i], k) == 0)
			return weight_exts[i];
	}
	return NULL;
}

const char *wsync_checkpoint_weight_ext_at(size_t i)
{
	return i < sizeof(weight_exts) / sizeof(weight_exts[0]) ? weight_exts[i] : NULL;
}

bool wsync_checkpoint_is_weight_name(const char *rel)
{
	const char *b = strrchr(rel, '/');

	b = b ? b + 1 : rel;
	return *b != '.' && wsync_checkpoint_weight_ext(b, strlen(b)) != NULL;
}

static bool has_suffix(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names of the top-level regular *.safetensors files, sorted. */
static int list_safetensors(const char *dir, char ***ret, size_t *n_ret,
			    struct wsync_error *err)
{
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int r = 0;

	d = opendir(dir);
	if (!d)
		return wsync_error_set(err, -errno, "%s: %s", dir, strerror(errno));
	while ((de = readdir(d))) {
		struct stat st;

		if (!has_suffix(de->d_name, ".safetensors") || de->d_name[0] == '.')
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (WSYNC_GROW(names, cap, n, 8) < 0) {
			r = -ENOMEM;
			break;
		}
		names[n] = strdup(de->d_name);
		if (!names[n]) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (r < 0) {
		for (size_t i = 0; i < n; i++)
			free(names[i]);
		free(names);
		return wsync_error_set(err, r, "%s: out of memory", dir);
	}
	if (n)
		qsort(names, n, sizeof(*names), cmp_name);
	*ret = names;
	*n_ret = n;
	return 0;
}

/* Index and shards must describe the same tensors. */
static int check_against_index(const struct wsync_checkpoint *c,
			       struct wsync_error *err)
{
	uint64_t in_shards = 0;

	for (size_t i = 0; i < c->n_shards; i++) {
		const struct wsync_st_header *h = c->shards[i].file->hdr;

		for (size_t t = 0; t < h->n_tensors; t++) {
			const char *want = wsync_st_index_shard(c->index,
								h->tensors[t].name);

			if (!want || strcmp(want, c->shards[i].name) != 0)
				return wsync_error_set(err, -EINVAL,
						       "%s: tensor \"%s\" of %s is %s",
						       c->dir, h->tensors[t].name,
						       c->shards[i].name,
						       want ? "indexed under another shard"
							    : "missing from " WSYNC_INDEX_NAME);
		}
		in_shards += h->n_tensors;
	}
	if (in_shards != c->index->n) {
		/* Some weight_map entry names a tensor its shard lacks. */
		for (size_t e = 0; e < c->index->n; e++) {
			const struct wsync_st_index_entry *ent = &c->index->entries[e];

			for (size_t i = 0; i < c->n_shards; i++)
				if (strcmp(c->shards[i].name, ent->shard) == 0 &&
				    !wsync_st_find(c->shards[i].file->hdr, ent->tensor))
					return wsync_error_set(err, -EINVAL,
							       "%s: " WSYNC_INDEX_NAME
							       " puts tensor \"%s\" in %s, "
							       "which does not hold it",
							       c->dir, ent->tensor, ent->shard);
		}
	}
	return 0;
}

int wsync_checkpoint_open(const char *dir, struct wsync_checkpoint **ret,
			  struct wsync_error *err)
{
	struct wsync_checkpoint *c;
	char **names = NULL, *ipath;
	size_t n_names = 0;
	struct stat st;
	int r;

	*ret = NULL;
	c = calloc(1, sizeof(*c));
	if (!c || !(c->dir = strdup(dir))) {
		free(c);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	ipath = wsync_path_join(dir, WSYNC_INDEX_NAME);
	if (!ipath) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	if (stat(ipath, &st) == 0) {
		r = wsync_st_index_load(ipath, &c->index, err);
		free(ipath);
		if (r < 0)
			goto fail;
		names = malloc((c->index->n_shards ? c->index->n_shards : 1) *
			       sizeof(*names));
		if (!names) {
			r = wsync_error_set(err, -ENOMEM, "out of memory");
			goto fail;
		}
		for (; n_names < c->index->n_shards; n_names++) {
			names[n_names] = strdup(c->index->shards[n_names]);
			if (!names[n_names]) {
				r = wsync_error_set(err, -ENOMEM, "out of memory");
				goto fail;
			}
		}
	} else {
		free(ipath);
		r = list_safetensors(dir, &names, &n_names, err);
		if (r < 0)
			goto fail;
		if (n_names == 0) {
			r = wsync_error_set(err, -ENOENT,
					    "%s: no safetensors files and no %s",
					    dir, WSYNC_INDEX_NAME);
			goto fail;
		}
	}

	c->shards = calloc(n_names ? n_names : 1, sizeof(*c->shards));
	if (!c->shards) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < n_names; i++) {
		char *p = wsync_path_join(dir, names[i]);

		if (!p) {
			r = wsync_error_set(err, -ENOMEM, "out of memory");
			goto fail;
		}
		c->shards[i].name = names[i];
		names[i] = NULL;
		c->n_shards++;
		r = wsync_st_open(p, &c->shards[i].file, err);
		free(p);
		if (r < 0)
			goto fail;
		c->n_tensors += c->shards[i].file->hdr->n_tensors;
		c->tensor_bytes += c->shards[i].file->hdr->data_size;
	}
	if (c->index) {
		r = check_against_index(c, err);
		if (r < 0)
			goto fail;
	}
	free(names);
	*ret = c;
	return 0;
fail:
	for (size_t i = 0; i < n_names; i++)
		free(names ? names[i] : NULL);
	free(names);
	wsync_checkpoint_free(c);
	return r;
}

void wsync_checkpoint_free(struct wsync_checkpoint *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n_shards; i++) {
		free(c->shards[i].name);
		wsync_st_close(c->shards[i].file);
	}
	free(c->shards);
	wsync_st_index_free(c->index);
	free(c->dir);
	free(c);
}
