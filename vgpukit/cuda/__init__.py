"""The CUDA interception library's state on the host: per-tenant configuration and shared usage."""
