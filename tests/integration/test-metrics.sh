#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-metrics: the Prometheus metrics, checked by Prometheus's own tools.
# A publisher and two subscribers on one file:// bucket write their
# metrics files into one directory (a third subscriber keeps the default,
# runtime_dir/wsync.prom; a fourth daemon's bucket is down).  Three
# checkpoints go through.  Then:
#  - `promtool check metrics` accepts every file, and the merged
#    exposition that node_exporter's textfile collector serves from the
#    directory (prometheus-node-exporter on loopback, scraped here);
#  - the scraped values are what the daemons did: versions published and
#    applied, bytes uploaded (every object, manifest and HEAD in the
#    bucket), bytes downloaded (the objects the subscriber's journal says
#    it applied), bytes written (at least the model), the step, HEAD;
#  - a store outage shows (store_up 0, errors counted) and its length
#    grows with no change of state: the file is rewritten every ~10 s;
#  - `wsync status --prometheus` prints the same series, for one daemon
#    and for all in the default runtime directory;
#  - files are world-readable whatever the umask; a daemon stopped
#    cleanly removes its file; metrics_file = "" writes none and a name
#    not ending in .prom is refused;
#  - the alert rules shipped in systemd/wsync-alerts.yml pass
#    `promtool check rules` and their unit tests (`promtool test rules`);
#  - a configuration file name that is not UTF-8 still gives an instance
#    label that is (U+FFFD), which promtool and node_exporter accept.
. "$(dirname "$0")/lib.sh"

PROMTOOL=$(command -v promtool || true)
NODE_EXPORTER=$(command -v prometheus-node-exporter || command -v node_exporter || true)
if [ -z "$PROMTOOL" ] || [ -z "$NODE_EXPORTER" ]; then
	echo "# promtool or prometheus-node-exporter is missing: scripts/setup.sh installs them"
	tap_result 1 "Prometheus's tools are installed"
	tap_done
	exit 1
fi

CK=$TMP/ck
gen_ckpts "$CK" --params 1M --steps 3 --shards 2
PROM=$TMP/prom
mkdir -p "$TMP/bucket" "$TMP/train" "$PROM" "$TMP/etc"

ini() { # ini NAME ROLE [LINE...]: $TMP/etc/NAME.ini
	local name=$1 role=$2
	shift 2
	{
		echo "[daemon]"
		echo "role = $role"
		echo "state_dir = $TMP/$name/state"
		echo "runtime_dir = $TMP/$name/run"
		echo "threads = 1"
		for l in "$@"; do
			case "$l" in \[*) break ;; esac
			echo "$l"
		done
		echo "[store]"
		echo "url = ${STORE_URL:-file://$TMP/bucket}"
		[ -n "${STORE_EXTRA:-}" ] && echo "$STORE_EXTRA"
		if [ "$role" = publisher ]; then
			echo "[publisher]"
			echo "watch_dir = $TMP/train"
			echo "settle_time = 200ms"
		else
			echo "[subscriber]"
			echo "target_dir = $TMP/$name/model"
			echo "poll_interval = 200ms"
		fi
	} >"$TMP/etc/$name.ini"
	mkdir -p "$TMP/$name"
}
# ser NAME ROLE INSTANCE [,le="X"]: a series, its labels as written
ser() { printf '%s{role="%s",instance="%s"%s}' "$1" "$2" "$3" "${4:-}"; }
# value FILE SERIES: its value in an exposition, whatever the order of
# the labels there (node_exporter sorts them)
value() {
	"$PYTHON3" - "$@" <<'PY'
import re, sys
def key(s):
    m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$', s)
    return m.group(1), tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
want = key(sys.argv[2])
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.strip():
        continue
    series, v = line.rsplit(" ", 1)
    if key(series) == want:
        print(v.strip())
        sys.exit(0)
sys.exit(1)
PY
}

ini publisher publisher "metrics_file = $PROM/wsync-publisher.prom"
ini sub1 subscriber "metrics_file = $PROM/wsync-sub1.prom"
ini sub2 subscriber "metrics_file = $PROM/wsync-sub2.prom"
ini sub3 subscriber
# A bucket nobody answers for: port 9 (discard), refused on loopback.
STORE_URL=s3://nobody/x STORE_EXTRA=$'endpoint = http://127.0.0.1:9\nretry_attempts = 1\nconnect_timeout = 1s\ntimeout = 1s\nregion = us-east-1\ncredentials = '"$TMP/cred" \
	ini down subscriber "metrics_file = $PROM/wsync-down.prom"
printf '[default]\naws_access_key_id = x\naws_secret_access_key = y\n' >"$TMP/cred"
chmod 600 "$TMP/cred"

for n in publisher sub1 sub2 sub3 down; do start -m 077 -c "$TMP/etc/$n.ini" "$n"; done

put() { # put STEP: the trainer writes checkpoint-STEP, marker last
	local d=$TMP/train/checkpoint-$1 f
	mkdir -p "$d"
	for f in "$CK/checkpoint-$1"/*; do
		[ "${f##*/}" = trainer_state.json ] || cp "$f" "$d/"
	done
	cp "$CK/checkpoint-$1/trainer_state.json" "$d/"
}
converged() { # converged STEP: every file-bucket daemon idle at the publisher's version
	"$PYTHON3" - "$TMP" "$1" <<'PY'
import json, sys
tmp, step = sys.argv[1], int(sys.argv[2])
def st(n):
    try:
        return json.load(open("%s/%s/run/status.json" % (tmp, n)))
    except (OSError, ValueError):
        return {}
p = st("publisher")
v = p.get("version")
ok = p.get("step") == step and p.get("state") == "idle" and v and all(
    st(n).get("version") == v and st(n).get("state") == "idle" for n in ("sub1", "sub2", "sub3"))
sys.exit(0 if ok else 1)
PY
}
for step in 1 2 3; do
	put $step
	check "checkpoint-$step reaches every subscriber" wait_for 60 converged $step
done
check "each subscriber's model is the last checkpoint" bash -c \
	"diff -r -x .wsync -x 'optimizer*' -x 'scheduler.pt' -x 'rng_state*' -x 'training_args.bin' \
	 '$CK/checkpoint-3' '$TMP/sub1/model' >/dev/null"

# ---- the files ----------------------------------------------------------
for f in wsync-publisher wsync-sub1 wsync-sub2 wsync-down; do
	check "$f.prom is written" wait_for 10 test -s "$PROM/$f.prom"
	check "promtool check metrics accepts $f.prom" \
		bash -c "'$PROMTOOL' check metrics <'$PROM/$f.prom'"
done
check "the default metrics file is runtime_dir/wsync.prom" test -s "$TMP/sub3/run/wsync.prom"
check "metrics files are world-readable under umask 077" bash -c \
	"[ \$(stat -c %a '$PROM/wsync-sub1.prom') = 644 ] && [ \$(stat -c %a '$TMP/sub3/run/wsync.prom') = 644 ]"
check "no temporary file is left where the collector reads" \
	bash -c "[ \$(ls -A '$PROM' | grep -vc '\\.prom\$') = 0 ]"

# ---- node_exporter serves the merged directory ------------------------
PORT=$("$PYTHON3" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$NODE_EXPORTER" --web.listen-address="127.0.0.1:$PORT" --collector.disable-defaults \
	--collector.textfile --collector.textfile.directory="$PROM" >"$TMP/node_exporter.log" 2>&1 &
PIDS+=($!)
scrape() { curl -sf --max-time 5 "http://127.0.0.1:$PORT/metrics" >"$TMP/scrape.txt"; }
check "node_exporter serves the directory" wait_for 15 scrape
check "node_exporter read every file without error" \
	bash -c "grep -q '^node_textfile_scrape_error 0' '$TMP/scrape.txt' && ! grep -qi 'error' '$TMP/node_exporter.log'"
grep -v '^wsync_' "$TMP/scrape.txt" | grep -v '^# [A-Z]* wsync_' >/dev/null
check "promtool check metrics accepts the merged scrape" \
	bash -c "grep -E '^(# (HELP|TYPE) )?wsync_' '$TMP/scrape.txt' | '$PROMTOOL' check metrics"
S=$TMP/scrape.txt
has_all() {
	value "$S" "$(ser wsync_build_info publisher publisher ",version=\"$("$WSYNC" --version | awk '{print $2; exit}')\"")" &&
	value "$S" "$(ser wsync_version subscriber sub1)" &&
	value "$S" "$(ser wsync_version subscriber sub2)" &&
	value "$S" "$(ser wsync_store_up subscriber down)"
}
check "every daemon's series is there, with role and instance" has_all

# What the daemons did, from the bucket and their own logs.
HEADV=$("$PYTHON3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$TMP/publisher/run/status.json")
expect_value() { # expect_value DESC SERIES WANT
	local got
	got=$(value "$S" "$2")
	if [ "$got" = "$3" ]; then tap_result 0 "$1"; else
		echo "# $2: $got, expected $3"
		tap_result 1 "$1"
	fi
}
expect_value "versions published: 3" "$(ser wsync_versions_published_total publisher publisher)" 3
expect_value "the publisher's version is HEAD's" "$(ser wsync_version publisher publisher)" "$HEADV"
expect_value "the publisher's step is 3" "$(ser wsync_step publisher publisher)" 3
expect_value "versions applied by sub1: 3" "$(ser wsync_versions_applied_total subscriber sub1)" 3
expect_value "sub2 is at HEAD's version" "$(ser wsync_version subscriber sub2)" "$HEADV"
expect_value "sub2 saw HEAD's version" "$(ser wsync_head_version subscriber sub2)" "$HEADV"
expect_value "sub1 is not behind" "$(ser wsync_lag_seconds subscriber sub1)" 0
expect_value "the file bucket is up for sub1" "$(ser wsync_store_up subscriber sub1)" 1
expect_value "no verification failure" "$(ser wsync_verification_failures_total subscriber sub1)" 0
expect_value "apply durations: 3 observations" "$(ser wsync_apply_duration_seconds_count subscriber sub1)" 3
expect_value "publish durations: 3 observations" "$(ser wsync_publish_duration_seconds_count publisher publisher)" 3
expect_value "the +Inf bucket holds them all" \
	"$(ser wsync_apply_duration_seconds_bucket subscriber sub1 ',le="+Inf"')" 3

check "bytes uploaded: at least every object and manifest in the bucket" "$PYTHON3" - "$S" "$TMP/bucket" <<'PY'
import os, sys
scrape, bucket = sys.argv[1:3]
v = {l.split(" ")[0]: float(l.split(" ")[1]) for l in open(scrape) if l.startswith("wsync_")}
up = v['wsync_bytes_uploaded_total{instance="publisher",role="publisher"}']
total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(bucket) for f in fs
            if f != "HEAD" and not f.startswith("."))
head = os.path.getsize(os.path.join(bucket, "HEAD"))
assert total + head <= up <= total + 3 * head + 4096, (up, total, head)
PY
check "bytes downloaded: the objects sub1's log says it applied" "$PYTHON3" - "$S" "$TMP/bucket" "$TMP/sub1/log" <<'PY'
import os, re, sys
scrape, bucket, log = sys.argv[1:4]
v = {l.split(" ")[0]: float(l.split(" ")[1]) for l in open(scrape) if l.startswith("wsync_")}
down = v['wsync_bytes_downloaded_total{instance="sub1",role="subscriber"}']
keys = re.findall(r"applied from (?:anchor|delta) (\S+):", open(log).read())
assert len(keys) == 3, keys
want = sum(os.path.getsize(os.path.join(bucket, k)) for k in keys)
assert down == want, (down, want, keys)
PY
check "bytes written: at least the model's files" "$PYTHON3" - "$S" "$CK/checkpoint-1" <<'PY'
import glob, os, sys
v = {l.split(" ")[0]: float(l.split(" ")[1]) for l in open(sys.argv[1]) if l.startswith("wsync_")}
w = v['wsync_bytes_written_total{instance="sub1",role="subscriber"}']
model = sum(os.path.getsize(f) for f in glob.glob(sys.argv[2] + "/*.safetensors"))
assert w >= model, (w, model)
PY

# ---- an outage, and freshness without a change of state -------------
DOWN=$PROM/wsync-down.prom
outage_shows() {
	[ "$(value "$DOWN" "$(ser wsync_store_up subscriber down)")" = 0 ] &&
		[ "$(value "$DOWN" "$(ser wsync_store_errors_total subscriber down)")" -ge 1 ]
}
check "the dead bucket shows: store_up 0, errors counted" outage_shows
T0=$(value "$PROM/wsync-sub2.prom" "$(ser wsync_metrics_updated_timestamp_seconds subscriber sub2)")
D0=$(value "$DOWN" "$(ser wsync_store_down_seconds subscriber down)")
sleep 12
T1=$(value "$PROM/wsync-sub2.prom" "$(ser wsync_metrics_updated_timestamp_seconds subscriber sub2)")
D1=$(value "$DOWN" "$(ser wsync_store_down_seconds subscriber down)")
check "an idle daemon's file is rewritten within 12 s ($T0 -> $T1)" \
	"$PYTHON3" -c "import sys; sys.exit(not (float('$T1') - float('$T0') >= 5))"
check "the outage's length grows ($D0 -> $D1)" \
	"$PYTHON3" -c "import sys; sys.exit(not (float('$D1') - float('$D0') >= 5))"

# ---- wsync status --prometheus -----------------------------------------
"$WSYNC" status --prometheus --config "$TMP/etc/sub1.ini" >"$TMP/st1.txt" 2>"$TMP/st1.err"
check "wsync status --prometheus exits 0 for a healthy daemon" test $? -eq 0
check "promtool check metrics accepts its output" bash -c "'$PROMTOOL' check metrics <'$TMP/st1.txt'"
check "it prints what the daemon's file holds" "$PYTHON3" - "$TMP/st1.txt" "$PROM/wsync-sub1.prom" <<'PY'
import sys
def series(p):
    return {l.split(" ")[0]: l.split(" ")[1] for l in open(p)
            if l.startswith("wsync_") and "_timestamp_seconds" not in l and "lag" not in l}
a, b = series(sys.argv[1]), series(sys.argv[2])
assert a == b, set(a.items()) ^ set(b.items())
assert len(a) > 20, len(a)
PY
mkdir -p "$TMP/rt"
ini pubrt publisher
sed -i "s|^runtime_dir = .*|runtime_dir = $TMP/rt/publisher|; s|^state_dir = .*|state_dir = $TMP/pubrt/state|; s|^watch_dir = .*|watch_dir = $TMP/train2|" "$TMP/etc/pubrt.ini"
ini subrt subscriber
sed -i "s|^runtime_dir = .*|runtime_dir = $TMP/rt/subscriber|" "$TMP/etc/subrt.ini"
mkdir -p "$TMP/train2"
sed -i "s|^url = .*|url = file://$TMP/bucket2|" "$TMP/etc/pubrt.ini" "$TMP/etc/subrt.ini"
mkdir -p "$TMP/bucket2"
start -m 077 -c "$TMP/etc/pubrt.ini" pubrt
start -m 077 -c "$TMP/etc/subrt.ini" subrt
check "two daemons under one runtime directory write their status" \
	wait_for 10 test -s "$TMP/rt/publisher/status.json" -a -s "$TMP/rt/subscriber/status.json"
RUNTIME_DIRECTORY=$TMP/rt "$WSYNC" status --prometheus >"$TMP/all.txt" 2>"$TMP/all.err"
check "wsync status --prometheus with no option merges both: promtool accepts it" \
	bash -c "'$PROMTOOL' check metrics <'$TMP/all.txt'"
merged() {
	[ "$(grep -c '^# TYPE wsync_version gauge' "$TMP/all.txt")" = 1 ] &&
		value "$TMP/all.txt" "$(ser wsync_version publisher pubrt)" &&
		value "$TMP/all.txt" "$(ser wsync_version subscriber subrt)"
}
check "... with each family once and both daemons' series" merged
expect_exit 2 "--json and --prometheus together are refused" \
	"$WSYNC" status --json --prometheus --config "$TMP/etc/sub1.ini"

# ---- stop, off, refused -----------------------------------------------
stop sub2
tap_result $? "a daemon stopped cleanly exits 0"
check "... and removes its metrics file" test ! -e "$PROM/wsync-sub2.prom"
expect_exit 3 "wsync status --prometheus of a stopped daemon exits 3" \
	"$WSYNC" status --prometheus --config "$TMP/etc/sub2.ini"
check "... and prints no series" bash -c "! grep -q '^wsync_' <<<\"\$OUT\""
stop sub3
ini off subscriber "metrics_file ="
start -m 077 -c "$TMP/etc/off.ini" off
check "metrics_file = \"\" (off): status.json is written" wait_for 10 test -s "$TMP/off/run/status.json"
check "... and no metrics file" test ! -e "$TMP/off/run/wsync.prom"
expect_exit 1 "wsync status --prometheus of a daemon with metrics off exits 1" \
	"$WSYNC" status --prometheus --config "$TMP/etc/off.ini"
contains "... saying so" "$OUT" "metrics_file is empty"
ini bad subscriber "metrics_file = $PROM/wsync.txt"
expect_exit 78 "a metrics_file not ending in .prom is a configuration error" \
	"$WSYNCD" --check-config -c "$TMP/etc/bad.ini"
contains "... that says why" "$OUT" ".prom"

# ---- a configuration file name that is not UTF-8 ------------------------
# "lat\xe9.ini" (Latin-1): its instance label must stay valid UTF-8 --
# U+FFFD for the bad byte -- or node_exporter refuses the whole file.
LAT=$'lat\xe9'
ini "$LAT" subscriber "metrics_file = $PROM/wsync-latin1.prom"
mkdir -p "$TMP/latin1"
start -m 077 -c "$TMP/etc/$LAT.ini" latin1
check "a configuration named lat\\xe9.ini: its metrics file is written" \
	wait_for 10 test -s "$PROM/wsync-latin1.prom"
check "promtool check metrics accepts it" \
	bash -c "'$PROMTOOL' check metrics <'$PROM/wsync-latin1.prom'"
check "its instance label is lat + U+FFFD" \
	grep -q "instance=\"lat"$'\xef\xbf\xbd'"\"" "$PROM/wsync-latin1.prom"
check "node_exporter reads it without error" bash -c \
	"scrape() { curl -sf --max-time 5 'http://127.0.0.1:$PORT/metrics' >'$TMP/scrape2.txt'; }
	 for i in \$(seq 50); do scrape && grep -q 'lat'\$'\\xef\\xbf\\xbd' '$TMP/scrape2.txt' && break; sleep 0.2; done
	 grep -q '^node_textfile_scrape_error 0' '$TMP/scrape2.txt' && grep -q 'lat'\$'\\xef\\xbf\\xbd' '$TMP/scrape2.txt'"
check "wsync status --prometheus prints it, and promtool accepts that" bash -c \
	"'$WSYNC' status --prometheus --config '$TMP/etc/$LAT.ini' | '$PROMTOOL' check metrics"
stop latin1

# ---- the alert rules ---------------------------------------------------
RULES=$WSYNC_SOURCE_ROOT/systemd/wsync-alerts.yml
check "promtool check rules accepts systemd/wsync-alerts.yml" "$PROMTOOL" check rules "$RULES"
cp "$RULES" "$TMP/wsync-alerts.yml"
cp "$WSYNC_SOURCE_ROOT/tests/integration/wsync-alerts.test.yml" "$TMP/"
check "the alert rules fire when they should (promtool test rules)" \
	bash -c "cd '$TMP' && '$PROMTOOL' test rules wsync-alerts.test.yml"

tap_done
