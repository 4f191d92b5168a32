"""What device names from the system's PCI ID database cost at start-up.

Usage: .venv/bin/python benchmarks/cli/pci_names.py [--runs N]
Times ``vgpukit --sim <hgx-a100> devices`` (whole process) on a simulated host without a database
(the built-in list), with Debian's pci.ids under its root, and with udev's hwdb text under it; and, in
process, one PciNames lookup of every device of the host (first lookup = opening the database).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import print_table, timed  # benchmarks/cli/run.py, beside this script

PCI_IDS = Path("/usr/share/misc/pci.ids")


def in_process(root: Path, runs: int) -> float:
    from vgpukit.data.pci_names import PciNames
    from vgpukit.host import Host
    from vgpukit.pci import Scan

    ids = [(d.vendor, d.device) for d in Scan(Host(root)).devices()]
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        names = PciNames(Host(root))
        for v, d in ids:
            names.device_name(v, d)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    if not PCI_IDS.is_file():
        print(f"{PCI_IDS} is missing: apt-get install pci.ids (scripts/setup.sh installs it)")
        return 1
    vg = [sys.executable, "-m", "vgpukit"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sims = {}
        for label in ("built-in list", "pci.ids", "hwdb text"):
            sim = Path(tmp) / label.replace(" ", "-").replace(".", "-")
            subprocess.run(
                [*vg, "sim", "init", str(sim), "--profile", "hgx-a100"], check=True, stdout=subprocess.DEVNULL
            )
            sims[label] = sim
        (sims["pci.ids"] / "usr/share/misc").mkdir(parents=True)
        shutil.copy(PCI_IDS, sims["pci.ids"] / "usr/share/misc/pci.ids")
        hwdb = sims["hwdb text"] / "usr/lib/udev/hwdb.d"
        hwdb.mkdir(parents=True)
        lines = []
        vendor = ""
        for raw in PCI_IDS.read_text(errors="replace").splitlines():  # the same names, in hwdb's form
            if raw[:1] not in ("", "#", "\t", "C") and raw[4:6] == "  ":
                vendor = raw[:4].upper()
                lines += [f"pci:v0000{vendor}*", f" ID_VENDOR_FROM_DATABASE={raw[6:]}", ""]
            elif raw.startswith("\t") and not raw.startswith("\t\t") and raw[5:7] == "  " and vendor:
                lines += [f"pci:v0000{vendor}d0000{raw[1:5].upper()}*", f" ID_MODEL_FROM_DATABASE={raw[7:]}", ""]
        (hwdb / "20-pci-vendor-model.hwdb").write_text("\n".join(lines))
        for label, sim in sims.items():
            ts = sorted(timed([*vg, "--sim", str(sim), "devices"], args.runs))
            per = in_process(sim, args.runs)
            rows.append(
                (
                    label,
                    f"{statistics.median(ts):.3f}",
                    f"{ts[int(0.9 * (len(ts) - 1))]:.3f}",
                    f"{ts[0]:.3f}",
                    f"{per * 1000:.2f}",
                )
            )
    print_table(("names from", "devices median s", "p90 s", "min s", "all names in-process ms"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
