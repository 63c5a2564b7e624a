"""What the broker tells about itself: Prometheus metrics, message rates, event-loop lag,
garbage-collector pauses (and freezing what survived a long one), and the stall tracer."""
