"""Admin HTTP: a subset of Pulsar's admin REST API v2 and Prometheus ``/metrics``."""
