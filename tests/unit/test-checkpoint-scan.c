/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-checkpoint-scan.c -- what the publisher sees of a checkpoint folder
 * (daemon/checkpoint_scan.h) and hears of it (daemon/watch.h): the
 * include/exclude globs (a pattern without '/' matches a name at any
 * depth, excluded folders are pruned), step numbers from names and
 * trainer_state.json, whole / short / malformed safetensors shards, index
 * completeness, and inotify events for files in new subfolders.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "checkpoint_scan.h"
#include "tap.h"
#include "watch.h"

static char tmpdir[256];

static void write_file(const char *rel, const void *data, size_t len)
{
	char p[512];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", tmpdir, rel);
	f = fopen(p, "wb");
	if (!f)
		return;
	if (len)
		fwrite(data, 1, len, f);
	fclose(f);
}

static void mkdir_rel(const char *rel)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", tmpdir, rel);
	mkdir(p, 0755);
}

/* A one-tensor safetensors file: 4 bytes of F32. */
static size_t make_st(uint8_t *buf, const char *hdr_json)
{
	size_t n = strlen(hdr_json);

	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(buf + 8, hdr_json, n);
	memset(buf + 8 + n, 0x3f, 4);
	return 8 + n + 4;
}

#define HDR "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"

static void test_filter(void)
{
	struct ckscan_filter f;

	CHECK(ckscan_filter_init(&f, "*", "optimizer* rng_state*.pth global_step* sub/skip.bin") == 0);
	CHECK(ckscan_filter_match(&f, "model.safetensors"));
	CHECK(ckscan_filter_match(&f, "deep/er/config.json"));
	CHECK(!ckscan_filter_match(&f, "optimizer.pt"));
	CHECK(!ckscan_filter_match(&f, "x/optimizer.pt"));	/* any depth */
	CHECK(!ckscan_filter_match(&f, "rng_state_3.pth"));
	CHECK(!ckscan_filter_match(&f, "global_step12/mp_rank_00.pt"));	/* folder */
	CHECK(!ckscan_filter_match(&f, "sub/skip.bin"));	/* path pattern */
	CHECK(ckscan_filter_match(&f, "other/skip.bin"));
	CHECK(ckscan_filter_prunes_dir(&f, "global_step7"));
	/* a subscriber's state folder is never shipped, whatever the globs */
	CHECK(!ckscan_filter_match(&f, ".wsync/state.json"));
	CHECK(ckscan_filter_prunes_dir(&f, ".wsync"));
	CHECK(ckscan_filter_match(&f, ".wsyncrc"));
	ckscan_filter_free(&f);

	CHECK(ckscan_filter_init(&f, "*.safetensors *.json", "") == 0);
	CHECK(ckscan_filter_match(&f, "a/model.safetensors"));
	CHECK(!ckscan_filter_match(&f, "tokenizer.model"));
	ckscan_filter_free(&f);
}

static void test_steps(void)
{
	int64_t s = 0;

	CHECK(ckscan_step_from_name("checkpoint-2400", &s) == 0 && s == 2400);
	CHECK(ckscan_step_from_name("step_000012", &s) == 0 && s == 12);
	CHECK(ckscan_step_from_name("checkpoint-final", &s) == -EINVAL);
	write_file("trainer_state.json", "{\"global_step\": 77, \"x\": []}", 28);
	CHECK(ckscan_read_global_step(tmpdir, &s) == 0 && s == 77);
	unlink("/nonexistent-wsync");
	CHECK(ckscan_read_global_step("/nonexistent-wsync", &s) == -ENOENT);
}

static void test_tree(void)
{
	struct ckscan_filter f;
	struct ckscan_tree t;
	struct wsync_error err = { 0 };

	mkdir_rel("ck");
	mkdir_rel("ck/sub");
	mkdir_rel("ck/global_step3");
	write_file("ck/b.json", "{}", 2);
	write_file("ck/a.bin", "xyz", 3);
	write_file("ck/sub/c.txt", "c", 1);
	write_file("ck/optimizer.pt", "o", 1);
	write_file("ck/global_step3/x", "x", 1);
	CHECK(ckscan_filter_init(&f, "*", "optimizer* global_step*") == 0);
	char dir[512];

	snprintf(dir, sizeof(dir), "%s/ck", tmpdir);
	CHECK(ckscan_tree_read(dir, &f, NULL, &t, &err) == 0);
	CHECK_EQ_U64(t.n, 3);
	if (t.n == 3) {
		CHECK_STR(t.files[0].path, "a.bin");
		CHECK_STR(t.files[1].path, "b.json");
		CHECK_STR(t.files[2].path, "sub/c.txt");
		CHECK_EQ_U64(t.total_bytes, 6);
	}
	uint64_t fp = t.fingerprint;

	ckscan_tree_free(&t);
	CHECK(ckscan_tree_read(dir, &f, "sub", &t, &err) == 0);	/* skip_top */
	CHECK_EQ_U64(t.n, 2);
	CHECK(t.fingerprint != fp);
	ckscan_tree_free(&t);
	ckscan_filter_free(&f);
}

static void test_shards(void)
{
	uint8_t buf[256];
	size_t n = make_st(buf, HDR);
	struct wsync_error err = { 0 };
	char p[512], dir[512];

	mkdir_rel("sh");
	snprintf(dir, sizeof(dir), "%s/sh", tmpdir);
	snprintf(p, sizeof(p), "%s/sh/model.safetensors", tmpdir);
	/* no shard yet: incomplete */
	CHECK(ckscan_index_complete(dir, &err) == 0);
	write_file("sh/model.safetensors", buf, n - 2);		/* short */
	CHECK(ckscan_shard_whole(p, n - 2, &err) == 0);
	CHECK(ckscan_index_complete(dir, &err) == 0);
	write_file("sh/model.safetensors", buf, n);		/* whole */
	CHECK(ckscan_shard_whole(p, n, &err) == 1);
	CHECK(ckscan_index_complete(dir, &err) == 1);
	buf[n] = 0;
	write_file("sh/model.safetensors", buf, n + 1);		/* too long */
	CHECK(ckscan_shard_whole(p, n + 1, &err) == -EINVAL);
	n = make_st(buf, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}");
	write_file("sh/model.safetensors", buf, n);		/* shape disagrees */
	CHECK(ckscan_shard_whole(p, n, &err) == -EINVAL);
	write_file("sh/model.safetensors", "not json at all!", 16);
	CHECK(ckscan_shard_whole(p, 16, &err) <= 0);

	/* with an index naming a shard that is not there (yet) */
	n = make_st(buf, HDR);
	write_file("sh/model-1.safetensors", buf, n);
	const char *idx = "{\"metadata\":{},\"weight_map\":{\"w\":\"model-1.safetensors\","
			  "\"v\":\"model-2.safetensors\"}}";

	write_file("sh/model.safetensors.index.json", idx, strlen(idx));
	CHECK(ckscan_index_complete(dir, &err) == 0);
	write_file("sh/model-2.safetensors", buf, n);
	CHECK(ckscan_index_complete(dir, &err) == 1);
	write_file("sh/model.safetensors.index.json", "{\"weight_", 9);	/* half written */
	CHECK(ckscan_index_complete(dir, &err) == -EINVAL);
}

struct watch_ctx {
	unsigned events;
	uv_timer_t timer;
	int phase;
	struct wsync_watch *w;
	bool closed;
};

static void on_event(struct wsync_watch *w, bool overflow, void *data)
{
	struct watch_ctx *c = data;

	(void)w;
	(void)overflow;
	c->events++;
}

static void on_closed(void *data)
{
	((struct watch_ctx *)data)->closed = true;
}

static void on_tick(uv_timer_t *t)
{
	struct watch_ctx *c = t->data;

	switch (c->phase++) {
	case 0:
		mkdir_rel("w/new-step");	/* a new folder: watched from now on */
		break;
	case 1:
		c->events = 0;
		write_file("w/new-step/model.safetensors", "abc", 3);
		break;
	case 2:
		CHECK(c->events >= 1);	/* IN_CLOSE_WRITE inside the new folder */
		CHECK(wsync_watch_count(c->w) == 2);
		wsync_watch_close(c->w, on_closed, c);
		uv_close((uv_handle_t *)t, NULL);
		break;
	}
}

static void test_watch(void)
{
	uv_loop_t loop;
	struct watch_ctx c = { 0 };
	char dir[512];

	mkdir_rel("w");
	snprintf(dir, sizeof(dir), "%s/w", tmpdir);
	CHECK(uv_loop_init(&loop) == 0);
	CHECK(wsync_watch_new(&loop, dir, on_event, &c, &c.w) == 0);
	if (!c.w) {
		uv_loop_close(&loop);
		return;
	}
	uv_timer_init(&loop, &c.timer);
	c.timer.data = &c;
	uv_timer_start(&c.timer, on_tick, 100, 100);
	uv_run(&loop, UV_RUN_DEFAULT);
	CHECK(c.closed);
	CHECK(uv_loop_close(&loop) == 0);
}

int main(void)
{
	char cmd[300];

	snprintf(tmpdir, sizeof(tmpdir), "%s/wsync-ckscan.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmpdir))
		return 1;
	TEST(test_filter);
	TEST(test_steps);
	TEST(test_tree);
	TEST(test_shards);
	TEST(test_watch);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", tmpdir);
	return tap_done();
}
