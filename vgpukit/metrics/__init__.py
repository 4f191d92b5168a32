"""``vgpukit exporter``: Prometheus metrics read afresh at every scrape.

:mod:`.snapshot` reads the host once per scrape through the facades (NVML, PCI, the health layer, the
QoS daemon's status, the CUDA library's shared regions, the device inventory); :mod:`.devices`,
:mod:`.tenants` and :mod:`.slices` turn one snapshot into metric families; :mod:`.collector` is the
prometheus-client collector. Names and labels: docs/metrics.md.
"""
