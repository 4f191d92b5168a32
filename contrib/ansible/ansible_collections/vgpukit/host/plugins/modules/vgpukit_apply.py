#!/usr/bin/python
# Apache-2.0 (see the vgpukit repository's LICENSE)
"""Ansible module: make a host match a vgpukit host config (``vgpukit apply --json``)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vgpukit_apply
short_description: Make a GPU / SR-IOV host match a vgpukit host config
description:
  - Runs C(vgpukit apply -f FILE -c CONFIG --json) on the managed node: SR-IOV VFs, vfio-pci bindings,
    mdev and vGPU instances, MIG layouts and QoS config in one plan, rolled back as a whole on failure.
  - In check mode runs C(vgpukit apply --dry-run) and reports whether anything would change.
  - In diff mode returns the plan (one line per step).
options:
  file:
    description: The vgpukit.host/v1 (or mig-parted v1) file on the managed node.
    type: path
    required: true
  config:
    description: The config name in the file (needed when it holds several).
    type: str
  executable:
    description: The vgpukit command (default: vgpukit on the PATH).
    type: path
  sim:
    description: Act on the simulated host in this directory (vgpukit --sim; for tests).
    type: path
  root:
    description: Host root directory (vgpukit --root).
    type: path
  wait:
    description: Seconds to wait for another vgpukit command to release the host lock.
    type: float
    default: 30
author: vgpukit contributors
"""

EXAMPLES = r"""
- name: GPU host layout
  vgpukit.host.vgpukit_apply:
    file: /etc/vgpukit/host.yaml
    config: a100-vms
"""

RETURN = r"""
plan:
  description: The steps, in words, in execution order (empty when the host already matches).
  type: list
  elements: str
  returned: always
areas:
  description: Number of steps per area (sriov, bind, mdev, vgpu, mig, qos).
  type: dict
  returned: success
error:
  description: vgpukit's error kind (in-use, busy, invalid-input, not-found, unsupported, unusable, failed...).
  type: str
  returned: failure
skipped:
  description: >-
    Rc 6: the devices left alone because vgpukit's health layer finds them unusable (area, device, bdf,
    error, message); everything else was applied (changed says whether anything was).
  type: list
  elements: dict
  returned: when rc is 6
rc:
  description: vgpukit's exit code (docs/fleet.md).
  type: int
  returned: always
"""

import json  # noqa: E402 (Ansible modules document themselves first)

from ansible.module_utils.basic import AnsibleModule  # noqa: E402


def _error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("vgpukit: error: ")]
    return lines[-1].removeprefix("vgpukit: error: ") if lines else (stderr.strip().splitlines() or ["failed"])[-1]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "file": {"type": "path", "required": True},
            "config": {"type": "str"},
            "executable": {"type": "path"},
            "sim": {"type": "path"},
            "root": {"type": "path"},
            "wait": {"type": "float", "default": 30.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    exe = p["executable"] or module.get_bin_path("vgpukit", required=True)
    cmd = [exe]
    if p["sim"]:
        cmd += ["--sim", p["sim"]]
    if p["root"]:
        cmd += ["--root", p["root"]]
    cmd += ["--wait", str(p["wait"]), "apply", "-f", p["file"], "--json"]
    if p["config"]:
        cmd += ["-c", p["config"]]
    if module.check_mode:
        cmd.append("--dry-run")
    rc, out, err = module.run_command(cmd)
    try:
        doc = json.loads(out) if out.strip() else {}
    except ValueError:
        doc = {}
    skipped = doc.get("skipped") or []
    if rc == 6 and skipped:  # everything applied but the devices left alone (unusable): the task fails,
        module.fail_json(  # with what was done (failed_when: rc not in [0, 6] goes on)
            msg=_error_line(err),
            rc=rc,
            error=skipped[0].get("error", "unusable"),
            skipped=skipped,
            plan=doc.get("plan", []),
            changed=bool(doc.get("changed")) and not module.check_mode,
            stderr=err,
        )
    if rc != 0:
        module.fail_json(
            msg=_error_line(err), rc=rc, error=doc.get("error", "failed"), plan=[], stderr=err
        )
    plan = doc.get("plan", [])
    result = {
        "changed": bool(plan) if module.check_mode else bool(doc.get("changed")),
        "plan": plan,
        "areas": doc.get("areas", {}),
        "rc": rc,
    }
    if module._diff:
        result["diff"] = {"prepared": "".join(f"+ {line}\n" for line in plan)}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
