/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-sigv4: the input is a request to sign, as NUL-separated fields:
 * method, path, region, then query "name=value" pairs and "name:value"
 * headers (a field starting with '?' or 'h').  Signing must never crash or
 * leak; a signed request is deterministic, its canonical request lists the
 * signed headers, the path and query it carries are encoded with only
 * unreserved characters and %XX escapes, and no output holds the secret.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sigv4.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FIELDS_MAX 32
#define SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

static void encoded_only(const char *s, const char *also)
{
	for (; *s; s++) {
		if ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
		    (*s >= '0' && *s <= '9') || strchr("-._~%", *s) || strchr(also, *s))
			continue;
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wsync_sigv4_param q[FIELDS_MAX];
	struct wsync_sigv4_header h[FIELDS_MAX + 1];
	const char *field[FIELDS_MAX + 3];
	struct wsync_sigv4_signed a = { 0 }, b = { 0 };
	struct wsync_error err = { 0 };
	size_t nf = 0, nq = 0, nh = 0;
	char *buf, *p, *end;
	int r;

	if (size > 8192)
		return 0;
	buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	for (p = buf, end = buf + size; p <= end && nf < FIELDS_MAX + 3; p += strlen(p) + 1)
		field[nf++] = p;
	h[nh++] = (struct wsync_sigv4_header){ "host", "bucket.s3.example.com" };
	for (size_t i = 3; i < nf; i++) {
		char *f = (char *)field[i], *sep;

		if (f[0] == '?' && nq < FIELDS_MAX) {
			sep = strchr(f + 1, '=');
			if (sep)
				*sep = '\0';
			q[nq++] = (struct wsync_sigv4_param){ f + 1, sep ? sep + 1 : NULL };
		} else if (f[0] == 'h' && nh < FIELDS_MAX + 1 && (sep = strchr(f + 1, ':'))) {
			*sep = '\0';
			h[nh++] = (struct wsync_sigv4_header){ f + 1, sep + 1 };
		}
	}
	struct wsync_sigv4_request req = {
		.method = nf > 0 ? field[0] : "GET",
		.path = nf > 1 ? field[1] : "/",
		.query = q, .n_query = nq, .headers = h, .n_headers = nh,
		.payload_hash = WSYNC_SIGV4_UNSIGNED_PAYLOAD, .content_sha256_header = true,
		.region = nf > 2 ? field[2] : "us-east-1", .service = "s3",
		.when = 1700000000, .access_key = "AKIDEXAMPLE", .secret_key = SECRET,
	};

	/* the secret may only show where the input itself put it */
	bool given = memmem(data, size, SECRET, strlen(SECRET)) != NULL;

	r = wsync_sigv4_sign(&req, &a, &err);
	if (r == 0) {
		if (wsync_sigv4_sign(&req, &b, &err) != 0 || strcmp(a.signature, b.signature) != 0 ||
		    strcmp(a.authorization, b.authorization) != 0)
			abort();	/* not deterministic */
		if (strncmp(a.authorization, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/", 40) != 0)
			abort();
		if (!strstr(a.canonical_request, a.signed_headers))
			abort();
		encoded_only(a.canonical_uri, "/");
		encoded_only(a.canonical_query, "=&");
		const char *outs[] = { a.authorization, a.signed_headers, a.canonical_uri,
				       a.canonical_query, a.canonical_request, a.string_to_sign };

		for (size_t i = 0; i < sizeof(outs) / sizeof(outs[0]); i++)
			if (!given && strstr(outs[i], SECRET))
				abort();	/* the secret leaked */
		for (size_t i = 0; a.send_headers[i]; i++)
			if ((!given && strstr(a.send_headers[i], SECRET)) ||
			    strpbrk(a.send_headers[i], "\r\n"))
				abort();
	} else if (r == -EINVAL && (!err.msg[0] || (!given && strstr(err.msg, SECRET)))) {
		abort();
	}
	wsync_sigv4_signed_free(&a);
	wsync_sigv4_signed_free(&b);
	free(buf);
	return 0;
}
