"""vgpukit.mig"""
