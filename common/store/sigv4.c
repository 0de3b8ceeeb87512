/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sigv4.c -- AWS Signature Version 4 (see sigv4.h).
 *
 * The steps are AWS's: a canonical request (method, encoded path, sorted
 * encoded query, sorted lowercased headers, the list of their names, the
 * payload hash), a string to sign that carries its SHA-256, a signing key
 * derived from the secret by four HMACs over date, region, service and
 * "aws4_request", and the HMAC of the string to sign under that key.
 *
 * Everything is checked before anything is signed: a header value with a
 * CR or LF would be a header injection on the wire, a '/' in a region or
 * access key would shift the fields of the credential scope.  Secret
 * material (the "AWS4" + secret buffer and every derived key) is wiped
 * with explicit_bzero() once used.
 */
#include "sigv4.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "buf.h"
#include "io.h"

#define SHA256_LEN 32
#define FD_WINDOW (1u << 20)	/* pread window of wsync_sha256_fd_hex() */
#define ALGORITHM "AWS4-HMAC-SHA256"
#define TERMINATOR "aws4_request"

static const char hex_digits[] = "0123456789abcdef";

static void to_hex(const unsigned char *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex_digits[p[i] >> 4];
		out[2 * i + 1] = hex_digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}

int wsync_sha256_hex(const void *p, size_t n, char out[WSYNC_SHA256_HEX_LEN + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;

	/* EVP_Digest() refuses a NULL pointer even for 0 bytes. */
	if (!EVP_Digest(n ? p : "", n, md, &len, EVP_sha256(), NULL) || len != SHA256_LEN)
		return -EIO;
	to_hex(md, SHA256_LEN, out);
	return 0;
}

int wsync_sha256_fd_hex(int fd, uint64_t off, uint64_t len,
			char out[WSYNC_SHA256_HEX_LEN + 1], struct wsync_error *err)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int md_len = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint8_t *buf = malloc(len < FD_WINDOW ? (len ? len : 1) : FD_WINDOW);
	int r = 0;

	if (!ctx || !buf) {
		r = wsync_error_set(err, -ENOMEM, "SHA-256: out of memory");
		goto out;
	}
	if (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
		r = wsync_error_set(err, -EIO, "SHA-256: libcrypto failed to start a digest");
		goto out;
	}
	while (len > 0) {
		size_t n = len < FD_WINDOW ? (size_t)len : FD_WINDOW;

		r = wsync_pread_all(fd, buf, n, off);
		if (r == -ENODATA) {
			r = wsync_error_set(err, r, "SHA-256: the file ends before offset %llu",
					    (unsigned long long)(off + len));
			goto out;
		}
		if (r < 0) {
			r = wsync_error_set(err, r, "SHA-256: read at offset %llu: %s",
					    (unsigned long long)off, strerror(-r));
			goto out;
		}
		if (!EVP_DigestUpdate(ctx, buf, n)) {
			r = wsync_error_set(err, -EIO, "SHA-256: libcrypto failed");
			goto out;
		}
		off += n;
		len -= n;
	}
	if (!EVP_DigestFinal_ex(ctx, md, &md_len) || md_len != SHA256_LEN) {
		r = wsync_error_set(err, -EIO, "SHA-256: libcrypto failed");
		goto out;
	}
	to_hex(md, SHA256_LEN, out);
out:
	EVP_MD_CTX_free(ctx);
	free(buf);
	return r;
}

/* HMAC-SHA256 of n bytes at data under key into out (32 bytes). */
static int hmac_sha256(const void *key, size_t key_len, const void *data, size_t n,
		       unsigned char out[SHA256_LEN])
{
	size_t len = 0;

	if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key, key_len,
		       data, n, out, SHA256_LEN, &len) || len != SHA256_LEN)
		return -EIO;
	return 0;
}

static bool is_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

static int buf_puts(struct wsync_buf *b, const char *s)
{
	return wsync_buf_append(b, s, strlen(s));
}

/* Append the UriEncode of s to b. */
static int buf_encode(struct wsync_buf *b, const char *s, bool keep_slash)
{
	static const char upper[] = "0123456789ABCDEF";
	int r;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (is_unreserved(*p) || (keep_slash && *p == '/')) {
			r = wsync_buf_put_u8(b, *p);
		} else {
			char esc[3] = { '%', upper[*p >> 4], upper[*p & 15] };

			r = wsync_buf_append(b, esc, sizeof(esc));
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* NUL-terminate b and hand its memory over as a string; b is left empty. */
static int buf_take(struct wsync_buf *b, char **ret)
{
	int r = wsync_buf_put_u8(b, '\0');

	if (r < 0)
		return r;
	*ret = (char *)b->data;
	*b = (struct wsync_buf){ 0 };
	return 0;
}

int wsync_sigv4_uri_encode(const char *s, bool keep_slash, char **ret)
{
	struct wsync_buf b = { 0 };
	int r = buf_encode(&b, s, keep_slash);

	if (r >= 0)
		r = buf_take(&b, ret);
	wsync_buf_free(&b);
	return r;
}

/* One query parameter, encoded. */
struct enc_param {
	char *name, *value;
};

static int cmp_param(const void *a, const void *b)
{
	const struct enc_param *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->value, y->value);
}

int wsync_sigv4_canonical_query(const struct wsync_sigv4_param *params, size_t n,
				char **ret)
{
	struct enc_param *enc = NULL;
	struct wsync_buf b = { 0 };
	int r = 0;

	if (n > 0) {
		enc = calloc(n, sizeof(*enc));
		if (!enc)
			return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (!params[i].name || !params[i].name[0]) {
			r = -EINVAL;
			goto out;
		}
		r = wsync_sigv4_uri_encode(params[i].name, false, &enc[i].name);
		if (r < 0)
			goto out;
		r = wsync_sigv4_uri_encode(params[i].value ? params[i].value : "",
					   false, &enc[i].value);
		if (r < 0)
			goto out;
	}
	/* Sorting the encoded forms bytewise is what AWS specifies: "%2F"
	 * sorts where '%' does, not where '/' would. */
	if (n > 1)
		qsort(enc, n, sizeof(*enc), cmp_param);
	for (size_t i = 0; i < n && r >= 0; i++) {
		if (i > 0)
			r = wsync_buf_put_u8(&b, '&');
		if (r >= 0)
			r = buf_puts(&b, enc[i].name);
		if (r >= 0)
			r = wsync_buf_put_u8(&b, '=');
		if (r >= 0)
			r = buf_puts(&b, enc[i].value);
	}
	if (r >= 0)
		r = buf_take(&b, ret);
out:
	for (size_t i = 0; i < n; i++) {
		free(enc[i].name);
		free(enc[i].value);
	}
	free(enc);
	wsync_buf_free(&b);
	return r;
}

/* RFC 9110 token characters: what a header name may be made of. */
static bool is_tchar(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A header as signed: lowercased name, canonical value, input position. */
struct canon_header {
	char *name, *value;
	size_t order;
};

static int cmp_header(const void *a, const void *b)
{
	const struct canon_header *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	/* Repeated names keep their order: their values are joined. */
	if (c)
		return c;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* Headers the signer adds itself, which the caller must not pass. */
static const char *const owned_headers[] = {
	"authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token",
};

/*
 * Canonicalise header name and value into h (lowercase name, trimmed value
 * with inner blanks collapsed).  secret_value: the value is the session
 * token, which messages must not quote or even name as a header value.
 */
static int canon_header(const char *name, const char *value, size_t order,
			bool secret_value, struct canon_header *h, struct wsync_error *err)
{
	size_t n = strlen(name), vn;
	char *v, *o;
	const char *p, *end;

	if (n == 0)
		return wsync_error_set(err, -EINVAL, "empty header name");
	/* Messages quote only the valid part: the rest may be a newline. */
	for (size_t i = 0; i < n; i++)
		if (!is_tchar((unsigned char)name[i]))
			return wsync_error_set(err, -EINVAL,
					       "header name \"%.*s\" is followed by byte 0x%02x",
					       (int)(i < 64 ? i : 64), name,
					       (unsigned char)name[i]);
	if (!value)
		value = "";
	vn = strlen(value);
	for (size_t i = 0; i < vn; i++) {
		unsigned char c = (unsigned char)value[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f) {
			if (secret_value)
				return wsync_error_set(err, -EINVAL,
						       "the session token contains control character 0x%02x",
						       c);
			return wsync_error_set(err, -EINVAL,
					       "header %.64s: value contains control character 0x%02x",
					       name, c);
		}
	}
	h->name = strdup(name);
	h->value = v = malloc(vn + 1);
	h->order = order;
	if (!h->name || !v)
		return -ENOMEM;
	for (char *q = h->name; *q; q++)
		if (*q >= 'A' && *q <= 'Z')
			*q = (char)(*q - 'A' + 'a');
	/* Trim both ends, make every inner run of blanks one space. */
	p = value;
	end = value + vn;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	for (o = v; p < end; p++) {
		if (*p == ' ' || *p == '\t') {
			if (o[-1] != ' ')	/* p is past the first char here */
				*o++ = ' ';
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
	return 0;
}

/* Printable ASCII other than space, '/' and ',': safe inside the
 * Credential=AK/DATE/REGION/SERVICE/aws4_request field. */
static int check_scope_part(const char *what, const char *s, bool quote,
			    struct wsync_error *err)
{
	if (!s || !*s)
		return wsync_error_set(err, -EINVAL, "empty %s", what);
	for (const char *p = s; *p; p++) {
		unsigned char c = (unsigned char)*p;
		int valid = (int)(p - s < 64 ? p - s : 64);

		if (c <= ' ' || c >= 0x7f || c == '/' || c == ',') {
			if (quote)
				return wsync_error_set(err, -EINVAL,
						       "%s \"%.*s\" is followed by byte 0x%02x",
						       what, valid, s, c);
			return wsync_error_set(err, -EINVAL,
					       "%s contains byte 0x%02x", what, c);
		}
	}
	return 0;
}

/* 64 lowercase hex digits, UNSIGNED-PAYLOAD, or one of AWS's
 * STREAMING-... keywords (all capitals, digits and '-'). */
static bool payload_hash_ok(const char *s)
{
	static const char streaming[] = "STREAMING-";
	size_t n = s ? strlen(s) : 0;
	bool hex = n == WSYNC_SHA256_HEX_LEN, word;

	if (n == 0)
		return false;
	if (strcmp(s, WSYNC_SIGV4_UNSIGNED_PAYLOAD) == 0)
		return true;
	word = strncmp(s, streaming, sizeof(streaming) - 1) == 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
		word = word && ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-');
	}
	return hex || word;
}

static int check_request(const struct wsync_sigv4_request *req, struct wsync_error *err)
{
	int r;

	if (!req->method || !*req->method)
		return wsync_error_set(err, -EINVAL, "empty method");
	for (const char *p = req->method; *p; p++)
		if (!is_tchar((unsigned char)*p))
			return wsync_error_set(err, -EINVAL, "method contains byte 0x%02x",
					       (unsigned char)*p);
	if (!req->path || req->path[0] != '/')
		return wsync_error_set(err, -EINVAL, "the path must start with '/'");
	if (!payload_hash_ok(req->payload_hash))
		return wsync_error_set(err, -EINVAL,
				       "payload hash must be 64 lowercase hex digits, "
				       "UNSIGNED-PAYLOAD or STREAMING-...");
	if ((r = check_scope_part("region", req->region, true, err)) < 0 ||
	    (r = check_scope_part("service", req->service, true, err)) < 0 ||
	    (r = check_scope_part("access key id", req->access_key, false, err)) < 0)
		return r;
	if (!req->secret_key || !*req->secret_key)
		return wsync_error_set(err, -EINVAL, "empty secret access key");
	if (req->session_token && !*req->session_token)
		return wsync_error_set(err, -EINVAL, "empty session token");
	for (size_t i = 0; i < req->n_query; i++)
		if (!req->query[i].name || !*req->query[i].name)
			return wsync_error_set(err, -EINVAL, "query parameter %zu has no name", i);
	return 0;
}

/* The x-amz-date value of t (its first 8 characters are the date). */
static int format_time(time_t t, char amz_date[17], struct wsync_error *err)
{
	struct tm tm;
	char tmp[80];	/* room for any int: the compiler sees no truncation */

	if (!gmtime_r(&t, &tm) || tm.tm_year < -1900 || tm.tm_year > 9999 - 1900)
		return wsync_error_set(err, -EINVAL, "signing time %lld out of range",
				       (long long)t);
	/* The year check and gmtime's ranges make it exactly 16 characters. */
	(void)snprintf(tmp, sizeof(tmp), "%04d%02d%02dT%02d%02d%02dZ", tm.tm_year + 1900,
		       tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
	memcpy(amz_date, tmp, 16);
	amz_date[16] = '\0';
	return 0;
}

struct header_set {
	struct canon_header *h;
	size_t n;
};

static void header_set_free(struct header_set *hs)
{
	for (size_t i = 0; i < hs->n; i++) {
		free(hs->h[i].name);
		free(hs->h[i].value);
	}
	free(hs->h);
	hs->h = NULL;
	hs->n = 0;
}

/* The caller's headers and the signer's own, canonical and sorted, with
 * repeated names merged into one. */
static int build_headers(const struct wsync_sigv4_request *req, const char *amz_date,
			 struct header_set *hs, struct wsync_error *err)
{
	size_t cap = req->n_headers + 3, k = 0;
	bool host = false;
	int r;

	hs->h = calloc(cap, sizeof(*hs->h));
	if (!hs->h)
		return -ENOMEM;
	for (size_t i = 0; i < req->n_headers; i++) {
		const struct wsync_sigv4_header *in = &req->headers[i];

		if (!in->name)
			return wsync_error_set(err, -EINVAL, "header %zu has no name", i);
		for (size_t j = 0; j < sizeof(owned_headers) / sizeof(owned_headers[0]); j++)
			if (strcasecmp(in->name, owned_headers[j]) == 0)
				return wsync_error_set(err, -EINVAL,
						       "header %s is added by the signer",
						       owned_headers[j]);
		r = canon_header(in->name, in->value, i, false, &hs->h[hs->n++], err);
		if (r < 0)
			return r;
		if (strcmp(hs->h[hs->n - 1].name, "host") == 0) {
			if (!*hs->h[hs->n - 1].value)
				return wsync_error_set(err, -EINVAL, "empty host header");
			host = true;
		}
	}
	if (!host)
		return wsync_error_set(err, -EINVAL, "no host header");
	r = canon_header("x-amz-date", amz_date, hs->n, false, &hs->h[hs->n], err);
	hs->n++;
	if (r >= 0 && req->content_sha256_header) {
		r = canon_header("x-amz-content-sha256", req->payload_hash, hs->n, false,
				 &hs->h[hs->n], err);
		hs->n++;
	}
	if (r >= 0 && req->session_token) {
		r = canon_header("x-amz-security-token", req->session_token, hs->n, true,
				 &hs->h[hs->n], err);
		hs->n++;
	}
	if (r < 0)
		return r;
	qsort(hs->h, hs->n, sizeof(*hs->h), cmp_header);
	/* Merge runs of one name, "a:1" "a:2" -> "a:1,2", compacting to the
	 * front.  hs->n stays the allocated count until the end, so on failure
	 * header_set_free() finds every slot either live or zeroed. */
	for (size_t i = 0; i < hs->n; i++) {
		struct canon_header cur = hs->h[i];

		hs->h[i] = (struct canon_header){ 0 };
		if (k > 0 && strcmp(hs->h[k - 1].name, cur.name) == 0) {
			struct canon_header *last = &hs->h[k - 1];
			size_t a = strlen(last->value), b = strlen(cur.value);
			char *v = realloc(last->value, a + b + 2);

			if (v) {
				v[a] = ',';
				memcpy(v + a + 1, cur.value, b + 1);
				last->value = v;
			}
			free(cur.name);
			free(cur.value);
			if (!v)
				return -ENOMEM;
		} else {
			hs->h[k++] = cur;
		}
	}
	hs->n = k;
	return 0;
}

/* canonical request = METHOD \n URI \n QUERY \n HEADERS \n SIGNED \n HASH */
static int build_canonical_request(const struct wsync_sigv4_request *req,
				   const struct header_set *hs,
				   struct wsync_sigv4_signed *out)
{
	struct wsync_buf b = { 0 };
	int r;

	r = buf_encode(&b, req->path, true);
	if (r >= 0)
		r = buf_take(&b, &out->canonical_uri);
	if (r >= 0)
		r = wsync_sigv4_canonical_query(req->query, req->n_query,
						&out->canonical_query);
	for (size_t i = 0; i < hs->n && r >= 0; i++) {
		if (i > 0)
			r = wsync_buf_put_u8(&b, ';');
		if (r >= 0)
			r = buf_puts(&b, hs->h[i].name);
	}
	if (r >= 0)
		r = buf_take(&b, &out->signed_headers);

	if (r >= 0)
		r = buf_puts(&b, req->method);
	if (r >= 0)
		r = wsync_buf_put_u8(&b, '\n');
	if (r >= 0)
		r = buf_puts(&b, out->canonical_uri);
	if (r >= 0)
		r = wsync_buf_put_u8(&b, '\n');
	if (r >= 0)
		r = buf_puts(&b, out->canonical_query);
	if (r >= 0)
		r = wsync_buf_put_u8(&b, '\n');
	for (size_t i = 0; i < hs->n && r >= 0; i++) {
		r = buf_puts(&b, hs->h[i].name);
		if (r >= 0)
			r = wsync_buf_put_u8(&b, ':');
		if (r >= 0)
			r = buf_puts(&b, hs->h[i].value);
		if (r >= 0)
			r = wsync_buf_put_u8(&b, '\n');
	}
	if (r >= 0)
		r = wsync_buf_put_u8(&b, '\n');
	if (r >= 0)
		r = buf_puts(&b, out->signed_headers);
	if (r >= 0)
		r = wsync_buf_put_u8(&b, '\n');
	if (r >= 0)
		r = buf_puts(&b, req->payload_hash);
	if (r >= 0)
		r = buf_take(&b, &out->canonical_request);
	wsync_buf_free(&b);
	return r;
}

/* The signing key: HMAC chain over date, region, service, "aws4_request". */
static int signing_key(const char *secret, const char *date, const char *region,
		       const char *service, unsigned char key[SHA256_LEN])
{
	size_t sn = strlen(secret);
	char *k_secret = malloc(sn + 5);
	unsigned char k1[SHA256_LEN], k2[SHA256_LEN], k3[SHA256_LEN];
	int r;

	if (!k_secret)
		return -ENOMEM;
	memcpy(k_secret, "AWS4", 4);
	memcpy(k_secret + 4, secret, sn + 1);
	r = hmac_sha256(k_secret, sn + 4, date, strlen(date), k1);
	if (r >= 0)
		r = hmac_sha256(k1, sizeof(k1), region, strlen(region), k2);
	if (r >= 0)
		r = hmac_sha256(k2, sizeof(k2), service, strlen(service), k3);
	if (r >= 0)
		r = hmac_sha256(k3, sizeof(k3), TERMINATOR, strlen(TERMINATOR), key);
	explicit_bzero(k_secret, sn + 4);
	free(k_secret);
	explicit_bzero(k1, sizeof(k1));
	explicit_bzero(k2, sizeof(k2));
	explicit_bzero(k3, sizeof(k3));
	return r;
}

/* Append a "Name: value" line to out->send_headers. */
static int add_send_header(struct wsync_sigv4_signed *out, const char *name,
			   const char *value)
{
	size_t i = 0;

	while (out->send_headers[i])
		i++;
	if (i >= WSYNC_SIGV4_SEND_MAX)
		return -EINVAL;	/* not reached: at most four are added */
	if (asprintf(&out->send_headers[i], "%s: %s", name, value) < 0) {
		out->send_headers[i] = NULL;
		return -ENOMEM;
	}
	return 0;
}

int wsync_sigv4_sign(const struct wsync_sigv4_request *req,
		     struct wsync_sigv4_signed *out, struct wsync_error *err)
{
	struct header_set hs = { 0 };
	unsigned char key[SHA256_LEN], mac[SHA256_LEN];
	char creq_hash[WSYNC_SHA256_HEX_LEN + 1], date[9];
	int r;

	memset(out, 0, sizeof(*out));
	r = check_request(req, err);
	if (r < 0)
		return r;
	r = format_time(req->when, out->amz_date, err);
	if (r < 0)
		return r;
	memcpy(date, out->amz_date, 8);
	date[8] = '\0';

	r = build_headers(req, out->amz_date, &hs, err);
	if (r >= 0)
		r = build_canonical_request(req, &hs, out);
	header_set_free(&hs);
	if (r >= 0)
		r = wsync_sha256_hex(out->canonical_request, strlen(out->canonical_request),
				     creq_hash);
	if (r >= 0 &&
	    asprintf(&out->string_to_sign, ALGORITHM "\n%s\n%s/%s/%s/" TERMINATOR "\n%s",
		     out->amz_date, date, req->region, req->service, creq_hash) < 0) {
		out->string_to_sign = NULL;
		r = -ENOMEM;
	}
	if (r >= 0)
		r = signing_key(req->secret_key, date, req->region, req->service, key);
	if (r >= 0)
		r = hmac_sha256(key, sizeof(key), out->string_to_sign,
				strlen(out->string_to_sign), mac);
	explicit_bzero(key, sizeof(key));
	if (r >= 0) {
		to_hex(mac, sizeof(mac), out->signature);
		if (asprintf(&out->authorization,
			     ALGORITHM " Credential=%s/%s/%s/%s/" TERMINATOR
			     ", SignedHeaders=%s, Signature=%s",
			     req->access_key, date, req->region, req->service,
			     out->signed_headers, out->signature) < 0) {
			out->authorization = NULL;
			r = -ENOMEM;
		}
	}
	if (r >= 0)
		r = add_send_header(out, "Authorization", out->authorization);
	if (r >= 0)
		r = add_send_header(out, "x-amz-date", out->amz_date);
	if (r >= 0 && req->content_sha256_header)
		r = add_send_header(out, "x-amz-content-sha256", req->payload_hash);
	if (r >= 0 && req->session_token)
		r = add_send_header(out, "x-amz-security-token", req->session_token);
	if (r < 0) {
		wsync_sigv4_signed_free(out);
		if (r == -ENOMEM)
			return wsync_error_set(err, r, "signing: out of memory");
		if (r == -EIO)
			return wsync_error_set(err, r, "signing: libcrypto failed");
		return r;	/* -EINVAL with its message already in err */
	}
	return 0;
}

void wsync_sigv4_signed_free(struct wsync_sigv4_signed *out)
{
	if (!out)
		return;
	free(out->authorization);
	free(out->signed_headers);
	free(out->canonical_uri);
	free(out->canonical_query);
	free(out->canonical_request);
	free(out->string_to_sign);
	for (size_t i = 0; i < WSYNC_SIGV4_SEND_MAX; i++) {
		/* The session token travels in one of these lines. */
		if (out->send_headers[i])
			explicit_bzero(out->send_headers[i], strlen(out->send_headers[i]));
		free(out->send_headers[i]);
	}
	memset(out, 0, sizeof(*out));
}
