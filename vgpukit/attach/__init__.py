"""Hand devices to VMs (libvirt domain XML from jinja2 templates); containers are vgpukit.cdi."""
