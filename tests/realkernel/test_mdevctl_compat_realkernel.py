"""A shell script written for mdevctl, run on the real kernel twice in the shared guest: once through
Debian's mdevctl 1.2.0, once through vgpukit (``mdevctl() { vgpukit mdev --mdevctl "$@"; }``), with
the same call-out and notifier scripts installed in ``/etc/mdevctl.d/scripts.d``. The two runs must
leave the same end state -- ``mdevctl list --dumpjson -d`` and ``mdevctl list --dumpjson`` (asked of
the real mdevctl both times), the definition files, the instances in sysfs, the mtty capacity -- and
print the same output (list/types text and JSON, generated UUIDs, success or failure of each
command), and the scripts must have seen the same events with the same arguments and stdin.
"""

from __future__ import annotations

import json
import re

import pytest

from .conftest import GuestSession

pytestmark = pytest.mark.realkernel

DIR = "/tmp/mdevctl-compat"
U1 = "5a1c0de0-0000-4000-8000-000000000001"
U2 = "5a1c0de0-0000-4000-8000-000000000002"
SCRIPTS = "/etc/mdevctl.d/scripts.d"

SETUP = f"""
set -e
INSTALL_MDEVCTL
mkdir -p {DIR}
cat > {SCRIPTS}/callouts/50-log <<'EOF'
#!/bin/sh
[ "$6" = capabilities ] && exit 0  # vgpukit asks it first (mdevctl 1.4); Debian's mdevctl 1.2 does not
echo "callout $* <$(cat)>" >> {DIR}/log
[ "$4" = get ] && {{ echo '[{{"note":"from-get"}}]'; exit 0; }}
[ "$4" = pre ] && [ -e {DIR}/veto ] && {{ echo "vetoed by the test" >&2; exit 1; }}
exit 0
EOF
printf '#!/bin/sh\\nexit 2\\n' > {SCRIPTS}/callouts/10-not-mine
printf '#!/bin/sh\\necho "notify $* <$(cat)>" >> {DIR}/log\\n' > {SCRIPTS}/notifiers/log
chmod +x {SCRIPTS}/callouts/* {SCRIPTS}/notifiers/*
echo '{{"mdev_type": "mtty-1", "start": "manual", "attrs": [{{"a": "1"}}]}}' > {DIR}/dev.json
echo '{{"mdev_type": "mtty-1", "start": "auto", "attrs": []}}' > {DIR}/transient.json
: > {DIR}/log
ls {SCRIPTS}/callouts {SCRIPTS}/notifiers
"""

# The script under test: written for mdevctl 1.2 (its man page's commands and options).
SCRIPT = f"""
U1=5a1c0de0-0000-4000-8000-000000000001
U2=5a1c0de0-0000-4000-8000-000000000002
U3=5a1c0de0-0000-4000-8000-000000000003
U4=5a1c0de0-0000-4000-8000-000000000004
r() {{ "$@" > {DIR}/out 2>/dev/null && s=ok || s=fail; echo "\\$ $* -> $s"; cat {DIR}/out; }}
e() {{ echo "\\$ $* says:"; "$@" 2>&1 >/dev/null | sed -e 's/^Error: //' -e 's/^vgpukit: error: //'; }}
r mdevctl types
r mdevctl start -u $U1 -p mtty -t mtty-2
r mdevctl list
r mdevctl define -u $U1
r mdevctl define -u $U2 -p mtty -t mtty-1 -a
r mdevctl modify -u $U2 --addattr=baz --value=1 -i 0
r mdevctl modify -u $U2 --addattr foo --value bar
r mdevctl modify -u $U2 --delattr -i 0 -t mtty-2 -m
r mdevctl list -d -v
r mdevctl list -d -u $U2 --dumpjson
r mdevctl modify -u $U2 --delattr --auto
r mdevctl define -p mtty -u $U3 --jsonfile {DIR}/dev.json
r mdevctl start -u $U2
r mdevctl start -u $U2
e mdevctl start -u $U2
e mdevctl start -p MTTY -t mtty-1
e mdevctl start -p nosuch -t mtty-1
r mdevctl types -p nosuch
r mdevctl start -p mtty --jsonfile {DIR}/transient.json -u $U4
r mdevctl list --dumpjson -p mtty
r mdevctl stop -u $U4
touch {DIR}/veto; r mdevctl modify -u $U3 -a; rm {DIR}/veto
r mdevctl undefine -u $U3 -p mtty
G=$(mdevctl define -p mtty -t mtty-2) && echo "generated ${{#G}}" && r mdevctl undefine -u "$G"
"""

STATE = f"""
echo "### log"; cat {DIR}/log
echo "### files"; for f in /etc/mdevctl.d/mtty/*; do echo "$(basename $f) $(tr -d ' \\n' < $f)"; done
echo "### bytes"; for f in /etc/mdevctl.d/mtty/*; do echo "$(basename $f) $(sha256sum < $f)"; done
echo "### sysfs"
for d in /sys/bus/mdev/devices/*; do
  [ -e "$d" ] && echo "$(basename $d) $(basename $(readlink -f $d/..)) $(basename $(readlink $d/mdev_type))"
done
for t in mtty-1 mtty-2; do echo "$t $(cat /sys/class/mdev_bus/mtty/mdev_supported_types/$t/available_instances)"; done
echo "### defined"; /usr/bin/mdevctl list --dumpjson -d
echo "### active"; /usr/bin/mdevctl list --dumpjson
"""

RESET = f"""
for d in /sys/bus/mdev/devices/*; do [ -e "$d" ] && echo 1 > "$d/remove"; done
rm -rf /etc/mdevctl.d/mtty; : > {DIR}/log
"""

CLEANUP = f"{RESET}rm -f {SCRIPTS}/callouts/* {SCRIPTS}/notifiers/*; rm -rf {DIR}; ls /sys/bus/mdev/devices | wc -l"

GUEST_STEPS = [
    ("mdevctl-compat-setup", "sh-vgpukit", (SETUP,)),
    ("mdevctl-compat-mdevctl", "sh", (SCRIPT + STATE + RESET,)),
    ("mdevctl-compat-vgpukit", "sh-vgpukit", ('mdevctl() { VGPUKIT mdev --mdevctl "$@"; }\n' + SCRIPT + STATE,), 900),
    ("mdevctl-compat-cleanup", "sh", (CLEANUP,)),  # the next modules see mtty as booted
]


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^### (\w+)\n", text, flags=re.M)
    return {"script": parts[0], **dict(zip(parts[1::2], parts[2::2], strict=True))}


@pytest.fixture
def runs(guest: GuestSession) -> tuple[dict[str, str], dict[str, str]]:
    setup = guest.step("mdevctl-compat-setup")
    assert setup.rc == 0, setup.describe()
    a, b = guest.step("mdevctl-compat-mdevctl"), guest.step("mdevctl-compat-vgpukit")
    assert a.rc == 0 and b.rc == 0, a.describe() + b.describe()
    return _sections(a.stdout), _sections(b.stdout)


def test_the_mdevctl_script_really_ran_through_mdevctl(runs: tuple[dict[str, str], dict[str, str]]) -> None:
    """The reference run did what the script asks (so that matching it means something)."""
    ref, _ = runs
    out = ref["script"]
    assert "$ mdevctl list -d -u 5a1c0de0-0000-4000-8000-000000000002 --dumpjson -> ok" in out
    assert "$ mdevctl modify -u 5a1c0de0-0000-4000-8000-000000000003 -a -> fail" in out  # vetoed
    assert "generated 36" in out
    assert "Device already exists" in out and "Did you mean 'mtty'?" in out  # mdevctl's words, compared below
    log = ref["log"]
    assert "-e pre -a start -s none" in log and "-e post -a modify -s success" in log
    assert "-e get -a attributes -s none" in log and "notify -t mtty-1 -e notify -a modify -s none" in log
    defined = json.loads(ref["defined"])
    assert [sorted(c) for c in defined[0]["mtty"]] == [[U1], [U2]]  # U3 undefined, the generated one too


@pytest.mark.parametrize("section", ["script", "log", "files", "bytes", "sysfs", "defined", "active"])
def test_vgpukit_does_what_mdevctl_does(runs: tuple[dict[str, str], dict[str, str]], section: str) -> None:
    ref, ours = runs
    assert _generated(ours[section]) == _generated(ref[section])


def _generated(text: str) -> str:
    """The UUID ``define`` made up differs between the runs: the rest must not."""
    return re.sub(r"\b(?!5a1c0de0)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<generated>", text)


def test_cleanup_leaves_mtty_as_booted(guest: GuestSession) -> None:
    r = guest.step("mdevctl-compat-cleanup")
    assert r.rc == 0 and r.stdout.strip() == "0", r.describe()
