"""Fleets: one declarative host config (``vgpukit apply``), see docs/fleet.md."""
