"""vgpukit: carve GPUs and PCIe devices into pieces and hand them to VMs and containers."""

__version__ = "0.1.0"
