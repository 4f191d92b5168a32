"""Hand devices to VMs (libvirt domain XML from jinja2 templates) and to containers (CDI specs)."""
