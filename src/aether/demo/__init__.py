"""`aether demo`: the whole mesh on one machine (see `aether.demo.mesh` for what runs, `scenario` for the steps)."""
