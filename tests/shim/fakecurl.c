/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fakecurl.c -- a "libcurl.so.4" with none of libcurl's functions, for
 * test-store-cli: put first on LD_LIBRARY_PATH, it is what wsync's lazy
 * loader (common/store/curl_lazy.c) finds, so the error an operator sees with a
 * broken or too old libcurl can be checked, and that the commands which
 * need no libcurl still work.
 */
int wsync_fake_curl(void);

int wsync_fake_curl(void)
{
	return 0;
}
