"""The pure core: events in, state and Envoy resources out. No I/O, no clock, no randomness, no logging."""
