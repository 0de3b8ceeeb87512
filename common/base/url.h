/* SPDX-License-Identifier: Apache-2.0 */
/*
 * url.h -- parse and validate a bucket URL, the `[store] url` setting.
 *
 *   file:///abs/path              a directory used as the bucket
 *   s3://bucket[/prefix]          any S3-compatible store
 *   hf://buckets/NS/BUCKET[/prefix]  a Hugging Face Storage Bucket, reached
 *                                 through its S3 gateway (https://s3.hf.co/NS)
 *
 * The prefix never starts or ends with '/', and must be a valid object key
 * prefix under the strictest backend rules (Hugging Face's): no "//", no
 * "." or ".." segment, no '\\', no control characters.  S3 bucket names
 * follow AWS's rules (3..63 chars of [a-z0-9.-], starting and ending with a
 * letter or digit).
 */
#ifndef WSYNC_URL_H
#define WSYNC_URL_H

#include "error.h"

/* S3's (and Hugging Face's) longest object key, bytes of UTF-8. */
#define WSYNC_URL_KEY_MAX 1024
/* Longest prefix accepted: keys below it must stay within S3's 1024. */
#define WSYNC_URL_PREFIX_MAX 768

enum wsync_url_scheme {
	WSYNC_URL_FILE,
	WSYNC_URL_S3,
	WSYNC_URL_HF,
};

struct wsync_url {
	enum wsync_url_scheme scheme;
	char *path;		/* file: the absolute directory, no trailing '/' */
	char *ns;		/* hf: the namespace (user or org) */
	char *bucket;		/* s3, hf: the bucket name */
	char *prefix;		/* s3, hf: key prefix without slashes at the ends; "" if none */
};

/* Parse s into url (fields malloc'd).  Returns 0, or -EINVAL with a reason
 * in err, or -ENOMEM.  On failure url holds nothing to free. */
int wsync_url_parse(const char *s, struct wsync_url *url, struct wsync_error *err);

void wsync_url_free(struct wsync_url *url);

/* Check that key is acceptable as an object key on every backend:
 * 0, or -EINVAL with the reason in err. */
int wsync_url_check_key(const char *key, struct wsync_error *err);

#endif
