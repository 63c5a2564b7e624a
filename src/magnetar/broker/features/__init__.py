"""Broker features layered on topics: PIP-371 request-reply routing, PIP-68 producer
access modes, deduplication, compaction, schemas and their compatibility, PIP-96 raw
entries, and the operations behind the admin API's topic and subscription routes."""
