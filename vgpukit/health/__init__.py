"""GPU and PCI device health: one model below every front end.

:mod:`.xid` reads the XID classification (``vgpukit/data/xid.yaml``), :mod:`.model` holds the pure
types (:class:`~.model.DeviceHealth`, :class:`~.model.HealthEvent`) and the rules that turn
conditions and events into a state and an action, :mod:`.log` keeps the bounded event log under
``/run/vgpukit/health`` through the host door, :mod:`.check` gathers the facts (NVML facade, PCI
view) into a :class:`~.model.DeviceHealth` per device. The health layer plans nothing itself:
planners read its answer as a fact (docs/health.md).
"""
