/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-path.c -- common/base/path.h, the rule every path from the bucket passes
 * (delta FILE records, manifest files, a subscriber's state): relative
 * UTF-8 names of up to 4096 bytes are accepted, whatever is absolute,
 * climbs out ("..", "."), hides a separator or a control character, is
 * not UTF-8 or is too long is refused with a message saying why.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "path.h"
#include "tap.h"

static void test_paths_accepted(void)
{
	struct wsync_error err;
	char *longest = malloc(WSYNC_PATH_LEN_MAX);
	static const char *ok[] = {
		"a", "model.safetensors", "dir/sub/x.bin", ".hidden", "a..b",
		"...", "mod\xc3\xa8le/\xe2\x82\xac/\xf0\x9f\x98\x80", "a b",
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		int r = wsync_path_check(ok[i], strlen(ok[i]), &err);

		if (r)
			printf("# refused %s: %s\n", ok[i], err.msg);
		CHECK(r == 0);
	}
	memset(longest, 'x', WSYNC_PATH_LEN_MAX);
	for (int i = 100; i < WSYNC_PATH_LEN_MAX; i += 100)
		longest[i] = '/';
	CHECK(wsync_path_check(longest, WSYNC_PATH_LEN_MAX, &err) == 0);
	free(longest);
}

static void refuse_path(const char *p, size_t len, const char *needle)
{
	struct wsync_error err = { 0 };

	CHECK(wsync_path_check(p, len, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, needle);
}

static void test_paths_refused(void)
{
	char *over = malloc(WSYNC_PATH_LEN_MAX + 1);

	refuse_path("", 0, "empty");
	refuse_path("/abs", 4, "absolute");
	refuse_path("../x", 4, "\"..\"");
	refuse_path("a/../b", 6, "\"..\"");
	refuse_path("a/./b", 5, "\".\"");
	refuse_path(".", 1, "\".\"");
	refuse_path("a//b", 4, "empty component");
	refuse_path("a/", 2, "empty component");
	refuse_path("a\\b", 3, "backslash");
	refuse_path("a\0b", 3, "NUL or control");
	refuse_path("a\nb", 3, "NUL or control");
	refuse_path("a\x7f", 2, "NUL or control");
	refuse_path("a\xc2\x85", 3, "NUL or control");	/* C1 NEL */
	refuse_path("a\xff", 2, "UTF-8");
	refuse_path("\xc0\xaf", 2, "UTF-8");		/* overlong '/' */
	refuse_path("\xed\xa0\x80", 3, "UTF-8");	/* surrogate */
	refuse_path("\xe2\x82", 2, "UTF-8");		/* cut */
	memset(over, 'x', WSYNC_PATH_LEN_MAX + 1);
	refuse_path(over, WSYNC_PATH_LEN_MAX + 1, "4096");
	free(over);
}

static void test_component_length(void)
{
	char name[WSYNC_PATH_NAME_MAX + 3];

	memset(name, 'n', sizeof(name));
	name[0] = 'd';
	name[1] = '/';
	CHECK(wsync_path_check(name, 2 + WSYNC_PATH_NAME_MAX, NULL) == 0);
	refuse_path(name, sizeof(name), "segment of 256 bytes");
}

int main(void)
{
	TEST(test_paths_accepted);
	TEST(test_paths_refused);
	TEST(test_component_length);
	return tap_done();
}
