"""jepa-server's API on Ray Serve (the optional extra `jepa[ray]`; docs/scale-out.md).

    serve run jepa_server.ray:app model=/models/vit.gguf num_replicas=2

`import jepa` and `jepa-server` never import this package (nor Ray)."""

from .deployment import JepaReplica, app, deployment

__all__ = ["JepaReplica", "app", "deployment"]
