#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-e2e.sh [file|s3]... -- the whole product: one publisher wsyncd and
# three subscriber wsyncd (each with its own state, runtime and target
# dirs) on one bucket, a file:// directory and/or an s3rver bucket
# (endpoint, credentials file, path style; skipped when s3rver is not
# installed).  Default: both.  test-e2e-file.sh / test-e2e-s3.sh run one.
#
# Per bucket, two scenarios:
#  dir      new-directory mode (checkpoint-N folders, rotated like HF's
#           save_total_limit 3).  10 steps; after every one each running
#           subscriber's target is byte-identical to the trainer's shipped
#           files (the default exclude drops optimizer*, scheduler.pt,
#           scaler.pt, rng_state*.pth, training_args.bin).  Subscriber s2
#           is stopped (SIGTERM, exit 0) after step 3 and restarted 5 steps
#           later: it catches up.  Subscriber s3 starts at step 7: it
#           bootstraps from an anchor.  Then the trainer resumes from
#           checkpoint-8 (a new checkpoint-9 with a lower step than the
#           last published): a new, higher version carrying step 9.  Then
#           a checkpoint deleted while the publisher reads it (restarted
#           with the WSYNC_TEST_SNAPSHOT_PAUSE_MS test hook so that the
#           rm -rf lands inside the read): dropped with a log line, the
#           next one published.  Last, with anchor_every = 4,
#           keep_anchors = 2, gc_grace = 0, the bucket's key set is exactly
#           what common/format/BUCKET.md §2 rule 3 (retention) keeps.
#  inplace  `step_pattern =` empty: the trainer rewrites one folder (files
#           overwritten in place, trainer_state.json last, as HF Trainer
#           and gen-checkpoints --inplace do).  10 steps, the same
#           byte-identity check after each, the step taken from
#           trainer_state.json's global_step, the same retention check.
#
# The trainer is driven step by step from the test: checkpoints are
# generated once into a staging dir (gen-checkpoints --params 3M, 2
# shards, trainer files included) and copied into the watched dir one at
# a time, marker last, so every step can be checked before the next.
# Every wait is bounded (status.json polled with a deadline).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3-servers.sh"

BACKENDS=${*:-file s3}
STEP_TIMEOUT=${E2E_STEP_TIMEOUT:-40}
CK=$TMP/ck	# staging: checkpoint-1..13

declare -n PID=DPID	# lib.sh's table of pids
trap 'daemons_kill_all; s3servers_stop_all; rm -rf "$TMP"' EXIT

gen_ckpts "$CK" --params 3M --steps 13 --shards 2

# --- helpers ----------------------------------------------------------------

# Python helpers, written once.
cat >"$TMP/e2e.py" <<'PY'
import fnmatch, json, os, subprocess, sys, time
EXCLUDE = ["optimizer*", "scheduler.pt", "scaler.pt", "rng_state*.pth",
           "training_args.bin", "global_step*"]

def shipped(d):
    """Relative paths of the files a publisher ships from checkpoint d."""
    out = set()
    for root, dirs, names in os.walk(d):
        dirs[:] = [x for x in dirs if not any(fnmatch.fnmatch(x, p) for p in EXCLUDE)]
        for n in names:
            if not any(fnmatch.fnmatch(n, p) for p in EXCLUDE):
                out.add(os.path.relpath(os.path.join(root, n), d))
    return out

def files(d):
    out = set()
    for root, dirs, names in os.walk(d):
        dirs[:] = [x for x in dirs if x != ".wsync"]
        out.update(os.path.relpath(os.path.join(root, n), d) for n in names)
    return out

def same(ref, targets):
    want, bad = shipped(ref), []
    for t in targets:
        got = files(t)
        if got != want:
            bad.append("%s: missing %s, extra %s" % (t, sorted(want - got), sorted(got - want)))
            continue
        for f in sorted(want):
            # cmp, byte for byte
            if subprocess.run(["cmp", "-s", os.path.join(ref, f), os.path.join(t, f)]).returncode:
                bad.append("%s/%s differs from %s/%s" % (t, f, ref, f))
    for b in bad:
        print(b)
    return not bad

def status(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}

def alive(pid):
    try:
        with open("/proc/%s/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

def wait(timeout, version, args):
    """Until every status.json says version and idle (bounded; args are
    STATUS_PATH:PID, a daemon that exits ends the wait)."""
    paths = [a.rsplit(":", 1)[0] for a in args]
    pids = [a.rsplit(":", 1)[1] for a in args]
    end = time.monotonic() + timeout
    while True:
        dead = [p for p, pid in zip(paths, pids) if not alive(pid)]
        if dead:
            print("exited: %s" % " ".join(dead))
            return False
        ss = [status(p) for p in paths]
        if all(s.get("version") == version and s.get("state") == "idle" for s in ss):
            return True
        if time.monotonic() > end:
            for p, s in zip(paths, ss):
                print("%s: version %s state %s error %s message %s" % (
                    p, s.get("version"), s.get("state"), s.get("last_error"), s.get("message")))
            return False
        time.sleep(0.05)

def doc(text):
    return json.loads(text.split("\nwsync-signature")[0])

cmd = sys.argv[1]
if cmd == "same":
    sys.exit(not same(sys.argv[2], sys.argv[3:]))
elif cmd == "wait":
    sys.exit(not wait(float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]))
elif cmd == "field":			# field STATUS KEY
    v = status(sys.argv[2]).get(sys.argv[3])
    print("" if v is None else v)
elif cmd == "patch-step":		# patch-step SRC DST STEP: trainer_state with global_step
    st = json.load(open(sys.argv[2]))
    st["global_step"] = int(sys.argv[4])
    open(sys.argv[3], "w").write(json.dumps(st, indent=2, sort_keys=True) + "\n")
elif cmd == "mfield":			# mfield MANIFEST_FILE EXPR over m
    m = doc(open(sys.argv[2]).read())
    print(eval(sys.argv[3]))
elif cmd == "retention":
    # retention LISTING_JSON MANIFEST_DIR KEEP_ANCHORS: the bucket's keys
    # against BUCKET.md §2 rule 3.  MANIFEST_DIR holds every manifest the
    # test fetched while the versions were published (GC deletes some).
    # PREFIX: the bucket URL's key prefix, which s3:// listings include
    listing, mdir, keep = json.load(open(sys.argv[2])), sys.argv[3], int(sys.argv[4])
    prefix = sys.argv[5] if len(sys.argv) > 5 else ""
    keys = {o["key"][len(prefix):] if o["key"].startswith(prefix) else o["key"] for o in listing}
    ms = {}
    for n in os.listdir(mdir):
        m = doc(open(os.path.join(mdir, n)).read())
        ms[m["version"]] = m
    head = max(ms)
    hm = ms[head]
    anchors = sorted(a["version"] for a in hm["anchors"])
    every_anchor = sorted(v for v, m in ms.items() if m["kind"] == "anchor")
    ok = True
    if anchors != every_anchor[-keep:]:
        print("HEAD's manifest lists anchors %s; the newest %d anchors published are %s"
              % (anchors, keep, every_anchor[-keep:]))
        ok = False
    oldest = anchors[0]
    # HEAD, and the writer lease (BUCKET.md §8) while a publisher runs
    want = {"HEAD"} | {k for k in keys if k == "writers/1.json"}
    # The anchors HEAD's manifest lists, their manifests, every manifest
    # after the oldest up to HEAD, and what those manifests list.  (The
    # delta the oldest anchor's version also carries, from a version that
    # is gone, stays: its manifest, kept, names it.  BUCKET.md's wording,
    # "every delta ... after the oldest", would drop it; wsyncd keeps it.)
    for v in range(oldest, head + 1):
        want.add("manifests/%012d.json" % v)
        want.update(o["key"] for o in ms[v]["objects"])
    if keys != want:
        print("bucket has, beyond retention: %s" % sorted(keys - want))
        print("bucket lacks, that retention keeps: %s" % sorted(want - keys))
        ok = False
    sys.exit(not ok)
PY
e2e() { "$PYTHON3" "$TMP/e2e.py" "$@"; }

# scenario_init NAME BACKEND MODE: dirs and configs for a publisher and
# subscribers s1..s3 in $SC; sets URL (the bucket URL, prefix included).
scenario_init() {
	SC=$TMP/$1
	DAEMONS=$SC
	local backend=$2 mode=$3 n store
	# pre-created: wsyncd does not create a missing parent of state_dir
	mkdir -p "$SC"/{watch,manifests} "$SC"/{pub,s1,s2,s3}
	if [ "$backend" = file ]; then
		mkdir -p "$SC/bucket"
		URL=file://$SC/bucket
		PREFIX=
		store="url = $URL"
	else
		URL=s3://wsync-e2e/$1
		PREFIX=$1/
		store=$(printf 'url = %s\nendpoint = %s\ncredentials = %s\npath_style = true\nretry_max_time = 30s' \
			"$URL" "$S3RVER_ENDPOINT" "$TMP/s3.cred")
	fi
	cat >"$SC/pub.ini" <<EOF
[daemon]
role = publisher
state_dir = $SC/pub/state
runtime_dir = $SC/pub/run
threads = 2
log_level = debug
[store]
$store
[publisher]
watch_dir = $SC/watch
anchor_every = 4
keep_anchors = 2
gc_grace = 0
rescan_interval = 1s
EOF
	[ "$mode" = inplace ] && echo "step_pattern =" >>"$SC/pub.ini"
	for n in s1 s2 s3; do
		cat >"$SC/$n.ini" <<EOF
[daemon]
role = subscriber
state_dir = $SC/$n/state
runtime_dir = $SC/$n/run
threads = 1
log_level = debug
[store]
$store
[subscriber]
target_dir = $SC/$n/target
poll_interval = 200ms
EOF
	done
}

running() { # the names of the running daemons of the scenario
	local n
	for n in pub s1 s2 s3; do
		[ -n "${PID[$n]:-}" ] && echo "$n"
	done
}
status_files() { local n; for n in "$@"; do echo "$SC/$n/run/status.json:${PID[$n]}"; done; }

# wait_all VERSION: the publisher and every running subscriber at VERSION, idle
wait_all() {
	local names
	mapfile -t names < <(running)
	mapfile -t files < <(status_files "${names[@]}")
	e2e wait "$STEP_TIMEOUT" "$1" "${files[@]}" && return 0
	for n in "${names[@]}"; do
		echo "# --- $n/log (last lines)"
		tail -6 "$SC/$n/log" | sed 's/^/# /'
	done
	return 1
}
# same_all REF: every running subscriber's target equals REF's shipped files
same_all() {
	local n t=()
	for n in $(running); do [ "$n" = pub ] || t+=("$SC/$n/target"); done
	e2e same "$1" "${t[@]}"
}
# as_step SRC STEP: SRC's trainer_state.json with global_step STEP, in
# $TMP/trainer_state.json (for put_ckpt SRC DEST "$TMP/trainer_state.json")
as_step() { e2e patch-step "$1/trainer_state.json" "$TMP/trainer_state.json" "$2"; }
# fetch_manifest V: keep a copy of manifest V (GC may delete it later)
fetch_manifest() {
	local k
	k=$(printf 'manifests/%012d.json' "$1")
	"$WSYNC" store get "$URL/$k" "$SC/manifests/${k#manifests/}" --config "$SC/pub.ini" >/dev/null 2>&1
}
mfield() { e2e mfield "$SC/manifests/$(printf '%012d' "$1").json" "$2"; }
# retention: the bucket's keys are what BUCKET.md's rule keeps (GC
# runs after a publication; wait for it, bounded)
retention() {
	for _ in $(seq 40); do # 20 s
		"$WSYNC" store ls "$URL/" --json --config "$SC/pub.ini" >"$SC/listing.json" 2>"$SC/ls.err" &&
			e2e retention "$SC/listing.json" "$SC/manifests" 2 "$PREFIX" >"$SC/retention.out" && return 0
		sleep 0.5
	done
	sed 's/^/# /' "$SC/retention.out" "$SC/ls.err"
	return 1
}
no_crash() {
	! grep -E 'AddressSanitizer|runtime error|Segmentation|assert' "$SC"/*/log
}

# --- scenario: new-directory mode ---------------------------------------

scenario_dir() { # scenario_dir BACKEND
	local b=$1 n v subs
	scenario_init "$b-dir" "$b" dir
	echo "# $b bucket, checkpoint-N folders: $URL"
	start pub
	start s1
	start s2
	for n in $(seq 1 10); do
		if [ "$n" = 4 ]; then
			stop s2
			tap_result $? "$b dir: s2 stops on SIGTERM with exit 0 (after step 3)"
		fi
		put_ckpt "$CK/checkpoint-$n" "$SC/watch/checkpoint-$n"
		# save_total_limit 3: the trainer keeps its 3 newest checkpoints
		rm -rf "$SC/watch/checkpoint-$((n - 3))"
		if [ "$n" = 8 ]; then
			start s2
		fi
		subs=$(running | grep -v pub | tr '\n' ' ')
		check "$b dir: step $n published as version $n and applied by ${subs% }" wait_all "$n"
		fetch_manifest "$n"
		check "$b dir: step $n: ${subs% } byte-identical to the trainer's checkpoint-$n" \
			same_all "$SC/watch/checkpoint-$n"
		if [ "$n" = 7 ]; then
			start s3
			check "$b dir: s3 started at step 7 reaches version 7" wait_all 7
			check "$b dir: s3 bootstrapped from the newest anchor (5), then deltas 6, 7" \
				grep -q "version 5 (step 5) applied from anchor anchors/000000000005.wsa" "$SC/s3/log"
			check "$b dir: s3 byte-identical to checkpoint-7" e2e same "$SC/watch/checkpoint-7" "$SC/s3/target"
		fi
		if [ "$n" = 8 ]; then
			check "$b dir: s2, stopped at version 3 and restarted 5 steps later, caught up" \
				grep -q "version 8 (step 8) applied" "$SC/s2/log"
		fi
	done
	check "$b dir: versions 1, 5, 9 are anchors (anchor_every = 4)" \
		test "$(mfield 1 'm["kind"]') $(mfield 5 'm["kind"]') $(mfield 9 'm["kind"]') $(mfield 8 'm["kind"]')" = "anchor anchor anchor delta"

	# The trainer resumes from checkpoint-8: checkpoint-9 and -10 go, a
	# new (different) checkpoint-9 appears: its step is lower than 10.
	rm -rf "$SC/watch/checkpoint-9" "$SC/watch/checkpoint-10"
	as_step "$CK/checkpoint-11" 9
	put_ckpt "$CK/checkpoint-11" "$SC/watch/checkpoint-9" "$TMP/trainer_state.json"
	check "$b dir: resumed checkpoint-9 published as version 11, applied everywhere" wait_all 11
	fetch_manifest 11
	check "$b dir: version 11 carries step 9 (the step went back, the version on)" \
		test "$(mfield 11 '(m["version"], m["step"], m.get("base_version"))')" = "(11, 9, 10)"
	check "$b dir: after the resume all subscribers equal the new checkpoint-9" \
		same_all "$SC/watch/checkpoint-9"

	# A checkpoint deleted while being read: the publisher restarted with
	# a pause between its scan and its snapshot so that rm -rf lands there.
	stop pub
	tap_result $? "$b dir: publisher stops on SIGTERM with exit 0"
	start pub WSYNC_TEST_SNAPSHOT_PAUSE_MS=1500
	as_step "$CK/checkpoint-12" 10
	put_ckpt "$CK/checkpoint-12" "$SC/watch/checkpoint-10" "$TMP/trainer_state.json"
	check "$b dir: the publisher reads checkpoint-10" wait_state pub encoding "$STEP_TIMEOUT"
	rm -rf "$SC/watch/checkpoint-10"
	check "$b dir: checkpoint-10 deleted while being read is dropped" \
		wait_log pub "checkpoint-10 disappeared while being read" "$STEP_TIMEOUT"
	as_step "$CK/checkpoint-13" 11
	put_ckpt "$CK/checkpoint-13" "$SC/watch/checkpoint-11" "$TMP/trainer_state.json"
	check "$b dir: the next checkpoint (11) is published as version 12, applied everywhere" wait_all 12
	fetch_manifest 12
	check "$b dir: version 12 is step 11, a delta from 11" \
		test "$(mfield 12 '(m["step"], m.get("base_version"))')" = "(11, 11)"
	check "$b dir: all subscribers equal checkpoint-11" same_all "$SC/watch/checkpoint-11"
	check "$b dir: nothing half-published for the deleted checkpoint" \
		test "$(sed -n '/checkpoint-10 disappeared while being read/,$p' "$SC/pub/log" | grep -c 'published version .* from checkpoint-10')" = 0

	check "$b dir: the bucket holds exactly what retention keeps (keep_anchors 2, gc_grace 0)" retention
	for n in s1 s2 s3; do
		expect_exit 0 "$b dir: wsync status says $n is healthy" "$WSYNC" status --config "$SC/$n.ini" --json
	done
	contains "$b dir: wsync status --json has lag_seconds" "$OUT" '"lag_seconds"'
	for n in pub s1 s2 s3; do
		stop "$n"
		tap_result $? "$b dir: $n stops on SIGTERM with exit 0"
	done
	check "$b dir: no crash or sanitizer report in the logs" no_crash
}

# --- scenario: in-place mode ------------------------------------------------

scenario_inplace() { # scenario_inplace BACKEND
	local b=$1 n
	scenario_init "$b-inplace" "$b" inplace
	echo "# $b bucket, one folder rewritten in place: $URL"
	start pub
	start s1
	start s2
	start s3
	for n in $(seq 1 10); do
		put_ckpt "$CK/checkpoint-$n" "$SC/watch"
		check "$b inplace: step $n published as version $n and applied by s1 s2 s3" wait_all "$n"
		fetch_manifest "$n"
		check "$b inplace: step $n: s1 s2 s3 byte-identical to the trainer's folder" \
			same_all "$SC/watch"
	done
	check "$b inplace: the steps come from trainer_state.json" \
		test "$(mfield 10 'm["step"]') $(mfield 3 'm["step"]')" = "10 3"
	check "$b inplace: the bucket holds exactly what retention keeps" retention
	for n in pub s1 s2 s3; do
		stop "$n"
		tap_result $? "$b inplace: $n stops on SIGTERM with exit 0"
	done
	check "$b inplace: no crash or sanitizer report in the logs" no_crash
}

for b in $BACKENDS; do
	case $b in
	file) ;;
	s3)
		if ! have_s3rver; then
			echo "# SKIP s3: $S3S_WHY"
			continue
		fi
		printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
			"$S3RVER_ACCESS_KEY" "$S3RVER_SECRET_KEY" >"$TMP/s3.cred"
		read -r port < <(free_ports 1)
		s3rver_start "$TMP/s3rver" "$port" wsync-e2e
		st=$?
		tap_result $st "s3rver is up on port $port"
		[ $st -eq 0 ] || continue
		;;
	*)
		echo "Bail out! unknown backend $b (file or s3)"
		exit 1
		;;
	esac
	scenario_dir "$b"
	scenario_inplace "$b"
done
tap_done
