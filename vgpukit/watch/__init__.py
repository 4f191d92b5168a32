"""The watch: one listener per long-running process, below its doors (docs/engine.md, "The watch").

Kernel uevents (pyudev's netlink monitor, or the simulated kernel's feed), NVML events (the health
layer's watcher) and inotify on vgpukit's own state and configuration directories, ``/etc/mdevctl.d``
and ``/dev/vfio`` feed one :class:`~.model.HostModel`, updated by what each change names; the device
plugin, the DRA plugin, the exporter, ``health --watch``, the QoS daemon and the node agent read it or
wait on it instead of reading the host on a timer.
"""
