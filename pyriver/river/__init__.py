"""River: exit statistics and the sidecar files of river blocks (building and binding them is pyriver.engine.river's).
May import: pyriver.models (cache), pyriver.errors."""
