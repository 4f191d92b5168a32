"""vgpukit.mdev"""
