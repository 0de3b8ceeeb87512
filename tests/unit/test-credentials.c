/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-credentials.c -- common/store/credentials.h: each source (a named file,
 * $CREDENTIALS_DIRECTORY/store, the environment, none) is read, they are
 * tried in the documented order and a source that was chosen is never
 * skipped silently; the shared-credentials INI format is parsed as AWS
 * writes it; and no error message ever carries a secret.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "credentials.h"
#include "tap.h"

#define AK "AKIAIOSFODNN7EXAMPLE"
#define SK "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define TOKEN "FwoGZXIvYXdzEXAMPLE//TOKEN+="
/* Distinct secrets for the error cases: no message may contain them. */
#define LEAK_SK "LeakCheck/Secret+Key#0123456789"
#define LEAK_TOKEN "LeakCheckSessionToken;abcdef"

static char dir[] = "/tmp/wsync-test-credentials-XXXXXX";
static char path_buf[512];

/* Write content to dir/name; returns the path (valid until the next call). */
static const char *write_file(const char *name, const char *content)
{
	FILE *f;

	snprintf(path_buf, sizeof(path_buf), "%s/%s", dir, name);
	f = fopen(path_buf, "w");
	if (!f || fputs(content, f) < 0 || fclose(f) != 0) {
		printf("# cannot write %s\n", path_buf);
		return path_buf;
	}
	return path_buf;
}

static void clear_env(void)
{
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
	unsetenv("CREDENTIALS_DIRECTORY");
}

/* An error message must never quote a secret. */
static void check_no_secret(const struct wsync_error *err)
{
	CHECK(!strstr(err->msg, SK));
	CHECK(!strstr(err->msg, LEAK_SK));
	CHECK(!strstr(err->msg, TOKEN));
	CHECK(!strstr(err->msg, LEAK_TOKEN));
}

/* Load and expect success with these values (token NULL: none). */
static void expect_ok(const char *file, const char *ak, const char *sk,
		      const char *token, const char *source)
{
	struct wsync_credentials c;
	struct wsync_error err = { 0 };
	int r = wsync_credentials_load(file, &c, &err);

	if (r != 0) {
		printf("# load(%s): %d %s\n", file ? file : "NULL", r, wsync_error_str(&err));
		CHECK(r == 0);
		return;
	}
	CHECK_STR(c.access_key, ak);
	CHECK_STR(c.secret_key, sk);
	if (token)
		CHECK_STR(c.session_token, token);
	else
		CHECK(c.session_token == NULL);
	CHECK_STR(c.source, source);
	wsync_credentials_free(&c);
	CHECK(!c.access_key && !c.secret_key && !c.session_token && !c.source);
}

/* Load and expect failure with code and a message containing reason. */
static void expect_fail(const char *file, int code, const char *reason)
{
	struct wsync_credentials c;
	struct wsync_error err = { 0 };
	int r = wsync_credentials_load(file, &c, &err);

	if (r != code) {
		printf("# load(%s): %d (%s), expected %d\n", file ? file : "NULL", r,
		       wsync_error_str(&err), code);
		CHECK(r == code);
		if (r == 0)
			wsync_credentials_free(&c);
		return;
	}
	CHECK(!c.access_key && !c.secret_key && !c.session_token && !c.source);
	CHECK(err.code == code);
	CHECK_CONTAINS(err.msg, reason);
	check_no_secret(&err);
}

static void test_file_default_section(void)
{
	const char *p;
	char source[600];

	clear_env();
	p = write_file("default.ini",
		       "[default]\n"
		       "aws_access_key_id = " AK "\n"
		       "aws_secret_access_key = " SK "\n");
	snprintf(source, sizeof(source), "file %s", p);
	expect_ok(p, AK, SK, NULL, source);
}

/* [default] wins over other profiles, wherever it is in the file. */
static void test_file_default_among_profiles(void)
{
	const char *p;
	char source[600];

	clear_env();
	p = write_file("profiles.ini",
		       "[prod]\n"
		       "aws_access_key_id = AKIDPROD\n"
		       "aws_secret_access_key = prodsecret\n"
		       "[default]\n"
		       "aws_access_key_id = " AK "\n"
		       "aws_secret_access_key = " SK "\n"
		       "[dev]\n"
		       "aws_access_key_id = AKIDDEV\n"
		       "aws_secret_access_key = devsecret\n");
	snprintf(source, sizeof(source), "file %s", p);
	expect_ok(p, AK, SK, NULL, source);
}

static void test_file_single_section(void)
{
	const char *p;
	char source[600];

	clear_env();
	p = write_file("single.ini",
		       "[wsync-publisher]\n"
		       "aws_access_key_id=" AK "\n"
		       "aws_secret_access_key=" SK "\n");
	snprintf(source, sizeof(source), "file %s", p);
	expect_ok(p, AK, SK, NULL, source);
}

static void test_file_no_section(void)
{
	const char *p;
	char source[600];

	clear_env();
	p = write_file("bare.ini",
		       "aws_access_key_id = " AK "\n"
		       "aws_secret_access_key = " SK "\n");
	snprintf(source, sizeof(source), "file %s", p);
	expect_ok(p, AK, SK, NULL, source);
}

static void test_file_session_token(void)
{
	const char *p;
	char source[600];

	clear_env();
	p = write_file("token.ini",
		       "[default]\n"
		       "aws_access_key_id = " AK "\n"
		       "aws_secret_access_key = " SK "\n"
		       "aws_session_token = " TOKEN "\n");
	snprintf(source, sizeof(source), "file %s", p);
	expect_ok(p, AK, SK, TOKEN, source);
	/* An empty token is no token. */
	p = write_file("token-empty.ini",
		       "[default]\n"
		       "aws_access_key_id = " AK "\n"
		       "aws_secret_access_key = " SK "\n"
		       "aws_session_token =\n");
	snprintf(source, sizeof(source), "file %s", p);
	expect_ok(p, AK, SK, NULL, source);
}

/* Comments (# and ;, whole lines), blank lines, CRLF, a BOM, blanks around
 * '=' and names, other keys, key names in any case; and '#' or ';' inside a
 * value are part of it. */
static void test_file_syntax(void)
{
	const char *p;
	char source[600];

	clear_env();
	p = write_file("syntax.ini",
		       "\xef\xbb\xbf# written by hand\r\n"
		       "; another comment\r\n"
		       "\r\n"
		       "  [ default ]  \r\n"
		       "region = eu-west-1\r\n"
		       "\tAWS_Access_Key_ID\t=\t" AK "  \r\n"
		       "   # indented comment\r\n"
		       "aws_secret_access_key =    ab#cd;ef  \r\n"
		       "output = json");	/* no final newline */
	snprintf(source, sizeof(source), "file %s", p);
	expect_ok(p, AK, "ab#cd;ef", NULL, source);
}

static void test_file_missing_keys(void)
{
	const char *p;

	clear_env();
	p = write_file("no-secret.ini", "[default]\naws_access_key_id = " AK "\n");
	expect_fail(p, -EINVAL, "[default] has no aws_secret_access_key");
	p = write_file("no-access.ini", "[default]\naws_secret_access_key = " LEAK_SK "\n");
	expect_fail(p, -EINVAL, "[default] has no aws_access_key_id");
	p = write_file("empty-secret.ini",
		       "[default]\naws_access_key_id = " AK "\naws_secret_access_key =\n");
	expect_fail(p, -EINVAL, "has no aws_secret_access_key");
	p = write_file("empty.ini", "# nothing here\n");
	expect_fail(p, -EINVAL, "no aws_access_key_id");
	/* The keys are in another profile than [default]: not taken. */
	p = write_file("wrong-profile.ini",
		       "[default]\nregion = us-east-1\n"
		       "[other]\naws_access_key_id = " AK "\naws_secret_access_key = " LEAK_SK "\n");
	expect_fail(p, -EINVAL, "[default] has no aws_access_key_id");
}

static void test_file_ambiguous_profiles(void)
{
	const char *p;

	clear_env();
	p = write_file("two.ini",
		       "[a]\naws_access_key_id = " AK "\naws_secret_access_key = " LEAK_SK "\n"
		       "[b]\naws_access_key_id = " AK "\naws_secret_access_key = " LEAK_SK "\n");
	expect_fail(p, -EINVAL, "no [default] section and 2 to choose from");
	/* Keys before the first section count as one more group. */
	p = write_file("bare-and-section.ini",
		       "aws_access_key_id = " AK "\n"
		       "[b]\naws_access_key_id = " AK "\naws_secret_access_key = " LEAK_SK "\n");
	expect_fail(p, -EINVAL, "no [default] section");
}

/* Malformed lines are reported by number, never by content. */
static void test_file_malformed(void)
{
	const char *p;

	clear_env();
	p = write_file("no-equals.ini",
		       "[default]\naws_access_key_id = " AK "\naws_secret_access_key " LEAK_SK "\n");
	expect_fail(p, -EINVAL, "line 3: expected \"[section]\" or \"key = value\"");
	p = write_file("open-section.ini", "[default\naws_access_key_id = " AK "\n");
	expect_fail(p, -EINVAL, "line 1: a section header must end with ']'");
	p = write_file("empty-section.ini", "[ ]\n");
	expect_fail(p, -EINVAL, "line 1: empty section name");
	p = write_file("no-key.ini", "[default]\n= " LEAK_SK "\n");
	expect_fail(p, -EINVAL, "line 2: missing key before '='");
	p = write_file("twice.ini",
		       "[default]\naws_access_key_id = " AK "\naws_secret_access_key = " LEAK_SK "\n"
		       "aws_secret_access_key = " LEAK_SK "\n");
	expect_fail(p, -EINVAL,
		    "line 4: aws_secret_access_key given twice in [default] (first on line 3)");
	p = write_file("ctl.ini",
		       "[default]\naws_access_key_id = " AK "\naws_secret_access_key = "
		       LEAK_SK "\x1b" "x\n");
	expect_fail(p, -EINVAL, "line 3: control character 0x1b");
}

static void test_file_unreadable_never_falls_back(void)
{
	char missing[600], big_path[600];
	char *big;
	FILE *f;

	clear_env();
	/* Good credentials elsewhere must not hide the error. */
	setenv("AWS_ACCESS_KEY_ID", AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", SK, 1);
	snprintf(missing, sizeof(missing), "%s/does-not-exist.ini", dir);
	expect_fail(missing, -ENOENT, "No such file or directory");
	expect_fail(missing, -ENOENT, missing);
	expect_fail(dir, -EINVAL, "not a regular file");
	expect_fail("", -EINVAL, "empty credentials file name");
	snprintf(big_path, sizeof(big_path), "%s/big.ini", dir);
	big = malloc(WSYNC_CREDENTIALS_FILE_MAX + 2);
	f = fopen(big_path, "w");
	CHECK(big && f);
	if (big && f) {
		memset(big, '#', WSYNC_CREDENTIALS_FILE_MAX + 1);
		big[WSYNC_CREDENTIALS_FILE_MAX + 1] = '\0';
		CHECK(fputs(big, f) >= 0);
	}
	if (f)
		CHECK(fclose(f) == 0);
	free(big);
	expect_fail(big_path, -EFBIG, "larger than 64 KiB");
	clear_env();
}

static void test_credentials_directory(void)
{
	char sub[600];

	clear_env();
	snprintf(sub, sizeof(sub), "%s/creds", dir);
	CHECK(mkdir(sub, 0700) == 0);
	setenv("CREDENTIALS_DIRECTORY", sub, 1);
	/* No store file: on to the environment, then anonymous. */
	setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	expect_ok(NULL, "AKIDENV", "envsecret", NULL, "environment");
	/* The store wins over the environment. */
	write_file("creds/store",
		   "[default]\naws_access_key_id = " AK "\naws_secret_access_key = " SK "\n"
		   "aws_session_token = " TOKEN "\n");
	expect_ok(NULL, AK, SK, TOKEN, "$CREDENTIALS_DIRECTORY/store");
	/* A broken store is an error, not a reason to use the environment. */
	write_file("creds/store", "[default]\naws_access_key_id = " AK "\n");
	expect_fail(NULL, -EINVAL, "$CREDENTIALS_DIRECTORY/store (");
	expect_fail(NULL, -EINVAL, "has no aws_secret_access_key");
	/* A file named by the caller wins over both. */
	write_file("creds/store",
		   "aws_access_key_id = AKIDSTORE\naws_secret_access_key = storesecret\n");
	{
		const char *p = write_file("explicit.ini",
					   "aws_access_key_id = " AK "\n"
					   "aws_secret_access_key = " SK "\n");
		char source[600];

		snprintf(source, sizeof(source), "file %s", p);
		expect_ok(p, AK, SK, NULL, source);
	}
	expect_ok(NULL, "AKIDSTORE", "storesecret", NULL, "$CREDENTIALS_DIRECTORY/store");
	clear_env();
}

static void test_environment(void)
{
	clear_env();
	setenv("AWS_ACCESS_KEY_ID", AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", SK, 1);
	expect_ok(NULL, AK, SK, NULL, "environment");
	setenv("AWS_SESSION_TOKEN", TOKEN, 1);
	expect_ok(NULL, AK, SK, TOKEN, "environment");
	/* An empty token is no token. */
	setenv("AWS_SESSION_TOKEN", "", 1);
	expect_ok(NULL, AK, SK, NULL, "environment");
	clear_env();
}

static void test_environment_incomplete(void)
{
	clear_env();
	setenv("AWS_ACCESS_KEY_ID", AK, 1);
	expect_fail(NULL, -EINVAL, "$AWS_ACCESS_KEY_ID is set but $AWS_SECRET_ACCESS_KEY is not");
	setenv("AWS_SECRET_ACCESS_KEY", "", 1);		/* empty counts as unset */
	expect_fail(NULL, -EINVAL, "$AWS_SECRET_ACCESS_KEY is not");
	clear_env();
	setenv("AWS_SECRET_ACCESS_KEY", LEAK_SK, 1);
	expect_fail(NULL, -EINVAL, "$AWS_SECRET_ACCESS_KEY is set but $AWS_ACCESS_KEY_ID is not");
	clear_env();
	setenv("AWS_SESSION_TOKEN", LEAK_TOKEN, 1);
	expect_fail(NULL, -EINVAL, "$AWS_SESSION_TOKEN is set but");
	clear_env();
	setenv("AWS_ACCESS_KEY_ID", AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", LEAK_SK "\n", 1);
	expect_fail(NULL, -EINVAL, "$AWS_SECRET_ACCESS_KEY contains control character 0x0a");
	clear_env();
}

static void test_anonymous(void)
{
	struct wsync_credentials c;
	struct wsync_error err = { 0 };

	clear_env();
	setenv("AWS_ACCESS_KEY_ID", "", 1);
	setenv("CREDENTIALS_DIRECTORY", "", 1);
	CHECK(wsync_credentials_load(NULL, &c, &err) == 0);
	CHECK(c.access_key == NULL && c.secret_key == NULL && c.session_token == NULL);
	CHECK_STR(c.source, "anonymous");
	wsync_credentials_free(&c);
	wsync_credentials_free(&c);	/* twice is harmless */
	wsync_credentials_free(NULL);
	clear_env();
}

/* Remove the scratch directory (flat, plus creds/). */
static void cleanup(void)
{
	static const char *const names[] = {
		"default.ini", "profiles.ini", "single.ini", "bare.ini", "token.ini",
		"token-empty.ini", "syntax.ini", "no-secret.ini", "no-access.ini",
		"empty-secret.ini", "empty.ini", "wrong-profile.ini", "two.ini",
		"bare-and-section.ini", "no-equals.ini", "open-section.ini",
		"empty-section.ini", "no-key.ini", "twice.ini", "ctl.ini", "big.ini",
		"explicit.ini", "creds/store", "creds",
	};
	char p[600];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		(void)remove(p);
	}
	(void)rmdir(dir);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		printf("Bail out! mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	TEST(test_file_default_section);
	TEST(test_file_default_among_profiles);
	TEST(test_file_single_section);
	TEST(test_file_no_section);
	TEST(test_file_session_token);
	TEST(test_file_syntax);
	TEST(test_file_missing_keys);
	TEST(test_file_ambiguous_profiles);
	TEST(test_file_malformed);
	TEST(test_file_unreadable_never_falls_back);
	TEST(test_credentials_directory);
	TEST(test_environment);
	TEST(test_environment_incomplete);
	TEST(test_anonymous);
	cleanup();
	return tap_done();
}
