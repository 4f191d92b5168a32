#!/usr/bin/env bash
# release.sh [--snapshot] [-o DIR]: every artefact of one version, from the committed tree
# (docs/install.md "Releasing"): the sdist and the wheel (python -m build), the .deb
# (scripts/build-deb.sh), the node image localhost/vgpukit:<version> (scripts/build-image.sh, also
# saved as an OCI archive); then checks that `vgpukit -V`, the package versions and the image tag
# agree, and prints each artefact's size and sha256.
#   --snapshot  allow a HEAD that is not tagged v<version> (a test build; never a release)
#   -o DIR      where the artefacts go (default: dist/release-<version>)
# Refuses (exit 1) a dirty tree (changes or untracked files), and a HEAD not tagged v<__version__>.
set -euo pipefail
cd "$(dirname "$0")/.."
SNAPSHOT=0; OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --snapshot) SNAPSHOT=1; shift;;
    -o) OUT=$(realpath -m "$2"); shift 2;;
    *) echo "usage: $0 [--snapshot] [-o DIR]" >&2; exit 2;;
  esac
done
fail() { echo "release: $*" >&2; exit 1; }
[ -z "$(git status --porcelain)" ] || fail "the tree has uncommitted changes or untracked files (git status); commit or remove them"
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' vgpukit/__init__.py)
[ -n "$VERSION" ] || fail "no __version__ in vgpukit/__init__.py"
if ! git tag --points-at HEAD | grep -qx "v$VERSION"; then
  [ $SNAPSHOT = 1 ] || fail "HEAD is not tagged v$VERSION (tag it: git tag -a v$VERSION), or build a test with --snapshot"
  echo "release: snapshot of $(git rev-parse --short HEAD) (not tagged v$VERSION)"
fi
grep -q "^## \(\[\?v\?$VERSION\]\?\|Unreleased\)" CHANGELOG.md || fail "CHANGELOG.md has no entry for $VERSION"
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/dist/release-$VERSION}
rm -rf "$OUT"; mkdir -p "$OUT"
W=$(mktemp -d "${TMPDIR:-/tmp}/vgpukit-release.XXXXXX"); trap 'rm -rf "$W"' EXIT
git archive --format=tar --prefix=src/ HEAD | tar -C "$W" -xf -   # exactly the committed tree
(cd "$W/src" && git init -q && git add -A)   # the build scripts read the file list from git

echo "release: sdist and wheel"
env -u PYTHONPATH "$PY" -m build -o "$OUT" "$W/src" >"$W/build.log" 2>&1 || { tail -20 "$W/build.log" >&2; exit 1; }
WHEEL=$(ls "$OUT"/vgpukit-"$VERSION"-*.whl)
echo "release: Debian package"
DEB=$(PYTHON=$PY bash "$W/src/scripts/build-deb.sh" -o "$OUT" --wheel "$WHEEL" | tail -1)
echo "release: node image"
IMAGE=$(bash "$W/src/scripts/build-image.sh" --deb "$DEB" | tail -1)
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
if [ "${VGPUKIT_TEST_PODMAN_REROOT:-}" = 1 ] || ! awk '$5 == "/" {f = 1} END {exit !f}' /proc/self/mountinfo; then
  mkdir "$W/reroot"  # in a chroot: see scripts/build-image.sh
  PODMAN=(unshare --mount --propagation unchanged sh -c 'mount --rbind / "$0" && exec chroot "$0" "$@"' "$W/reroot"
          "${PODMAN[@]}")
fi
"${PODMAN[@]}" save -q --format oci-archive -o "$OUT/vgpukit-image_${VERSION}_amd64.tar" "$IMAGE"

# one version everywhere
[ "$(dpkg-deb -f "$DEB" Version)" = "$VERSION" ] || fail "the .deb's version is not $VERSION"
[ "$IMAGE" = "localhost/vgpukit:$VERSION" ] || fail "the image is $IMAGE, not localhost/vgpukit:$VERSION"
ran=$("${PODMAN[@]}" run --rm --network none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$IMAGE" vgpukit -V)
[ "$ran" = "vgpukit, version $VERSION" ] || fail "the image says '$ran'"
for f in "$OUT"/vgpukit-"$VERSION".tar.gz "$WHEEL"; do [ -f "$f" ] || fail "missing $f"; done

echo "release: vgpukit $VERSION ($(git rev-parse --short HEAD)) in $OUT"
echo "  image: $IMAGE  $("${PODMAN[@]}" image inspect --format '{{.Id}}  {{.Size}} bytes' "$IMAGE")"
(cd "$OUT" && for f in *; do
   printf '  %-48s %10s  sha256:%s\n' "$f" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
 done) >"$W/sums"   # listed before SHA256SUMS.txt exists, so it never lists itself
cp "$W/sums" "$OUT/SHA256SUMS.txt" && cat "$W/sums"
