/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_filter.c -- include/exclude globs (file_filter.h).
 */
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "file_filter.h"

static int split_globs(const char *s, char ***out, size_t *n)
{
	char *copy = strdup(s ? s : ""), *save = NULL;
	size_t cap = 0;

	if (!copy)
		return -ENOMEM;
	*out = NULL;
	*n = 0;
	for (char *tok = strtok_r(copy, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		if (WSYNC_GROW(*out, cap, *n, 8) < 0)
			goto oom;
		if (!((*out)[*n] = strdup(tok)))
			goto oom;
		(*n)++;
	}
	free(copy);
	return 0;
oom:
	free(copy);
	return -ENOMEM;
}

int wsync_file_filter_init(struct wsync_file_filter *f, const char *include, const char *exclude)
{
	memset(f, 0, sizeof(*f));
	if (split_globs(include, &f->include, &f->n_include) < 0 ||
	    split_globs(exclude, &f->exclude, &f->n_exclude) < 0) {
		wsync_file_filter_free(f);
		return -ENOMEM;
	}
	return 0;
}

void wsync_file_filter_free(struct wsync_file_filter *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n_include; i++)
		free(f->include[i]);
	for (size_t i = 0; i < f->n_exclude; i++)
		free(f->exclude[i]);
	free(f->include);
	free(f->exclude);
	memset(f, 0, sizeof(*f));
}

static const char *base_name(const char *rel)
{
	const char *s = strrchr(rel, '/');

	return s ? s + 1 : rel;
}

/* Does pattern p match rel: a component pattern against the last
 * component, a path pattern against the whole path. */
static bool glob_match(const char *p, const char *rel)
{
	if (strchr(p, '/'))
		return fnmatch(p, rel, FNM_PATHNAME) == 0;
	return fnmatch(p, base_name(rel), 0) == 0;
}

static bool excluded(const struct wsync_file_filter *f, const char *rel)
{
	for (size_t i = 0; i < f->n_exclude; i++)
		if (glob_match(f->exclude[i], rel))
			return true;
	return false;
}

/* A subscriber's own state (target_dir/.wsync/, BUCKET.md) is never
 * shipped, whatever the patterns say: a publisher watching a subscriber's
 * folder would otherwise publish versions every subscriber must refuse. */
static bool is_wsync_state(const char *rel)
{
	return strncmp(rel, ".wsync", 6) == 0 && (rel[6] == '\0' || rel[6] == '/');
}

bool wsync_file_filter_prunes_dir(const struct wsync_file_filter *f, const char *rel)
{
	return is_wsync_state(rel) || excluded(f, rel);
}

bool wsync_file_filter_match(const struct wsync_file_filter *f, const char *rel)
{
	bool inc = false;
	char buf[PATH_MAX];

	if (is_wsync_state(rel))
		return false;
	for (size_t i = 0; i < f->n_include && !inc; i++)
		inc = glob_match(f->include[i], rel);
	if (!inc || excluded(f, rel))
		return false;
	/* every directory on the way, for patterns without '/' */
	snprintf(buf, sizeof(buf), "%s", rel);
	for (char *s = strrchr(buf, '/'); s; s = strrchr(buf, '/')) {
		*s = '\0';
		if (excluded(f, buf))
			return false;
	}
	return true;
}
