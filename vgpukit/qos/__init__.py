"""vgpukit.qos"""
