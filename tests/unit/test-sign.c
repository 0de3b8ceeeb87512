/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-sign.c -- common/format/sign.h: Ed25519 keys and signed documents.
 * Proves that key ids and signatures match RFC 8032's test vector; that
 * keygen writes PEM files with the right modes and never overwrites; that
 * loading refuses missing, foreign, encrypted and mixed-up key files with
 * a message naming the file and no key material; that keys and
 * signatures interoperate with the openssl command-line tool both ways;
 * and that the signature line of BUCKET.md §5 is written, found, and
 * refused when malformed, missing, altered or by another key.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sign.h"
#include "tap.h"

/* RFC 8032 §7.1, TEST 1. */
static const uint8_t rfc_secret[32] = {
	0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4,
	0x92, 0xec, 0x2c, 0xc4, 0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19,
	0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60,
};
static const uint8_t rfc_public[32] = {
	0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3,
	0xc9, 0x64, 0x07, 0x3a, 0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25,
	0xaf, 0x02, 0x1a, 0x68, 0xf7, 0x07, 0x51, 0x1a,
};
static const uint8_t rfc_sig_empty[64] = {
	0xe5, 0x56, 0x43, 0x00, 0xc3, 0x60, 0xac, 0x72, 0x90, 0x86, 0xe2, 0xcc,
	0x80, 0x6e, 0x82, 0x8a, 0x84, 0x87, 0x7f, 0x1e, 0xb8, 0xe5, 0xd9, 0x74,
	0xd8, 0x73, 0xe0, 0x65, 0x22, 0x49, 0x01, 0x55, 0x5f, 0xb8, 0x82, 0x15,
	0x90, 0xa3, 0x3b, 0xac, 0xc6, 0x1e, 0x39, 0x70, 0x1c, 0xf9, 0xb4, 0x6b,
	0xd2, 0x5b, 0xf5, 0xf0, 0x59, 0x5b, 0xbe, 0x24, 0x65, 0x51, 0x41, 0x43,
	0x8e, 0x7a, 0x10, 0x0b,
};
/* sha256(rfc_public) = 21fe31dfa154a261626bf854... */
#define RFC_KEY_ID "21fe31dfa154a261"

static char tmpdir[64];

/* A path in the test's directory; the result stays valid for the next 63
 * calls (enough for every test below to keep its names in variables). */
static const char *tpath(const char *name)
{
	static char buf[64][256];
	static int slot;
	char *p = buf[slot++ % 64];

	snprintf(p, 256, "%s/%s", tmpdir, name);
	return p;
}

static int have_openssl(void)
{
	return system("command -v openssl >/dev/null 2>&1") == 0;
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	if (buf)
		buf[n] = '\0';
	if (len)
		*len = (size_t)n;
	fclose(f);
	return buf;
}

static void spill(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	if (!f)
		return;
	if (fwrite(p, 1, n, f) != n)
		printf("# short write to %s\n", path);
	fclose(f);
}

/* Does the error message hold any 16-byte run of the base64 lines of a PEM
 * file?  (It must never: errors may end up in logs.) */
static int leaks_pem(const char *msg, const char *pem)
{
	const char *line = pem;

	while (line && *line) {
		const char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);

		if (line[0] != '-')
			for (size_t i = 0; i + 16 <= n; i++) {
				char run16[17];

				memcpy(run16, line + i, 16);
				run16[16] = '\0';
				if (strstr(msg, run16))
					return 1;
			}
		line = nl ? nl + 1 : NULL;
	}
	return 0;
}

static void test_rfc8032_vector_and_key_id(void)
{
	struct wsync_sign_key *priv = NULL, *pub = NULL;
	struct wsync_error err = { 0 };
	uint8_t sig[64], raw[32];

	CHECK(wsync_sign_key_from_raw(true, rfc_secret, &priv, &err) == 0);
	CHECK(wsync_sign_key_from_raw(false, rfc_public, &pub, &err) == 0);
	if (!priv || !pub)
		goto out;
	/* key id = first 16 hex of SHA-256(raw public key), the same from
	 * either half */
	CHECK_STR(wsync_sign_key_id(pub), RFC_KEY_ID);
	CHECK_STR(wsync_sign_key_id(priv), RFC_KEY_ID);
	wsync_sign_key_public_raw(priv, raw);
	CHECK(memcmp(raw, rfc_public, 32) == 0);
	CHECK(wsync_sign_key_has_private(priv));
	CHECK(!wsync_sign_key_has_private(pub));
	/* Ed25519 is deterministic: the RFC's signature of the empty message */
	CHECK(wsync_sign(priv, "", 0, sig, &err) == 0);
	CHECK(memcmp(sig, rfc_sig_empty, 64) == 0);
	CHECK(wsync_sign_verify(pub, "", 0, rfc_sig_empty, &err) == 0);
	CHECK(wsync_sign_verify(pub, "x", 1, rfc_sig_empty, &err) == -EBADMSG);
	CHECK_CONTAINS(err.msg, "does not verify");
	/* a public key cannot sign */
	CHECK(wsync_sign(pub, "x", 1, sig, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "cannot sign");
out:
	wsync_sign_key_free(priv);
	wsync_sign_key_free(pub);
}

static void test_sign_verify_flips(void)
{
	struct wsync_sign_key *k = NULL;
	struct wsync_error err = { 0 };
	uint8_t msg[300], sig[64];
	int bad = 0;

	CHECK(wsync_sign_key_from_raw(true, rfc_secret, &k, &err) == 0);
	if (!k)
		return;
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 7 + 1);
	CHECK(wsync_sign(k, msg, sizeof(msg), sig, &err) == 0);
	CHECK(wsync_sign_verify(k, msg, sizeof(msg), sig, &err) == 0);
	for (size_t i = 0; i < sizeof(msg); i++) {
		msg[i] ^= 0x01;
		bad += wsync_sign_verify(k, msg, sizeof(msg), sig, NULL) != -EBADMSG;
		msg[i] ^= 0x01;
	}
	for (size_t i = 0; i < sizeof(sig); i++) {
		sig[i] ^= 0x80;
		bad += wsync_sign_verify(k, msg, sizeof(msg), sig, NULL) != -EBADMSG;
		sig[i] ^= 0x80;
	}
	CHECK_EQ_U64(bad, 0);
	CHECK(wsync_sign_verify(k, msg, sizeof(msg) - 1, sig, NULL) == -EBADMSG);
	wsync_sign_key_free(k);
}

static void test_keygen_writes_pem_files(void)
{
	struct wsync_sign_key *k = NULL, *priv = NULL, *pub = NULL;
	struct wsync_error err = { 0 };
	const char *kp = tpath("gen.key"), *pp = tpath("gen.key.pub");
	struct stat st;
	char *text;
	uint8_t sig[64];

	umask(022);
	CHECK(wsync_sign_keygen(kp, pp, &k, &err) == 0);
	if (!k) {
		printf("# %s\n", err.msg);
		return;
	}
	CHECK(stat(kp, &st) == 0 && (st.st_mode & 07777) == 0600);
	CHECK(stat(pp, &st) == 0 && (st.st_mode & 07777) == 0644);
	text = slurp(kp, NULL);
	CHECK(text && strncmp(text, "-----BEGIN PRIVATE KEY-----\n", 28) == 0);
	free(text);
	text = slurp(pp, NULL);
	CHECK(text && strncmp(text, "-----BEGIN PUBLIC KEY-----\n", 27) == 0);
	free(text);

	CHECK(wsync_sign_key_load_private(kp, &priv, &err) == 0);
	CHECK(wsync_sign_key_load_public(pp, &pub, &err) == 0);
	if (priv && pub) {
		CHECK_STR(wsync_sign_key_id(priv), wsync_sign_key_id(k));
		CHECK_STR(wsync_sign_key_id(pub), wsync_sign_key_id(k));
		CHECK(wsync_sign(priv, "hello", 5, sig, &err) == 0);
		CHECK(wsync_sign_verify(pub, "hello", 5, sig, &err) == 0);
	}
	wsync_sign_key_free(k);
	wsync_sign_key_free(priv);
	wsync_sign_key_free(pub);
}

static void test_keygen_never_overwrites(void)
{
	struct wsync_error err = { 0 };
	const char *kp = tpath("ow.key"), *pp = tpath("ow.key.pub"), *other = tpath("ow2.key");
	char *before, *after;

	CHECK(wsync_sign_keygen(kp, pp, NULL, &err) == 0);
	before = slurp(kp, NULL);
	/* both exist */
	CHECK(wsync_sign_keygen(kp, pp, NULL, &err) == -EEXIST);
	CHECK_CONTAINS(err.msg, "already exists");
	after = slurp(kp, NULL);
	CHECK(before && after && strcmp(before, after) == 0);
	free(after);
	/* only the private path exists: refused, the public one not made */
	CHECK(wsync_sign_keygen(kp, tpath("ow-new.pub"), NULL, &err) == -EEXIST);
	CHECK_CONTAINS(err.msg, kp);
	CHECK(access(tpath("ow-new.pub"), F_OK) != 0);
	/* only the public path exists: refused, no private key left behind */
	CHECK(wsync_sign_keygen(other, pp, NULL, &err) == -EEXIST);
	CHECK_CONTAINS(err.msg, pp);
	CHECK(access(other, F_OK) != 0);
	/* a symlink where the private key would go is not followed */
	CHECK(symlink(tpath("elsewhere"), tpath("link.key")) == 0);
	CHECK(wsync_sign_keygen(tpath("link.key"), tpath("link.pub"), NULL, &err) < 0);
	CHECK(access(tpath("elsewhere"), F_OK) != 0);
	/* one file for both */
	CHECK(wsync_sign_keygen(tpath("same"), tpath("same"), NULL, &err) == -EINVAL);
	/* the public key cannot be written: the private key is removed again */
	CHECK(wsync_sign_keygen(tpath("orphan.key"), tpath("no-such-dir/orphan.pub"),
				NULL, &err) == -ENOENT);
	CHECK_CONTAINS(err.msg, "no-such-dir/orphan.pub");
	CHECK(access(tpath("orphan.key"), F_OK) != 0);
	free(before);
}

static void test_load_errors_name_the_file(void)
{
	struct wsync_sign_key *k = NULL;
	struct wsync_error err = { 0 };
	const char *kp = tpath("le.key"), *pp = tpath("le.key.pub");
	char *pem, *big;
	size_t len;

	CHECK(wsync_sign_key_load_public(tpath("missing.pub"), &k, &err) == -ENOENT);
	CHECK_CONTAINS(err.msg, "missing.pub");
	CHECK(wsync_sign_key_load_private(tmpdir, &k, &err) < 0);
	CHECK_CONTAINS(err.msg, tmpdir);

	spill(tpath("empty.pem"), "", 0);
	CHECK(wsync_sign_key_load_private(tpath("empty.pem"), &k, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "empty.pem");
	CHECK_CONTAINS(err.msg, "no PEM private");
	spill(tpath("garbage.pem"), "hello\n", 6);
	CHECK(wsync_sign_key_load_public(tpath("garbage.pem"), &k, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "garbage.pem");

	big = calloc(1, WSYNC_SIGN_PEM_MAX + 1);
	if (big) {
		spill(tpath("big.pem"), big, WSYNC_SIGN_PEM_MAX + 1);
		CHECK(wsync_sign_key_load_public(tpath("big.pem"), &k, &err) == -EFBIG);
		CHECK_CONTAINS(err.msg, "big.pem");
		free(big);
	}

	CHECK(wsync_sign_keygen(kp, pp, NULL, &err) == 0);
	/* the two halves mixed up */
	CHECK(wsync_sign_key_load_public(kp, &k, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "holds a private key");
	CHECK(wsync_sign_key_load_private(pp, &k, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "le.key.pub");
	CHECK(k == NULL);

	/* a damaged private key: refused, and no key text in the message */
	pem = slurp(kp, &len);
	if (pem) {
		char *mid = strchr(pem, '\n');

		if (mid && mid[5])
			mid[5] = mid[5] == 'A' ? 'B' : 'A';
		if (mid && mid[10])
			mid[10] = '*';
		spill(tpath("damaged.key"), pem, len);
		CHECK(wsync_sign_key_load_private(tpath("damaged.key"), &k, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "damaged.key");
		CHECK(!leaks_pem(err.msg, pem));
		free(pem);
	}
}

/* Keys made by openssl load; signatures cross both ways; our files are the
 * files openssl writes. */
static void test_openssl_interop(void)
{
	struct wsync_sign_key *priv = NULL, *pub = NULL, *ours = NULL;
	struct wsync_error err = { 0 };
	const char *okey = tpath("ossl.key"), *opub = tpath("ossl.pub"),
		   *msg = tpath("msg"), *sig = tpath("sig"), *osig = tpath("osig");
	uint8_t s[64];
	char *a, *b;
	size_t n = 0;

	if (!have_openssl())
		SKIP("no openssl command");
	CHECK(run("openssl genpkey -algorithm ed25519 -out %s 2>/dev/null", okey) == 0);
	CHECK(run("openssl pkey -in %s -pubout -out %s 2>/dev/null", okey, opub) == 0);
	CHECK(wsync_sign_key_load_private(okey, &priv, &err) == 0);
	CHECK(wsync_sign_key_load_public(opub, &pub, &err) == 0);
	if (!priv || !pub) {
		printf("# %s\n", err.msg);
		goto out;
	}
	CHECK_STR(wsync_sign_key_id(priv), wsync_sign_key_id(pub));

	/* ours -> openssl pkeyutl -verify */
	spill(msg, "the manifest body\n", 18);
	CHECK(wsync_sign(priv, "the manifest body\n", 18, s, &err) == 0);
	spill(sig, s, 64);
	CHECK(run("openssl pkeyutl -verify -pubin -inkey %s -rawin -in %s -sigfile %s "
		  ">/dev/null 2>&1", opub, msg, sig) == 0);
	/* openssl pkeyutl -sign -> ours */
	CHECK(run("openssl pkeyutl -sign -inkey %s -rawin -in %s -out %s 2>/dev/null",
		  okey, msg, osig) == 0);
	a = slurp(osig, &n);
	CHECK(a && n == 64);
	if (a && n == 64) {
		CHECK(wsync_sign_verify(pub, "the manifest body\n", 18, (uint8_t *)a, &err) == 0);
		CHECK(memcmp(a, s, 64) == 0);	/* deterministic: the same bytes */
	}
	free(a);

	/* our keygen's files are what openssl writes for that key */
	CHECK(wsync_sign_keygen(tpath("w.key"), tpath("w.pub"), &ours, &err) == 0);
	CHECK(run("openssl pkey -in %s -pubout -out %s 2>/dev/null", tpath("w.key"),
		  tpath("w.pub.ossl")) == 0);
	a = slurp(tpath("w.pub"), NULL);
	b = slurp(tpath("w.pub.ossl"), NULL);
	CHECK(a && b && strcmp(a, b) == 0);
	free(a);
	free(b);
	CHECK(run("openssl pkey -in %s -out %s 2>/dev/null", tpath("w.key"),
		  tpath("w.key.ossl")) == 0);
	a = slurp(tpath("w.key"), NULL);
	b = slurp(tpath("w.key.ossl"), NULL);
	CHECK(a && b && strcmp(a, b) == 0);
	free(a);
	free(b);

	/* BUCKET.md §5's recipe by hand, with the openssl CLI only: key id
	 * from the DER public key's last 32 bytes, signature line appended */
	spill(tpath("body.json"), "{\"a\": 1}\n", 9);
	CHECK(run("cd %s && id=$(openssl pkey -pubin -in ossl.pub -outform DER | tail -c 32 | "
		  "sha256sum | cut -c1-16) && cp body.json signed.json && printf "
		  "'wsync-signature ed25519 %%s %%s\\n' \"$id\" \"$(openssl pkeyutl -sign "
		  "-inkey ossl.key -rawin -in body.json | base64 -w0)\" >> signed.json",
		  tmpdir) == 0);
	a = slurp(tpath("signed.json"), &n);
	if (a) {
		struct wsync_sign_trailer t;
		size_t body = 0;

		CHECK(wsync_sign_doc_check(pub, a, n, &body, &t, &err) == 0);
		CHECK(body == 9 && t.present);
		CHECK_STR(t.key_id, wsync_sign_key_id(pub));
		free(a);
	}

	/* refused with clear words: an encrypted key (no prompt) and RSA */
	wsync_sign_key_free(priv);
	priv = NULL;
	CHECK(run("openssl genpkey -algorithm ed25519 -aes256 -pass pass:secret "
		  "-out %s 2>/dev/null", tpath("enc.key")) == 0);
	CHECK(wsync_sign_key_load_private(tpath("enc.key"), &priv, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "encrypted");
	CHECK(run("openssl genpkey -algorithm rsa -pkeyopt rsa_keygen_bits:1024 "
		  "-out %s 2>/dev/null", tpath("rsa.key")) == 0);
	CHECK(wsync_sign_key_load_private(tpath("rsa.key"), &priv, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "not an Ed25519 key");
	CHECK_CONTAINS(err.msg, "rsa.key");
out:
	wsync_sign_key_free(priv);
	wsync_sign_key_free(pub);
	wsync_sign_key_free(ours);
}

static void test_signature_line(void)
{
	struct wsync_sign_key *k = NULL, *other = NULL;
	struct wsync_sign_trailer t;
	struct wsync_error err = { 0 };
	struct wsync_buf doc = { 0 };
	uint8_t seed[32];
	size_t body;
	char *line;

	CHECK(wsync_sign_key_from_raw(true, rfc_secret, &k, &err) == 0);
	memset(seed, 7, sizeof(seed));
	CHECK(wsync_sign_key_from_raw(true, seed, &other, &err) == 0);
	if (!k || !other)
		goto out;
	CHECK(wsync_buf_append(&doc, "{\"a\": 1}", 8) == 0);
	CHECK(wsync_sign_doc_append(k, &doc, &err) == -EINVAL);	/* no final newline */
	CHECK(wsync_buf_append(&doc, "\n", 1) == 0);
	CHECK(wsync_sign_doc_append(k, &doc, &err) == 0);
	/* 9 body bytes and one 130-byte line */
	CHECK_EQ_U64(doc.len, 9 + 130);
	line = (char *)doc.data + 9;
	CHECK(strncmp(line, "wsync-signature ed25519 " RFC_KEY_ID " ", 41) == 0);
	CHECK(doc.data[doc.len - 1] == '\n' && doc.data[doc.len - 2] != ' ');

	CHECK(wsync_sign_doc_split(doc.data, doc.len, &body, &t, &err) == 0);
	CHECK(t.present && body == 9);
	CHECK_STR(t.algorithm, "ed25519");
	CHECK_STR(t.key_id, RFC_KEY_ID);
	CHECK(wsync_sign_doc_check(k, doc.data, doc.len, &body, &t, &err) == 0);
	CHECK(wsync_sign_doc_check(NULL, doc.data, doc.len, &body, &t, &err) == 0 &&
	      body == 9 && t.present);
	/* another key */
	CHECK(wsync_sign_doc_check(other, doc.data, doc.len, &body, &t, &err) == -EBADMSG);
	CHECK_CONTAINS(err.msg, "signed by key " RFC_KEY_ID ", not by the configured key");
	/* unsigned, with and without a verify key */
	CHECK(wsync_sign_doc_check(k, doc.data, 9, &body, &t, &err) == -EBADMSG);
	CHECK_CONTAINS(err.msg, "not signed");
	CHECK(wsync_sign_doc_check(NULL, doc.data, 9, &body, &t, &err) == 0 && body == 9 &&
	      !t.present);
	/* the body altered */
	doc.data[2] = 'b';
	CHECK(wsync_sign_doc_check(k, doc.data, doc.len, &body, &t, &err) == -EBADMSG);
	CHECK_CONTAINS(err.msg, "does not verify");
	doc.data[2] = 'a';
	/* bytes after the line: it is no longer the last line */
	CHECK(wsync_buf_append(&doc, "x\n", 2) == 0);
	CHECK(wsync_sign_doc_check(k, doc.data, doc.len, &body, &t, &err) == -EBADMSG);
	doc.len -= 2;
	/* non-canonical base64: the last data character before "==" carries
	 * 4 unused bits; setting one must be refused, not decoded alike */
	{
		char *c = (char *)doc.data + doc.len - 4;
		char saved = *c;

		CHECK(doc.data[doc.len - 2] == '=' && doc.data[doc.len - 3] == '=');
		*c = saved == 'A' ? 'B' : saved == 'Q' ? 'R' : saved == 'g' ? 'h' : 'x';
		CHECK(wsync_sign_doc_split(doc.data, doc.len, &body, &t, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "canonical base64");
		*c = saved;
	}
	wsync_buf_free(&doc);

	/* malformed lines are refused with or without a verify key */
	static const char *const bad[] = {
		"{}\nwsync-signature\n",
		"{}\nwsync-signature ed25519\n",
		"{}\nwsync-signature ed25519 " RFC_KEY_ID "\n",
		"{}\nwsync-signature  ed25519 " RFC_KEY_ID " AAAA\n",
		"{}\nwsync-signature ed25519 " RFC_KEY_ID " AAAA \n",
		"{}\nwsync-signature ed25519 21FE31DFA154A261 AAAA\n",
		"{}\nwsync-signature ed25519 21fe31df AAAA\n",
		"{}\nwsync-signature ED25519 " RFC_KEY_ID " AAAA\n",
		"{}\nwsync-signature ed25519 " RFC_KEY_ID " AAAA\n",	/* 3 bytes */
		"{}\nwsync-signature ed25519 " RFC_KEY_ID " AA!A\n",
		"{}\nwsync-signaturex ed25519 " RFC_KEY_ID " AAAA\n",
		"{}\nwsync-signature ed25519 " RFC_KEY_ID " AAAA extra\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = wsync_sign_doc_check(NULL, bad[i], strlen(bad[i]), &body, &t, &err);

		if (r != -EINVAL)
			printf("# bad[%zu] gave %d\n", i, r);
		CHECK(r == -EINVAL);
		CHECK_CONTAINS(err.msg, "malformed signature line");
	}
	/* a well-formed line of another algorithm: dropped without a key,
	 * refused by name with one */
	{
		const char *d = "{}\nwsync-signature ml-dsa-65 " RFC_KEY_ID " AAAA\n";

		CHECK(wsync_sign_doc_check(NULL, d, strlen(d), &body, &t, &err) == 0);
		CHECK(body == 3 && t.present);
		CHECK_STR(t.algorithm, "ml-dsa-65");
		CHECK(wsync_sign_doc_check(k, d, strlen(d), &body, &t, &err) == -EBADMSG);
		CHECK_CONTAINS(err.msg, "unsupported signature algorithm \"ml-dsa-65\"");
	}
	/* a last line that merely mentions the tag elsewhere is body */
	CHECK(wsync_sign_doc_split("{}\n x wsync-signature\n", 22, &body, &t, &err) == 0 &&
	      body == 22 && !t.present);
out:
	wsync_sign_key_free(k);
	wsync_sign_key_free(other);
}

int main(void)
{
	char cmd[128];

	snprintf(tmpdir, sizeof(tmpdir), "/tmp/wsync-test-sign-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	TEST(test_rfc8032_vector_and_key_id);
	TEST(test_sign_verify_flips);
	TEST(test_keygen_writes_pem_files);
	TEST(test_keygen_never_overwrites);
	TEST(test_load_errors_name_the_file);
	TEST(test_openssl_interop);
	TEST(test_signature_line);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", tmpdir);
	return tap_done();
}
