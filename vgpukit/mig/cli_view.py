"""Human rendering of ``mig status`` / ``mig profiles`` documents (the data comes from :mod:`.view`)."""

from __future__ import annotations

from typing import Any

from ..clikit.output import say, table

LETTERS = "ABCDEFGHIJKLMNOP"  # one letter per GPU instance in the memory-slot map


def show_status(docs: list[dict[str, Any]]) -> None:
    if not docs:
        say("no NVIDIA GPU on this host")
    for doc in docs:
        head = f"{doc['gpu']}  {doc['bdf']}  {doc['name']}".rstrip()
        if "unreadable" in doc:
            say(f"{head}  MIG: ? (not read: {doc['unreadable']})", "bold red")
            continue
        if not doc["mig_capable"]:
            say(f"{head}  MIG: not capable")
            continue
        mig = doc["mig"]
        mode = "on" if mig["current"] else "off"
        if mig["change_pending"]:
            mode += f" (pending: {'on' if mig['pending'] else 'off'} after a GPU reset)"
        say(f"{head}  MIG: {mode}", "bold")
        if doc["gpu_processes"]:
            say("  held by: " + ", ".join(f"{p['name']} (pid {p['pid']})" for p in doc["gpu_processes"]))
        if not mig["current"]:
            continue
        letter = {gi["id"]: LETTERS[i % len(LETTERS)] for i, gi in enumerate(doc["gpu_instances"])}
        cells = [letter[o] if o is not None else "." for o in doc["slot_owner"]]
        say("  memory slots  " + " ".join(f"{i}" for i in range(doc["memory_slots"])))
        say("                " + " ".join(cells))
        rows = []
        for gi in doc["gpu_instances"]:
            place = f"{gi['placement']['start']}:{gi['placement']['size']}"
            users = ", ".join(f"{p['name']}({p['pid']})" for p in gi["processes"])
            if not gi["compute_instances"]:
                rows.append([letter[gi["id"]], gi["id"], gi["profile"], place, "-", "-", "(no compute instance)"])
            for ci in gi["compute_instances"]:
                rows.append(
                    [letter[gi["id"]], gi["id"], gi["profile"], place, ci["id"], f"{ci['slices']}c", ci["uuid"]]
                )
            if users:
                rows[-1][-1] += f"  used by {users}"
        if rows:
            table(None, ["", "GI", "PROFILE", "PLACEMENT", "CI", "CI SIZE", "MIG UUID"], rows)
        free = ",".join(str(s) for s in doc["free_slots"]) or "none"
        cs = doc["compute_slices"]
        say(
            f"  free memory slots: {free}; free compute slices: {cs['free']} of {cs['total']}; "
            f"largest profile still placeable: {doc['largest_free_profile'] or 'none'}"
        )


def show_profiles(doc: dict[str, Any]) -> None:
    rows = []
    for r in doc["profiles"]:
        places = ",".join(f"{x['start']}:{x['size']}" for x in r["placements"])
        remaining = "-" if r["remaining"] is None else f"{r['remaining']}/{r['max_count']}"
        rows.append([r["name"], r["id"], r["slices"], r["memory_mib"], r["sms"], remaining, places])
    note = "" if doc["mig_enabled"] else " (MIG off: remaining capacity shown once enabled)"
    table(
        f"{doc['gpu']} {doc['name']}{note}", ["PROFILE", "ID", "SLICES", "MiB", "SMs", "FREE/MAX", "PLACEMENTS"], rows
    )
