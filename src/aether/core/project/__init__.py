"""Projections from state to Envoy resources (the node-projection issue builds them)."""
