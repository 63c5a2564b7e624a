"""Producing: the application's :class:`~.producer.Producer` routes each message
(:mod:`.routing`) to the :class:`~.partition_producer.PartitionProducer` of one
partition, which numbers, batches (:mod:`.batch_builder`), sends and resends after a
reconnect what :mod:`.outgoing` describes, and matches receipts (:mod:`.receipts`).
Settings: :mod:`.config`."""
