#!/usr/bin/env bash
# Fetches the upstream tarball of a Debian trixie source package into a cache folder, checked by
# apt against trixie's signed Sources index, and prints its path on the last line of output.
#
#   scripts/debian-source.sh PACKAGE TARBALL_NAME     # e.g. libfabric libfabric_2.1.0.orig.tar.xz
#
# Shared by scripts/libfabric.sh and scripts/rdma-core.sh. The archive address is read from this
# machine's own apt sources and written only to a private apt configuration under the cache
# folder (NNF_DEPS, default /opt/nnf-deps), so the system's apt state is left as it was. Only the
# upstream tarball is needed: a missing .dsc or Debian patch set is accepted (we use upstream as
# released). A tarball already in the cache is returned at once.
set -euo pipefail
package=${1:?package name}
name=${2:?tarball file name}
deps=${NNF_DEPS:-/opt/nnf-deps}
src=$deps/src
tarball=$src/$name
mkdir -p "$src"
if [[ -f $tarball ]]; then
  echo "$tarball"
  exit 0
fi

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
# debian_uri: the Debian archive this machine already uses (deb822 or one-line sources).
debian_uri() {
  local uri=""
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    # The first URI of a stanza whose suites are the plain release (not -security).
    uri=$(awk -v codename="$codename" '
      /^URIs:/ { uris = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == codename) found = 1 }
      /^$/ { if (found && uris != "") { print uris; exit } found = 0; uris = "" }
      END { if (found && uris != "") print uris }' /etc/apt/sources.list.d/debian.sources | head -1)
  fi
  if [[ -z $uri && -f /etc/apt/sources.list ]]; then
    uri=$(awk -v codename="$codename" '$1 == "deb" && $0 !~ /\[/ && $3 == codename { print $2; exit }
      $1 == "deb" && $3 == codename { for (i = 3; i <= NF; i++) if ($i ~ /\]$/) { print $(i + 1); exit } }' \
      /etc/apt/sources.list)
  fi
  echo "$uri"
}

apt_dir=$deps/apt
mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
if [[ ! -f $apt_dir/sources.list.d/trixie-src.sources ]]; then
  uri=$(debian_uri)
  if [[ -z $uri ]]; then
    echo "debian-source.sh: no Debian archive for '$codename' in /etc/apt/sources.list{,.d/debian.sources}" >&2
    exit 1
  fi
  # A private apt configuration: trixie's Sources index never enters the system's apt lists.
  cat >"$apt_dir/sources.list.d/trixie-src.sources" <<EOT
Types: deb-src
URIs: $uri
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOT
fi
apt_options=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
             -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
             -o "APT::Sandbox::User=root")
echo "== fetching trixie's $package source package" >&2
apt-get "${apt_options[@]}" update -qq >&2
# The .dsc may be refused by the archive's mirror while the tarball arrives: judge the result by
# the tarball, which apt has checked against the signed Sources index.
(cd "$src" && apt-get "${apt_options[@]}" source --download-only "$package/trixie" >&2) ||
  echo "== apt-get source reported an error; checking for the upstream tarball" >&2
if [[ ! -f $tarball ]]; then
  echo "debian-source.sh: $tarball did not arrive (trixie's $package is:" >&2
  ls "$src" >&2
  echo "); name its upstream version" >&2
  exit 1
fi
echo "$tarball"
