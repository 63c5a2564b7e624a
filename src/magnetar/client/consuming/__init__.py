"""Consuming: the application's :class:`~.consumer.Consumer` (and :class:`~.reader.Reader`)
over one :class:`~.topic_consumer.TopicConsumer` per topic or partition, and the receiver
queue they feed (:mod:`.receiver_queue`, holding :mod:`.entries`).

A topic consumer is made of parts over :mod:`.topic_state`: attaching and receiving
(:mod:`.topic_consumer`), acks (:mod:`.acking`, with the trackers of :mod:`.acks`),
negative acks, the ack timeout, redelivery and dead letters (:mod:`.redelivery`, with
:mod:`.nack`, :mod:`.ack_timeout`, :mod:`.dead_letter`), PIP-371 replies
(:mod:`.replying`). Also here: retries (:mod:`.retry_topic`), PIP-96 payload processors
(:mod:`.payload_processor`, :mod:`.kafka_processor`, :mod:`.kafka_records`), settings
(:mod:`.config`) and consumer options from files (:mod:`.options`)."""
