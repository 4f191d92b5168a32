"""vgpukit.sriov"""
