#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# install-config.sh DIR FILE... -- meson install script: copy each FILE
# into DIR (under $DESTDIR) unless a file of that name is already there,
# so `meson install` never replaces a configuration an operator edited.
set -eu
dir=$1
shift
dest="${DESTDIR:-}$dir"
if [ -n "${MESON_INSTALL_DRY_RUN:-}" ]; then
	echo "would install $* into $dest (where absent)"
	exit 0
fi
mkdir -p "$dest"
for f in "$@"; do
	name=$(basename "$f")
	if [ -e "$dest/$name" ] || [ -L "$dest/$name" ]; then
		echo "Keeping existing $dest/$name"
	else
		install -m 0644 "$f" "$dest/$name"
		echo "Installing $f to $dest"
	fi
done
