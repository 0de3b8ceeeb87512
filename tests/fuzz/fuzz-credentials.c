/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-credentials: the input is a credentials file (`[store]
 * credentials`, an AWS-style INI or KEY=VALUE lines).  Loading must never
 * crash or leak; accepted keys come in pairs, hold no line break (they go
 * into HTTP headers), and a refusal says why.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "credentials.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* only the file speaks */
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
	unsetenv("CREDENTIALS_DIRECTORY");
	return 0;
}

/* A value that goes into an HTTP header (the access key in Authorization,
 * the session token as x-amz-security-token) must not end the line. */
static void clean(const char *s)
{
	if (!s || !*s || strpbrk(s, "\r\n"))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wsync_credentials c = { 0 };
	struct wsync_error err = { 0 };
	char path[64];
	int fd, r;

	if (size > WSYNC_CREDENTIALS_FILE_MAX + 16)
		return 0;
	fd = memfd_create("wsync-fuzz-creds", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (size && write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return 0;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	r = wsync_credentials_load(path, &c, &err);
	if (r == 0) {
		if (!c.access_key != !c.secret_key)
			abort();	/* half a pair */
		if (c.access_key) {
			clean(c.access_key);
			clean(c.secret_key);
			if (c.session_token)
				clean(c.session_token);
		}
	} else if (!err.msg[0]) {
		abort();	/* refused without saying why */
	}
	wsync_credentials_free(&c);
	close(fd);
	return 0;
}
