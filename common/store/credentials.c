/* SPDX-License-Identifier: Apache-2.0 */
/*
 * credentials.c -- find the S3 credentials (see credentials.h).
 *
 * The INI reader is our own rather than inih: Debian's inih is configured
 * through process-wide globals (ini_max_line and friends, set by
 * config/config.c), so two threads reading INI files at once would step on
 * each other, and it would copy secret lines into buffers we cannot wipe.
 * Here the file is read into one buffer, parsed in place, the chosen values
 * copied out, and the buffer wiped before it is freed.
 */
#include "credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"

#define KEY_ACCESS "aws_access_key_id"
#define KEY_SECRET "aws_secret_access_key"
#define KEY_TOKEN "aws_session_token"
#define ENV_ACCESS "AWS_ACCESS_KEY_ID"
#define ENV_SECRET "AWS_SECRET_ACCESS_KEY"
#define ENV_TOKEN "AWS_SESSION_TOKEN"
#define STORE_NAME "store"

/* One section of the file (name NULL: the keys before any section).
 * Values point into the file buffer; line numbers are for messages. */
struct section {
	const char *name;
	const char *value[3];	/* access, secret, token */
	unsigned line[3];
};

static const char *const key_names[3] = { KEY_ACCESS, KEY_SECRET, KEY_TOKEN };

struct ini {
	struct section *s;
	size_t n, cap;
};

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Trim blanks at both ends of [*p, *end) in place. */
static void trim(char **p, char **end)
{
	while (*p < *end && is_blank(**p))
		(*p)++;
	while (*end > *p && is_blank((*end)[-1]))
		(*end)--;
}

/* The section called name (NULL: the unnamed one), created if new. */
static struct section *section_get(struct ini *ini, const char *name)
{
	for (size_t i = 0; i < ini->n; i++)
		if ((!name && !ini->s[i].name) ||
		    (name && ini->s[i].name && strcmp(name, ini->s[i].name) == 0))
			return &ini->s[i];
	if (WSYNC_GROW(ini->s, ini->cap, ini->n, 4) < 0)
		return NULL;
	ini->s[ini->n] = (struct section){ .name = name };
	return &ini->s[ini->n++];
}

/*
 * Parse the NUL-terminated text (modified in place: names and values get
 * their NUL) into ini.  what names the file in messages.
 */
static int parse(char *text, struct ini *ini, const char *what, struct wsync_error *err)
{
	struct section *cur = NULL;
	char *line = text;
	unsigned lineno = 0;

	if ((unsigned char)text[0] == 0xef && (unsigned char)text[1] == 0xbb &&
	    (unsigned char)text[2] == 0xbf)
		line += 3;
	while (*line) {
		char *nl = strchr(line, '\n'), *end = nl ? nl : line + strlen(line);
		char *next = nl ? nl + 1 : end, *p = line, *eq;

		lineno++;
		if (end > p && end[-1] == '\r')
			end--;
		trim(&p, &end);
		for (char *q = p; q < end; q++)
			if ((unsigned char)*q < 0x20 && *q != '\t')
				return wsync_error_set(err, -EINVAL,
						       "%s line %u: control character 0x%02x",
						       what, lineno, (unsigned char)*q);
		if (p == end || *p == '#' || *p == ';') {
			line = next;
			continue;
		}
		if (*p == '[') {
			char *name = p + 1, *name_end = end - 1;

			if (end[-1] != ']' || end - p < 2)
				return wsync_error_set(err, -EINVAL,
						       "%s line %u: a section header must end with ']'",
						       what, lineno);
			trim(&name, &name_end);
			if (name == name_end)
				return wsync_error_set(err, -EINVAL,
						       "%s line %u: empty section name", what, lineno);
			*name_end = '\0';
			cur = section_get(ini, name);
			if (!cur)
				return -ENOMEM;
			line = next;
			continue;
		}
		eq = memchr(p, '=', (size_t)(end - p));
		if (!eq)
			return wsync_error_set(err, -EINVAL,
					       "%s line %u: expected \"[section]\" or \"key = value\"",
					       what, lineno);
		{
			char *key = p, *key_end = eq, *val = eq + 1, *val_end = end;

			trim(&key, &key_end);
			trim(&val, &val_end);
			if (key == key_end)
				return wsync_error_set(err, -EINVAL,
						       "%s line %u: missing key before '='",
						       what, lineno);
			*key_end = '\0';
			*val_end = '\0';
			if (!cur) {
				cur = section_get(ini, NULL);
				if (!cur)
					return -ENOMEM;
			}
			for (int k = 0; k < 3; k++) {
				if (strcasecmp(key, key_names[k]) != 0)
					continue;
				if (cur->value[k])
					return wsync_error_set(err, -EINVAL,
							       "%s line %u: %s given twice in %s%s%s (first on line %u)",
							       what, lineno, key_names[k],
							       cur->name ? "[" : "the keys before any section",
							       cur->name ? cur->name : "",
							       cur->name ? "]" : "", cur->line[k]);
				cur->value[k] = val;
				cur->line[k] = lineno;
			}
		}
		line = next;
	}
	return 0;
}

/* [default], else the one section there is. */
static int choose(const struct ini *ini, const struct section **ret, const char *what,
		  struct wsync_error *err)
{
	for (size_t i = 0; i < ini->n; i++)
		if (ini->s[i].name && strcmp(ini->s[i].name, "default") == 0) {
			*ret = &ini->s[i];
			return 0;
		}
	if (ini->n == 1) {
		*ret = &ini->s[0];
		return 0;
	}
	if (ini->n == 0)
		return wsync_error_set(err, -EINVAL, "%s: no " KEY_ACCESS " or " KEY_SECRET,
				       what);
	/* The unnamed group counts: keys before the first section. */
	return wsync_error_set(err, -EINVAL,
			       "%s: no [default] section and %zu to choose from (put the "
			       "keys wsync should use under [default])", what, ini->n);
}

static void wipe_free(char *s)
{
	if (!s)
		return;
	explicit_bzero(s, strlen(s));
	free(s);
}

void wsync_credentials_free(struct wsync_credentials *c)
{
	if (!c)
		return;
	wipe_free(c->access_key);
	wipe_free(c->secret_key);
	wipe_free(c->session_token);
	free(c->source);
	memset(c, 0, sizeof(*c));
}

/* Copy the three values (token optional, "" counting as none) into out. */
static int take(const char *access, const char *secret, const char *token,
		const char *source, struct wsync_credentials *out)
{
	out->access_key = strdup(access);
	out->secret_key = strdup(secret);
	out->session_token = token && *token ? strdup(token) : NULL;
	out->source = strdup(source);
	if (!out->access_key || !out->secret_key || !out->source ||
	    (token && *token && !out->session_token)) {
		wsync_credentials_free(out);
		return -ENOMEM;
	}
	return 0;
}

/* Read fd (at most WSYNC_CREDENTIALS_FILE_MAX bytes) into a NUL-terminated
 * buffer *ret of *len bytes. */
static int read_all(int fd, char **ret, size_t *len, const char *what,
		    struct wsync_error *err)
{
	size_t cap = WSYNC_CREDENTIALS_FILE_MAX + 1, n = 0;
	char *buf = malloc(cap + 1);
	struct stat st;

	if (!buf)
		return -ENOMEM;
	if (fstat(fd, &st) < 0) {
		int e = errno;

		free(buf);
		return wsync_error_set(err, -e, "%s: %s", what, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		free(buf);
		return wsync_error_set(err, -EINVAL, "%s: not a regular file", what);
	}
	for (;;) {
		ssize_t r = read(fd, buf + n, cap - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;

			explicit_bzero(buf, n);
			free(buf);
			return wsync_error_set(err, -e, "%s: read: %s", what, strerror(e));
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n == cap) {
			explicit_bzero(buf, n);
			free(buf);
			return wsync_error_set(err, -EFBIG,
					       "%s: larger than %u KiB, not a credentials file",
					       what, WSYNC_CREDENTIALS_FILE_MAX / 1024);
		}
	}
	buf[n] = '\0';
	*ret = buf;
	*len = n;
	return 0;
}

/*
 * Load credentials from the file at path.  what names it in messages,
 * source goes into out->source.  missing_ok: return 1, not an error, when
 * the file does not exist.
 */
static int load_file(const char *path, const char *what, const char *source,
		     bool missing_ok, struct wsync_credentials *out, struct wsync_error *err)
{
	struct ini ini = { 0 };
	const struct section *s = NULL;
	char *text = NULL;
	size_t len = 0;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		int e = errno;

		if (e == ENOENT && missing_ok)
			return 1;
		return wsync_error_set(err, -e, "%s: %s", what, strerror(e));
	}
	r = read_all(fd, &text, &len, what, err);
	(void)close(fd);
	if (r < 0)
		return r;
	if (memchr(text, '\0', len)) {
		r = wsync_error_set(err, -EINVAL, "%s: contains a NUL byte", what);
		goto out;
	}
	r = parse(text, &ini, what, err);
	if (r >= 0)
		r = choose(&ini, &s, what, err);
	if (r < 0)
		goto out;
	for (int k = 0; k < 2; k++)
		if (!s->value[k] || !*s->value[k]) {
			r = wsync_error_set(err, -EINVAL, "%s: %s%s%s has no %s", what,
					    s->name ? "[" : "", s->name ? s->name : "the file",
					    s->name ? "]" : "", key_names[k]);
			goto out;
		}
	r = take(s->value[0], s->value[1], s->value[2], source, out);
	if (r == -ENOMEM)
		(void)wsync_error_set(err, r, "%s: out of memory", what);
out:
	free(ini.s);
	explicit_bzero(text, len);
	free(text);
	return r;
}

/* Control characters in an environment value (a pasted newline). */
static int check_env(const char *name, const char *v, struct wsync_error *err)
{
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return wsync_error_set(err, -EINVAL,
					       "$%s contains control character 0x%02x",
					       name, (unsigned char)*p);
	return 0;
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

static int load_env(struct wsync_credentials *out, struct wsync_error *err)
{
	const char *access = env(ENV_ACCESS), *secret = env(ENV_SECRET);
	const char *token = env(ENV_TOKEN);
	int r;

	if (!access && !secret) {
		if (token)
			return wsync_error_set(err, -EINVAL,
					       "$" ENV_TOKEN " is set but $" ENV_ACCESS
					       " and $" ENV_SECRET " are not");
		return 1;
	}
	if (!access)
		return wsync_error_set(err, -EINVAL,
				       "$" ENV_SECRET " is set but $" ENV_ACCESS " is not");
	if (!secret)
		return wsync_error_set(err, -EINVAL,
				       "$" ENV_ACCESS " is set but $" ENV_SECRET " is not");
	if ((r = check_env(ENV_ACCESS, access, err)) < 0 ||
	    (r = check_env(ENV_SECRET, secret, err)) < 0 ||
	    (token && (r = check_env(ENV_TOKEN, token, err)) < 0))
		return r;
	r = take(access, secret, token, "environment", out);
	if (r == -ENOMEM)
		return wsync_error_set(err, r, "credentials: out of memory");
	return 0;
}

int wsync_credentials_load(const char *file, struct wsync_credentials *out,
			   struct wsync_error *err)
{
	const char *dir;
	int r;

	memset(out, 0, sizeof(*out));
	if (file) {
		char *what = NULL;

		if (!*file)
			return wsync_error_set(err, -EINVAL, "empty credentials file name");
		if (asprintf(&what, "credentials file %s", file) < 0)
			return -ENOMEM;
		/* "file PATH" is what follows "credentials " */
		r = load_file(file, what, what + strlen("credentials "), false, out, err);
		free(what);
		return r;
	}
	dir = env("CREDENTIALS_DIRECTORY");
	if (dir) {
		char *path = NULL, *what = NULL;

		if (asprintf(&path, "%s/" STORE_NAME, dir) < 0)
			return -ENOMEM;
		if (asprintf(&what, "$CREDENTIALS_DIRECTORY/" STORE_NAME " (%s)", path) < 0) {
			free(path);
			return -ENOMEM;
		}
		r = load_file(path, what, "$CREDENTIALS_DIRECTORY/" STORE_NAME, true, out, err);
		free(path);
		free(what);
		if (r <= 0)
			return r;
	}
	r = load_env(out, err);
	if (r <= 0)
		return r;
	out->source = strdup("anonymous");
	return out->source ? 0 : -ENOMEM;
}
