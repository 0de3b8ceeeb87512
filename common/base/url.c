/* SPDX-License-Identifier: Apache-2.0 */
/*
 * url.c -- parse and validate bucket URLs and object keys (see url.h).
 *
 * The point of being strict here is to fail at config load, with a reason,
 * rather than at the first upload hours into a training run.  The key rules
 * are the intersection of what S3, S3-compatible stores and Hugging Face's
 * bucket gateway accept, plus one rule of our own: no "." or ".." segment,
 * because curl removes dot segments from request paths (RFC 3986 section
 * 5.2.4) and the object would silently land under another key.
 */
#include "url.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "text.h"

#define URL_KEY_MAX 1024	/* S3 and Hugging Face: bytes of UTF-8 */
#define S3_BUCKET_MIN 3
#define S3_BUCKET_MAX 63
#define HF_NAME_MAX 96

#define URL_FORMS "file:///path, s3://bucket[/prefix] or hf://buckets/NAMESPACE/BUCKET[/prefix]"

static bool is_ctl(unsigned char c)
{
	return c < 0x20 || c == 0x7f;
}

static bool is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
	return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF):
 * S3 rejects keys that are not valid UTF-8 with a 400 we would only see at
 * upload time. */
static bool utf8_valid(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned char c = s[i];
		size_t len;
		unsigned cp;

		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xc2 && c <= 0xdf) {
			len = 2;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			len = 3;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			len = 4;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (n - i < len)
			return false;
		for (size_t j = 1; j < len; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + j] & 0x3f);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
		    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
			return false;
		i += len;
	}
	return true;
}

/* Does the '/'-separated string s contain a segment equal to "." or ".."? */
static bool has_dot_segment(const char *s)
{
	const char *seg = s;

	for (;;) {
		const char *end = strchrnul(seg, '/');
		size_t n = (size_t)(end - seg);

		if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return true;
		if (!*end)
			return false;
		seg = end + 1;
	}
}

/* The key rules, with max_len bytes as the length limit. */
static int check_key(const char *key, size_t max_len, struct wsync_error *err)
{
	size_t n;

	if (!key || !*key)
		return wsync_error_set(err, -EINVAL, "empty key");
	n = strlen(key);
	if (n > max_len)
		return wsync_error_set(err, -EINVAL, "%zu bytes long (at most %zu)",
				       n, max_len);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)key[i];

		if (c == '\\')
			return wsync_error_set(err, -EINVAL, "contains a backslash");
		if (is_ctl(c))
			return wsync_error_set(err, -EINVAL,
					       "contains control character 0x%02x", c);
	}
	if (key[0] == '/')
		return wsync_error_set(err, -EINVAL, "starts with '/'");
	if (key[n - 1] == '/')
		return wsync_error_set(err, -EINVAL, "ends with '/'");
	if (strstr(key, "//"))
		return wsync_error_set(err, -EINVAL, "contains \"//\"");
	/* Hugging Face refuses "../" anywhere (even inside "a../b") and a
	 * trailing ".."; the segment test adds "." and "./" everywhere. */
	if (strstr(key, "../") || (n >= 2 && strcmp(key + n - 2, "..") == 0))
		return wsync_error_set(err, -EINVAL, "contains \"..\"");
	if (has_dot_segment(key))
		return wsync_error_set(err, -EINVAL,
				       "contains a \".\" path segment");
	if (!utf8_valid((const unsigned char *)key, n))
		return wsync_error_set(err, -EINVAL, "is not valid UTF-8");
	return 0;
}

int wsync_url_check_key(const char *key, struct wsync_error *err)
{
	return check_key(key, URL_KEY_MAX, err);
}

/* The prefix is everything after "bucket/": one trailing '/' is allowed
 * (people write s3://b/runs/), anything else must already be a valid key.
 * Its length is not limited here, as the config contract asks (URLs of
 * several kilobytes must load); every key built on it still has to pass
 * wsync_url_check_key(), so a prefix near 1024 bytes leaves no room. */
static int parse_prefix(const char *s, struct wsync_url *url, struct wsync_error *err)
{
	size_t n = strlen(s);
	int r;

	if (s[0] == '/')
		return wsync_error_set(err, -EINVAL,
				       "empty path segment (\"//\") after the bucket name");
	if (strstr(s, "//"))	/* before the trailing '/' goes: "a//" */
		return wsync_error_set(err, -EINVAL, "prefix contains \"//\"");
	if (n > 0 && s[n - 1] == '/')
		n--;
	/* Object keys are at most 1024 bytes; leave room for wsync's own
	 * names under the prefix, so a long prefix fails here, not at the
	 * first upload. */
	if (n > WSYNC_URL_PREFIX_MAX)
		return wsync_error_set(err, -EINVAL,
				       "prefix is %zu bytes, more than %d (object keys are "
				       "limited to 1024 bytes)", n, WSYNC_URL_PREFIX_MAX);
	url->prefix = strndup(s, n);
	if (!url->prefix)
		return -ENOMEM;
	if (!*url->prefix)
		return 0;
	r = check_key(url->prefix, SIZE_MAX, err);
	if (r < 0)
		wsync_error_prefix(err, "prefix \"%.80s%s\"", url->prefix,
				   n > 80 ? "..." : "");
	return r;
}

/* Is s (n bytes) a dotted quad, which AWS refuses as a bucket name? */
static bool looks_like_ipv4(const char *s, size_t n)
{
	unsigned dots = 0, digits = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] == '.') {
			if (digits == 0)
				return false;
			dots++;
			digits = 0;
		} else if (is_digit(s[i]) && digits < 3) {
			digits++;
		} else {
			return false;
		}
	}
	return dots == 3 && digits > 0;
}

/* AWS general-purpose bucket naming rules: the strictest of the
 * S3-compatible stores, so a name valid here is valid everywhere. */
static int check_s3_bucket(const char *b, size_t n, struct wsync_error *err)
{
	static const char *const bad_prefix[] = { "xn--", "sthree-" };
	static const char *const bad_suffix[] = { "-s3alias", "--ol-s3", ".mrap", "--x-s3" };

	if (n == 0)
		return wsync_error_set(err, -EINVAL,
				       "missing bucket name (s3://BUCKET[/prefix])");
	if (memchr(b, '@', n))
		return wsync_error_set(err, -EINVAL,
				       "credentials must not appear in the URL");
	if (n < S3_BUCKET_MIN || n > S3_BUCKET_MAX)
		return wsync_error_set(err, -EINVAL,
				       "bucket name \"%.*s\" must be %d to %d characters long",
				       (int)(n > 80 ? 80 : n), b, S3_BUCKET_MIN, S3_BUCKET_MAX);
	for (size_t i = 0; i < n; i++) {
		if (b[i] >= 'A' && b[i] <= 'Z')
			return wsync_error_set(err, -EINVAL,
					       "bucket name \"%.*s\" must be lowercase",
					       (int)n, b);
		if (!is_lower_alnum(b[i]) && b[i] != '.' && b[i] != '-')
			return wsync_error_set(err, -EINVAL,
					       "bucket name \"%.*s\" may contain only a-z, 0-9, '.' and '-'",
					       (int)n, b);
	}
	if (!is_lower_alnum(b[0]) || !is_lower_alnum(b[n - 1]))
		return wsync_error_set(err, -EINVAL,
				       "bucket name \"%.*s\" must start and end with a letter or digit",
				       (int)n, b);
	if (memmem(b, n, "..", 2))
		return wsync_error_set(err, -EINVAL,
				       "bucket name \"%.*s\" must not contain \"..\"", (int)n, b);
	if (looks_like_ipv4(b, n))
		return wsync_error_set(err, -EINVAL,
				       "bucket name \"%.*s\" must not look like an IP address",
				       (int)n, b);
	for (size_t i = 0; i < sizeof(bad_prefix) / sizeof(bad_prefix[0]); i++)
		if (n >= strlen(bad_prefix[i]) &&
		    strncmp(b, bad_prefix[i], strlen(bad_prefix[i])) == 0)
			return wsync_error_set(err, -EINVAL,
					       "bucket name \"%.*s\": prefix \"%s\" is reserved by AWS",
					       (int)n, b, bad_prefix[i]);
	for (size_t i = 0; i < sizeof(bad_suffix) / sizeof(bad_suffix[0]); i++) {
		size_t sl = strlen(bad_suffix[i]);

		if (n >= sl && memcmp(b + n - sl, bad_suffix[i], sl) == 0)
			return wsync_error_set(err, -EINVAL,
					       "bucket name \"%.*s\": suffix \"%s\" is reserved by AWS",
					       (int)n, b, bad_suffix[i]);
	}
	return 0;
}

static int parse_s3(const char *rest, struct wsync_url *url, struct wsync_error *err)
{
	const char *slash = strchrnul(rest, '/');
	size_t n = (size_t)(slash - rest);
	int r;

	r = check_s3_bucket(rest, n, err);
	if (r < 0)
		return r;
	url->bucket = strndup(rest, n);
	if (!url->bucket)
		return -ENOMEM;
	return parse_prefix(*slash ? slash + 1 : slash, url, err);
}

/* Hugging Face namespace (user or organisation) and bucket names. */
static int check_hf_name(const char *what, const char *s, size_t n,
			 struct wsync_error *err)
{
	if (n == 0)
		return wsync_error_set(err, -EINVAL,
				       "missing %s (hf://buckets/NAMESPACE/BUCKET[/prefix])", what);
	if (n > HF_NAME_MAX)
		return wsync_error_set(err, -EINVAL, "%s \"%.*s...\" is longer than %d characters",
				       what, 40, s, HF_NAME_MAX);
	if (s[0] == '.' || s[0] == '-')
		return wsync_error_set(err, -EINVAL, "%s \"%.*s\" must not start with '%c'",
				       what, (int)n, s, s[0]);
	for (size_t i = 0; i < n; i++)
		if (!is_alnum(s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
			return wsync_error_set(err, -EINVAL,
					       "%s \"%.*s\" may contain only letters, digits, '.', '_' and '-'",
					       what, (int)n, s);
	return 0;
}

static int parse_hf(const char *rest, struct wsync_url *url, struct wsync_error *err)
{
	static const char buckets[] = "buckets/";
	const char *ns, *ns_end, *b, *end;
	int r;

	if (strncmp(rest, buckets, sizeof(buckets) - 1) != 0)
		return wsync_error_set(err, -EINVAL,
				       "expected hf://buckets/NAMESPACE/BUCKET[/prefix] "
				       "(models, datasets and spaces are not buckets)");
	ns = rest + sizeof(buckets) - 1;
	ns_end = strchrnul(ns, '/');
	r = check_hf_name("namespace", ns, (size_t)(ns_end - ns), err);
	if (r < 0)
		return r;
	b = *ns_end ? ns_end + 1 : ns_end;
	end = strchrnul(b, '/');
	r = check_hf_name("bucket name", b, (size_t)(end - b), err);
	if (r < 0)
		return r;
	url->ns = strndup(ns, (size_t)(ns_end - ns));
	url->bucket = strndup(b, (size_t)(end - b));
	if (!url->ns || !url->bucket)
		return -ENOMEM;
	return parse_prefix(*end ? end + 1 : end, url, err);
}

/* Decode %XX escapes of s into a new string.  A raw '?' or '#' would start
 * a query or fragment, which a directory has no use for: refuse rather than
 * guess (the operator can write %3F / %23). */
static int percent_decode(const char *s, char **ret, struct wsync_error *err)
{
	char *out = malloc(strlen(s) + 1), *o = out;

	if (!out)
		return -ENOMEM;
	for (const char *p = s; *p; p++) {
		unsigned char c = (unsigned char)*p;

		if (c == '%') {
			int hi = wsync_hex_digit(p[1]), lo = hi >= 0 ? wsync_hex_digit(p[2]) : -1;

			if (hi < 0 || lo < 0) {
				free(out);
				return wsync_error_set(err, -EINVAL,
						       "bad percent-escape \"%.3s\" (expected %%XX)", p);
			}
			c = (unsigned char)(hi * 16 + lo);
			p += 2;
		} else if (c == '?' || c == '#') {
			free(out);
			return wsync_error_set(err, -EINVAL,
					       "'%c' is not allowed in a file:// URL (write %%%02X)",
					       c, c);
		}
		if (is_ctl(c)) {
			free(out);
			return wsync_error_set(err, -EINVAL,
					       "path contains control character 0x%02x", c);
		}
		*o++ = (char)c;
	}
	*o = '\0';
	*ret = out;
	return 0;
}

/* Collapse repeated and trailing '/' of the absolute path s in place;
 * refuse "." and ".." so the bucket directory is what it looks like. */
static int normalise_path(char *s, struct wsync_error *err)
{
	char *o = s;

	if (has_dot_segment(s + 1))
		return wsync_error_set(err, -EINVAL,
				       "path \"%.200s\" contains a \".\" or \"..\" segment", s);
	for (const char *p = s; *p; p++) {
		if (*p == '/' && o > s && o[-1] == '/')
			continue;
		*o++ = *p;
	}
	if (o > s + 1 && o[-1] == '/')
		o--;
	*o = '\0';
	return 0;
}

static int parse_file(const char *rest, struct wsync_url *url, struct wsync_error *err)
{
	static const char localhost[] = "localhost";
	const char *path = rest;
	char *p = NULL;
	int r;

	if (*rest != '/') {
		const char *slash = strchrnul(rest, '/');

		if ((size_t)(slash - rest) != sizeof(localhost) - 1 ||
		    strncasecmp(rest, localhost, sizeof(localhost) - 1) != 0 || !*slash)
			return wsync_error_set(err, -EINVAL,
					       "expected file:///absolute/path (a file:// URL "
					       "names a local directory; host \"%.*s\" is not supported)",
					       (int)(slash - rest > 64 ? 64 : slash - rest), rest);
		path = slash;
	}
	r = percent_decode(path, &p, err);
	if (r < 0)
		return r;
	r = normalise_path(p, err);
	if (r < 0) {
		free(p);
		return r;
	}
	if (strcmp(p, "/") == 0) {
		free(p);
		return wsync_error_set(err, -EINVAL,
				       "the root directory cannot be the bucket");
	}
	url->path = p;
	return 0;
}

int wsync_url_parse(const char *s, struct wsync_url *url, struct wsync_error *err)
{
	static const struct {
		const char *name;
		enum wsync_url_scheme scheme;
		int (*parse)(const char *rest, struct wsync_url *url, struct wsync_error *err);
	} schemes[] = {
		{ "file", WSYNC_URL_FILE, parse_file },
		{ "s3", WSYNC_URL_S3, parse_s3 },
		{ "hf", WSYNC_URL_HF, parse_hf },
	};
	const char *sep;
	size_t n;

	memset(url, 0, sizeof(*url));
	if (!s || !*s)
		return wsync_error_set(err, -EINVAL, "empty URL (expected " URL_FORMS ")");
	sep = strstr(s, "://");
	n = sep ? (size_t)(sep - s) : 0;
	for (size_t i = 0; i < n; i++)
		if (!is_alnum(s[i]) && s[i] != '+' && s[i] != '-' && s[i] != '.')
			n = 0;
	if (n == 0) {
		if (s[0] == '/')
			return wsync_error_set(err, -EINVAL,
					       "not a URL: for a local directory write file://%.200s", s);
		return wsync_error_set(err, -EINVAL, "not a URL: expected " URL_FORMS);
	}
	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
		int r;

		if (strlen(schemes[i].name) != n || strncasecmp(s, schemes[i].name, n) != 0)
			continue;
		url->scheme = schemes[i].scheme;
		r = schemes[i].parse(sep + 3, url, err);
		if (r < 0)
			wsync_url_free(url);
		return r;
	}
	return wsync_error_set(err, -EINVAL,
			       "unknown scheme \"%.*s\" (expected file://, s3:// or hf://)",
			       (int)(n > 32 ? 32 : n), s);
}

void wsync_url_free(struct wsync_url *url)
{
	if (!url)
		return;
	free(url->path);
	free(url->ns);
	free(url->bucket);
	free(url->prefix);
	memset(url, 0, sizeof(*url));
}
