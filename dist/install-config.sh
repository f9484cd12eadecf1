#!/bin/sh
# meson install script: put the default configuration in place unless one is there already,
# so that `make install` never overwrites an operator's file. $1: the file, $2: the directory.
set -eu
dest="${DESTDIR:-}$2"
if [ -e "$dest/linerate.conf" ]; then
    echo "install-config: $dest/linerate.conf exists, left as it is"
    exit 0
fi
install -d -m 755 "$dest"
install -m 644 "$1" "$dest/linerate.conf"
echo "Installing $1 to $dest"
