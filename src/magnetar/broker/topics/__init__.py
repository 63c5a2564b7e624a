"""Topics and what hangs off them (Pulsar's PersistentTopic and its parts): producers,
subscriptions, consumers, dispatchers and the dispatch round, failover, delayed delivery,
batch-index acks, the PIP-96 shield, readers' cursors, and the topics on disk."""
