"""Every command the broker sends a client, built in one place (in the spirit of Pulsar's
PulsarCommandSender and Commands.newX): the handlers, the handshake, keepalive, failover
and dispatch ask for a command here and write it; none builds a BaseCommand by hand.

The hot commands (SEND_RECEIPT, MESSAGE, the plain ACK_RESPONSE) are encoded byte by byte
by ``magnetar.protocol.fastpath`` instead; these are the rest."""

from __future__ import annotations

from magnetar import __version__
from magnetar.protocol.pb import BaseCommand, pb

T = BaseCommand.Type
SERVER_VERSION = f"magnetar/{__version__}"


# ------------------------------------------------------------ connection


def connected(protocol_version: int, max_message_size: int) -> BaseCommand:
    return BaseCommand(
        type=T.CONNECTED,
        connected=pb.CommandConnected(
            server_version=SERVER_VERSION,
            protocol_version=protocol_version,
            max_message_size=max_message_size,
            feature_flags=pb.FeatureFlags(supports_request_reply=True),
        ),
    )


def auth_challenge(protocol_version: int, method: str, data: bytes) -> BaseCommand:
    return BaseCommand(
        type=T.AUTH_CHALLENGE,
        authChallenge=pb.CommandAuthChallenge(
            server_version=SERVER_VERSION,
            protocol_version=protocol_version,
            challenge=pb.AuthData(auth_method_name=method, auth_data=data),
        ),
    )


def ping() -> BaseCommand:
    return BaseCommand(type=T.PING, ping=pb.CommandPing())


def pong() -> BaseCommand:
    return BaseCommand(type=T.PONG, pong=pb.CommandPong())


def success(request_id: int) -> BaseCommand:
    return BaseCommand(type=T.SUCCESS, success=pb.CommandSuccess(request_id=request_id))


def error(request_id: int, code: int, message: str) -> BaseCommand:
    return BaseCommand(
        type=T.ERROR,
        error=pb.CommandError(request_id=request_id, error=code, message=message),  # type: ignore[arg-type]
    )


# ------------------------------------------------------------ lookups


def lookup_response(response: pb.CommandLookupTopicResponse) -> BaseCommand:
    return BaseCommand(type=T.LOOKUP_RESPONSE, lookupTopicResponse=response)


def partitioned_metadata_response(
    response: pb.CommandPartitionedTopicMetadataResponse,
) -> BaseCommand:
    return BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=response)


def topics_of_namespace(request_id: int, topics: list[str]) -> BaseCommand:
    return BaseCommand(
        type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        getTopicsOfNamespaceResponse=pb.CommandGetTopicsOfNamespaceResponse(
            request_id=request_id, topics=topics, filtered=False, changed=True
        ),
    )


def schema_response(response: pb.CommandGetSchemaResponse) -> BaseCommand:
    return BaseCommand(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=response)


def get_or_create_schema_response(
    response: pb.CommandGetOrCreateSchemaResponse,
) -> BaseCommand:
    return BaseCommand(
        type=T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=response
    )


# ------------------------------------------------------------ producers


def producer_success(response: pb.CommandProducerSuccess) -> BaseCommand:
    return BaseCommand(type=T.PRODUCER_SUCCESS, producer_success=response)


def close_producer(producer_id: int) -> BaseCommand:
    return BaseCommand(
        type=T.CLOSE_PRODUCER,
        close_producer=pb.CommandCloseProducer(producer_id=producer_id, request_id=0),
    )


def send_error(producer_id: int, sequence_id: int, code: int, message: str) -> BaseCommand:
    return BaseCommand(
        type=T.SEND_ERROR,
        send_error=pb.CommandSendError(
            producer_id=producer_id,
            sequence_id=sequence_id,
            error=code,  # type: ignore[arg-type]
            message=message,
        ),
    )


# ------------------------------------------------------------ consumers


def close_consumer(consumer_id: int) -> BaseCommand:
    return BaseCommand(
        type=T.CLOSE_CONSUMER,
        close_consumer=pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=0),
    )


def active_consumer_change(consumer_id: int, is_active: bool) -> BaseCommand:
    return BaseCommand(
        type=T.ACTIVE_CONSUMER_CHANGE,
        active_consumer_change=pb.CommandActiveConsumerChange(
            consumer_id=consumer_id, is_active=is_active
        ),
    )


def reached_end_of_topic(consumer_id: int) -> BaseCommand:
    return BaseCommand(
        type=T.REACHED_END_OF_TOPIC,
        reachedEndOfTopic=pb.CommandReachedEndOfTopic(consumer_id=consumer_id),
    )


def ack_response(response: pb.CommandAckResponse) -> BaseCommand:
    return BaseCommand(type=T.ACK_RESPONSE, ackResponse=response)


def last_message_id(
    request_id: int, last: pb.MessageIdData, mark_delete: pb.MessageIdData
) -> BaseCommand:
    return BaseCommand(
        type=T.GET_LAST_MESSAGE_ID_RESPONSE,
        getLastMessageIdResponse=pb.CommandGetLastMessageIdResponse(
            request_id=request_id,
            last_message_id=last,
            consumer_mark_delete_position=mark_delete,
        ),
    )


def consumer_stats(response: pb.CommandConsumerStatsResponse) -> BaseCommand:
    return BaseCommand(type=T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=response)
