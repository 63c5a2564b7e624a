"""Policies: tenants and namespaces, and the policies a topic follows (retention, message
TTL, backlog quotas, deduplication, redelivery backoff), each from the topic, else its
namespace, else the broker's setting."""
