"""Producing: the application's :class:`~.producer.Producer` routes each message
(:mod:`.routing`) to the :class:`~.partition_producer.PartitionProducer` of one
partition, which batches (:mod:`.batch_builder`), sends, resends after a reconnect
and matches receipts."""
