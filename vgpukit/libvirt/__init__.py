"""libvirt: one connection facade (:mod:`.connection`) and one XML model of the domain elements
vgpukit uses (:mod:`.domain`, built on :mod:`.xmlbuilder`). Nothing here imports libvirt-python at
module level."""
