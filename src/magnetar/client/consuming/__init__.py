"""Consuming: the application's :class:`~.consumer.Consumer` (and :class:`~.reader.Reader`)
over one :class:`~.topic_consumer.TopicConsumer` per topic or partition, the receiver
queue they feed, acks (:mod:`.acks`), negative acks (:mod:`.nack`), the ack timeout
(:mod:`.ack_timeout`), dead letters and retries (:mod:`.dead_letter`,
:mod:`.retry_topic`), PIP-96 payload processors (:mod:`.payload_processor`,
:mod:`.kafka_processor`, :mod:`.kafka_records`) and consumer options from files
(:mod:`.options`)."""
