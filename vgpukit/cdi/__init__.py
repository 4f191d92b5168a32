"""Containers: CDI specs for devices of this host (what `vgpukit cdi` writes and the device plugin names)."""
