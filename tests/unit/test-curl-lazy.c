/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-curl-lazy.c -- common/store/curl_lazy.c: programs start without libcurl,
 * the first call loads it, and every argument type of the variadic setters
 * and getters reaches libcurl intact (a file:// transfer, no network).
 */
#include <curl/curl.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "curl_lazy.h"
#include "tap.h"

/* Is any of libcurl's sonames in the process? (RTLD_NOLOAD: never loads.) */
static bool curl_in_process(void)
{
	static const char *const sonames[] = { WSYNC_CURL_SONAMES };

	for (size_t i = 0; i < sizeof(sonames) / sizeof(sonames[0]); i++) {
		void *h = dlopen(sonames[i], RTLD_NOW | RTLD_NOLOAD);

		if (h) {
			dlclose(h);
			return true;
		}
	}
	return false;
}

static void test_loaded_on_first_use(void)
{
	struct wsync_error err = { 0 };

	/* the test links libwsync as the programs do: no libcurl at start */
	CHECK(!curl_in_process());
	CHECK(wsync_curl_load(&err) == 0);
	CHECK(curl_in_process());
	CHECK(wsync_curl_load(&err) == 0);	/* once */
	CHECK(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK);
}

struct sink {
	char data[64];
	size_t len;
};

static size_t on_data(char *p, size_t size, size_t n, void *userdata)
{
	struct sink *s = userdata;
	size_t len = size * n;

	if (len > sizeof(s->data) - s->len)
		return 0;
	memcpy(s->data + s->len, p, len);
	s->len += len;
	return len;
}

static void test_setopt_types(void)
{
	char path[] = "/tmp/wsync-curl-lazy-XXXXXX", url[128];
	static const char body[] = "weights, delta by delta";
	struct sink sink = { .len = 0 };
	curl_off_t got = 0;
	char *priv = NULL;
	long code = -1;
	CURL *e;
	int fd = mkstemp(path);

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK(write(fd, body, strlen(body)) == (ssize_t)strlen(body));
	(void)close(fd);
	snprintf(url, sizeof(url), "file://%s", path);

	e = curl_easy_init();
	CHECK(e != NULL);
	if (!e) {
		(void)unlink(path);
		return;
	}
	/* object pointers, a function pointer and a long */
	CHECK(curl_easy_setopt(e, CURLOPT_URL, url) == CURLE_OK);
	CHECK(curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data) == CURLE_OK);
	CHECK(curl_easy_setopt(e, CURLOPT_WRITEDATA, &sink) == CURLE_OK);
	CHECK(curl_easy_setopt(e, CURLOPT_PRIVATE, path) == CURLE_OK);
	CHECK(curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK);
	CHECK(curl_easy_perform(e) == CURLE_OK);
	CHECK(sink.len == strlen(body) && memcmp(sink.data, body, sink.len) == 0);
	/* getters: a curl_off_t, a pointer and a long come back */
	CHECK(curl_easy_getinfo(e, CURLINFO_SIZE_DOWNLOAD_T, &got) == CURLE_OK);
	CHECK_EQ_U64((uint64_t)got, strlen(body));
	CHECK(curl_easy_getinfo(e, CURLINFO_PRIVATE, &priv) == CURLE_OK && priv == path);
	CHECK(curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 0);
	/* a curl_off_t setter: resuming at byte 9 skips "weights, " */
	CHECK(curl_easy_setopt(e, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)9) == CURLE_OK);
	sink.len = 0;
	CHECK(curl_easy_perform(e) == CURLE_OK);
	CHECK(sink.len == strlen(body) - 9 && memcmp(sink.data, body + 9, sink.len) == 0);
	/* a long that libcurl checks: a negative one is refused */
	CHECK(curl_easy_setopt(e, CURLOPT_MAXREDIRS, -2L) == CURLE_BAD_FUNCTION_ARGUMENT);
	curl_easy_reset(e);
	sink.len = 0;
	CHECK(curl_easy_setopt(e, CURLOPT_URL, url) == CURLE_OK);
	CHECK(curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data) == CURLE_OK);
	CHECK(curl_easy_setopt(e, CURLOPT_WRITEDATA, &sink) == CURLE_OK);
	CHECK(curl_easy_perform(e) == CURLE_OK && sink.len == strlen(body));
	curl_easy_cleanup(e);
	(void)unlink(path);
}

static void test_rest(void)
{
	struct curl_slist *l = curl_slist_append(NULL, "A: 1");
	CURLM *m = curl_multi_init();
	int queued = -1;

	CHECK(l && (l = curl_slist_append(l, "B: 2")) && strcmp(l->next->data, "B: 2") == 0);
	curl_slist_free_all(l);
	CHECK(curl_getdate("Sun, 06 Nov 1994 08:49:37 GMT", NULL) == 784111777);
	CHECK(curl_getdate("no date", NULL) == -1);
	CHECK_CONTAINS(curl_easy_strerror(CURLE_FILESIZE_EXCEEDED), "size");
	CHECK(m != NULL);
	if (!m)
		return;
	CHECK(curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, 4L) == CURLM_OK);
	CHECK(curl_multi_setopt(m, CURLMOPT_TIMERDATA, &queued) == CURLM_OK);
	CHECK(curl_multi_info_read(m, &queued) == NULL && queued == 0);
	CHECK(curl_multi_cleanup(m) == CURLM_OK);
}

int main(void)
{
	TEST(test_loaded_on_first_use);
	TEST(test_setopt_types);
	TEST(test_rest);
	curl_global_cleanup();
	return tap_done();
}
