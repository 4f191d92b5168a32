"""NVIDIA vGPU over both host interfaces: legacy mdev and vendor-specific VFIO on SR-IOV VFs."""
