"""Aether: an event-sourced service-mesh control plane for Envoy, on trio."""
