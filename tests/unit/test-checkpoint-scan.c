/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-checkpoint-scan.c -- what the publisher sees of a checkpoint folder
 * (daemon/publisher/checkpoint_scan.h) and hears of it (watch.h there): the
 * include/exclude globs (a pattern without '/' matches a name at any
 * depth, excluded folders are pruned), step numbers from names and
* trainer_state.json, whole / short / malformed safetensors shards, what
 * makes a checkpoint a complete model (markers, indexes, shard-name sets,
 * formats without a header), and inotify events for files in new subfolders.
 * Against a user who can write the watched folder: links to outside are
 * never followed (a subfolder, trainer_state.json, a marker, a shard on
 * the judge's way), a FIFO never blocks a read, trainer_state.json has a
 * size limit, and the header judgement works on bytes alone.  The binary
 * ends itself (SIGALRM) if an open ever blocks.
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

#include "checkpoint.h"
#include "checkpoint_complete.h"
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
	struct wsync_file_filter f;

	CHECK(wsync_file_filter_init(&f, "*", "optimizer* rng_state*.pth global_step* sub/skip.bin") == 0);
	CHECK(wsync_file_filter_match(&f, "model.safetensors"));
	CHECK(wsync_file_filter_match(&f, "deep/er/config.json"));
	CHECK(!wsync_file_filter_match(&f, "optimizer.pt"));
	CHECK(!wsync_file_filter_match(&f, "x/optimizer.pt"));	/* any depth */
	CHECK(!wsync_file_filter_match(&f, "rng_state_3.pth"));
	CHECK(!wsync_file_filter_match(&f, "global_step12/mp_rank_00.pt"));	/* folder */
	CHECK(!wsync_file_filter_match(&f, "sub/skip.bin"));	/* path pattern */
	CHECK(wsync_file_filter_match(&f, "other/skip.bin"));
	CHECK(wsync_file_filter_prunes_dir(&f, "global_step7"));
	/* a subscriber's state folder is never shipped, whatever the globs */
	CHECK(!wsync_file_filter_match(&f, ".wsync/state.json"));
	CHECK(wsync_file_filter_prunes_dir(&f, ".wsync"));
	CHECK(wsync_file_filter_match(&f, ".wsyncrc"));
	wsync_file_filter_free(&f);

	CHECK(wsync_file_filter_init(&f, "*.safetensors *.json", "") == 0);
	CHECK(wsync_file_filter_match(&f, "a/model.safetensors"));
	CHECK(!wsync_file_filter_match(&f, "tokenizer.model"));
	wsync_file_filter_free(&f);
}

/* ckscan_read_global_step in dir (absolute, or under tmpdir). */
static int global_step_in(const char *dir, int64_t *s)
{
	char p[512];
	int fd, r;

	snprintf(p, sizeof(p), "%s%s%s", dir[0] == '/' ? "" : tmpdir, dir[0] == '/' ? "" : "/",
		 dir);
	fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = ckscan_read_global_step(fd, s);
	(void)close(fd);
	return r;
}

static void test_steps(void)
{
	int64_t s = 0;

	CHECK(ckscan_step_from_name("checkpoint-2400", &s) == 0 && s == 2400);
	CHECK(ckscan_step_from_name("step_000012", &s) == 0 && s == 12);
	CHECK(ckscan_step_from_name("checkpoint-final", &s) == -EINVAL);
	write_file("trainer_state.json", "{\"global_step\": 77, \"x\": []}", 28);
	CHECK(global_step_in(tmpdir, &s) == 0 && s == 77);
	mkdir_rel("nostate");
	CHECK(global_step_in("nostate", &s) == -ENOENT);
}

static void test_tree(void)
{
	struct wsync_file_filter f;
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
	CHECK(wsync_file_filter_init(&f, "*", "optimizer* global_step*") == 0);
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
	wsync_file_filter_free(&f);
}

/* A one-tensor safetensors file holding tensor name (4 bytes of F32). */
static size_t make_named(uint8_t *buf, const char *name)
{
	char hdr[128];

	snprintf(hdr, sizeof(hdr), "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],"
		 "\"data_offsets\":[0,4]}}", name);
	return make_st(buf, hdr);
}

static void put_st(const char *rel, const char *tensor)
{
	uint8_t buf[256];
	size_t n = make_named(buf, tensor);

	write_file(rel, buf, n);
}

/* The cache judge_dir passes (NULL: none). */
static struct ckcomplete_cache *judge_cache;

/* ckcomplete_judge on tmpdir/sub with everything shipped (exclude: what
 * the pattern says); why's message in why_out. */
static int judge_dir(const char *sub, const char *exclude, const char *marker,
		     bool marker_last, char *why_out, size_t why_len)
{
	struct ckcomplete_opts o = { .marker = marker, .marker_last = marker_last,
				     .cache = judge_cache };
	struct wsync_error why = { 0 };
	struct wsync_file_filter f;
	struct ckscan_tree t = { 0 };
	char dir[512];
	int r, dfd;

	snprintf(dir, sizeof(dir), "%s/%s", tmpdir, sub);
	if (wsync_file_filter_init(&f, "*", exclude) < 0)
		return -ENOMEM;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	r = dfd < 0 ? -errno : ckscan_tree_read_at(dfd, dir, &f, NULL, &t, &why);
	if (r == 0)
		r = ckcomplete_judge(dfd, dir, &t, &o, &why);
	if (dfd >= 0)
		(void)close(dfd);
	ckscan_tree_free(&t);
	wsync_file_filter_free(&f);
	snprintf(why_out, why_len, "%s", why.msg);
	return r;
}

/* Does judge_cache know tmpdir/sub as it is now (ckcomplete_cache_covers)? */
static bool cache_covers(const char *sub)
{
	struct wsync_error why = { 0 };
	struct wsync_file_filter f;
	struct ckscan_tree t = { 0 };
	char dir[512];
	bool r = false;
	int dfd;

	snprintf(dir, sizeof(dir), "%s/%s", tmpdir, sub);
	if (wsync_file_filter_init(&f, "*", "") < 0)
		return false;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0 && ckscan_tree_read_at(dfd, dir, &f, NULL, &t, &why) == 0)
		r = ckcomplete_cache_covers(judge_cache, &t);
	if (dfd >= 0)
		(void)close(dfd);
	ckscan_tree_free(&t);
	wsync_file_filter_free(&f);
	return r;
}

#define JUDGE(sub, want, text)                                                         \
	do {                                                                           \
		char w_[600];                                                          \
		int r_ = judge_dir((sub), "", NULL, false, w_, sizeof(w_));            \
		CHECK(r_ == (want));                                                   \
		CHECK(strstr(w_, (text)) != NULL);                                     \
		if (r_ != (want) || !strstr(w_, (text)))                               \
			printf("# %s: got %d \"%s\", want %d \"%s\"\n", (sub), r_, w_,     \
			       (want), (text));                                        \
	} while (0)

static void test_shard_whole(void)
{
	uint8_t buf[256];
	size_t n = make_st(buf, HDR);
	struct wsync_error err = { 0 };
	char p[512];

	mkdir_rel("sh");
	snprintf(p, sizeof(p), "%s/sh/model.safetensors", tmpdir);
	write_file("sh/model.safetensors", buf, n - 2);		/* short */
	CHECK(ckcomplete_shard_whole(p, n - 2, &err) == 0);
	write_file("sh/model.safetensors", buf, 5);		/* no header length yet */
	CHECK(ckcomplete_shard_whole(p, 5, &err) == 0);
	write_file("sh/model.safetensors", buf, n);		/* whole */
	CHECK(ckcomplete_shard_whole(p, n, &err) == 1);
	buf[n] = 0;
	write_file("sh/model.safetensors", buf, n + 1);		/* too long */
	CHECK(ckcomplete_shard_whole(p, n + 1, &err) == -EINVAL);
	n = make_st(buf, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}");
	write_file("sh/model.safetensors", buf, n);		/* shape disagrees */
	CHECK(ckcomplete_shard_whole(p, n, &err) == -EINVAL);
	write_file("sh/model.safetensors", "{\"__metadata__\":{}}!!!!!!!!!!", 28);
	CHECK(ckcomplete_shard_whole(p, 28, &err) == -EINVAL);	/* a JSON file */
	CHECK(strstr(err.msg, "not a safetensors file") != NULL);
	CHECK(wsync_checkpoint_is_weight_name("a/model-00001-of-00002.safetensors"));
	CHECK(wsync_checkpoint_is_weight_name("pytorch_model.bin"));
	CHECK(wsync_checkpoint_is_weight_name("m.gguf") && wsync_checkpoint_is_weight_name("x.pth"));
	CHECK(!wsync_checkpoint_is_weight_name("config.json"));
	CHECK(!wsync_checkpoint_is_weight_name(".model.safetensors"));
	CHECK(!wsync_checkpoint_is_weight_name(".safetensors"));
}

static void set_mtime(const char *rel, long sec)
{
	char p[512];
	struct timespec ts[2] = { { sec, 0 }, { sec, 0 } };

	snprintf(p, sizeof(p), "%s/%s", tmpdir, rel);
	CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0);
}

/* What makes a checkpoint a complete model (checkpoint_complete.h). */
/* A cache keeps each file's verdict while its size, mtime and inode stay,
 * and judges again what changed: the same answers as without it. */
static void test_complete_cache(void)
{
	const char *idx = "{\"metadata\":{},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
			  "\"b\":\"model-00002-of-00002.safetensors\"}}";
	char p[512];
	struct stat st;
	uint8_t buf[256];
	size_t n;

	CHECK((judge_cache = ckcomplete_cache_new()) != NULL);
	mkdir_rel("cc");
	write_file("cc/model.safetensors.index.json", idx, strlen(idx));
	put_st("cc/model-00001-of-00002.safetensors", "a");
	CHECK(!cache_covers("cc"));	/* nothing judged yet: the files are read */
	CHECK(!ckcomplete_cache_covers(NULL, &(struct ckscan_tree){ 0 }));
	JUDGE("cc", 0, "model-00002-of-00002.safetensors missing");
	CHECK(cache_covers("cc"));	/* a missing shard is a lookup, not a read */
	n = make_named(buf, "b");
	write_file("cc/model-00002-of-00002.safetensors", buf, n - 2);
	CHECK(!cache_covers("cc"));	/* a new file */
	JUDGE("cc", 0, "model-00002-of-00002.safetensors short");
	CHECK(cache_covers("cc"));	/* a short one's verdict is kept too */
	write_file("cc/model-00002-of-00002.safetensors", buf, n);	/* grew: read again */
	CHECK(!cache_covers("cc"));
	JUDGE("cc", 1, "");
	CHECK(cache_covers("cc"));
	JUDGE("cc", 1, "");	/* from the cache */
	/* the index changes: every shard is checked against it again */
	idx = "{\"metadata\":{},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
	      "\"b\":\"model-00001-of-00002.safetensors\"}}";
	write_file("cc/model.safetensors.index.json", idx, strlen(idx));
	CHECK(!cache_covers("cc"));
	JUDGE("cc", -EINVAL, "model-00001-of-00002.safetensors: ");
	idx = "{\"metadata\":{},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
	      "\"b\":\"model-00002-of-00002.safetensors\"}}";
	write_file("cc/model.safetensors.index.json", idx, strlen(idx));
	JUDGE("cc", 1, "");
	/* Bytes changed under the same size, mtime and inode are not looked
	 * at again (the publisher's fingerprint would not see them either):
	 * the cache is what answers. */
	snprintf(p, sizeof(p), "%s/cc/model-00002-of-00002.safetensors", tmpdir);
	CHECK(stat(p, &st) == 0);
	{
		FILE *f = fopen(p, "r+b");
		struct timespec ts[2] = { st.st_atim, st.st_mtim };

		CHECK(f != NULL);
		if (f) {
			fseek(f, 8, SEEK_SET);
			fputs("[", f);	/* the header is no JSON object now */
			fclose(f);
		}
		CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0);
	}
	JUDGE("cc", 1, "");
	ckcomplete_cache_free(judge_cache);
	judge_cache = NULL;
	JUDGE("cc", -EINVAL, "model-00002-of-00002.safetensors");	/* without: read */
}

static void test_complete(void)
{
	uint8_t buf[256];
	size_t n = make_named(buf, "a");
	char why[600];

	/* nothing, or nothing but configuration: no weight file */
	mkdir_rel("c0");
	JUDGE("c0", -EINVAL, "no weight file");
	write_file("c0/config.json", "{}", 2);
	write_file("c0/trainer_state.json", "{}", 2);
	JUDGE("c0", -EINVAL, "no weight file");

	/* one file without an index: short, whole, too long */
	mkdir_rel("c1");
	write_file("c1/model.safetensors", buf, n - 1);
	JUDGE("c1", 0, "c1/model.safetensors short");
	write_file("c1/model.safetensors", buf, n);
	JUDGE("c1", 1, "");
	buf[n] = 0;
	write_file("c1/model.safetensors", buf, n + 3);
	JUDGE("c1", -EINVAL, "c1/model.safetensors: ");

	/* the marker */
	mkdir_rel("c2");
	put_st("c2/model.safetensors", "a");
	CHECK(judge_dir("c2", "", "trainer_state.json", false, why, sizeof(why)) == 0);
	CHECK(strstr(why, "c2/trainer_state.json not written yet") != NULL);
	write_file("c2/trainer_state.json", "{}", 2);
	CHECK(judge_dir("c2", "", "trainer_state.json", false, why, sizeof(why)) == 1);
	/* in place: the marker must be the newest */
	set_mtime("c2/trainer_state.json", 1000);
	set_mtime("c2/model.safetensors", 2000);
	CHECK(judge_dir("c2", "", "trainer_state.json", true, why, sizeof(why)) == 0);
	CHECK(strstr(why, "is older than model.safetensors") != NULL);
	CHECK(strstr(why, "write the marker last") != NULL);
	CHECK(judge_dir("c2", "", "trainer_state.json", false, why, sizeof(why)) == 1);
	set_mtime("c2/trainer_state.json", 3000);
	CHECK(judge_dir("c2", "", "trainer_state.json", true, why, sizeof(why)) == 1);

	/* an index written before its shards */
	mkdir_rel("c3");
	const char *idx = "{\"metadata\":{},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
			  "\"b\":\"model-00002-of-00002.safetensors\"}}";

	write_file("c3/model.safetensors.index.json", idx, strlen(idx));
	JUDGE("c3", 0, "c3/model-00001-of-00002.safetensors missing (named by "
		       "model.safetensors.index.json)");
	put_st("c3/model-00001-of-00002.safetensors", "a");
	JUDGE("c3", 0, "c3/model-00002-of-00002.safetensors missing");
	write_file("c3/model-00002-of-00002.safetensors", buf, 9);	/* being written */
	JUDGE("c3", 0, "model-00002-of-00002.safetensors short");
	put_st("c3/model-00002-of-00002.safetensors", "b");
	JUDGE("c3", 1, "");
	/* a shard holding a tensor the index puts elsewhere */
	put_st("c3/model-00002-of-00002.safetensors", "a");
	JUDGE("c3", -EINVAL, "tensor \"a\" is put in another shard by");
	/* a shard lacking a tensor the index maps to it */
	idx = "{\"metadata\":{},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
	      "\"b\":\"model-00002-of-00002.safetensors\",\"c\":\"model-00002-of-00002.safetensors\"}}";
	put_st("c3/model-00002-of-00002.safetensors", "b");
	write_file("c3/model.safetensors.index.json", idx, strlen(idx));
	JUDGE("c3", -EINVAL, "puts tensor \"c\" here, but it does not hold it");
	/* a shard's tensor the index does not know */
	idx = "{\"metadata\":{},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
	      "\"z\":\"model-00002-of-00002.safetensors\"}}";
	write_file("c3/model.safetensors.index.json", idx, strlen(idx));
	JUDGE("c3", -EINVAL, "tensor \"b\" is missing from model.safetensors.index.json");
	/* a shard the index does not name */
	idx = "{\"metadata\":{},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\"}}";
	write_file("c3/model.safetensors.index.json", idx, strlen(idx));
	JUDGE("c3", -EINVAL, "c3/model-00002-of-00002.safetensors is not named by "
			     "model.safetensors.index.json");
	/* ... but another model's file beside it is not a shard of it */
	idx = "{\"metadata\":{},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
	      "\"b\":\"model-00002-of-00002.safetensors\"}}";
	write_file("c3/model.safetensors.index.json", idx, strlen(idx));
	put_st("c3/model-00002-of-00002.safetensors", "b");
	put_st("c3/adapter_model.safetensors", "lora");
	put_st("c3/modelling.safetensors", "x");
	JUDGE("c3", 1, "");
	/* half written */
	write_file("c3/model.safetensors.index.json", "{\"weight_", 9);
	JUDGE("c3", -EINVAL, "not a readable index");
	/* a shard the index names, left out by exclude */
	idx = "{\"metadata\":{},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
	      "\"b\":\"model-00002-of-00002.safetensors\"}}";
	write_file("c3/model.safetensors.index.json", idx, strlen(idx));
	CHECK(judge_dir("c3", "model-00002*", NULL, false, why, sizeof(why)) == -EINVAL);
	CHECK(strstr(why, "not shipped") != NULL);

	/* shard names promise their set: no index */
	mkdir_rel("c4");
	put_st("c4/model-00001-of-00003.safetensors", "a");
	put_st("c4/model-00003-of-00003.safetensors", "c");
	JUDGE("c4", 0, "c4/model-00002-of-00003.safetensors missing (model-00001-of-00003"
		       ".safetensors promises 3 shards)");
	put_st("c4/model-00002-of-00003.safetensors", "b");
	JUDGE("c4", 1, "");
	/* a new sharding beside the old one */
	put_st("c4/model-00001-of-00002.safetensors", "a");
	JUDGE("c4", -EINVAL, "two shardings side by side");

	/* formats without a header: the pattern and the index judge them */
	mkdir_rel("c5");
	write_file("c5/pytorch_model-00001-of-00002.bin", "xx", 2);
	JUDGE("c5", 0, "pytorch_model-00002-of-00002.bin missing");
	write_file("c5/pytorch_model-00002-of-00002.bin", "", 0);
	JUDGE("c5", 1, "");
	idx = "{\"metadata\":{},\"weight_map\":{\"a\":\"pytorch_model-00001-of-00002.bin\","
	      "\"b\":\"weights/extra.data\",\"c\":\"pytorch_model-00002-of-00002.bin\"}}";
	write_file("c5/pytorch_model.bin.index.json", idx, strlen(idx));
	JUDGE("c5", 0, "c5/weights/extra.data missing (named by pytorch_model.bin.index.json)");
	mkdir_rel("c5/weights");
	write_file("c5/weights/extra.data", "x", 1);
	JUDGE("c5", 1, "");

	/* an index in a subfolder names shards beside it; "-of-" in a prefix */
	mkdir_rel("c6");
	mkdir_rel("c6/text_encoder");
	idx = "{\"metadata\":{},\"weight_map\":{\"a\":\"out-of-core-00001-of-00001.safetensors\"}}";
	write_file("c6/text_encoder/model.safetensors.index.json", idx, strlen(idx));
	JUDGE("c6", 0, "c6/text_encoder/out-of-core-00001-of-00001.safetensors missing");
	put_st("c6/out-of-core-00001-of-00001.safetensors", "a");	/* wrong folder */
	JUDGE("c6", 0, "text_encoder/out-of-core-00001-of-00001.safetensors missing");
	put_st("c6/text_encoder/out-of-core-00001-of-00001.safetensors", "a");
	JUDGE("c6", 1, "");

	/* one gguf file is a model */
	mkdir_rel("c7");
	write_file("c7/model-q4.gguf", "GGUF", 4);
	JUDGE("c7", 1, "");
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

/* A user who can write the checkpoint folder points things outside it:
 * a subfolder linked to a folder outside is not listed, trainer_state.json
 * as a link is not read (its step is not taken) nor as a FIFO (no
 * waiting), nor past its size limit; a marker that is a link is no marker;
 * the judge, handed a tree that names a path through a link (the folder
 * swapped since the scan), reads nothing through it. */
static void test_links_out(void)
{
	char out[300], p[600], why[600];
	struct wsync_file_filter f;
	struct ckscan_tree t = { 0 };
	struct wsync_error err = { 0 };
	struct ckcomplete_opts o = { 0 };
	int64_t s = -1;
	int dfd, fd;

	snprintf(out, sizeof(out), "%s/outside", tmpdir);
	mkdir_rel("outside");
	put_st("outside/model.safetensors", "a");
	write_file("outside/trainer_state.json", "{\"global_step\": 31337}", 22);
	mkdir_rel("lk");
	put_st("lk/model.safetensors", "a");
	snprintf(p, sizeof(p), "%s/lk/sub", tmpdir);
	CHECK(symlink(out, p) == 0);
	snprintf(p, sizeof(p), "%s/lk/trainer_state.json", tmpdir);
	snprintf(why, sizeof(why), "%s/trainer_state.json", out);
	CHECK(symlink(why, p) == 0);

	snprintf(p, sizeof(p), "%s/lk", tmpdir);
	dfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(dfd >= 0);
	if (dfd < 0)
		return;
	CHECK(wsync_file_filter_init(&f, "*", "") == 0);
	CHECK(ckscan_tree_read_at(dfd, p, &f, NULL, &t, &err) == 0);
	CHECK_EQ_U64(t.n, 1);	/* model.safetensors only */
	/* trainer_state.json through a link: not read */
	CHECK_EQ_U64((uint64_t)-ckscan_read_global_step(dfd, &s), EINVAL);
	CHECK(s == -1);
	/* the marker as a link: not written yet */
	o.marker = "trainer_state.json";
	CHECK(ckcomplete_judge(dfd, p, &t, &o, &err) == 0);
	CHECK_CONTAINS(err.msg, "trainer_state.json not written yet");
	ckscan_tree_free(&t);

	/* a tree naming sub/model.safetensors, as if sub had been a folder at
	 * the scan: the judge does not read it through the link (wait) */
	t.files = calloc(2, sizeof(*t.files));
	CHECK(t.files != NULL);
	if (t.files) {
		uint8_t buf[256];

		t.n = 1;
		t.files[0].path = strdup("sub/model.safetensors");
		t.files[0].size = make_named(buf, "a");
		o.marker = NULL;
		CHECK(ckcomplete_judge(dfd, p, &t, &o, &err) == 0);
		CHECK_CONTAINS(err.msg, "a symbolic link on the way");
		ckscan_tree_free(&t);
	}

	/* trainer_state.json as a FIFO, then over the limit, then good */
	CHECK(unlinkat(dfd, "trainer_state.json", 0) == 0);
	CHECK(mkfifoat(dfd, "trainer_state.json", 0600) == 0);
	CHECK_EQ_U64((uint64_t)-ckscan_read_global_step(dfd, &s), EINVAL);
	CHECK(unlinkat(dfd, "trainer_state.json", 0) == 0);
	fd = openat(dfd, "trainer_state.json", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CHECK(fd >= 0 && ftruncate(fd, CKSCAN_TRAINER_STATE_MAX + 1) == 0);
	if (fd >= 0)
		(void)close(fd);
	CHECK_EQ_U64((uint64_t)-ckscan_read_global_step(dfd, &s), EFBIG);
	CHECK(unlinkat(dfd, "trainer_state.json", 0) == 0);
	write_file("lk/trainer_state.json", "{\"global_step\": 12}", 19);
	CHECK(ckscan_read_global_step(dfd, &s) == 0 && s == 12);
	CHECK(ckscan_parse_global_step("{\"global_step\": 5}", 18, &s) == 0 && s == 5);
	CHECK(ckscan_parse_global_step("[1, 2]", 6, &s) == -EINVAL);
	CHECK(ckscan_parse_global_step("{\"global_step\": \"5\"}", 20, &s) == -EINVAL);
	CHECK(ckscan_parse_global_step("{}", (size_t)CKSCAN_TRAINER_STATE_MAX + 1, &s) == -EFBIG);
	(void)close(dfd);
	wsync_file_filter_free(&f);
}

/* A shard that turned into a FIFO since the scan is not waited on, and
 * the header judgement on bytes: short buffers are "short", whatever the
 * length prefix claims nothing past the buffer is read. */
static void test_shard_fifo_and_bytes(void)
{
	uint8_t buf[256];
	size_t n = make_st(buf, HDR);
	struct wsync_error err = { 0 };
	char p[512];

	mkdir_rel("ff");
	snprintf(p, sizeof(p), "%s/ff/model.safetensors", tmpdir);
	CHECK(mkfifo(p, 0600) == 0);
	CHECK(ckcomplete_shard_whole(p, n, &err) == 0);	/* not waited on */
	CHECK_CONTAINS(err.msg, "not a regular file");

	CHECK(ckcomplete_judge_header(buf, n, n, "m", NULL, &err) == 1);
	CHECK(ckcomplete_judge_header(buf, 7, n, "m", NULL, &err) == 0);
	CHECK(ckcomplete_judge_header(buf, n - 4, n, "m", NULL, &err) == 1);	/* header only */
	CHECK(ckcomplete_judge_header(buf, n - 5, n, "m", NULL, &err) == 0);	/* one byte short */
	CHECK(ckcomplete_judge_header(buf, 20, n, "m", NULL, &err) == 0);	/* cut header */
	CHECK(ckcomplete_judge_header(buf, n, n - 1, "m", NULL, &err) == 0);	/* short file */
	CHECK(ckcomplete_judge_header(buf, n, n + 1, "m", NULL, &err) == -EINVAL);
	memset(buf, 0xff, 8);	/* a length prefix past any limit */
	CHECK(ckcomplete_judge_header(buf, 8, UINT64_MAX, "m", NULL, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "over the limit");
}

int main(void)
{
	char cmd[300];

	alarm(100);	/* an open that blocks (a FIFO) fails the run, not hangs it */

	snprintf(tmpdir, sizeof(tmpdir), "%s/wsync-ckscan.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmpdir))
		return 1;
	TEST(test_filter);
	TEST(test_steps);
	TEST(test_tree);
	TEST(test_shard_whole);
	TEST(test_complete);
	TEST(test_complete_cache);
	TEST(test_links_out);
	TEST(test_shard_fifo_and_bytes);
	TEST(test_watch);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", tmpdir);
	return tap_done();
}
