/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_state.c -- what the publisher remembers (publisher_local.h):
 * state_dir/publisher/state.json, which says what the local base is (the
 * version, its manifest's hash, the checkpoint it came from) and since
 * when each object no longer needed has been so; pending.json, the
 * checkpoint of the version being published; and HEAD as last seen.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "log.h"
#include "publisher_local.h"

/* ---- state.json and pending.json ---- */

char *pub_state_text(struct wsync_publisher *p, uint64_t version,
		     const struct wsync_manifest_ref *ref, bool has_step, int64_t step,
		     const char *source, uint64_t mtime_ns, uint64_t fp)
{
	json_t *o = json_object(), *gc = json_object();
	char hex[WSYNC_HASH_HEX_LEN + 1], fph[17];
	char *text;

	if (!o || !gc) {
		json_decref(o);
		json_decref(gc);
		return NULL;
	}
	json_object_set_new(o, "version", json_integer((json_int_t)version));
	if (ref && ref->key) {
		json_object_set_new(o, "manifest_key", json_string(ref->key));
		json_object_set_new(o, "manifest_size", json_integer((json_int_t)ref->size));
		json_object_set_new(o, "manifest_xxh128",
				    json_string(wsync_hash_hex(&ref->hash, hex, sizeof(hex))));
	}
	json_object_set_new(o, "step", has_step ? json_integer(step) : json_null());
	json_object_set_new(o, "source", json_string(source ? source : ""));
	json_object_set_new(o, "source_mtime_ns", json_integer((json_int_t)mtime_ns));
	PATHF(fph, "%016" PRIx64, fp);
	json_object_set_new(o, "source_fingerprint", json_string(fph));
	json_object_set_new(o, "written", json_integer((json_int_t)time(NULL)));
	/* the key this version was signed with: a change is a rotation
	 * (publisher_recover.c) */
	if (p->key)
		json_object_set_new(o, "key_id", json_string(wsync_sign_key_id(p->key)));
	for (size_t i = 0; i < p->n_gc; i++)
		json_object_set_new(gc, p->gc[i].key, json_integer(p->gc[i].since));
	json_object_set_new(o, "gc_unneeded_since", gc);
	text = json_dumps(o, JSON_INDENT(2));
	json_decref(o);
	if (text) {
		size_t n = strlen(text);
		char *t2 = realloc(text, n + 2);

		if (!t2) {
			free(text);
			return NULL;
		}
		t2[n] = '\n';
		t2[n + 1] = '\0';
		text = t2;
	}
	return text;
}

void pub_load_state(struct wsync_publisher *p, struct pub_local_state *ls)
{
	char path[PATH_MAX];
	json_error_t je;
	json_t *o, *v, *gc;
	const char *key;

	memset(ls, 0, sizeof(*ls));
	PATHF(path, "%s/state.json", p->pub_dir);
	o = json_load_file(path, 0, &je);
	if (!o) {
		if (access(path, F_OK) == 0)
			log_warning("%s: unreadable (%s); treating the local base as unknown",
				    path, je.text);
		return;
	}
	if (json_is_integer(v = json_object_get(o, "version")))
		ls->version = (uint64_t)json_integer_value(v);
	if (json_is_string(v = json_object_get(o, "manifest_xxh128"))) {
		const char *s = json_string_value(v);

		if (strlen(s) == 32) {
			ls->has_hash = true;
			for (int i = 0; i < 16; i++) {
				unsigned b;

				if (sscanf(s + 2 * i, "%2x", &b) != 1)
					ls->has_hash = false;
				ls->manifest_hash.b[i] = (uint8_t)b;
			}
		}
	}
	if (json_is_integer(v = json_object_get(o, "step"))) {
		p->step = json_integer_value(v);
		p->has_step = true;
	}
	if (json_is_string(v = json_object_get(o, "source")) && *json_string_value(v))
		p->source = strdup(json_string_value(v));
	if (json_is_integer(v = json_object_get(o, "source_mtime_ns")))
		p->source_mtime_ns = (uint64_t)json_integer_value(v);
	if (json_is_string(v = json_object_get(o, "source_fingerprint")))
		p->source_fp = strtoull(json_string_value(v), NULL, 16);
	gc = json_object_get(o, "gc_unneeded_since");
	if (json_is_object(gc)) {
		json_object_foreach(gc, key, v) {
			struct gc_entry *ng;

			if (!json_is_integer(v))
				continue;
			ng = realloc(p->gc, (p->n_gc + 1) * sizeof(*ng));
			if (!ng)
				break;
			p->gc = ng;
			if (!(p->gc[p->n_gc].key = strdup(key)))
				break;
			p->gc[p->n_gc++].since = json_integer_value(v);
		}
	}
	json_decref(o);
}

int pub_load_state_key(struct wsync_publisher *p, uint64_t *version,
		       char key_id[WSYNC_SIGN_KEY_ID_LEN + 1])
{
	char path[PATH_MAX];
	json_error_t je;
	json_t *o, *v;

	*version = 0;
	key_id[0] = '\0';
	PATHF(path, "%s/state.json", p->pub_dir);
	o = json_load_file(path, 0, &je);
	if (!o)
		return -ENOENT;
	if (json_is_integer(v = json_object_get(o, "version")) && json_integer_value(v) > 0)
		*version = (uint64_t)json_integer_value(v);
	if (json_is_string(v = json_object_get(o, "key_id")) &&
	    json_string_length(v) == WSYNC_SIGN_KEY_ID_LEN)
		memcpy(key_id, json_string_value(v), WSYNC_SIGN_KEY_ID_LEN + 1);
	json_decref(o);
	return 0;
}

/* pending.json: the source of the version being published, so that a
 * restart that finds it published knows which checkpoint it was. */
void pub_take_pending(struct wsync_publisher *p, uint64_t version)
{
	char path[PATH_MAX];
	json_error_t je;
	json_t *o, *v;

	PATHF(path, "%s/pending.json", p->pub_dir);
	o = json_load_file(path, 0, &je);
	if (!o)
		return;
	v = json_object_get(o, "version");
	if (json_is_integer(v) && (uint64_t)json_integer_value(v) == version) {
		free(p->source);
		p->source = NULL;
		if (json_is_string(v = json_object_get(o, "source")))
			p->source = strdup(json_string_value(v));
		if (json_is_integer(v = json_object_get(o, "source_mtime_ns")))
			p->source_mtime_ns = (uint64_t)json_integer_value(v);
		if (json_is_string(v = json_object_get(o, "source_fingerprint")))
			p->source_fp = strtoull(json_string_value(v), NULL, 16);
	}
	json_decref(o);
}

/* ---- the head we know ---- */

/* Take doc (a manifest document, already checked against ref) as HEAD's. */
int pub_adopt_head_manifest(struct wsync_publisher *p, const void *doc, size_t len,
			    uint64_t version, struct wsync_error *err)
{
	struct wsync_manifest m;
	int r;

	r = wsync_manifest_parse(doc, len, NULL, &m, err);
	if (r < 0)
		return r;
	if (m.version != version) {
		wsync_manifest_free(&m);
		return wsync_error_set(err, -EINVAL, "manifest of version %" PRIu64 " says "
				       "version %" PRIu64, version, m.version);
	}
	wsync_manifest_free(&p->head_manifest);
	p->head_manifest = m;
	p->head_version = version;
	wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, version, p->head_ref_key);
	p->head_ref.key = p->head_ref_key;
	p->head_ref.size = len;
	wsync_hash_mem(doc, len, &p->head_ref.hash);
	p->step = m.step;
	p->has_step = true;
	return 0;
}

