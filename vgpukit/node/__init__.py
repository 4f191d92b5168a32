"""The node's device view, below every front end: what devices the node offers (:mod:`.inventory`),
their names in the DRA pool (:mod:`.dra_names`), which claim each is prepared for (:mod:`.claimed`)
and the watch's views of them (:mod:`.views`) -- read alike by the device plugin, the DRA plugin, the
exporter and remediation."""
