/* SPDX-License-Identifier: Apache-2.0 */
/*
 * curl_lazy.c -- the libcurl functions wsync calls, as trampolines into
 * libcurl loaded with dlopen on first use (see curl_lazy.h for why).
 *
 * Each function here has libcurl's own name and signature, so callers
 * compile against <curl/curl.h> unchanged; the first call loads the
 * library and looks every function up, the later ones jump through the
 * table.  Before libcurl is loaded, or if it cannot be, a trampoline
 * fails the way libcurl itself would fail to start (CURLE_FAILED_INIT,
 * NULL, -1).
 *
 * The two variadic setters take one argument whose type libcurl reads
 * from the option's number (CURLOPTTYPE_*): long, an object pointer, a
 * function pointer, a curl_off_t or a blob pointer.  Each is read here by
 * that type and passed on as such; the getter's is always a pointer.  Add a libcurl function by adding it to
 * CURL_FUNCS and writing its trampoline.
 */
#define CURL_DISABLE_TYPECHECK	/* here the setters are functions, not macros */
#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "curl_lazy.h"

/* X(return type, name without "curl_", parameter list) */
#define CURL_FUNCS(X)								\
	X(CURLcode, global_init, (long))					\
	X(void, global_cleanup, (void))						\
	X(CURL *, easy_init, (void))						\
	X(CURLcode, easy_setopt, (CURL *, CURLoption, ...))			\
	X(CURLcode, easy_getinfo, (CURL *, CURLINFO, ...))			\
	X(CURLcode, easy_perform, (CURL *))					\
	X(void, easy_reset, (CURL *))						\
	X(void, easy_cleanup, (CURL *))						\
	X(const char *, easy_strerror, (CURLcode))				\
	X(time_t, getdate, (const char *, const time_t *))			\
	X(struct curl_slist *, slist_append, (struct curl_slist *, const char *)) \
	X(void, slist_free_all, (struct curl_slist *))				\
	X(CURLM *, multi_init, (void))						\
	X(CURLMcode, multi_setopt, (CURLM *, CURLMoption, ...))			\
	X(CURLMcode, multi_add_handle, (CURLM *, CURL *))			\
	X(CURLMcode, multi_remove_handle, (CURLM *, CURL *))			\
	X(CURLMcode, multi_socket_action, (CURLM *, curl_socket_t, int, int *))	\
	X(CURLMcode, multi_assign, (CURLM *, curl_socket_t, void *))		\
	X(CURLMsg *, multi_info_read, (CURLM *, int *))				\
	X(CURLMcode, multi_cleanup, (CURLM *))

#define API_FIELD(ret, name, params) ret (*name) params;
static struct {
	CURL_FUNCS(API_FIELD)
} api;

#define API_ENTRY(ret, name, params) { "curl_" #name, offsetof(__typeof__(api), name) },
static const struct {
	const char *sym;
	size_t off;
} api_syms[] = { CURL_FUNCS(API_ENTRY) };

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;
static char load_msg[512];	/* why not, when !loaded */

static void load(void)
{
	static const char *const sonames[] = { WSYNC_CURL_SONAMES };
	char first[256] = "";
	void *h = NULL;

	for (size_t i = 0; !h && i < sizeof(sonames) / sizeof(sonames[0]); i++) {
		h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
		if (!h && i == 0)	/* the reason that matters: the usual soname's */
			snprintf(first, sizeof(first), "%s", dlerror());
	}
	if (!h) {
		snprintf(load_msg, sizeof(load_msg),
			 "libcurl cannot be loaded (install libcurl4): %s", first);
		return;
	}
	for (size_t i = 0; i < sizeof(api_syms) / sizeof(api_syms[0]); i++) {
		void *f = dlsym(h, api_syms[i].sym);

		if (!f) {
			snprintf(load_msg, sizeof(load_msg),
				 "libcurl has no %s (wsync needs libcurl 7.88 or later)",
				 api_syms[i].sym);
			memset(&api, 0, sizeof(api));
			return;	/* h stays open: a library is never unloaded */
		}
		/* POSIX: a function's address converts through void * */
		memcpy((char *)&api + api_syms[i].off, &f, sizeof(f));
	}
	loaded = true;
}

static bool ready(void)
{
	(void)pthread_once(&load_once, load);
	return loaded;
}

int wsync_curl_load(struct wsync_error *err)
{
	if (ready())
		return 0;
	return wsync_error_set(err, -ELIBACC, "%s", load_msg);
}

/* ---- the trampolines ---- */

CURLcode curl_global_init(long flags)
{
	return ready() ? api.global_init(flags) : CURLE_FAILED_INIT;
}

void curl_global_cleanup(void)
{
	if (ready())
		api.global_cleanup();
}

CURL *curl_easy_init(void)
{
	return ready() ? api.easy_init() : NULL;
}

/*
 * Call setter fn(handle, option, x) with the one argument in ap read as
 * the type the option's number says (the same numbering for both).
 */
#define FORWARD_SETOPT(fn, handle, option, ap)					\
	((long)(option) < CURLOPTTYPE_OBJECTPOINT				\
		 ? fn(handle, option, va_arg(ap, long))				\
	 : (long)(option) < CURLOPTTYPE_FUNCTIONPOINT				\
		 ? fn(handle, option, va_arg(ap, void *))			\
	 : (long)(option) < CURLOPTTYPE_OFF_T					\
		 ? fn(handle, option, va_arg(ap, void (*)(void)))		\
	 : (long)(option) < CURLOPTTYPE_BLOB					\
		 ? fn(handle, option, va_arg(ap, curl_off_t))			\
		 : fn(handle, option, va_arg(ap, void *)))

CURLcode curl_easy_setopt(CURL *curl, CURLoption option, ...)
{
	CURLcode rc;
	va_list ap;

	if (!ready())
		return CURLE_FAILED_INIT;
	va_start(ap, option);
	rc = FORWARD_SETOPT(api.easy_setopt, curl, option, ap);
	va_end(ap);
	return rc;
}

/* Every CURLINFO_* takes a pointer to where the answer goes. */
CURLcode curl_easy_getinfo(CURL *curl, CURLINFO info, ...)
{
	CURLcode rc;
	va_list ap;

	if (!ready())
		return CURLE_FAILED_INIT;
	va_start(ap, info);
	rc = api.easy_getinfo(curl, info, va_arg(ap, void *));
	va_end(ap);
	return rc;
}

CURLcode curl_easy_perform(CURL *curl)
{
	return ready() ? api.easy_perform(curl) : CURLE_FAILED_INIT;
}

void curl_easy_reset(CURL *curl)
{
	if (ready())
		api.easy_reset(curl);
}

void curl_easy_cleanup(CURL *curl)
{
	if (ready())
		api.easy_cleanup(curl);
}

const char *curl_easy_strerror(CURLcode code)
{
	return ready() ? api.easy_strerror(code) : "libcurl is not loaded";
}

time_t curl_getdate(const char *p, const time_t *unused)
{
	return ready() ? api.getdate(p, unused) : (time_t)-1;
}

struct curl_slist *curl_slist_append(struct curl_slist *list, const char *s)
{
	return ready() ? api.slist_append(list, s) : NULL;
}

void curl_slist_free_all(struct curl_slist *list)
{
	if (ready())
		api.slist_free_all(list);
}

CURLM *curl_multi_init(void)
{
	return ready() ? api.multi_init() : NULL;
}

CURLMcode curl_multi_setopt(CURLM *multi, CURLMoption option, ...)
{
	CURLMcode rc;
	va_list ap;

	if (!ready())
		return CURLM_INTERNAL_ERROR;
	va_start(ap, option);
	rc = FORWARD_SETOPT(api.multi_setopt, multi, option, ap);
	va_end(ap);
	return rc;
}

CURLMcode curl_multi_add_handle(CURLM *multi, CURL *curl)
{
	return ready() ? api.multi_add_handle(multi, curl) : CURLM_INTERNAL_ERROR;
}

CURLMcode curl_multi_remove_handle(CURLM *multi, CURL *curl)
{
	return ready() ? api.multi_remove_handle(multi, curl) : CURLM_INTERNAL_ERROR;
}

CURLMcode curl_multi_socket_action(CURLM *multi, curl_socket_t s, int ev_bitmask,
				   int *running_handles)
{
	return ready() ? api.multi_socket_action(multi, s, ev_bitmask, running_handles)
		       : CURLM_INTERNAL_ERROR;
}

CURLMcode curl_multi_assign(CURLM *multi, curl_socket_t s, void *sockp)
{
	return ready() ? api.multi_assign(multi, s, sockp) : CURLM_INTERNAL_ERROR;
}

CURLMsg *curl_multi_info_read(CURLM *multi, int *msgs_in_queue)
{
	return ready() ? api.multi_info_read(multi, msgs_in_queue) : NULL;
}

CURLMcode curl_multi_cleanup(CURLM *multi)
{
	return ready() ? api.multi_cleanup(multi) : CURLM_INTERNAL_ERROR;
}
