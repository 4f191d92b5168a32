#!/usr/bin/env bash
# build-deb.sh [-o OUTDIR] [--wheel WHEEL] [--version VERSION]: vgpukit_<version>_amd64.deb for Debian 12,
# assembled with dpkg-deb from the wheel (docs/install.md "The Debian package").
#   -o DIR           where the .deb goes (default: dist/)
#   --wheel WHEEL    package this wheel (default: build one with `python -m build --wheel` from a clean copy
#                    of the tree: tracked and not-ignored files only, so build/ or .venv never leak in)
#   --version V      package as version V (rewrites __version__ in the packaged copy; the tests build an
#                    older "previous" package from the same tree this way)
# Needs: python3 with `build` (the dev extra), pip, cc + make (the wheel's CUDA library), dpkg-deb.
# The dependencies Debian 12 does not have in a new enough version are vendored from the wheelhouse
# ($VGPUKIT_WHEELHOUSE, default /var/tmp/vgpukit-wheelhouse; filled by `pip download` when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
OUT=$TOP/dist; WHEEL=""; VERSION=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) OUT=$(realpath -m "$2"); shift 2;;
    --wheel) WHEEL=$(realpath "$2"); shift 2;;
    --version) VERSION=$2; shift 2;;
    *) echo "usage: $0 [-o OUTDIR] [--wheel WHEEL] [--version VERSION]" >&2; exit 2;;
  esac
done
PY=${PYTHON:-python3}
HOUSE=${VGPUKIT_WHEELHOUSE:-/var/tmp/vgpukit-wheelhouse}
W=$(mktemp -d "${TMPDIR:-/tmp}/vgpukit-deb.XXXXXX"); trap 'rm -rf "$W"' EXIT
mkdir -p "$OUT" "$HOUSE"

if [ -z "$WHEEL" ]; then  # a clean copy of the tree, then the wheel from it
  mkdir "$W/src"
  git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"; done | tar --null -T - -cf - | tar -C "$W/src" -xf -
  env -u PYTHONPATH "$PY" -m build -q --wheel -o "$W/wheel" "$W/src" >/dev/null
  WHEEL=$(ls "$W"/wheel/vgpukit-*.whl)
fi

R=$W/root; LIB=$R/usr/lib/vgpukit; SITE=$LIB/python
mkdir -p "$SITE" "$R/DEBIAN"
# 1. the wheel: the package into the private directory, its shared data under /usr
"$PY" - "$WHEEL" "$R" "$SITE" "$VERSION" <<'PY'
import re, sys, zipfile
from pathlib import Path
wheel, root, site, version = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if info.is_dir():
            continue
        parts = info.filename.split("/")
        if parts[0].endswith(".data"):
            if parts[1] != "data":
                raise SystemExit(f"unexpected wheel data: {info.filename}")
            dest = root / "usr" / "/".join(parts[2:])
        elif parts[0].endswith(".dist-info"):
            continue  # the package manager is dpkg: no pip metadata in the private directory
        else:
            dest = site / info.filename
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(z.read(info))
init = site / "vgpukit" / "__init__.py"
text = init.read_text()
if version:
    text = re.sub(r'__version__ = "[^"]*"', f'__version__ = "{version}"', text, count=1)
    init.write_text(text)
print(re.search(r'__version__ = "([^"]*)"', text).group(1), file=open(root / "VERSION", "w"))
PY
VERSION=$(cat "$R/VERSION"); rm "$R/VERSION"

# 2. dependencies: Debian's own packages where bookworm's version satisfies the requirement (Depends:),
# everything else pinned by pip's resolver and vendored into the private directory
DEBIAN_HAS="click rich jinja2 markupsafe pyyaml pygments markdown-it-py mdurl pyudev"
req="$WHEEL[k8s]"
if ! env -u PYTHONPATH "$PY" -m pip download -q --no-index --find-links "$HOUSE" -d "$HOUSE" "$req" >/dev/null 2>&1; then
  env -u PYTHONPATH "$PY" -m pip download -q -d "$HOUSE" "$req" >/dev/null
fi
env -u PYTHONPATH "$PY" -m pip install -q --dry-run --ignore-installed --no-index --find-links "$HOUSE" \
  --report "$W/report.json" "$req" >/dev/null
"$PY" - "$W/report.json" "$DEBIAN_HAS" >"$W/vendor.txt" <<'PY'
import json, re, sys
debian = set(sys.argv[2].split())
for item in json.load(open(sys.argv[1]))["install"]:
    name = re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower()
    if name not in debian and name != "vgpukit":
        print(f"{name}=={item['metadata']['version']}")
PY
env -u PYTHONPATH "$PY" -m pip install -q --no-deps --no-compile --no-index --find-links "$HOUSE" \
  --target "$SITE" -r "$W/vendor.txt" >/dev/null
rm -rf "$SITE/bin"
find "$SITE" -name __pycache__ -prune -exec rm -rf {} +

# 3. the command, the mdevctl shims, units, docs
mkdir -p "$R/usr/bin" "$LIB/bin" "$R/lib/systemd/system" "$R/usr/share/doc/vgpukit" "$R/usr/share/vgpukit/udev"
cat >"$R/usr/bin/vgpukit" <<'EOF'
#!/usr/bin/python3 -P
# vgpukit from the Debian package: the program and its vendored dependencies live in
# /usr/lib/vgpukit/python (never on the system's sys.path); bytecode is compiled by the postinst.
import runpy
import sys

sys.path.insert(0, "/usr/lib/vgpukit/python")
sys.dont_write_bytecode = True
runpy.run_module("vgpukit", run_name="__main__", alter_sys=False)
EOF
for s in mdevctl lsmdev; do
  sed "s|^exec vgpukit |exec /usr/bin/vgpukit |; s|Install as /usr/local/sbin/$s.|/usr/sbin/$s through update-alternatives (vgpukit package).|" \
    "templates/bin/$s" >"$LIB/bin/$s"
done
sed "s|^exec vgpukit |exec /usr/bin/vgpukit |; s|Install as /usr/local/bin/nvidia-mig-parted.|/usr/bin/nvidia-mig-parted through update-alternatives (vgpukit package).|" \
  templates/bin/nvidia-mig-parted >"$LIB/bin/nvidia-mig-parted"
for f in templates/systemd/*; do sed 's|@VGPUKIT@|/usr/bin/vgpukit|g' "$f" >"$R/lib/systemd/system/$(basename "$f")"; done
cp templates/udev/*.rules "$R/usr/share/vgpukit/udev/"
cp docs/*.md "$R/usr/share/doc/vgpukit/"
gzip -9n "$R/usr/share/man/man1/vgpukit.1"
chmod 0755 "$R/usr/bin/vgpukit" "$LIB"/bin/*
find "$R" -type d -exec chmod 0755 {} +
find "$R/usr/share" "$SITE" "$R/lib" -type f -exec chmod 0644 {} +
chmod 0755 "$SITE"/vgpukit/_templates/bin/*
find "$LIB" -name '*.so' -exec strip --strip-unneeded --remove-section=.comment --remove-section=.note {} + \
  -exec chmod 0644 {} +

# copyright: ours, and each vendored distribution's licence files where pip put them
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: vgpukit"
  echo
  echo "Files: *"
  echo "Copyright: 2026 the vgpukit authors"
  echo "License: Apache-2.0"
  echo " On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0."
  while IFS= read -r pin; do
    echo; echo "Files: usr/lib/vgpukit/python/* (vendored ${pin})"
    echo "Copyright: ${pin%%==*} authors (see the licence files)"
    echo "License: see the licence files in usr/lib/vgpukit/python/${pin%%==*}*.dist-info/"
  done <"$W/vendor.txt"
} >"$R/usr/share/doc/vgpukit/copyright"
{
  echo "vgpukit ($VERSION) unstable; urgency=medium"; echo
  echo "  * Release $VERSION (see /usr/share/doc/vgpukit/CHANGELOG.md.gz)."; echo
  echo " -- vgpukit maintainers <vgpukit@example.org>  $(date -R -d @"${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")"
} | gzip -9n >"$R/usr/share/doc/vgpukit/changelog.gz"
gzip -9n -c CHANGELOG.md >"$R/usr/share/doc/vgpukit/CHANGELOG.md.gz"
chmod 0644 "$R"/usr/share/doc/vgpukit/*

# 4. control data
SIZE=$(du -sk --exclude=DEBIAN "$R" | cut -f1)
cat >"$R/DEBIAN/control" <<EOF
Package: vgpukit
Version: $VERSION
Architecture: amd64
Maintainer: vgpukit maintainers <vgpukit@example.org>
Installed-Size: $SIZE
Depends: python3 (>= 3.11), python3 (<< 3.12), python3-click (>= 8.1), python3-rich (>= 13), python3-jinja2 (>= 3.1), python3-yaml (>= 6), python3-pyudev (>= 0.24), libc6 (>= 2.34)
Suggests: mdevctl, libvirt-clients, podman
Section: admin
Priority: optional
Homepage: https://example.org/vgpukit
Description: carve GPUs and PCIe devices into VFs, mdevs, vGPUs and MIG slices
 vgpukit creates SR-IOV virtual functions, binds vfio-pci, manages mediated
 devices and NVIDIA vGPUs, partitions GPUs with MIG, renders libvirt XML,
 generates CDI specs, time-slices GPUs between tenants (QoS daemon with the
 libvgpukit-cuda interception library) and runs the Kubernetes device plugin.
 .
 Python dependencies that Debian 12 lacks in a new enough version are
 vendored in /usr/lib/vgpukit/python.
EOF
for s in postinst prerm postrm; do install -m 0755 "scripts/deb/$s" "$R/DEBIAN/$s"; done
(cd "$R" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) >"$R/DEBIAN/md5sums"
chmod 0644 "$R/DEBIAN/control" "$R/DEBIAN/md5sums"
DEB=$OUT/vgpukit_${VERSION}_amd64.deb
dpkg-deb --root-owner-group -Zgzip --build "$R" "$DEB" >/dev/null
echo "$DEB"
