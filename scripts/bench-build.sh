# SPDX-License-Identifier: Apache-2.0
# bench-build.sh -- sourced by the benchmark scripts (bash): the programs
# they measure, built from this tree in build-bench/ (release).
#
#   bench_build NAME   unless $prebuilt is 1, build wsync and wsyncd in
#                      $root/build-bench (logs in $WORK) and set WSYNC and
#                      WSYNCD to them; NAME prefixes the error messages

bench_build() {
	[ "$prebuilt" = 1 ] && return 0
	# a build left from an older tree would run under this commit's name
	echo "# building build-bench (release): wsync, wsyncd" >&2
	if [ ! -d "$root/build-bench/meson-private" ]; then
		(cd "$root" && meson setup build-bench -Dbuildtype=release) >"$WORK/setup.log" 2>&1 ||
			{ cat "$WORK/setup.log" >&2; echo "$1: meson setup failed" >&2; exit 1; }
	fi
	ninja -C "$root/build-bench" daemon/wsync daemon/wsyncd >"$WORK/build.log" 2>&1 ||
		{ tail -40 "$WORK/build.log" >&2; echo "$1: build failed" >&2; exit 1; }
	WSYNC=$root/build-bench/daemon/wsync
	WSYNCD=$root/build-bench/daemon/wsyncd
}
