/* SPDX-License-Identifier: Apache-2.0 */
/*
 * preflight.c -- the folders, key files and globs a configuration names,
 * checked as the daemon's user before the role starts (preflight.h).
 */
#include "preflight.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "file_filter.h"
#include "sign.h"
#include "url.h"

struct check {
	const struct wsync_config *cfg;
	struct wsync_config_errors *errs;
	unsigned n;		/* problems found */
	bool all_wait;		/* every one of them may come right by itself */
	bool oom;
};

static void problem(struct check *c, bool wait, const char *section, const char *key,
		    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void problem(struct check *c, bool wait, const char *section, const char *key,
		    const char *fmt, ...)
{
	char *msg;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (r < 0 || wsync_config_errors_add(c->errs, c->cfg->path,
					     wsync_config_line(c->cfg, section, key),
					     "[%s] %s: %s", section, key, msg) < 0)
		c->oom = true;
	if (r >= 0)
		free(msg);
	c->n++;
	c->all_wait &= wait;
}

/* "user NAME" of this process, for messages. */
static const char *who(char *buf, size_t len)
{
	struct passwd *pw = getpwuid(geteuid());

	if (pw && pw->pw_name)
		snprintf(buf, len, "user %s", pw->pw_name);
	else
		snprintf(buf, len, "uid %u", (unsigned)geteuid());
	return buf;
}

/*
 * Can this process write in the directory path, or make it: it is a
 * directory it can write and search, or it does not exist and its
 * nearest existing ancestor is.  0, or a negative errno with the path
 * that stops it in where: -ENOTDIR (that path is no directory), -EACCES
 * (this user may not write there), another from stat().
 */
static int dir_writable(const char *path, char *where, size_t len)
{
	char p[PATH_MAX];
	struct stat st;

	snprintf(where, len, "%s", path);
	if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
		return -ENAMETOOLONG;
	for (;;) {
		char *slash;

		if (stat(p, &st) == 0) {
			snprintf(where, len, "%s", p);
			if (!S_ISDIR(st.st_mode))
				return -ENOTDIR;
			return access(p, W_OK | X_OK) == 0 ? 0 : -EACCES;
		}
		if (errno != ENOENT)
			return -errno;
		slash = strrchr(p, '/');
		if (!slash)
			return -ENOENT;
		if (slash == p) {
			p[1] = '\0';
		} else {
			*slash = '\0';
		}
	}
}

/* A folder the role makes if it is missing (state, runtime, target, a
 * publisher's bucket directory): say what stops it, and the fix. */
static void check_own_dir(struct check *c, const char *section, const char *key,
			  const char *dir, const char *fix)
{
	char where[PATH_MAX], user[64];
	int r = dir_writable(dir, where, sizeof(where));

	if (r == 0)
		return;
	if (r == -ENOTDIR)
		problem(c, false, section, key, "%s: %s is not a directory; %s", dir, where, fix);
	else if (r == -EACCES && strcmp(where, dir) == 0)
		problem(c, false, section, key, "%s: %s may not write in it; %s", dir,
			who(user, sizeof(user)), fix);
	else if (r == -EACCES)
		problem(c, false, section, key, "%s: cannot create it: %s may not write in %s; %s",
			dir, who(user, sizeof(user)), where, fix);
	else
		problem(c, false, section, key, "%s: %s: %s; %s", dir, where, strerror(-r), fix);
}

/*
 * A key under /run/credentials/ is a systemd credential
 * (LoadCredential=), there only while its unit runs: from a shell
 * (`wsyncd --check-config` before a start) it cannot be looked at, and
 * the start checks it.  Inside the unit, $CREDENTIALS_DIRECTORY is its
 * folder and it is checked as any file.
 */
static bool credential_elsewhere(const char *path)
{
	const char *dir = getenv("CREDENTIALS_DIRECTORY");
	size_t n = dir ? strlen(dir) : 0;

	if (strncmp(path, "/run/credentials/", 17) != 0)
		return false;
	return !(n && strncmp(path, dir, n) == 0 && path[n] == '/');
}

/* A file wsyncd reads: it must be there and readable by this user. */
static void check_readable(struct check *c, const char *section, const char *key,
			   const char *path)
{
	char user[64];

	if (!path || !*path || credential_elsewhere(path) || access(path, R_OK) == 0)
		return;
	if (errno == ENOENT)
		problem(c, false, section, key, "%s: no such file", path);
	else
		problem(c, false, section, key, "%s: %s cannot read it: %s", path,
			who(user, sizeof(user)), strerror(errno));
}

static void check_state_dirs(struct check *c)
{
	const struct wsync_config *cfg = c->cfg;
	char fix[512];
	bool given = wsync_config_line(cfg, "daemon", "state_dir") != 0;

	snprintf(fix, sizeof(fix), "%s[daemon] state_dir to a folder this user can write%s",
		 given ? "set " : "this is the default for this user: set ",
		 given ? "" : " (or give it a HOME it can write)");
	check_own_dir(c, "daemon", "state_dir", cfg->state_dir, fix);
	given = wsync_config_line(cfg, "daemon", "runtime_dir") != 0;
	snprintf(fix, sizeof(fix), "%s[daemon] runtime_dir to a folder this user can write",
		 given ? "set " : "this is the default for this user: set ");
	check_own_dir(c, "daemon", "runtime_dir", cfg->runtime_dir, fix);
}

static void check_globs(struct check *c, const char *section, const char *include,
			const char *exclude)
{
	bool given = wsync_config_line(c->cfg, section, "exclude") != 0;

	if (wsync_preflight_globs_take_weights(include, exclude))
		return;
	problem(c, false, section, "include", "\"%.200s\"%s%.200s%s takes no weight file "
		"(*.safetensors, *.bin, *.pt, *.pth, *.gguf): %s; name at least one weight "
		"file's glob", include, given ? " with exclude = \"" : "", given ? exclude : "",
		given ? "\"" : "", strcmp(section, "subscriber") == 0 ? "a node serves weights" :
		"a checkpoint is published with its weights");
}

static void check_publisher(struct check *c, const struct wsync_url *url)
{
	const struct wsync_config *cfg = c->cfg;
	struct wsync_sign_key *key = NULL;
	struct wsync_error err = { 0 };
	char user[64];
	struct stat st;

	if (stat(cfg->watch_dir, &st) < 0 && errno == ENOENT)
		problem(c, true, "publisher", "watch_dir", "%s: no such directory; wsyncd does "
			"not create the trainer's folder: create it (mkdir -p %s) or set "
			"watch_dir to the folder the trainer writes checkpoints into",
			cfg->watch_dir, cfg->watch_dir);
	else if (stat(cfg->watch_dir, &st) < 0)
		problem(c, false, "publisher", "watch_dir", "%s: %s", cfg->watch_dir,
			strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		problem(c, false, "publisher", "watch_dir", "%s: not a directory; set watch_dir "
			"to the folder the trainer writes checkpoints into", cfg->watch_dir);
	else if (access(cfg->watch_dir, R_OK | X_OK) < 0)
		problem(c, false, "publisher", "watch_dir", "%s: %s cannot read it: %s; give "
			"this user read access, or run wsyncd as a user who has it",
			cfg->watch_dir, who(user, sizeof(user)), strerror(errno));
	if (cfg->signing_key && *cfg->signing_key && !credential_elsewhere(cfg->signing_key)) {
		if (wsync_sign_key_load_private(cfg->signing_key, &key, &err) == -ENOMEM)
			c->oom = true;
		else if (err.code)
			problem(c, false, "publisher", "signing_key", "%s", wsync_error_str(&err));
		wsync_sign_key_free(key);
	}
	check_globs(c, "publisher", cfg->include, cfg->exclude);
	if (url->scheme == WSYNC_URL_FILE)
		check_own_dir(c, "store", "url", url->path, "the publisher creates the bucket "
			      "directory when it can: create it and give it to this user, or "
			      "name another");
}

static void check_subscriber(struct check *c, const struct wsync_url *url)
{
	const struct wsync_config *cfg = c->cfg;
	struct wsync_sign_key *key = NULL;
	struct wsync_error err = { 0 };
	char fix[PATH_MAX + 256], user[64];

	snprintf(fix, sizeof(fix), "create it and give it to this user (install -d -o %s %s), "
		 "or set target_dir to a folder it can write",
		 getpwuid(geteuid()) ? getpwuid(geteuid())->pw_name : "USER", cfg->target_dir);
	if (cfg->layout == WSYNC_LAYOUT_SYMLINK) {
		/* target_dir is a link the subscriber makes beside its versions */
		char *parent = strdup(cfg->target_dir), *slash = parent ? strrchr(parent, '/') : NULL;

		if (!parent) {
			c->oom = true;
			return;
		}
		if (slash)
			slash[slash == parent] = '\0';
		check_own_dir(c, "subscriber", "target_dir", parent, fix);
		free(parent);
	} else {
		check_own_dir(c, "subscriber", "target_dir", cfg->target_dir, fix);
	}
	if (cfg->verify_key && *cfg->verify_key && !credential_elsewhere(cfg->verify_key)) {
		if (wsync_sign_key_load_public(cfg->verify_key, &key, &err) == -ENOMEM)
			c->oom = true;
		else if (err.code)
			problem(c, false, "subscriber", "verify_key", "%s", wsync_error_str(&err));
		wsync_sign_key_free(key);
	}
	check_globs(c, "subscriber", cfg->sub_include, cfg->sub_exclude);
	/* A bucket directory not there yet is waited for (the publisher
	 * makes it); one there must be readable. */
	if (url->scheme == WSYNC_URL_FILE && access(url->path, F_OK) == 0 &&
	    access(url->path, R_OK | X_OK) < 0)
		problem(c, false, "store", "url", "%s: %s cannot read the bucket directory: %s",
			url->path, who(user, sizeof(user)), strerror(errno));
}

int wsync_preflight(const struct wsync_config *cfg, struct wsync_config_errors *errs,
		    bool *may_pass)
{
	struct check c = { .cfg = cfg, .errs = errs, .all_wait = true };
	struct wsync_url url = { 0 };
	struct wsync_error err = { 0 };
	int r;

	*may_pass = false;
	r = wsync_url_parse(cfg->store_url, &url, &err);
	if (r == -ENOMEM)
		return r;
	if (r < 0)	/* config.c has said why */
		url.scheme = WSYNC_URL_S3;
	check_state_dirs(&c);
	check_readable(&c, "store", "credentials", cfg->credentials);
	check_readable(&c, "store", "ca_file", cfg->ca_file);
	if (cfg->role == WSYNC_ROLE_PUBLISHER)
		check_publisher(&c, &url);
	else if (cfg->role == WSYNC_ROLE_SUBSCRIBER)
		check_subscriber(&c, &url);
	if (r == 0)
		wsync_url_free(&url);
	if (c.oom)
		return -ENOMEM;
	*may_pass = c.n && c.all_wait;
	return (int)c.n;
}

/* ---- can the globs take a weight file? ---------------------------------- */

/*
 * A name pattern matches: pattern with each '*' made "w" (the last one
 * "w" + ext when ext is given, "" each when empty is set), '?' 'w', a
 * bracket its first character.  false when the pattern holds what this
 * does not follow (a negated bracket, a backslash).
 */
static bool instantiate(const char *pat, const char *ext, bool empty, char *out, size_t len)
{
	const char *last = strrchr(pat, '*');
	size_t o = 0;

	for (const char *p = pat; *p; p++) {
		const char *add = NULL;
		char one[2] = { 0 };

		if (*p == '*') {
			add = empty ? "" : "w";
			if (p == last && ext) {
				if (o + 1 + strlen(ext) >= len)
					return false;
				o += (size_t)snprintf(out + o, len - o, "w%s", ext);
				continue;
			}
		} else if (*p == '?') {
			add = "w";
		} else if (*p == '\\') {
			return false;
		} else if (*p == '[') {
			const char *end = strchr(p + 2, ']');

			if (!end || p[1] == '!' || p[1] == '^')
				return false;
			one[0] = p[1];
			add = one;
			p = end;
		} else {
			one[0] = *p;
			add = one;
		}
		if (o + strlen(add) >= len)
			return false;
		o += (size_t)snprintf(out + o, len - o, "%s", add);
	}
	out[o] = '\0';
	return true;
}

bool wsync_preflight_globs_take_weights(const char *include, const char *exclude)
{
	struct wsync_file_filter f = { 0 };
	size_t n_ext = 0;
	bool can = false;

	while (wsync_checkpoint_weight_ext_at(n_ext))
		n_ext++;
	if (wsync_file_filter_init(&f, include, exclude) < 0)
		return true;	/* cannot tell */
	for (size_t i = 0; i < f.n_include && !can; i++) {
		const char *pat = f.include[i];
		char name[PATH_MAX];

		/* variants 0..n_ext-1: each '*' as "w", the last one ending
		 * in that weight extension; n_ext: '*' as "w"; n_ext + 1: as "" */
		for (size_t k = 0; k < n_ext + 2 && !can; k++) {
			if (!instantiate(pat, k < n_ext ? wsync_checkpoint_weight_ext_at(k) : NULL,
					 k == n_ext + 1, name, sizeof(name))) {
				can = true;
				break;
			}
			can = wsync_checkpoint_is_weight_name(name) &&
			      wsync_file_filter_match(&f, name);
		}
	}
	wsync_file_filter_free(&f);
	return can;
}
