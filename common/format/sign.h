/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sign.h -- Ed25519 keys and signed documents (common/format/BUCKET.md §5).
 *
 * A key is loaded from a PEM file as `openssl genpkey -algorithm ed25519`
 * writes it (PKCS#8 private key, SubjectPublicKeyInfo public key), or made
 * by wsync_sign_keygen().  A signed document is some text ending in '\n'
 * followed by one line
 *
 *     wsync-signature ed25519 <key id> <base64 signature>\n
 *
 * whose signature covers every byte before it.  The key id is the first
 * 16 hex digits of SHA-256 over the raw 32-byte public key.
 *
 * Errors name the file involved and never contain key material: PEM files
 * are read into a buffer that is wiped once decoded, and OpenSSL holds the
 * private key in its own (secure-heap when configured) memory.
 */
#ifndef WSYNC_SIGN_H
#define WSYNC_SIGN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"

#define WSYNC_SIGN_KEY_ID_LEN 16	/* hex digits, without the NUL */
#define WSYNC_SIGN_RAW_LEN 32		/* raw Ed25519 public key or seed */
#define WSYNC_SIGN_SIG_LEN 64		/* raw Ed25519 signature */
#define WSYNC_SIGN_PEM_MAX (64u << 10)	/* a key file larger than this is refused */
#define WSYNC_SHA256_LEN 32		/* bytes of a SHA-256 digest */

/* Opaque: an Ed25519 public key, with its private half when loaded from a
 * private key.  Immutable once made, so one key may be shared by threads. */
struct wsync_sign_key;

/*
 * Load a private key (PEM, PKCS#8, unencrypted) from path.  Returns 0 with
 * *ret set, or: -ENOENT/-EACCES/... (cannot read path), -EFBIG (over
 * WSYNC_SIGN_PEM_MAX), -EINVAL (not a PEM private key, encrypted, or not
 * Ed25519 -- the message says which), -ENOMEM.  The message names path.
 * Encrypted keys fail at once: no passphrase is ever prompted for.
 */
int wsync_sign_key_load_private(const char *path, struct wsync_sign_key **ret,
				struct wsync_error *err);

/*
 * Load a public key (PEM, SubjectPublicKeyInfo) from path.  Errors as for
 * the private key; a private key file given here is refused with a hint to
 * use its public half (a verify key is configured on every subscriber, and
 * the private key belongs on the publisher only).
 */
int wsync_sign_key_load_public(const char *path, struct wsync_sign_key **ret,
			       struct wsync_error *err);

/*
 * A key from raw bytes: with is_private, raw is the 32-byte private seed
 * (RFC 8032's "secret key"), otherwise the 32-byte public key.  For tests
 * and test vectors.  0, -EINVAL (OpenSSL refused the bytes), -ENOMEM.
 */
int wsync_sign_key_from_raw(bool is_private, const uint8_t raw[WSYNC_SIGN_RAW_LEN],
			    struct wsync_sign_key **ret, struct wsync_error *err);

/*
 * Make a new key pair and write it: the private key to private_path (mode
 * 0600) and the public key to public_path (mode 0644), both created with
 * O_EXCL, so an existing file is never overwritten (-EEXIST, naming it; if
 * the public file cannot be created the private file just made is removed
 * again).  Both files are fsynced.  *ret (ret may be NULL) gets the key,
 * private half included.  Other errors: the negative errno of the failed
 * call with the file named, -EINVAL if the two paths are the same, -EIO
 * if OpenSSL fails.
 */
int wsync_sign_keygen(const char *private_path, const char *public_path,
		      struct wsync_sign_key **ret, struct wsync_error *err);

/* Frees a key (NULL is fine); private material is wiped by OpenSSL. */
void wsync_sign_key_free(struct wsync_sign_key *k);

/* The key id: 16 lowercase hex digits, NUL-terminated, owned by k. */
const char *wsync_sign_key_id(const struct wsync_sign_key *k);

/* Does k hold a private key (can it sign)? */
bool wsync_sign_key_has_private(const struct wsync_sign_key *k);

/* The raw 32-byte public key into out. */
void wsync_sign_key_public_raw(const struct wsync_sign_key *k,
			       uint8_t out[WSYNC_SIGN_RAW_LEN]);

/*
 * Sign len bytes of msg (pure Ed25519).  0, -EINVAL (k has no private
 * key), -EIO (OpenSSL failed).
 */
int wsync_sign(const struct wsync_sign_key *k, const void *msg, size_t len,
	       uint8_t sig[WSYNC_SIGN_SIG_LEN], struct wsync_error *err);

/* Verify sig over msg: 0 if it verifies, -EBADMSG if not. */
int wsync_sign_verify(const struct wsync_sign_key *k, const void *msg, size_t len,
		      const uint8_t sig[WSYNC_SIGN_SIG_LEN], struct wsync_error *err);

/* ---- signed documents ---- */

/* The signature line, when a document has one. */
struct wsync_sign_trailer {
	bool present;
	char algorithm[16];			/* "ed25519", or a well-formed other name */
	char key_id[WSYNC_SIGN_KEY_ID_LEN + 1];
	uint8_t sig[WSYNC_SIGN_SIG_LEN];	/* valid only for "ed25519" */
};

/*
 * Sign the whole of doc (which must end with '\n': -EINVAL otherwise) and
 * append the signature line to it.  0, -EINVAL, -EIO, -ENOMEM.
 */
int wsync_sign_doc_append(const struct wsync_sign_key *k, struct wsync_buf *doc,
			  struct wsync_error *err);

/*
 * Find the signature line of doc (len bytes): if the last line starts
 * with "wsync-signature", it is parsed into *t and *body_len is its offset
 * (the signed bytes are doc[0, *body_len)); otherwise t->present is false
 * and *body_len is len.  A last line that starts with "wsync-signature"
 * but is malformed gives -EINVAL (as does an ed25519 signature that is not
 * 64 bytes of canonical base64); other algorithm names are returned, not
 * judged.  Checks no signature.
 */
int wsync_sign_doc_split(const void *doc, size_t len, size_t *body_len,
			 struct wsync_sign_trailer *t, struct wsync_error *err);

/*
 * The reader's policy of BUCKET.md §5 in one call.  verify NULL: a
 * well-formed signature line is dropped unchecked (*body_len excludes it;
 * t, which may be NULL, tells what it claimed).  verify set: the document
 * must carry an ed25519 signature line, by verify's key id, that verifies
 * over the body; otherwise -EBADMSG with the reason ("not signed", "signed
 * by key X, not by the configured key Y", "unsupported signature algorithm
 * \"x\"", "signature does not verify").  Malformed line: -EINVAL.
 */
int wsync_sign_doc_check(const struct wsync_sign_key *verify, const void *doc,
			 size_t len, size_t *body_len, struct wsync_sign_trailer *t,
			 struct wsync_error *err);

/*
 * SHA-256 of everything fd holds from offset 0 to its end (pread, in
 * windows): what binds a bucket object to its signed manifest
 * (BUCKET.md §3 "sha256").  0, or a negative errno with err naming what.
 */
int wsync_sha256_fd(int fd, const char *what, uint8_t out[WSYNC_SHA256_LEN],
		    struct wsync_error *err);

/* The same for the len bytes at off (UINT64_MAX: to the end); a file
 * that ends before them is -ENODATA. */
int wsync_sha256_fd_range(int fd, uint64_t off, uint64_t len, const char *what,
			  uint8_t out[WSYNC_SHA256_LEN], struct wsync_error *err);

/* SHA-256 in steps: new (NULL when out of memory), update, final (which
 * starts the next digest over), free (NULL is fine).  update and final
 * fail (-EIO) only when OpenSSL does. */
struct wsync_sha256;
struct wsync_sha256 *wsync_sha256_new(void);
int wsync_sha256_update(struct wsync_sha256 *s, const void *p, size_t len);
int wsync_sha256_final(struct wsync_sha256 *s, uint8_t out[WSYNC_SHA256_LEN]);
void wsync_sha256_free(struct wsync_sha256 *s);

/* The SHA-256 of len bytes at p: 0, or -ENOMEM / -EIO. */
int wsync_sha256_mem(const void *p, size_t len, uint8_t out[WSYNC_SHA256_LEN]);

#endif
