/* SPDX-License-Identifier: Apache-2.0 */
/*
 * credentials.h -- the access key, secret key and optional session token
 * the S3 backend signs with, and where they came from.
 *
 * Sources, first match wins:
 *
 *   1. the file given by `[store] credentials` (an error if it cannot be
 *      read or lacks a key: a file that was asked for is never skipped);
 *   2. $CREDENTIALS_DIRECTORY/store, when systemd passed credentials to
 *      the unit (LoadCredential=store:/etc/wsync/s3.ini) and that file
 *      exists (a file that exists but cannot be read is an error);
 *   3. the environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (both,
 *      or it is an error naming the missing one), AWS_SESSION_TOKEN
 *      optional; empty variables count as unset;
 *   4. none: anonymous access (public buckets), access_key NULL.
 *
 * The file format is AWS's shared credentials file:
 *
 *   # comment            ; comment too (whole lines only: a secret may
 *   [default]              contain '#' or ';', so nothing is cut after a value)
 *   aws_access_key_id = AKIA...
 *   aws_secret_access_key = ...
 *   aws_session_token = ...     (optional)
 *
 * The [default] section is read; without one, the only section, or the
 * keys written before any section when there is no section at all.  Names
 * and values are trimmed of blanks; values are otherwise taken as written
 * (no quotes are removed).  Other keys (region, output) are ignored; a key
 * given twice in one section is an error.  Files are at most 64 KiB, UTF-8 (a BOM is skipped), LF or CRLF.
 *
 * The loader does not check the file's mode: keeping it 0600 (or using
 * systemd credentials, which are) is the operator's part.
 *
 * Error messages name files, line numbers, sections and keys, never a
 * value: no secret ends up in a log.
 */
#ifndef WSYNC_CREDENTIALS_H
#define WSYNC_CREDENTIALS_H

#include "error.h"

/* Largest credentials file read. */
#define WSYNC_CREDENTIALS_FILE_MAX (64u * 1024)

struct wsync_credentials {
	char *access_key;	/* NULL: anonymous (no source had credentials) */
	char *secret_key;	/* NULL iff access_key is */
	char *session_token;	/* NULL: long-term keys */
	/* Where they came from, for logs: "file /etc/wsync/creds.ini",
	 * "$CREDENTIALS_DIRECTORY/store", "environment" or "anonymous".
	 * Owned by the struct like the keys. */
	char *source;
};

/*
 * Load credentials into out from file (NULL: none given) or the sources
 * after it, in the order above.  Returns 0 (out->access_key NULL when
 * anonymous); -EINVAL with the reason in err for a malformed or incomplete
 * file or environment; the negative errno of open/read with a message;
 * -EFBIG for a file over WSYNC_CREDENTIALS_FILE_MAX; -ENOMEM.  On failure
 * out holds nothing to free (wsync_credentials_free() is harmless).
 */
int wsync_credentials_load(const char *file, struct wsync_credentials *out,
			   struct wsync_error *err);

/* Wipe the keys' memory (explicit_bzero), free everything c owns and zero
 * the struct.  NULL is accepted. */
void wsync_credentials_free(struct wsync_credentials *c);

#endif
