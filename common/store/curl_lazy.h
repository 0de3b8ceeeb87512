/* SPDX-License-Identifier: Apache-2.0 */
/*
 * curl_lazy.h -- libcurl, loaded when first needed.
 *
 * libcurl and the ~30 libraries it pulls in (TLS, Kerberos, LDAP, SSH,
 * HTTP/2, ...) cost every start of a program that links them about 4 ms
 * here (mapping and relocating them), which the codec commands (`wsync
 * diff`, `apply`, `inspect`) and file:// buckets never use.  So wsync does
 * not link libcurl: curl_lazy.c defines the libcurl functions wsync calls,
 * each a trampoline that loads libcurl.so.4 with dlopen on the first call
 * and jumps to the real one.  Callers include <curl/curl.h> and call
 * libcurl as usual; they call wsync_curl_load() first where a clear error
 * helps (an s3:// or hf:// store, a notify_url), since a trampoline can
 * only fail with libcurl's own error codes.
 */
#ifndef WSYNC_CURL_LAZY_H
#define WSYNC_CURL_LAZY_H

#include "error.h"

/* The sonames tried, in order: Debian's libcurl4 (OpenSSL) first, then
 * libcurl3-gnutls (the same API). */
#define WSYNC_CURL_SONAMES "libcurl.so.4", "libcurl-gnutls.so.4"

/* Load libcurl (once per process; later calls give the first result).
 * 0, or -ELIBACC with the reason in err. */
int wsync_curl_load(struct wsync_error *err);

#endif
