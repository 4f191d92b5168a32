"""vgpukit.sim"""
