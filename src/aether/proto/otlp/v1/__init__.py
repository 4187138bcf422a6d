"""Generated protobuf modules: do not edit (nox -s proto)."""
