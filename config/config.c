/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c -- load wsyncd's INI file into struct wsync_config (config.h).
 *
 * config_keys[] is the whole schema: one row per key with its parser, its
 * printer (for --dump-config) and its bounds, in the manner of systemd's
 * gperf tables.  The inih callback only finds the row and calls it; the
 * rules that involve several keys run once the whole file has been read.
 *
 * What inih (Debian 12's libinih 55) does with the text, and what we set:
 *  - Whitespace around keys and values is stripped; keys are
 *    case-sensitive, enum-like values (role, log_level) are not.
 *  - A line whose first non-blank character is ';' or '#' is a comment.
 *  - After a value, only a ';' preceded by whitespace starts a comment
 *    ("threads = 4 ; why").  inih keeps a '#' there as part of the value,
 *    so we refuse any value containing whitespace + '#': silently loading
 *    "/srv/ckpt # old" as a path is worse than an error.
 *  - "key: value" works as well as "key = value" (a configparser habit).
 *  - A UTF-8 byte order mark at the start of the file is skipped.
 *  - Multi-line values (indented continuation lines) are switched off: a
 *    stray indented line is a syntax error rather than a second value.
 *  - Debian builds inih with a 200-byte stack buffer and silently splits
 *    longer lines into several.  Its runtime globals let us move to a heap
 *    buffer growing to WSYNC_CONFIG_MAX_LINE; longer lines are reported.
 * Those globals are process-wide, so loading is not thread-safe: wsyncd
 * loads its configuration on the main thread only.  They exist only in
 * Debian's build of inih (upstream has compile-time macros instead).
 *
 * Debian's handler has no line number (INI_HANDLER_LINENO is 0) and
 * ini_parse_file() returns only the first bad line.  So inih reads through
 * ini_parse_stream() with config_reader(), an fgets() over our own FILE
 * that counts physical lines and keeps a copy of the current one.  That
 * gives every issue its line, and lets finish_line() report every syntax
 * error and every unknown section (inih tells the handler neither), not
 * just the first.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <unistd.h>

#include "buf.h"
#include "error.h"
#include "store.h"
#include "units.h"
#include "url.h"

#define THREADS_MAX 1024
#define MEMORY_LIMIT_MIN (64 * MiB)	/* wsync diff/apply --memory: the same */
#define MEMORY_LIMIT_MAX (1024 * 1024 * MiB)
#define ANCHOR_EVERY_MAX 100000
#define POLL_MIN_MS 100
#define POLL_MAX_MS (24 * 3600 * 1000)
#define REGION_MAX 64
#define MiB (1024ULL * 1024)
#define GiB (1024ULL * MiB)
/* [store]'s bounds are store.h's (wsync_store_new refuses the others),
 * spelled out here because tests/integration/test-hostile.sh evaluates the
 * table's bounds from this file's #defines; the asserts keep them one. */
#define MAX_CONCURRENCY_MAX 1024
#define PART_SIZE_MIN (5 * MiB)
#define PART_SIZE_MAX (5 * GiB)
_Static_assert(MAX_CONCURRENCY_MAX == WSYNC_STORE_MAX_CONCURRENCY_MAX, "store.h's bound");
_Static_assert(PART_SIZE_MIN == WSYNC_STORE_PART_SIZE_MIN, "store.h's bound");
_Static_assert(PART_SIZE_MAX == WSYNC_STORE_PART_SIZE_MAX, "store.h's bound");
#define RETRY_ATTEMPTS_MAX 100
#define STORE_TIME_MIN_MS 100
#define RETRY_TIME_MAX_MS (24 * 3600 * 1000)
#define TIMEOUT_MAX_MS (3600 * 1000)
#define CONNECT_TIMEOUT_MAX_MS (300 * 1000)
#define FORMAT_MAX 64		/* a formatted number or duration */
#define SUGGEST_NAME_MAX 64	/* longer names get no "did you mean" */

/* Parsers and printers share one signature; not all use every argument. */
#define UNUSED __attribute__((unused))

#define URL_FORMS "file:///path, s3://bucket[/prefix] or hf://buckets/NAMESPACE/BUCKET[/prefix]"

enum {
	KEY_OPTIONAL = 1 << 0,	/* string; an empty value means "not set" */
	KEY_EMPTY_OK = 1 << 1,	/* string; an empty value is a value ("" kept) */
};

struct config_key;

/* Parse value into field (which points into struct wsync_config).  Returns
 * 0, -EINVAL with the reason in why, or -ENOMEM. */
typedef int (*config_parse_fn)(const struct config_key *k, const char *value,
			       void *field, struct wsync_error *why);

/* The value as it is written in the file, or NULL when unset.  buf (of
 * FORMAT_MAX bytes) holds the text when it is not a stored string. */
typedef const char *(*config_format_fn)(const struct config_key *k,
					const void *field, char *buf, size_t len);

struct config_key {
	const char *section;
	const char *key;
	config_parse_fn parse;
	config_format_fn format;
	size_t offset;		/* of the field in struct wsync_config */
	uint64_t min, max;	/* numbers: inclusive bounds */
	unsigned flags;		/* KEY_* */
	const char *const *names; /* ENUM_KEY's value names */
};

/* ---- value parsers and printers ---------------------------------------- */

/* An absolute path with repeated and trailing '/' collapsed.  "." and ".."
 * segments are refused so that comparing two paths means something (and
 * nobody points watch_dir at "/srv/x/../y" by accident). */
static int normalise_abs_path(const char *value, char **ret, struct wsync_error *why)
{
	size_t n = strlen(value);
	char *p, *o;

	if (value[0] != '/')
		return wsync_error_set(why, -EINVAL,
				       "expected an absolute path (starting with '/'), not \"%.64s\"",
				       value);
	if (n >= PATH_MAX)
		return wsync_error_set(why, -EINVAL, "path is %zu bytes long (at most %d)",
				       n, PATH_MAX - 1);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f)
			return wsync_error_set(why, -EINVAL,
					       "path contains control character 0x%02x",
					       (unsigned char)value[i]);
	p = strdup(value);
	if (!p)
		return -ENOMEM;
	o = p;
	for (const char *s = value; *s; s++) {
		if (*s == '/' && o > p && o[-1] == '/')
			continue;
		*o++ = *s;
	}
	if (o > p + 1 && o[-1] == '/')
		o--;
	*o = '\0';
	/* Segment check on the collapsed form: "/a/./b", "/a/..", "/.." */
	for (const char *seg = p + 1; *seg;) {
		size_t len = strcspn(seg, "/");

		if ((len == 1 && seg[0] == '.') || (len == 2 && seg[0] == '.' && seg[1] == '.')) {
			free(p);
			return wsync_error_set(why, -EINVAL,
					       "path \"%.64s\" must not contain \".\" or \"..\" segments",
					       value);
		}
		seg += len;
		if (*seg == '/')
			seg++;
	}
	*ret = p;
	return 0;
}

static int parse_path(UNUSED const struct config_key *k, const char *value, void *field,
		      struct wsync_error *why)
{
	char **dst = field, *p;
	int r;

	r = normalise_abs_path(value, &p, why);
	if (r < 0)
		return r;
	free(*dst);
	*dst = p;
	return 0;
}

static const char *format_string(UNUSED const struct config_key *k, const void *field,
				 UNUSED char *buf, UNUSED size_t len)
{
	return *(char *const *)field;
}

static int parse_uint32(const struct config_key *k, const char *value, void *field,
			struct wsync_error *why)
{
	uint64_t v;
	int r;

	r = wsync_parse_uint(value, &v);
	if (r == -EINVAL)
		return wsync_error_set(why, -EINVAL,
				       "expected a whole number from %" PRIu64 " to %" PRIu64
				       ", not \"%.64s\"", k->min, k->max, value);
	if (r < 0 || v < k->min || v > k->max)
		return wsync_error_set(why, -EINVAL,
				       "%.64s is out of range (%" PRIu64 "..%" PRIu64 ")",
				       value, k->min, k->max);
	*(uint32_t *)field = (uint32_t)v;
	return 0;
}

/* part = K/N: 1 <= K <= N <= WSYNC_MANIFEST_PARTS_MAX (9999); field is
 * part, and parts follows it in the struct. */
static int parse_part(UNUSED const struct config_key *k, const char *value, void *field,
		      struct wsync_error *why)
{
	unsigned kk, n;
	int used = 0;

	if (sscanf(value, "%u/%u%n", &kk, &n, &used) != 2 || value[used] != '\0' ||
	    !isdigit((unsigned char)value[0]) || kk < 1 || n < 1 || kk > n || n > 9999)
		return wsync_error_set(why, -EINVAL, "expected K/N with 1 <= K <= N <= 9999 "
				       "(this instance publishes part K of N), not \"%.64s\"",
				       value);
	((uint32_t *)field)[0] = kk;
	((uint32_t *)field)[1] = n;
	return 0;
}

static const char *format_part(UNUSED const struct config_key *k, const void *field,
			       char *buf, size_t len)
{
	snprintf(buf, len, "%u/%u", ((const uint32_t *)field)[0], ((const uint32_t *)field)[1]);
	return buf;
}

static const char *format_uint32(UNUSED const struct config_key *k, const void *field,
				 char *buf, size_t len)
{
	snprintf(buf, len, "%" PRIu32, *(const uint32_t *)field);
	return buf;
}

/* The largest unit that divides ms exactly, so that the text parses back
 * to the same number (2000 -> "2s", 1500 -> "1500ms"). */
static const char *format_ms(char *buf, size_t len, uint64_t ms)
{
	static const struct {
		uint64_t factor;
		const char *suffix;
	} units[] = {
		{ 86400000, "d" }, { 3600000, "h" }, { 60000, "min" }, { 1000, "s" },
	};

	for (size_t i = 0; ms && i < sizeof(units) / sizeof(units[0]); i++) {
		if (ms % units[i].factor == 0) {
			snprintf(buf, len, "%" PRIu64 "%s", ms / units[i].factor,
				 units[i].suffix);
			return buf;
		}
	}
	snprintf(buf, len, "%" PRIu64 "ms", ms);
	return buf;
}

static int parse_duration(const struct config_key *k, const char *value, void *field,
			  struct wsync_error *why)
{
	char lo[FORMAT_MAX], hi[FORMAT_MAX];
	uint64_t v;
	int r;

	r = wsync_parse_duration_ms(value, &v);
	if (r == -EINVAL)
		return wsync_error_set(why, -EINVAL,
				       "expected a duration like 500ms, 2s, 5min, 1h or 1d, not \"%.64s\"",
				       value);
	if (r < 0 || v < k->min || v > k->max)
		return wsync_error_set(why, -EINVAL, "%.64s is out of range (%s..%s)", value,
				       format_ms(lo, sizeof(lo), k->min),
				       format_ms(hi, sizeof(hi), k->max));
	*(uint64_t *)field = v;
	return 0;
}

static const char *format_duration(UNUSED const struct config_key *k, const void *field,
				   char *buf, size_t len)
{
	return format_ms(buf, len, *(const uint64_t *)field);
}

/* The largest binary unit that divides n exactly ("64MiB", "5GiB",
 * "5000000"), so the text parses back to the same number. */
static const char *format_bytes_exact(char *buf, size_t len, uint64_t n)
{
	static const char *const units[] = { "TiB", "GiB", "MiB", "KiB" };

	for (size_t i = 0; n && i < sizeof(units) / sizeof(units[0]); i++) {
		uint64_t f = 1ULL << (10 * (4 - i));

		if (n % f == 0) {
			snprintf(buf, len, "%" PRIu64 "%s", n / f, units[i]);
			return buf;
		}
	}
	snprintf(buf, len, "%" PRIu64, n);
	return buf;
}

static int parse_size(const struct config_key *k, const char *value, void *field,
		      struct wsync_error *why)
{
	char lo[FORMAT_MAX], hi[FORMAT_MAX];
	uint64_t v;
	int r;

	r = wsync_parse_size(value, &v);
	if (r == -EINVAL)
		return wsync_error_set(why, -EINVAL,
				       "expected a size like 64MiB, 1GiB or 500MB, not \"%.64s\"",
				       value);
	if (r < 0 || v < k->min || v > k->max)
		return wsync_error_set(why, -EINVAL, "%.64s is out of range (%s..%s)", value,
				       format_bytes_exact(lo, sizeof(lo), k->min),
				       format_bytes_exact(hi, sizeof(hi), k->max));
	*(uint64_t *)field = v;
	return 0;
}

static const char *format_size(UNUSED const struct config_key *k, const void *field,
			       char *buf, size_t len)
{
	return format_bytes_exact(buf, len, *(const uint64_t *)field);
}

/* auto, or a boolean: -1, 1, 0. */
static int parse_path_style(UNUSED const struct config_key *k, const char *value, void *field,
			    struct wsync_error *why)
{
	bool b;

	if (strcasecmp(value, "auto") == 0) {
		*(int *)field = -1;
		return 0;
	}
	if (wsync_parse_bool(value, &b) < 0)
		return wsync_error_set(why, -EINVAL,
				       "expected auto, true or false, not \"%.64s\"", value);
	*(int *)field = b;
	return 0;
}

static const char *format_path_style(UNUSED const struct config_key *k, const void *field,
				     UNUSED char *buf, UNUSED size_t len)
{
	int v = *(const int *)field;

	return v < 0 ? "auto" : v ? "true" : "false";
}

static int parse_role(UNUSED const struct config_key *k, const char *value, void *field,
		      struct wsync_error *why)
{
	enum wsync_role *role = field;

	if (strcasecmp(value, "publisher") == 0)
		*role = WSYNC_ROLE_PUBLISHER;
	else if (strcasecmp(value, "subscriber") == 0)
		*role = WSYNC_ROLE_SUBSCRIBER;
	else
		return wsync_error_set(why, -EINVAL,
				       "expected publisher or subscriber, not \"%.64s\"", value);
	return 0;
}

static const char *format_role(UNUSED const struct config_key *k, const void *field,
			       UNUSED char *buf, UNUSED size_t len)
{
	enum wsync_role role = *(const enum wsync_role *)field;

	return role == WSYNC_ROLE_UNSET ? NULL : wsync_role_name(role);
}

/* syslog's names, indexed by priority; "error" is accepted as an alias. */
static const char *const log_level_names[] = {
	[LOG_EMERG] = "emerg",	   [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
	[LOG_ERR] = "err",	   [LOG_WARNING] = "warning",
	[LOG_NOTICE] = "notice",   [LOG_INFO] = "info",	  [LOG_DEBUG] = "debug",
};

static int parse_log_level(UNUSED const struct config_key *k, const char *value, void *field,
			   struct wsync_error *why)
{
	int *level = field;

	if (strcasecmp(value, "error") == 0) {
		*level = LOG_ERR;
		return 0;
	}
	for (size_t i = 0; i < sizeof(log_level_names) / sizeof(log_level_names[0]); i++) {
		if (strcasecmp(value, log_level_names[i]) == 0) {
			*level = (int)i;
			return 0;
		}
	}
	return wsync_error_set(why, -EINVAL,
			       "expected one of emerg, alert, crit, err, warning, notice, "
			       "info, debug, not \"%.64s\"", value);
}

static const char *format_log_level(UNUSED const struct config_key *k, const void *field,
				    UNUSED char *buf, UNUSED size_t len)
{
	int level = *(const int *)field;

	if (level < 0 || (size_t)level >= sizeof(log_level_names) / sizeof(log_level_names[0]))
		return NULL;
	return log_level_names[level];
}

/* Kept as written; users of the setting parse it again with
 * wsync_url_parse(), which cannot fail on a string that passed here. */
static int parse_store_url(UNUSED const struct config_key *k, const char *value, void *field,
			   struct wsync_error *why)
{
	struct wsync_url url;
	char **dst = field, *s;
	int r;

	r = wsync_url_parse(value, &url, why);
	if (r < 0)
		return r;
	wsync_url_free(&url);
	s = strdup(value);
	if (!s)
		return -ENOMEM;
	free(*dst);
	*dst = s;
	return 0;
}

static bool is_host_char(char c)
{
	return isalnum((unsigned char)c) || c == '.' || c == '-';
}

/* http(s)://host[:port][/] -- an S3-compatible server.  The bucket and
 * prefix come from url, so a path here would be ambiguous; credentials
 * in it would end up in logs and in `--dump-config`. */
static int parse_endpoint(UNUSED const struct config_key *k, const char *value, void *field,
			  struct wsync_error *why)
{
	static const char expected[] = "expected http://HOST[:PORT] or https://HOST[:PORT]";
	const char *p, *end, *port = NULL;
	char **dst = field, *s;

	if (strncasecmp(value, "https://", 8) == 0)
		p = value + 8;
	else if (strncasecmp(value, "http://", 7) == 0)
		p = value + 7;
	else
		return wsync_error_set(why, -EINVAL, "%s, not \"%.64s\"", expected, value);
	end = strchrnul(p, '/');
	if (*end && end[1])
		return wsync_error_set(why, -EINVAL,
				       "must not have a path (%s; the bucket and prefix belong in url)",
				       expected);
	if (memchr(p, '@', (size_t)(end - p)))
		return wsync_error_set(why, -EINVAL,
				       "credentials must not appear in the endpoint "
				       "(use [store] credentials)");
	if (*p == '[') {	/* IPv6 literal */
		const char *q = p + 1;

		while (q < end && (isxdigit((unsigned char)*q) || *q == ':' || *q == '.'))
			q++;
		if (q == p + 1 || q >= end || *q != ']')
			return wsync_error_set(why, -EINVAL, "bad IPv6 address (%s)", expected);
		q++;
		if (q < end && *q != ':')
			return wsync_error_set(why, -EINVAL, "bad host (%s)", expected);
		if (q < end)
			port = q + 1;
	} else {
		const char *q = p;

		while (q < end && is_host_char(*q))
			q++;
		if (q == p || (q < end && *q != ':'))
			return wsync_error_set(why, -EINVAL, "bad host \"%.*s\" (%s)",
					       (int)(end - p > 64 ? 64 : end - p), p, expected);
		if (q < end)
			port = q + 1;
	}
	if (port) {
		unsigned long v = 0;
		const char *q = port;

		for (; q < end && *q >= '0' && *q <= '9' && v <= 65535; q++)
			v = v * 10 + (unsigned long)(*q - '0');
		if (q == port || q != end || v == 0 || v > 65535)
			return wsync_error_set(why, -EINVAL,
					       "bad port \"%.*s\" (expected 1..65535)",
					       (int)(end - port > 16 ? 16 : end - port), port);
	}
	s = strndup(value, (size_t)(end - value));	/* drop a trailing '/' */
	if (!s)
		return -ENOMEM;
	free(*dst);
	*dst = s;
	return 0;
}

/* AWS-style region names: us-east-1, eu-central-1, auto (R2), ... */
static int parse_region(const struct config_key *k, const char *value, void *field,
			struct wsync_error *why)
{
	size_t n = strlen(value);
	char **dst = field, *s;

	if (n == 0 || n > k->max || strspn(value, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
		return wsync_error_set(why, -EINVAL,
				       "expected a region name like us-east-1 (1 to %" PRIu64
				       " characters of a-z, 0-9 and '-'), not \"%.64s\"",
				       k->max, value);
	s = strdup(value);
	if (!s)
		return -ENOMEM;
	free(*dst);
	*dst = s;
	return 0;
}

/* A string of printable characters, 1..max bytes (0 allowed with
 * KEY_EMPTY_OK). */
static int parse_text(const struct config_key *k, const char *value, void *field,
		      struct wsync_error *why)
{
	size_t n = strlen(value);
	char **dst = field, *s;

	if ((n == 0 && !(k->flags & KEY_EMPTY_OK)) || n > k->max)
		return wsync_error_set(why, -EINVAL, "expected 1 to %" PRIu64 " characters",
				       k->max);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f)
			return wsync_error_set(why, -EINVAL, "contains control character 0x%02x",
					       (unsigned char)value[i]);
	s = strdup(value);
	if (!s)
		return -ENOMEM;
	free(*dst);
	*dst = s;
	return 0;
}

/* [daemon] metrics_file: "" (off), a file name in runtime_dir, or an
 * absolute path; either way a "*.prom" name, the only files
 * node_exporter's textfile collector reads. */
static int parse_metrics_file(const struct config_key *k, const char *value, void *field,
			      struct wsync_error *why)
{
	size_t n = strlen(value);
	const char *name = strrchr(value, '/') ? strrchr(value, '/') + 1 : value;

	if (n > 0 && (strlen(name) <= 5 || strcmp(value + n - 5, ".prom") != 0 || name[0] == '.'))
		return wsync_error_set(why, -EINVAL, "expected a file name ending in \".prom\" "
				       "(node_exporter's textfile collector reads no other), "
				       "not \"%.64s\"", value);
	if (value[0] == '/')
		return parse_path(k, value, field, why);
	if (strchr(value, '/'))
		return wsync_error_set(why, -EINVAL, "expected a file name in runtime_dir or an "
				       "absolute path, not \"%.64s\"", value);
	return parse_text(k, value, field, why);
}

/* A file name (no '/'), for [publisher] marker. */
static int parse_file_name(const struct config_key *k, const char *value, void *field,
			   struct wsync_error *why)
{
	if (strchr(value, '/') || strcmp(value, ".") == 0 || strcmp(value, "..") == 0)
		return wsync_error_set(why, -EINVAL,
				       "expected a file name without '/', not \"%.64s\"", value);
	return parse_text(k, value, field, why);
}

/* Space-separated globs, each a relative pattern without "..". */
static int parse_globs(const struct config_key *k, const char *value, void *field,
		       struct wsync_error *why)
{
	char *copy = strdup(value), *save = NULL;

	if (!copy)
		return -ENOMEM;
	for (char *g = strtok_r(copy, " \t", &save); g; g = strtok_r(NULL, " \t", &save)) {
		if (g[0] == '/' || strstr(g, "..")) {
			int r = wsync_error_set(why, -EINVAL,
						"pattern \"%.64s\" must be relative and without \"..\"",
						g);
			free(copy);
			return r;
		}
	}
	free(copy);
	return parse_text(k, value, field, why);
}

/* [publisher] part_keys: space-separated absolute paths of public keys,
 * one per part in order 1..N (checked against N after parsing; the keys
 * themselves are read by the publisher and by --check-config). */
static int parse_key_paths(const struct config_key *k, const char *value, void *field,
			   struct wsync_error *why)
{
	char *copy = strdup(value), *save = NULL;

	if (!copy)
		return -ENOMEM;
	for (char *g = strtok_r(copy, " \t", &save); g; g = strtok_r(NULL, " \t", &save)) {
		if (g[0] != '/' || strstr(g, "/../") || strstr(g, "/./")) {
			int r = wsync_error_set(why, -EINVAL, "\"%.64s\" is not an absolute path "
						"(one public key per part, 1 to N, space-separated)", g);
			free(copy);
			return r;
		}
	}
	free(copy);
	return parse_text(k, value, field, why);
}

unsigned wsync_config_part_keys_count(const struct wsync_config *cfg)
{
	unsigned n = 0;

	for (const char *s = cfg->part_keys; s && *s;) {
		s += strspn(s, " \t");
		if (!*s)
			break;
		n++;
		s += strcspn(s, " \t");
	}
	return n;
}

int wsync_config_part_key(const struct wsync_config *cfg, unsigned k, char *buf, size_t len)
{
	unsigned n = 0;

	for (const char *s = cfg->part_keys; s && *s;) {
		size_t l;

		s += strspn(s, " \t");
		if (!*s)
			break;
		l = strcspn(s, " \t");
		if (++n == k) {
			if (l >= len)
				return -ENAMETOOLONG;
			memcpy(buf, s, l);
			buf[l] = '\0';
			return 0;
		}
		s += l;
	}
	return -ENOENT;
}

/* [subscriber] notify_url: http:// or https://, a host, printable ASCII
 * without spaces.  libcurl parses it for real when the POST is made. */
static int parse_notify_url(UNUSED const struct config_key *k, const char *value, void *field,
			    struct wsync_error *why)
{
	const char *host = strncasecmp(value, "http://", 7) == 0 ? value + 7 :
			   strncasecmp(value, "https://", 8) == 0 ? value + 8 : NULL;
	char **dst = field, *s;
	size_t n = strlen(value);

	if (!host || !*host || *host == '/' || *host == ':')
		return wsync_error_set(why, -EINVAL,
				       "expected an http:// or https:// URL with a host, not \"%.64s\"",
				       value);
	if (n > 4096)
		return wsync_error_set(why, -EINVAL, "longer than 4096 characters");
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)value[i] <= 0x20 || (unsigned char)value[i] >= 0x7f)
			return wsync_error_set(why, -EINVAL,
					       "contains a space or a control or non-ASCII byte "
					       "(percent-encode it)");
	s = strdup(value);
	if (!s)
		return -ENOMEM;
	free(*dst);
	*dst = s;
	return 0;
}

/* The names of an enum's values, by value, NULL after the last
 * ([section] key = name, config_key.names). */
static const char *const complete_names[] = {
	[WSYNC_COMPLETE_MARKER] = "marker",
	[WSYNC_COMPLETE_INDEX] = "index",
	[WSYNC_COMPLETE_QUIET] = "quiet",
	NULL,
};

static const char *const watch_mode_names[] = {
	[WSYNC_WATCH_INOTIFY] = "inotify",
	[WSYNC_WATCH_POLL] = "poll",
	NULL,
};

static const char *const layout_names[] = {
	[WSYNC_LAYOUT_INPLACE] = "inplace",
	[WSYNC_LAYOUT_SYMLINK] = "symlink",
	NULL,
};

static const char *const ahead_pace_names[] = {
	[WSYNC_AHEAD_PACE_YIELD] = "yield",
	[WSYNC_AHEAD_PACE_OFF] = "off",
	NULL,
};

static const char *const page_cache_names[] = {
	[WSYNC_PAGE_CACHE_AROUND] = "around",
	[WSYNC_PAGE_CACHE_THROUGH] = "through",
	NULL,
};

static int parse_name_in(const char *const *names, size_t n, const char *value, int *ret,
			 struct wsync_error *why)
{
	char list[128] = "";

	for (size_t i = 0; i < n; i++) {
		if (strcasecmp(value, names[i]) == 0) {
			*ret = (int)i;
			return 0;
		}
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
			 i ? (i + 1 == n ? " or " : ", ") : "", names[i]);
	}
	return wsync_error_set(why, -EINVAL, "expected %s, not \"%.64s\"", list, value);
}

/* One of k->names, stored as its value in an enum field (ENUM_KEY checks
 * that the field is an int's size). */
static int parse_named(const struct config_key *k, const char *value, void *field,
		       struct wsync_error *why)
{
	size_t n = 0;
	int v = 0, r;

	while (k->names[n])
		n++;
	r = parse_name_in(k->names, n, value, &v, why);
	if (r == 0)
		memcpy(field, &v, sizeof(v));
	return r;
}

static const char *format_named(const struct config_key *k, const void *field,
				UNUSED char *buf, UNUSED size_t len)
{
	int v;

	memcpy(&v, field, sizeof(v));
	return k->names[v];
}

/* ---- the schema --------------------------------------------------------- */

/* Rows of one section stay together: dump and the section list rely on it.
 * The parser must match the field's type (char *, uint32_t, uint64_t, int,
 * enum wsync_role); the defaults live in wsync_config_init(). */
#define KEY(sec, name, parser, formatter, field, ...)                          \
	{ .section = (sec), .key = (name), .parse = (parser),                  \
	  .format = (formatter),                                               \
	  .offset = offsetof(struct wsync_config, field), __VA_ARGS__ }
/* An enum field named by value_names (the offset is invalid unless the
 * field is an int's size, as parse_named stores it). */
#define ENUM_KEY(sec, name, value_names, field)                               \
	KEY(sec, name, parse_named, format_named, field, .names = (value_names), \
	    .offset = offsetof(struct wsync_config, field) +                     \
		      0 * sizeof(char[sizeof(((struct wsync_config *)0)->field) == \
				      sizeof(int) ? 1 : -1]))

static const struct config_key config_keys[] = {
	KEY("daemon", "role", parse_role, format_role, role),
	KEY("daemon", "state_dir", parse_path, format_string, state_dir),
	KEY("daemon", "runtime_dir", parse_path, format_string, runtime_dir),
	KEY("daemon", "threads", parse_uint32, format_uint32, threads,
	    .min = 1, .max = THREADS_MAX),
	KEY("daemon", "memory_limit", parse_size, format_size, memory_limit,
	    .min = MEMORY_LIMIT_MIN, .max = MEMORY_LIMIT_MAX),
	KEY("daemon", "log_level", parse_log_level, format_log_level, log_level),
	KEY("daemon", "metrics_file", parse_metrics_file, format_string, metrics_file,
	    .max = 255, .flags = KEY_EMPTY_OK),
	KEY("store", "url", parse_store_url, format_string, store_url),
	KEY("store", "endpoint", parse_endpoint, format_string, endpoint,
	    .flags = KEY_OPTIONAL),
	KEY("store", "region", parse_region, format_string, region, .max = REGION_MAX),
	KEY("store", "credentials", parse_path, format_string, credentials,
	    .flags = KEY_OPTIONAL),
	KEY("store", "path_style", parse_path_style, format_path_style, path_style),
	KEY("store", "ca_file", parse_path, format_string, ca_file, .flags = KEY_OPTIONAL),
	KEY("store", "max_concurrency", parse_uint32, format_uint32, max_concurrency,
	    .min = 1, .max = MAX_CONCURRENCY_MAX),
	KEY("store", "part_size", parse_size, format_size, part_size,
	    .min = PART_SIZE_MIN, .max = PART_SIZE_MAX),
	KEY("store", "retry_attempts", parse_uint32, format_uint32, retry_attempts,
	    .min = 1, .max = RETRY_ATTEMPTS_MAX),
	KEY("store", "retry_max_time", parse_duration, format_duration, retry_max_time_ms,
	    .min = STORE_TIME_MIN_MS, .max = RETRY_TIME_MAX_MS),
	KEY("store", "timeout", parse_duration, format_duration, timeout_ms,
	    .min = STORE_TIME_MIN_MS, .max = TIMEOUT_MAX_MS),
	KEY("store", "connect_timeout", parse_duration, format_duration, connect_timeout_ms,
	    .min = STORE_TIME_MIN_MS, .max = CONNECT_TIMEOUT_MAX_MS),
	KEY("publisher", "watch_dir", parse_path, format_string, watch_dir),
	KEY("publisher", "anchor_every", parse_uint32, format_uint32, anchor_every,
	    .min = 1, .max = ANCHOR_EVERY_MAX),
	KEY("publisher", "step_pattern", parse_text, format_string, step_pattern,
	    .max = 255, .flags = KEY_EMPTY_OK),
	ENUM_KEY("publisher", "complete_when", complete_names, complete_when),
	KEY("publisher", "marker", parse_file_name, format_string, marker, .max = 255),
	KEY("publisher", "quiet_period", parse_duration, format_duration, quiet_period_ms,
	    .min = 1000, .max = 86400000),
	KEY("publisher", "settle_time", parse_duration, format_duration, settle_time_ms,
	    .min = 0, .max = 3600000),
	ENUM_KEY("publisher", "watch_mode", watch_mode_names, watch_mode),
	KEY("publisher", "rescan_interval", parse_duration, format_duration,
	    rescan_interval_ms, .min = 100, .max = 86400000),
	KEY("publisher", "include", parse_globs, format_string, include, .max = 4096),
	KEY("publisher", "exclude", parse_globs, format_string, exclude, .max = 4096,
	    .flags = KEY_EMPTY_OK),
	KEY("publisher", "chunk_size", parse_size, format_size, chunk_size,
	    .min = 0, .max = 4ull << 30),
	KEY("publisher", "keep_anchors", parse_uint32, format_uint32, keep_anchors,
	    .min = 1, .max = 1000),
	KEY("publisher", "gc_grace", parse_duration, format_duration, gc_grace_ms,
	    .min = 0, .max = 7 * 86400000ull),
	KEY("publisher", "signing_key", parse_path, format_string, signing_key,
	    .flags = KEY_OPTIONAL),
	KEY("publisher", "part", parse_part, format_part, part),
	KEY("publisher", "part_files", parse_globs, format_string, part_files, .max = 4096,
	    .flags = KEY_EMPTY_OK),
	KEY("publisher", "part_keys", parse_key_paths, format_string, part_keys, .max = 16384,
	    .flags = KEY_EMPTY_OK),
	KEY("publisher", "part_wait_alarm", parse_duration, format_duration,
	    part_wait_alarm_ms, .min = 1000, .max = 7 * 86400000ull),
	KEY("publisher", "writer_lease", parse_duration, format_duration, writer_lease_ms,
	    .min = 3000, .max = 3600000ull),
	KEY("subscriber", "target_dir", parse_path, format_string, target_dir),
	KEY("subscriber", "poll_interval", parse_duration, format_duration,
	    poll_interval_ms, .min = POLL_MIN_MS, .max = POLL_MAX_MS),
	KEY("subscriber", "verify_key", parse_path, format_string, verify_key,
	    .flags = KEY_OPTIONAL),
	KEY("subscriber", "max_head_age", parse_duration, format_duration, max_head_age_ms,
	    .min = 0, .max = 365 * 86400000ull),
	KEY("subscriber", "on_apply", parse_text, format_string, on_apply, .max = 4096,
	    .flags = KEY_OPTIONAL),
	KEY("subscriber", "on_apply_timeout", parse_duration, format_duration,
	    on_apply_timeout_ms, .min = 100, .max = 3600000),
	KEY("subscriber", "notify_url", parse_notify_url, format_string, notify_url,
	    .flags = KEY_OPTIONAL),
	ENUM_KEY("subscriber", "layout", layout_names, layout),
	KEY("subscriber", "ahead_max", parse_size, format_size, ahead_max,
	    .min = 0, .max = 1ull << 50),
	ENUM_KEY("subscriber", "ahead_pace", ahead_pace_names, ahead_pace),
	ENUM_KEY("subscriber", "page_cache", page_cache_names, page_cache),
	KEY("subscriber", "include", parse_globs, format_string, sub_include, .max = 4096),
	KEY("subscriber", "exclude", parse_globs, format_string, sub_exclude, .max = 4096,
	    .flags = KEY_EMPTY_OK),
};

#define N_KEYS (sizeof(config_keys) / sizeof(config_keys[0]))
_Static_assert(N_KEYS <= WSYNC_CONFIG_KEYS_MAX, "raise WSYNC_CONFIG_KEYS_MAX");

static const struct config_key *find_key(const char *section, const char *key)
{
	for (size_t i = 0; i < N_KEYS; i++)
		if (strcmp(config_keys[i].section, section) == 0 &&
		    strcmp(config_keys[i].key, key) == 0)
			return &config_keys[i];
	return NULL;
}

static bool section_known(const char *section, size_t n)
{
	for (size_t i = 0; i < N_KEYS; i++)
		if (strlen(config_keys[i].section) == n &&
		    strncmp(config_keys[i].section, section, n) == 0)
			return true;
	return false;
}

/* Levenshtein distance, case-insensitive (so "Role" suggests "role");
 * UINT_MAX for names too long to bother with. */
static unsigned edit_distance(const char *a, size_t la, const char *b)
{
	unsigned row[SUGGEST_NAME_MAX + 1];
	size_t lb = strlen(b);

	if (la > SUGGEST_NAME_MAX || lb > SUGGEST_NAME_MAX)
		return UINT_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = (unsigned)j;
	for (size_t i = 1; i <= la; i++) {
		unsigned diag = row[0];

		row[0] = (unsigned)i;
		for (size_t j = 1; j <= lb; j++) {
			unsigned up = row[j];
			unsigned cost = tolower((unsigned char)a[i - 1]) !=
					tolower((unsigned char)b[j - 1]);
			unsigned best = diag + cost;

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* Close enough to be a typo: one edit for short names, two for longer. */
static bool is_typo_of(const char *name, size_t n, const char *candidate)
{
	return edit_distance(name, n, candidate) <= (strlen(candidate) > 5 ? 2u : 1u);
}

/* "a, b, c or d" of the keys of section (or of the sections when section
 * is NULL, as "[a], [b] ..."), malloc'd; NULL on ENOMEM. */
static char *name_list(const char *section)
{
	const char *names[N_KEYS];
	size_t n = 0, len = 1;
	char *s, *o;

	for (size_t i = 0; i < N_KEYS; i++) {
		if (section && strcmp(config_keys[i].section, section) == 0)
			names[n++] = config_keys[i].key;
		else if (!section && (i == 0 || strcmp(config_keys[i].section,
						       config_keys[i - 1].section) != 0))
			names[n++] = config_keys[i].section;
	}
	for (size_t i = 0; i < n; i++)
		len += strlen(names[i]) + 6;
	s = o = malloc(len);
	if (!s)
		return NULL;
	*o = '\0';
	for (size_t i = 0; i < n; i++)
		o += sprintf(o, "%s%s%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ",
			     section ? "" : "[", names[i], section ? "" : "]");
	return s;
}

/* ---- the parse ---------------------------------------------------------- */

struct parse_state {
	struct wsync_config *cfg;
	struct wsync_config_errors *errs;
	const char *path;
	FILE *f;
	size_t first_issue;	/* errs->n when this load started */
	unsigned seen[N_KEYS];	/* line where each key was given, 0 if not */

	/* config_reader()'s view of the file */
	unsigned lineno;	/* current physical line, 1-based */
	char *line;		/* copy of it, for finish_line() */
	size_t len, cap;
	bool line_open;		/* line holds a line not yet finished */
	bool at_line_start;	/* the next read starts a new line */
	bool line_too_long;	/* reported; inih only has its beginning */
	bool line_has_key;	/* inih called the handler for it */
	int read_errno;
	bool oom;
};

static void add_issue(struct parse_state *st, unsigned line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void add_issue(struct parse_state *st, unsigned line, const char *fmt, ...)
{
	struct wsync_config_errors *errs = st->errs;
	char *msg, *text;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (r < 0) {
		st->oom = true;
		return;
	}
	if (line)
		r = asprintf(&text, "%s:%u: %s", st->path, line, msg);
	else
		r = asprintf(&text, "%s: %s", st->path, msg);
	free(msg);
	if (r < 0) {
		st->oom = true;
		return;
	}
	if (WSYNC_GROW(errs->items, errs->cap, errs->n, 8) < 0) {
		free(text);
		st->oom = true;
		return;
	}
	errs->items[errs->n].line = line;
	errs->items[errs->n].text = text;
	errs->n++;
}

static bool has_issue_on_line(const struct parse_state *st, unsigned line)
{
	for (size_t i = st->first_issue; i < st->errs->n; i++)
		if (st->errs->items[i].line == line)
			return true;
	return false;
}

static size_t n_issues(const struct parse_state *st)
{
	return st->errs->n - st->first_issue;
}

static void unknown_key(struct parse_state *st, const char *section, const char *name)
{
	const char *other = NULL, *typo = NULL;
	char *list;

	for (size_t i = 0; i < N_KEYS; i++) {
		const struct config_key *k = &config_keys[i];

		if (strcmp(k->section, section) != 0) {
			if (strcmp(k->key, name) == 0)
				other = k->section;
		} else if (!typo && is_typo_of(name, strlen(name), k->key)) {
			typo = k->key;
		}
	}
	if (other) {
		add_issue(st, st->lineno, "[%s] %s: unknown key in [%s]; %s belongs in [%s]",
			  section, name, section, name, other);
	} else if (typo) {
		add_issue(st, st->lineno, "[%s] %s: unknown key (did you mean %s?)",
			  section, name, typo);
	} else {
		list = name_list(section);
		if (!list) {
			st->oom = true;
			return;
		}
		add_issue(st, st->lineno, "[%s] %s: unknown key (valid keys in [%s]: %s)",
			  section, name, section, list);
		free(list);
	}
}

/* inih only reports a key outside any section as section "". */
static void key_outside_section(struct parse_state *st, const char *name)
{
	const char *home = NULL;
	char *list;

	for (size_t i = 0; i < N_KEYS; i++)
		if (strcmp(config_keys[i].key, name) == 0)
			home = config_keys[i].section;
	if (home) {
		add_issue(st, st->lineno, "%s: key outside of any section (it belongs in [%s])",
			  name, home);
		return;
	}
	list = name_list(NULL);
	if (!list) {
		st->oom = true;
		return;
	}
	add_issue(st, st->lineno, "%s: key outside of any section (sections are %s)",
		  name, list);
	free(list);
}

/* inih's handler: returns nonzero when the line was fine (inih's own
 * bookkeeping; every problem is recorded in st->errs either way). */
static int config_handler(void *user, const char *section, const char *name,
			  const char *value)
{
	struct parse_state *st = user;
	const struct config_key *k;
	struct wsync_error why = { 0 };
	void *field;
	size_t idx;
	int r;

	st->line_has_key = true;
	if (st->line_too_long)
		return 1;	/* reported already; inih saw a truncated value */
	if (!*name) {
		add_issue(st, st->lineno, "missing key name before '='");
		return 0;
	}
	if (!*section) {
		key_outside_section(st, name);
		return 0;
	}
	if (!section_known(section, strlen(section)))
		return 1;	/* finish_line() reported the section header */
	k = find_key(section, name);
	if (!k) {
		unknown_key(st, section, name);
		return 0;
	}
	idx = (size_t)(k - config_keys);
	if (st->seen[idx]) {
		add_issue(st, st->lineno, "[%s] %s: given twice (first on line %u); "
			  "each key may appear once", section, name, st->seen[idx]);
		return 0;
	}
	st->seen[idx] = st->lineno;
	for (const char *h = strchr(value, '#'); h; h = strchr(h + 1, '#')) {
		if (h > value && isspace((unsigned char)h[-1])) {
			add_issue(st, st->lineno, "[%s] %s: value contains \" #\": '#' starts a "
				  "comment only at the beginning of a line (after a value, use \" ;\")",
				  section, name);
			return 0;
		}
	}
	field = (char *)st->cfg + k->offset;
	if (!*value && (k->flags & KEY_OPTIONAL)) {
		char **s = field;

		free(*s);
		*s = NULL;
		return 1;
	}
	r = k->parse(k, value, field, &why);
	if (r == -ENOMEM) {
		st->oom = true;
		return 0;
	}
	if (r < 0) {
		add_issue(st, st->lineno, "[%s] %s: %s%s", section, name,
			  *value ? "" : "empty value; ", wsync_error_str(&why));
		return 0;
	}
	return 1;
}

/* Called once per physical line after inih is done with it: report what
 * inih rejected or never showed the handler (section headers, syntax
 * errors).  Mirrors inih's own classification of a line. */
static void finish_line(struct parse_state *st)
{
	char *p = st->line, *end;

	st->line_open = false;
	if (st->line_too_long || st->line_has_key || !p)
		return;
	if (st->lineno == 1 && st->len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
		p += 3;	/* the byte order mark inih skips */
	while (*p && isspace((unsigned char)*p))
		p++;
	end = p + strlen(p);
	while (end > p && isspace((unsigned char)end[-1]))
		end--;
	if (p == end || *p == ';' || *p == '#')
		return;
	if (*p == '[') {
		/* inih: the name ends at ']' or at an inline comment (" ;") */
		char *q = p + 1;
		bool was_space = false;

		while (q < end && *q != ']' && !(was_space && *q == ';')) {
			was_space = isspace((unsigned char)*q);
			q++;
		}
		if (q < end && *q == ']') {
			size_t n = (size_t)(q - p - 1);
			const char *typo = NULL;
			char *list;

			if (section_known(p + 1, n))
				return;
			for (size_t i = 0; i < N_KEYS && !typo; i++)
				if (is_typo_of(p + 1, n, config_keys[i].section))
					typo = config_keys[i].section;
			if (typo) {
				add_issue(st, st->lineno,
					  "[%.*s]: unknown section (did you mean [%s]?)",
					  (int)(n > 64 ? 64 : n), p + 1, typo);
				return;
			}
			list = name_list(NULL);
			if (!list) {
				st->oom = true;
				return;
			}
			add_issue(st, st->lineno, "[%.*s]: unknown section (valid sections: %s)",
				  (int)(n > 64 ? 64 : n), p + 1, list);
			free(list);
			return;
		}
		add_issue(st, st->lineno, "syntax error: section header without ']'");
		return;
	}
	add_issue(st, st->lineno, "syntax error: expected \"key = value\", "
		  "\"[section]\" or a comment");
}

static void append_line(struct parse_state *st, const char *s, size_t n)
{
	if (st->len + n + 1 > st->cap) {
		size_t cap = st->cap ? st->cap : 256;
		char *line;

		while (cap < st->len + n + 1)
			cap *= 2;
		line = realloc(st->line, cap);
		if (!line) {
			st->oom = true;
			return;
		}
		st->line = line;
		st->cap = cap;
	}
	memcpy(st->line + st->len, s, n + 1);
	st->len += n;
}

/* inih's ini_reader: fgets() on st->f, keeping count of physical lines.
 * inih calls it again for the same line while its buffer grows; a line
 * that would not fit in ini_max_line is reported and its tail dropped, so
 * inih's line count stays equal to ours. */
static char *config_reader(char *str, int num, void *stream)
{
	struct parse_state *st = stream;
	size_t n;
	int c;

	/* inih's buffer is full: it asks for 0 bytes, as fgets would answer */
	if (num <= 1) {
		if (num < 1)
			return NULL;
		str[0] = '\0';
		return str;
	}
	if (st->line_open && !st->at_line_start && st->line_too_long) {
		while ((c = getc(st->f)) != EOF && c != '\n')
			;
		st->at_line_start = true;
	}
	if (!fgets(str, num, st->f)) {
		if (ferror(st->f))
			st->read_errno = errno ? errno : EIO;
		return NULL;
	}
	if (st->at_line_start) {
		if (st->line_open)
			finish_line(st);
		st->lineno++;
		st->line_open = true;
		st->line_has_key = false;
		st->line_too_long = false;
		st->len = 0;
	}
	n = strlen(str);
	append_line(st, str, n);
	if (n > 0 && str[n - 1] == '\n') {
		st->at_line_start = true;
		return str;
	}
	c = getc(st->f);
	if (c == EOF) {		/* last line, no newline */
		if (ferror(st->f))
			st->read_errno = errno ? errno : EIO;
		st->at_line_start = true;
		return str;
	}
	(void)ungetc(c, st->f);
	st->at_line_start = false;
	if (st->len >= (size_t)ini_max_line - 1) {
		st->line_too_long = true;
		add_issue(st, st->lineno, "line too long (more than %d characters)",
			  ini_max_line - 2);
	}
	return str;
}

/* Debian's inih keeps its options in globals: set every one we depend on,
 * whatever another caller in the process may have left there. */
static void configure_inih(void)
{
	static char start_comments[] = ";#";
	static char inline_comments[] = ";";

	ini_use_stack = false;
	ini_allow_realloc = true;
	ini_initial_alloc = 256;
	ini_max_line = WSYNC_CONFIG_MAX_LINE;
	ini_allow_multiline = false;
	ini_allow_bom = true;
	ini_allow_inline_comments = true;
	ini_inline_comment_prefixes = inline_comments;
	ini_start_comment_prefixes = start_comments;
	ini_allow_no_value = false;
	ini_stop_on_first_error = false;
}

static unsigned seen_line(const struct parse_state *st, const char *section, const char *key)
{
	const struct config_key *k = find_key(section, key);

	return k ? st->seen[k - config_keys] : 0;
}

/* Is a the same directory as b, or inside it?  Both are normalised. */
static bool path_within(const char *a, const char *b)
{
	size_t n = strlen(b);

	return strncmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '/' || n == 1);
}

/* Rules across keys, once the whole file is read.  A key that was given
 * but failed to parse is not reported again as missing. */
static void validate(struct parse_state *st)
{
	const struct wsync_config *cfg = st->cfg;
	struct wsync_error why = { 0 };
	struct wsync_url url;
	int r;

	if (cfg->role == WSYNC_ROLE_UNSET && !seen_line(st, "daemon", "role"))
		add_issue(st, 0, "[daemon] role: missing (set it to publisher or subscriber)");
	if (!cfg->store_url && !seen_line(st, "store", "url"))
		add_issue(st, 0, "[store] url: missing (expected " URL_FORMS ")");
	if (cfg->role == WSYNC_ROLE_PUBLISHER && !cfg->watch_dir &&
	    !seen_line(st, "publisher", "watch_dir"))
		add_issue(st, 0, "[publisher] watch_dir: missing (required when role = publisher)");
	if (cfg->role == WSYNC_ROLE_SUBSCRIBER && !cfg->target_dir &&
	    !seen_line(st, "subscriber", "target_dir"))
		add_issue(st, 0, "[subscriber] target_dir: missing (required when role = subscriber)");
	if (cfg->part_files && *cfg->part_files && cfg->parts < 2)
		add_issue(st, seen_line(st, "publisher", "part_files"),
			  "[publisher] part_files: names this part's files, but there is one "
			  "part (set part = K/N, N of 2 or more, or remove it)");
	if (cfg->part_keys && *cfg->part_keys) {
		unsigned n = wsync_config_part_keys_count(cfg);
		unsigned line = seen_line(st, "publisher", "part_keys");

		if (cfg->parts < 2)
			add_issue(st, line, "[publisher] part_keys: names the parts' public keys, "
				  "but there is one part (set part = K/N, N of 2 or more, or "
				  "remove it)");
		else if (n != cfg->parts)
			add_issue(st, line, "[publisher] part_keys: %u public keys for %u parts "
				  "(name one per part, part 1's first, the same line on every "
				  "part)", n, cfg->parts);
		else if (cfg->part_files && *cfg->part_files)
			add_issue(st, line, "[publisher] part_keys: with part_files, part 1 cannot "
				  "check that a part sends only its own files (it does not know "
				  "another node's part_files): take the files by the rule, or "
				  "share one key (BUCKET.md section 7)");
		else if (!cfg->signing_key || !*cfg->signing_key)
			add_issue(st, line, "[publisher] part_keys: needs this part's own "
				  "signing_key");
	}
	if (cfg->watch_dir && cfg->target_dir && strcmp(cfg->watch_dir, cfg->target_dir) == 0)
		add_issue(st, seen_line(st, "subscriber", "target_dir"),
			  "[subscriber] target_dir: same directory as [publisher] watch_dir");

	if (!cfg->store_url)
		return;
	r = wsync_url_parse(cfg->store_url, &url, &why);
	if (r == -ENOMEM)
		st->oom = true;
	if (r < 0)
		return;
	if (url.scheme == WSYNC_URL_FILE) {
		const char *dir = cfg->role == WSYNC_ROLE_PUBLISHER ? cfg->watch_dir :
				  cfg->role == WSYNC_ROLE_SUBSCRIBER ? cfg->target_dir : NULL;

		if (cfg->endpoint)
			add_issue(st, seen_line(st, "store", "endpoint"),
				  "[store] endpoint: not used with a file:// url; remove it "
				  "(only s3:// and hf:// stores have an endpoint)");
		if (cfg->path_style >= 0)
			add_issue(st, seen_line(st, "store", "path_style"),
				  "[store] path_style: not used with a file:// url; remove it "
				  "(it chooses how s3:// requests address the bucket)");
		if (cfg->ca_file)
			add_issue(st, seen_line(st, "store", "ca_file"),
				  "[store] ca_file: not used with a file:// url; remove it "
				  "(only s3:// and hf:// stores speak TLS)");
		/* The publisher would see its own uploads as new files, the
		 * subscriber would apply deltas over the bucket. */
		if (dir && (path_within(url.path, dir) || path_within(dir, url.path)))
			add_issue(st, seen_line(st, "store", "url"),
				  "[store] url: bucket directory %s overlaps [%s] %s %s",
				  url.path, cfg->role == WSYNC_ROLE_PUBLISHER ? "publisher" : "subscriber",
				  cfg->role == WSYNC_ROLE_PUBLISHER ? "watch_dir" : "target_dir", dir);
	}
	/* The Hub's S3 gateway knows no virtual-hosted buckets. */
	if (url.scheme == WSYNC_URL_HF && cfg->path_style == 0)
		add_issue(st, seen_line(st, "store", "path_style"),
			  "[store] path_style: hf:// buckets are reached path-style only; "
			  "remove it or set it to auto or true");
	wsync_url_free(&url);
}

int wsync_config_load(struct wsync_config *cfg, const char *path,
		      struct wsync_config_errors *errs)
{
	struct wsync_config_errors local = { 0 };
	struct parse_state st = {
		.cfg = cfg,
		.errs = errs ? errs : &local,
		.path = path,
		.at_line_start = true,
	};
	int r, ret;

	st.first_issue = st.errs->n;
	free(cfg->path);
	cfg->path = strdup(path);
	if (!cfg->path) {
		ret = -ENOMEM;
		goto out;
	}
	st.f = fopen(path, "re");
	if (!st.f) {
		ret = -errno;
		add_issue(&st, 0, "cannot open: %s", strerror(-ret));
		goto out;
	}
	configure_inih();
	r = ini_parse_stream(config_reader, &st, config_handler, &st);
	if (st.line_open)
		finish_line(&st);
	(void)fclose(st.f);
	if (r == -2)
		st.oom = true;
	else if (r > 0 && !has_issue_on_line(&st, (unsigned)r))
		add_issue(&st, (unsigned)r, "syntax error");
	if (st.read_errno) {
		/* e.g. EISDIR: fopen() opens a directory, reading fails */
		add_issue(&st, 0, "cannot read: %s", strerror(st.read_errno));
		ret = -st.read_errno;
		goto out;
	}
	validate(&st);
	ret = n_issues(&st) ? -EINVAL : 0;
	memcpy(cfg->key_lines_, st.seen, sizeof(st.seen));
	cfg->other_role_key_line = 0;
	for (size_t i = 0; i < N_KEYS; i++) {
		const char *other = cfg->role == WSYNC_ROLE_PUBLISHER ? "subscriber" :
				    cfg->role == WSYNC_ROLE_SUBSCRIBER ? "publisher" : "";

		if (st.seen[i] && strcmp(config_keys[i].section, other) == 0 &&
		    (!cfg->other_role_key_line || st.seen[i] < cfg->other_role_key_line))
			cfg->other_role_key_line = st.seen[i];
	}
	/* Two daemons of different roles started from minimal files keep
	 * their status apart. */
	if (ret == 0 && cfg->runtime_dir_by_role && cfg->role != WSYNC_ROLE_UNSET &&
	    !seen_line(&st, "daemon", "runtime_dir")) {
		char *rd;

		if (asprintf(&rd, "%s/%s", cfg->runtime_dir, wsync_role_name(cfg->role)) < 0) {
			ret = -ENOMEM;
		} else {
			free(cfg->runtime_dir);
			cfg->runtime_dir = rd;
			cfg->runtime_dir_by_role = false;
		}
	}
out:
	if (st.oom)
		ret = -ENOMEM;
	free(st.line);
	wsync_config_errors_free(&local);
	return ret;
}

/* ---- defaults, lifetime, introspection ---------------------------------- */

/* systemd passes StateDirectory=/RuntimeDirectory= as a colon-separated
 * list; the first entry is ours.  Anything unusable falls back to def. */
static int default_dir(const char *env, const char *def, char **ret)
{
	const char *v = getenv(env);
	int r;

	if (v && *v) {
		char *first = strndup(v, strcspn(v, ":"));

		if (!first)
			return -ENOMEM;
		r = normalise_abs_path(first, ret, NULL);
		free(first);
		if (r != -EINVAL)
			return r;
	}
	*ret = strdup(def);
	return *ret ? 0 : -ENOMEM;
}

/* Where a daemon keeps its state and runtime files when neither the file
 * nor systemd says.  Root: /var/lib/wsync and /run/wsync.  Another user
 * (no /run/wsync to write): /var/lib/wsync still when it can write there
 * (an installation made so), else the XDG base directories, as systemd's
 * user services use them. */
static int fallback_dirs(char **state, char **runtime)
{
	const char *home = getenv("HOME"), *xs = getenv("XDG_STATE_HOME"),
		   *xr = getenv("XDG_RUNTIME_DIR");
	int r;

	*state = *runtime = NULL;
	if (geteuid() == 0 || access("/var/lib/wsync", W_OK) == 0 ||
	    (!(xs && xs[0] == '/') && !(home && home[0] == '/')))
		r = asprintf(state, "/var/lib/wsync");
	else if (xs && xs[0] == '/')
		r = asprintf(state, "%s/wsync", xs);
	else
		r = asprintf(state, "%s/.local/state/wsync", home);
	if (r < 0)
		return *state = NULL, -ENOMEM;
	if (geteuid() == 0 || access("/run/wsync", W_OK) == 0)
		r = asprintf(runtime, "/run/wsync");
	else if (xr && xr[0] == '/')
		r = asprintf(runtime, "%s/wsync", xr);
	else
		r = asprintf(runtime, "%s/run", *state);
	if (r < 0) {
		free(*state);
		*state = *runtime = NULL;
		return -ENOMEM;
	}
	return 0;
}

int wsync_config_init(struct wsync_config *cfg)
{
	char *state_fallback = NULL, *runtime_fallback = NULL;
	const char *rt = getenv("RUNTIME_DIRECTORY");
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	memset(cfg, 0, sizeof(*cfg));
	cfg->role = WSYNC_ROLE_UNSET;
	cfg->threads = ncpu < 1 ? 1 : ncpu > THREADS_MAX ? THREADS_MAX : (uint32_t)ncpu;
	cfg->memory_limit = 256 * MiB;	/* WSYNC_MEMORY_DEFAULT */
	cfg->log_level = LOG_INFO;
	cfg->anchor_every = 20;
	cfg->complete_when = WSYNC_COMPLETE_MARKER;
	cfg->quiet_period_ms = 30000;
	cfg->settle_time_ms = 2000;
	cfg->watch_mode = WSYNC_WATCH_INOTIFY;
	cfg->rescan_interval_ms = 30000;
	cfg->keep_anchors = 2;
	cfg->gc_grace_ms = 600000;
	cfg->part_wait_alarm_ms = 600000;
	cfg->writer_lease_ms = 30000;
	cfg->chunk_size = 16 * MiB;
	cfg->part = cfg->parts = 1;
	cfg->ahead_max = 16ull << 30;
	cfg->ahead_pace = WSYNC_AHEAD_PACE_YIELD;
	cfg->poll_interval_ms = 2000;
	cfg->on_apply_timeout_ms = 60000;
	/* [store]: store.h's defaults, which a zero would take there too */
	cfg->path_style = -1;
	cfg->max_concurrency = WSYNC_STORE_MAX_CONCURRENCY_DEFAULT;
	cfg->part_size = WSYNC_STORE_PART_SIZE_DEFAULT;
	cfg->retry_attempts = WSYNC_STORE_RETRY_ATTEMPTS_DEFAULT;
	cfg->retry_max_time_ms = WSYNC_STORE_RETRY_MAX_MS_DEFAULT;
	cfg->timeout_ms = WSYNC_STORE_TIMEOUT_MS_DEFAULT;
	cfg->connect_timeout_ms = WSYNC_STORE_CONNECT_TIMEOUT_MS_DEFAULT;
	if (fallback_dirs(&state_fallback, &runtime_fallback) < 0) {
		wsync_config_free(cfg);
		return -ENOMEM;
	}
	/* systemd's RuntimeDirectory=wsync/%i is one instance's already */
	cfg->runtime_dir_by_role = !(rt && *rt);
	if (default_dir("STATE_DIRECTORY", state_fallback, &cfg->state_dir) < 0 ||
	    default_dir("RUNTIME_DIRECTORY", runtime_fallback, &cfg->runtime_dir) < 0 ||
	    !(cfg->region = strdup(WSYNC_STORE_REGION_DEFAULT)) ||
	    !(cfg->metrics_file = strdup("wsync.prom")) ||
	    !(cfg->step_pattern = strdup("checkpoint-*")) ||
	    !(cfg->marker = strdup("trainer_state.json")) ||
	    !(cfg->include = strdup("*")) ||
	    !(cfg->sub_include = strdup("*")) ||
	    !(cfg->sub_exclude = strdup("")) ||
	    !(cfg->part_files = strdup("")) ||
	    !(cfg->part_keys = strdup("")) ||
	    !(cfg->exclude = strdup(WSYNC_DEFAULT_EXCLUDE))) {
		free(state_fallback);
		free(runtime_fallback);
		wsync_config_free(cfg);
		return -ENOMEM;
	}
	free(state_fallback);
	free(runtime_fallback);
	return 0;
}

void wsync_config_free(struct wsync_config *cfg)
{
	if (!cfg)
		return;
	free(cfg->path);
	free(cfg->state_dir);
	free(cfg->runtime_dir);
	free(cfg->metrics_file);
	free(cfg->store_url);
	free(cfg->endpoint);
	free(cfg->region);
	free(cfg->credentials);
	free(cfg->ca_file);
	free(cfg->watch_dir);
	free(cfg->step_pattern);
	free(cfg->marker);
	free(cfg->include);
	free(cfg->exclude);
	free(cfg->sub_include);
	free(cfg->sub_exclude);
	free(cfg->signing_key);
	free(cfg->part_files);
	free(cfg->part_keys);
	free(cfg->target_dir);
	free(cfg->verify_key);
	free(cfg->on_apply);
	free(cfg->notify_url);
	/* zeroed, so a second free (or a free after a failed init) is harmless */
	memset(cfg, 0, sizeof(*cfg));
}

int wsync_config_errors_add(struct wsync_config_errors *errs, const char *path,
			    unsigned line, const char *fmt, ...)
{
	struct parse_state st = { .errs = errs, .path = path };
	char *msg;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (r < 0)
		return -ENOMEM;
	add_issue(&st, line, "%s", msg);
	free(msg);
	return st.oom ? -ENOMEM : 0;
}

unsigned wsync_config_line(const struct wsync_config *cfg, const char *section,
			   const char *key)
{
	const struct config_key *k = find_key(section, key);

	return k ? cfg->key_lines_[k - config_keys] : 0;
}

void wsync_config_errors_free(struct wsync_config_errors *errs)
{
	if (!errs)
		return;
	for (size_t i = 0; i < errs->n; i++)
		free(errs->items[i].text);
	free(errs->items);
	memset(errs, 0, sizeof(*errs));
}

const char *wsync_role_name(enum wsync_role role)
{
	switch (role) {
	case WSYNC_ROLE_PUBLISHER:
		return "publisher";
	case WSYNC_ROLE_SUBSCRIBER:
		return "subscriber";
	case WSYNC_ROLE_UNSET:
		break;
	}
	return "unset";
}

void wsync_config_foreach_key(void (*cb)(const char *section, const char *key,
					 void *userdata),
			      void *userdata)
{
	for (size_t i = 0; i < N_KEYS; i++)
		cb(config_keys[i].section, config_keys[i].key, userdata);
}

/* Unset keys are written as comments, so the output loads back to the
 * same values (a missing required key is then reported as missing). */
void wsync_config_dump(const struct wsync_config *cfg, FILE *f)
{
	const char *section = NULL;

	if (cfg->path && !strpbrk(cfg->path, "\r\n"))
		fprintf(f, "; wsyncd effective configuration, loaded from %s\n", cfg->path);
	else
		fprintf(f, "; wsyncd effective configuration\n");
	for (size_t i = 0; i < N_KEYS; i++) {
		const struct config_key *k = &config_keys[i];
		char buf[FORMAT_MAX];
		const char *v;

		/* the other role's section only when the file gives keys of it
		 * (warned about: they do nothing), so the dump loads back the same */
		if (!cfg->other_role_key_line &&
		    ((cfg->role == WSYNC_ROLE_PUBLISHER && strcmp(k->section, "subscriber") == 0) ||
		     (cfg->role == WSYNC_ROLE_SUBSCRIBER && strcmp(k->section, "publisher") == 0)))
			continue;
		if (!section || strcmp(section, k->section) != 0) {
			fprintf(f, "\n[%s]\n", k->section);
			section = k->section;
		}
		v = k->format(k, (const char *)cfg + k->offset, buf, sizeof(buf));
		if (v)
			fprintf(f, "%s = %s\n", k->key, v);
		else
			fprintf(f, "; %s = (not set)\n", k->key);
	}
}

int wsync_config_store_options(const struct wsync_config *cfg,
			       struct wsync_store_options *opt)
{
	*opt = (struct wsync_store_options){
		.url = cfg->store_url,
		.endpoint = cfg->endpoint,
		.region = cfg->region,
		.path_style = cfg->path_style,
		.credentials = cfg->credentials,
		.ca_file = cfg->ca_file,
		.max_concurrency = cfg->max_concurrency,
		.part_size = cfg->part_size,
		.retry_attempts = cfg->retry_attempts,
		.retry_max_ms = cfg->retry_max_time_ms,
		.timeout_ms = cfg->timeout_ms,
		.connect_timeout_ms = cfg->connect_timeout_ms,
	};
	return 0;
}
