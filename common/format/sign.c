/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sign.c -- Ed25519 keys and signed documents (see sign.h, BUCKET.md §5).
 *
 * Everything cryptographic is OpenSSL 3's: EVP_PKEY_ED25519 keys, one-shot
 * EVP_DigestSign/EVP_DigestVerify with no digest (pure Ed25519 hashes the
 * message itself), PEM through the PKCS#8 and SubjectPublicKeyInfo
 * encoders that `openssl genpkey` and `openssl pkey -pubout` use.  This
 * file adds the file handling (size limits, O_EXCL creation, wiping the
 * PEM text of private keys) and the signature line of BUCKET.md §5.
 */
#include "sign.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "durable.h"
#include "io.h"

#define TAG "wsync-signature"
#define TAG_LEN (sizeof(TAG) - 1)
#define ALGO_ED25519 "ed25519"
#define SIG_B64_LEN 88		/* base64 of 64 bytes, with "==" */
#define LINE_MAX_LEN 2048	/* longest signature line accepted (any algorithm) */

struct wsync_sign_key {
	EVP_PKEY *pkey;
	bool priv;
	uint8_t pub[WSYNC_SIGN_RAW_LEN];
	char id[WSYNC_SIGN_KEY_ID_LEN + 1];
};

static const char hex_digits[] = "0123456789abcdef";

/* The reason of OpenSSL's newest error, for a message; the queue is
 * cleared so that errors do not pile up in a long-running daemon. */
static const char *ossl_reason(void)
{
	unsigned long e = ERR_peek_last_error();
	const char *s = e ? ERR_reason_error_string(e) : NULL;

	ERR_clear_error();
	return s ? s : "unknown OpenSSL error";
}

/* Wrap pkey (ownership passes) after checking it is Ed25519. */
static int key_wrap(EVP_PKEY *pkey, bool priv, const char *what,
		    struct wsync_sign_key **ret, struct wsync_error *err)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t publen = WSYNC_SIGN_RAW_LEN;
	struct wsync_sign_key *k;

	if (!EVP_PKEY_is_a(pkey, "ED25519")) {
		const char *type = EVP_PKEY_get0_type_name(pkey);

		EVP_PKEY_free(pkey);
		return wsync_error_set(err, -EINVAL, "%s: not an Ed25519 key (%s)",
				       what, type ? type : "unknown type");
	}
	k = calloc(1, sizeof(*k));
	if (!k) {
		EVP_PKEY_free(pkey);
		return wsync_error_set(err, -ENOMEM, "%s: out of memory", what);
	}
	k->pkey = pkey;
	k->priv = priv;
	if (EVP_PKEY_get_raw_public_key(pkey, k->pub, &publen) != 1 ||
	    publen != WSYNC_SIGN_RAW_LEN ||
	    !EVP_Digest(k->pub, sizeof(k->pub), md, &mdlen, EVP_sha256(), NULL) ||
	    mdlen < WSYNC_SIGN_KEY_ID_LEN / 2) {
		wsync_sign_key_free(k);
		return wsync_error_set(err, -EIO, "%s: cannot read the public key: %s",
				       what, ossl_reason());
	}
	for (size_t i = 0; i < WSYNC_SIGN_KEY_ID_LEN / 2; i++) {
		k->id[2 * i] = hex_digits[md[i] >> 4];
		k->id[2 * i + 1] = hex_digits[md[i] & 15];
	}
	k->id[WSYNC_SIGN_KEY_ID_LEN] = '\0';
	*ret = k;
	return 0;
}

void wsync_sign_key_free(struct wsync_sign_key *k)
{
	if (!k)
		return;
	EVP_PKEY_free(k->pkey);
	free(k);
}

const char *wsync_sign_key_id(const struct wsync_sign_key *k)
{
	return k->id;
}

bool wsync_sign_key_has_private(const struct wsync_sign_key *k)
{
	return k->priv;
}

void wsync_sign_key_public_raw(const struct wsync_sign_key *k,
			       uint8_t out[WSYNC_SIGN_RAW_LEN])
{
	memcpy(out, k->pub, WSYNC_SIGN_RAW_LEN);
}

/* Never prompt for a passphrase: a daemon has no terminal. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf, (void)size, (void)rwflag, (void)u;
	return -1;
}

static int load_key(const char *path, bool priv, struct wsync_sign_key **ret,
		    struct wsync_error *err)
{
	EVP_PKEY *pkey = NULL;
	size_t len = 0;
	char *pem = NULL;
	BIO *bio;
	int r;

	*ret = NULL;
	/* a regular file of at most WSYNC_SIGN_PEM_MAX (wiped after use) */
	r = wsync_read_file(path, WSYNC_SIGN_PEM_MAX, &pem, &len, err);
	if (r < 0)
		return r;
	if (priv && strstr(pem, "-----BEGIN ENCRYPTED PRIVATE KEY-----")) {
		r = wsync_error_set(err, -EINVAL, "%s: the private key is encrypted "
				    "(wsync needs an unencrypted PKCS#8 key, mode 0600)",
				    path);
		goto out;
	}
	if (!priv && strstr(pem, "PRIVATE KEY-----")) {
		r = wsync_error_set(err, -EINVAL, "%s: holds a private key; give the "
				    "public key instead (`openssl pkey -in %s -pubout` "
				    "prints it)", path, path);
		goto out;
	}
	bio = BIO_new_mem_buf(pem, (int)len);
	if (!bio) {
		r = wsync_error_set(err, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	pkey = priv ? PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL)
		    : PEM_read_bio_PUBKEY(bio, NULL, no_passphrase, NULL);
	BIO_free(bio);
	if (!pkey) {
		r = wsync_error_set(err, -EINVAL, "%s: no PEM %s key found (%s)", path,
				    priv ? "private (PKCS#8)" : "public (SubjectPublicKeyInfo)",
				    ossl_reason());
		goto out;
	}
	r = key_wrap(pkey, priv, path, ret, err);
out:
	explicit_bzero(pem, len);
	free(pem);
	return r;
}

int wsync_sign_key_load_private(const char *path, struct wsync_sign_key **ret,
				struct wsync_error *err)
{
	return load_key(path, true, ret, err);
}

int wsync_sign_key_load_public(const char *path, struct wsync_sign_key **ret,
			       struct wsync_error *err)
{
	return load_key(path, false, ret, err);
}

int wsync_sign_key_from_raw(bool is_private, const uint8_t raw[WSYNC_SIGN_RAW_LEN],
			    struct wsync_sign_key **ret, struct wsync_error *err)
{
	EVP_PKEY *pkey;

	*ret = NULL;
	pkey = is_private ? EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, raw,
							 WSYNC_SIGN_RAW_LEN)
			  : EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, raw,
							WSYNC_SIGN_RAW_LEN);
	if (!pkey)
		return wsync_error_set(err, -EINVAL, "raw Ed25519 %s key refused: %s",
				       is_private ? "private" : "public", ossl_reason());
	return key_wrap(pkey, is_private, "raw key", ret, err);
}

/* Write the PEM that fill() puts in a secure-memory BIO to a new file
 * (O_EXCL, mode), fsync it and its directory.  On failure a file this call created is
 * removed again. */
static int write_pem_file(const char *path, mode_t mode, EVP_PKEY *pkey, bool priv,
			  struct wsync_error *err)
{
	BIO *bio = BIO_new(BIO_s_secmem());
	char *data = NULL;
	long n;
	int fd, r;

	if (!bio)
		return wsync_error_set(err, -ENOMEM, "%s: out of memory", path);
	if (priv ? PEM_write_bio_PrivateKey(bio, pkey, NULL, NULL, 0, NULL, NULL) != 1
		 : PEM_write_bio_PUBKEY(bio, pkey) != 1) {
		BIO_free(bio);
		return wsync_error_set(err, -EIO, "%s: cannot encode the key: %s", path,
				       ossl_reason());
	}
	n = BIO_get_mem_data(bio, &data);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY,
		  mode);
	if (fd < 0) {
		r = -errno;
		BIO_free(bio);
		return wsync_error_set(err, r, "%s: %s", path,
				       r == -EEXIST ? "already exists (not overwritten)"
						    : strerror(-r));
	}
	/* Not an atomic replacement (wsync_write_atomic): a key file is never
	 * replaced, and O_EXCL on the name itself is what refuses to. */
	r = wsync_write_all(fd, data, n > 0 ? (size_t)n : 0);
	/* The umask may have made the mode stricter; never looser, but make
	 * sure a private key is not group- or world-readable either way. */
	if (r == 0 && fchmod(fd, mode) < 0)
		r = -errno;
	if (r == 0)
		r = wsync_fsync(fd);
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0)
		r = wsync_fsync_parent(path);	/* the new name, durable too */
	BIO_free(bio);
	if (r < 0) {
		(void)unlink(path);
		return wsync_error_set(err, r, "%s: %s", path, strerror(-r));
	}
	return 0;
}

int wsync_sign_keygen(const char *private_path, const char *public_path,
		      struct wsync_sign_key **ret, struct wsync_error *err)
{
	struct wsync_sign_key *k = NULL;
	EVP_PKEY *pkey;
	struct stat st;
	int r;

	if (ret)
		*ret = NULL;
	if (strcmp(private_path, public_path) == 0)
		return wsync_error_set(err, -EINVAL, "%s: the private and the public "
				       "key need two different files", private_path);
	/* Refuse early, before a private key is written for nothing; O_EXCL
	 * below is what actually guarantees nothing is overwritten. */
	if (lstat(public_path, &st) == 0)
		return wsync_error_set(err, -EEXIST, "%s: already exists (not "
				       "overwritten)", public_path);
	pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	if (!pkey)
		return wsync_error_set(err, -EIO, "cannot generate an Ed25519 key: %s",
				       ossl_reason());
	r = key_wrap(pkey, true, private_path, &k, err);
	if (r < 0)
		return r;
	r = write_pem_file(private_path, 0600, k->pkey, true, err);
	if (r < 0)
		goto fail;
	r = write_pem_file(public_path, 0644, k->pkey, false, err);
	if (r < 0) {
		(void)unlink(private_path);
		goto fail;
	}
	if (ret)
		*ret = k;
	else
		wsync_sign_key_free(k);
	return 0;
fail:
	wsync_sign_key_free(k);
	return r;
}

int wsync_sign(const struct wsync_sign_key *k, const void *msg, size_t len,
	       uint8_t sig[WSYNC_SIGN_SIG_LEN], struct wsync_error *err)
{
	size_t siglen = WSYNC_SIGN_SIG_LEN;
	EVP_MD_CTX *ctx;
	int ok;

	if (!k->priv)
		return wsync_error_set(err, -EINVAL, "key %s is a public key: it cannot "
				       "sign", k->id);
	ctx = EVP_MD_CTX_new();
	if (!ctx)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	ok = EVP_DigestSignInit(ctx, NULL, NULL, NULL, k->pkey) == 1 &&
	     EVP_DigestSign(ctx, sig, &siglen, len ? msg : (const void *)"", len) == 1 &&
	     siglen == WSYNC_SIGN_SIG_LEN;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return wsync_error_set(err, -EIO, "Ed25519 signing failed: %s",
				       ossl_reason());
	return 0;
}

int wsync_sign_verify(const struct wsync_sign_key *k, const void *msg, size_t len,
		      const uint8_t sig[WSYNC_SIGN_SIG_LEN], struct wsync_error *err)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok;

	if (!ctx)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	ok = EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, k->pkey) == 1 &&
	     EVP_DigestVerify(ctx, sig, WSYNC_SIGN_SIG_LEN,
			      len ? msg : (const void *)"", len) == 1;
	EVP_MD_CTX_free(ctx);
	ERR_clear_error();
	if (!ok)
		return wsync_error_set(err, -EBADMSG, "signature does not verify with "
				       "key %s (the document was altered or signed by "
				       "another key)", k->id);
	return 0;
}

/* ---- the signature line ---- */

int wsync_sign_doc_append(const struct wsync_sign_key *k, struct wsync_buf *doc,
			  struct wsync_error *err)
{
	uint8_t sig[WSYNC_SIGN_SIG_LEN];
	char line[TAG_LEN + 1 + sizeof(ALGO_ED25519) + WSYNC_SIGN_KEY_ID_LEN + 1 +
		  SIG_B64_LEN + 2];
	int r, n;

	if (doc->len == 0 || doc->data[doc->len - 1] != '\n')
		return wsync_error_set(err, -EINVAL, "a document to sign must end "
				       "with a newline");
	r = wsync_sign(k, doc->data, doc->len, sig, err);
	if (r < 0)
		return r;
	n = snprintf(line, sizeof(line), TAG " " ALGO_ED25519 " %s ", k->id);
	if (EVP_EncodeBlock((unsigned char *)line + n, sig, sizeof(sig)) != SIG_B64_LEN)
		return wsync_error_set(err, -EIO, "base64 encoding failed");
	n += SIG_B64_LEN;
	line[n++] = '\n';
	r = wsync_buf_append(doc, line, (size_t)n);
	if (r < 0)
		return wsync_error_set(err, r, "out of memory");
	return 0;
}

static bool is_b64(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '+' || c == '/' || c == '=';
}

/* Parse the fields of a signature line (without its '\n'). */
static int parse_line(const char *s, size_t n, struct wsync_sign_trailer *t,
		      struct wsync_error *err)
{
	const char *f[4];
	size_t fl[4], nf = 0, i = 0;

	if (n > LINE_MAX_LEN)
		return wsync_error_set(err, -EINVAL, "malformed signature line: %zu "
				       "bytes long", n);
	while (i <= n && nf < 4) {
		size_t j = i;

		while (j < n && s[j] != ' ')
			j++;
		f[nf] = s + i;
		fl[nf++] = j - i;
		i = j + 1;
	}
	if (nf != 4 || i <= n)
		return wsync_error_set(err, -EINVAL, "malformed signature line: "
				       "expected \"" TAG " ALGORITHM KEYID SIGNATURE\"");
	for (size_t k = 0; k < 4; k++)
		if (fl[k] == 0)
			return wsync_error_set(err, -EINVAL, "malformed signature line: "
					       "empty field or double space");
	if (fl[0] != TAG_LEN || memcmp(f[0], TAG, TAG_LEN) != 0)
		return wsync_error_set(err, -EINVAL, "malformed signature line: does "
				       "not start with \"" TAG " \"");
	if (fl[1] >= sizeof(t->algorithm))
		return wsync_error_set(err, -EINVAL, "malformed signature line: "
				       "algorithm name too long");
	for (size_t k = 0; k < fl[1]; k++) {
		char c = f[1][k];

		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
			return wsync_error_set(err, -EINVAL, "malformed signature line: "
					       "bad algorithm name");
	}
	memcpy(t->algorithm, f[1], fl[1]);
	t->algorithm[fl[1]] = '\0';
	if (fl[2] != WSYNC_SIGN_KEY_ID_LEN)
		return wsync_error_set(err, -EINVAL, "malformed signature line: key "
				       "id is not %d hex digits", WSYNC_SIGN_KEY_ID_LEN);
	for (size_t k = 0; k < fl[2]; k++)
		if (!strchr(hex_digits, f[2][k]) || f[2][k] == '\0')
			return wsync_error_set(err, -EINVAL, "malformed signature line: "
					       "key id is not lowercase hex");
	memcpy(t->key_id, f[2], WSYNC_SIGN_KEY_ID_LEN);
	t->key_id[WSYNC_SIGN_KEY_ID_LEN] = '\0';
	for (size_t k = 0; k < fl[3]; k++)
		if (!is_b64(f[3][k]))
			return wsync_error_set(err, -EINVAL, "malformed signature line: "
					       "signature is not base64");
	if (strcmp(t->algorithm, ALGO_ED25519) == 0) {
		unsigned char raw[SIG_B64_LEN], again[SIG_B64_LEN + 1];

		/* Decode, then insist that encoding gives the same text back:
		 * one spelling per signature (no stray bits, padding as
		 * written by EVP_EncodeBlock). */
		if (fl[3] != SIG_B64_LEN ||
		    EVP_DecodeBlock(raw, (const unsigned char *)f[3], SIG_B64_LEN) !=
			    WSYNC_SIGN_SIG_LEN + 2 ||
		    EVP_EncodeBlock(again, raw, WSYNC_SIGN_SIG_LEN) != SIG_B64_LEN ||
		    memcmp(again, f[3], SIG_B64_LEN) != 0)
			return wsync_error_set(err, -EINVAL, "malformed signature line: "
					       "an ed25519 signature is 64 bytes in "
					       "%d characters of canonical base64",
					       SIG_B64_LEN);
		memcpy(t->sig, raw, WSYNC_SIGN_SIG_LEN);
	}
	t->present = true;
	return 0;
}

int wsync_sign_doc_split(const void *doc, size_t len, size_t *body_len,
			 struct wsync_sign_trailer *t, struct wsync_error *err)
{
	const char *s = doc;
	size_t start;
	int r;

	memset(t, 0, sizeof(*t));
	*body_len = len;
	if (len == 0 || s[len - 1] != '\n')
		return 0;
	start = len - 1;
	while (start > 0 && s[start - 1] != '\n')
		start--;
	if (len - 1 - start < TAG_LEN || memcmp(s + start, TAG, TAG_LEN) != 0)
		return 0;
	r = parse_line(s + start, len - 1 - start, t, err);
	if (r < 0) {
		memset(t, 0, sizeof(*t));
		return r;
	}
	*body_len = start;
	return 0;
}

int wsync_sign_doc_check(const struct wsync_sign_key *verify, const void *doc,
			 size_t len, size_t *body_len, struct wsync_sign_trailer *t,
			 struct wsync_error *err)
{
	struct wsync_sign_trailer local;
	int r;

	if (!t)
		t = &local;
	r = wsync_sign_doc_split(doc, len, body_len, t, err);
	if (r < 0 || !verify)
		return r;
	if (!t->present)
		return wsync_error_set(err, -EBADMSG, "not signed (no \"" TAG "\" line "
				       "at its end) but a verify key (%s) is configured",
				       verify->id);
	if (strcmp(t->algorithm, ALGO_ED25519) != 0)
		return wsync_error_set(err, -EBADMSG, "unsupported signature algorithm "
				       "\"%s\" (this wsync verifies " ALGO_ED25519 ")",
				       t->algorithm);
	if (strcmp(t->key_id, verify->id) != 0)
		return wsync_error_set(err, -EBADMSG, "signed by key %s, not by the "
				       "configured key %s", t->key_id, verify->id);
	return wsync_sign_verify(verify, doc, *body_len, t->sig, err);
}

/* An EVP_MD_CTX set up for SHA-256. */
struct wsync_sha256 *wsync_sha256_new(void)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	if (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		ctx = NULL;
	}
	return (struct wsync_sha256 *)ctx;
}

int wsync_sha256_update(struct wsync_sha256 *s, const void *p, size_t len)
{
	return EVP_DigestUpdate((EVP_MD_CTX *)s, p, len) == 1 ? 0 : -EIO;
}

int wsync_sha256_final(struct wsync_sha256 *s, uint8_t out[WSYNC_SHA256_LEN])
{
	unsigned int len = 0;

	if (EVP_DigestFinal_ex((EVP_MD_CTX *)s, out, &len) != 1 || len != WSYNC_SHA256_LEN ||
	    EVP_DigestInit_ex((EVP_MD_CTX *)s, EVP_sha256(), NULL) != 1)
		return -EIO;
	return 0;
}

void wsync_sha256_free(struct wsync_sha256 *s)
{
	EVP_MD_CTX_free((EVP_MD_CTX *)s);
}

int wsync_sha256_mem(const void *p, size_t len, uint8_t out[WSYNC_SHA256_LEN])
{
	struct wsync_sha256 *s = wsync_sha256_new();
	int r;

	if (!s)
		return -ENOMEM;
	r = wsync_sha256_update(s, p, len);
	if (r == 0)
		r = wsync_sha256_final(s, out);
	wsync_sha256_free(s);
	return r;
}

int wsync_sha256_fd_range(int fd, uint64_t off, uint64_t len, const char *what,
			  uint8_t out[WSYNC_SHA256_LEN], struct wsync_error *err)
{
	struct wsync_sha256 *s = wsync_sha256_new();
	uint8_t *buf = malloc(1u << 20);
	int r = 0;

	if (!s || !buf) {
		r = wsync_error_set(err, -ENOMEM, "%s: SHA-256: out of memory", what);
		goto out;
	}
	while (len) {
		size_t want = len < (1u << 20) ? (size_t)len : 1u << 20;
		ssize_t n = pread(fd, buf, want, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = wsync_error_set(err, -errno, "%s: read: %s", what, strerror(errno));
			goto out;
		}
		if (n == 0) {
			if (len != UINT64_MAX)
				r = wsync_error_set(err, -ENODATA, "%s: ends %" PRIu64 " bytes "
						    "early", what, len);
			if (r < 0)
				goto out;
			break;
		}
		if (wsync_sha256_update(s, buf, (size_t)n) < 0) {
			r = wsync_error_set(err, -EIO, "%s: SHA-256 failed", what);
			goto out;
		}
		off += (uint64_t)n;
		if (len != UINT64_MAX)
			len -= (uint64_t)n;
	}
	if (wsync_sha256_final(s, out) < 0)
		r = wsync_error_set(err, -EIO, "%s: SHA-256 failed", what);
out:
	wsync_sha256_free(s);
	free(buf);
	return r;
}

int wsync_sha256_fd(int fd, const char *what, uint8_t out[WSYNC_SHA256_LEN],
		    struct wsync_error *err)
{
	return wsync_sha256_fd_range(fd, 0, UINT64_MAX, what, out, err);
}
