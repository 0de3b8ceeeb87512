/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sigv4.h -- AWS Signature Version 4 for requests to S3 and S3-compatible
 * stores (header-based authentication, "AWS4-HMAC-SHA256"), and SHA-256.
 *
 * Pure functions on strings, no I/O and no curl: the S3 backend describes a
 * request, gets back the headers to add, and sends the request with exactly
 * the path and query string the signature covers (canonical_uri and
 * canonical_query of the result).  Cryptography is OpenSSL's libcrypto 3.
 * Every function is thread safe.
 *
 * Encoding.  AWS's UriEncode keeps the unreserved bytes A-Z a-z 0-9 - . _ ~
 * and writes every other byte as %XX with uppercase hex (so a space is %20,
 * never '+', and UTF-8 is encoded byte by byte).  In paths '/' is kept; in
 * query names and values it is encoded.
 *
 * Paths.  The request path is given raw (the object key as it is, e.g.
 * "/bucket/runs/step 12.delta") and encoded exactly once by the signer.  S3
 * does not normalise paths or encode them twice, unlike other AWS services:
 * "a//b" and "a/./b" are signed as they are (wsync_url_check_key() keeps
 * such keys out of the bucket anyway).
 */
#ifndef WSYNC_SIGV4_H
#define WSYNC_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "error.h"

/* Characters of a hex SHA-256, without the NUL. */
#define WSYNC_SHA256_HEX_LEN 64

/* SHA-256 of the empty string: the payload hash of a request without body. */
#define WSYNC_SHA256_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* Payload hash of a body the signature does not cover (fine over TLS). */
#define WSYNC_SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

/*
 * Hex SHA-256 (lowercase) of n bytes at p into out (64 characters and a
 * NUL).  Returns 0, or -ENOMEM / -EIO when libcrypto fails.
 */
int wsync_sha256_hex(const void *p, size_t n, char out[WSYNC_SHA256_HEX_LEN + 1]);

/*
 * Hex SHA-256 of len bytes of fd starting at offset off (a multipart part,
 * a whole file), read with pread in 1 MiB windows: the fd's position is
 * untouched.  Returns 0; -ENODATA if the file ends before off + len;
 * -ENOMEM, -EIO or the errno of a failed read, with a message in err.
 */
int wsync_sha256_fd_hex(int fd, uint64_t off, uint64_t len,
			char out[WSYNC_SHA256_HEX_LEN + 1], struct wsync_error *err);

/*
 * AWS UriEncode of the NUL-terminated string s into a new string *ret
 * (malloc'd, the caller frees it).  keep_slash: leave '/' as is (paths)
 * rather than write %2F (query names and values).  Returns 0 or -ENOMEM.
 */
int wsync_sigv4_uri_encode(const char *s, bool keep_slash, char **ret);

/* One query parameter, raw (not encoded).  value NULL is the same as "":
 * both give "name=" ("?uploads" is signed as "uploads="). */
struct wsync_sigv4_param {
	const char *name;
	const char *value;
};

/*
 * The canonical query string of n parameters into *ret (malloc'd): names and
 * values UriEncoded ('/' too), "name=value" pairs sorted by encoded name,
 * then by encoded value, joined with '&'; "" when n is 0.  This is the query
 * string the request must carry on the wire, byte for byte.  Returns 0,
 * -EINVAL (an empty name) or -ENOMEM.
 */
int wsync_sigv4_canonical_query(const struct wsync_sigv4_param *params, size_t n,
				char **ret);

/* One request header, as the HTTP client sends it. */
struct wsync_sigv4_header {
	const char *name;	/* any case; no ':', space or control character */
	const char *value;	/* no CR or LF; NULL is the same as "" */
};

/*
 * A request to sign.  The strings are borrowed for the duration of the
 * call only.
 *
 * headers are the headers to sign and send: "host" is required; usual ones
 * for S3 are range, if-none-match, if-match, content-length, content-type,
 * content-md5.  Names are lowercased, values trimmed at both ends with inner
 * runs of spaces and tabs made one space; a name given several times is
 * signed as one header whose values are joined with ',' in the order given
 * (HTTP's rule for repeated headers).  The signer adds and signs the headers
 * it owns, which must therefore not appear in headers (-EINVAL):
 *   x-amz-date            always, the value of `when`;
 *   x-amz-content-sha256  when content_sha256_header (S3 requires it);
 *   x-amz-security-token  when session_token is set;
 * and "authorization" is refused too.  Every signed header must reach the
 * server with the value signed (content-length included, which curl sets
 * itself for uploads); headers sent but not signed (user-agent, expect,
 * accept) do not break the signature.
 */
struct wsync_sigv4_request {
	const char *method;			/* "GET", "PUT", "HEAD", "POST", "DELETE" */
	const char *path;			/* raw, starts with '/' (see the top of this file) */
	const struct wsync_sigv4_param *query;	/* n_query raw parameters, any order */
	size_t n_query;
	const struct wsync_sigv4_header *headers;
	size_t n_headers;
	const char *payload_hash;		/* lowercase hex SHA-256 of the body,
						 * WSYNC_SIGV4_UNSIGNED_PAYLOAD or an
						 * AWS "STREAMING-..." keyword */
	bool content_sha256_header;		/* add and sign x-amz-content-sha256 */
	const char *region;			/* "us-east-1" */
	const char *service;			/* "s3" */
	time_t when;				/* signing time, UTC (x-amz-date) */
	const char *access_key;
	const char *secret_key;
	const char *session_token;		/* NULL: none (long-term keys) */
};

/* Most headers the signer asks the caller to add (see send_headers). */
#define WSYNC_SIGV4_SEND_MAX 4

/*
 * The result of wsync_sigv4_sign().  Strings are malloc'd and owned by the
 * struct: free them with wsync_sigv4_signed_free().
 *
 * To send the request: URL = endpoint + canonical_uri, then '?' +
 * canonical_query unless it is empty; headers = the request's headers plus
 * every line of send_headers (curl_slist_append takes them as they are).
 */
struct wsync_sigv4_signed {
	char amz_date[17];		/* "YYYYMMDDTHHMMSSZ": the x-amz-date value */
	char signature[WSYNC_SHA256_HEX_LEN + 1];	/* hex HMAC, the last part of authorization */
	/* The Authorization value, parts separated by ", " as in AWS's test
	 * suite: "AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/SERVICE/aws4_request,
	 * SignedHeaders=host;x-amz-date, Signature=<hex>" */
	char *authorization;
	char *signed_headers;		/* "host;x-amz-date" */
	char *canonical_uri;		/* the path as sent, encoded once */
	char *canonical_query;		/* the query string as sent, without '?' */
	char *canonical_request;	/* for tests and debugging: holds the session
					 * token if any (it is a signed header),
					 * never the secret key */
	char *string_to_sign;		/* for tests and debugging */
	/* "Name: value" lines to add to the request, NULL-terminated:
	 * Authorization, x-amz-date and, when the signer added them,
	 * x-amz-content-sha256 and x-amz-security-token. */
	char *send_headers[WSYNC_SIGV4_SEND_MAX + 1];
};

/*
 * Sign req into out.  Returns 0; -EINVAL with the reason in err when the
 * request is malformed (no host header, a header the signer owns, a bad
 * name or value, an empty key, region or service, a path not starting with
 * '/', a time before year 0 or after 9999); -ENOMEM; -EIO when libcrypto
 * fails.  Messages never contain the secret key or the session token.  On
 * failure out holds nothing to free (wsync_sigv4_signed_free() is harmless).
 */
int wsync_sigv4_sign(const struct wsync_sigv4_request *req,
		     struct wsync_sigv4_signed *out, struct wsync_error *err);

/* Free what out owns and zero it.  NULL is accepted. */
void wsync_sigv4_signed_free(struct wsync_sigv4_signed *out);

#endif
