"""LOOKUP, PARTITIONED_METADATA and GET_TOPICS_OF_NAMESPACE: where a topic lives."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.auth.checks import lookup_refusal
from magnetar.broker.topic_name import InvalidTopicName, TopicName
from magnetar.protocol.pb import BaseCommand, pb

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerCnx
    from magnetar.protocol.frames import Frame

T = BaseCommand.Type


def handle_lookup(cnx: ServerCnx, command: BaseCommand, frame: Frame) -> None:
    lookup = command.lookupTopic
    response = pb.CommandLookupTopicResponse(request_id=lookup.request_id)
    refused = lookup_refusal(cnx, lookup.topic, "Lookup")
    if refused is not None:
        response.response = pb.CommandLookupTopicResponse.Failed
        response.error = pb.AuthorizationError
        response.message = refused
        cnx.write_command(BaseCommand(type=T.LOOKUP_RESPONSE, lookupTopicResponse=response))
        return
    try:
        TopicName.parse(lookup.topic)
    except InvalidTopicName as exc:
        response.response = pb.CommandLookupTopicResponse.Failed
        response.error = pb.InvalidTopicName
        response.message = str(exc)
    else:
        response.response = pb.CommandLookupTopicResponse.Connect
        response.brokerServiceUrl = cnx.service.config.service_url
        response.authoritative = True
        tls_url = cnx.service.config.service_url_tls
        if tls_url and not response.brokerServiceUrlTls:
            response.brokerServiceUrlTls = tls_url
    cnx.write_command(BaseCommand(type=T.LOOKUP_RESPONSE, lookupTopicResponse=response))


def handle_partitioned_metadata(cnx: ServerCnx, command: BaseCommand, frame: Frame) -> None:
    request = command.partitionMetadata
    response = pb.CommandPartitionedTopicMetadataResponse(request_id=request.request_id)
    refused = lookup_refusal(cnx, request.topic, "Get Partition Metadata")
    if refused is not None:
        response.response = pb.CommandPartitionedTopicMetadataResponse.Failed
        response.error = pb.AuthorizationError
        response.message = refused
        cnx.write_command(
            BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=response)
        )
        return
    try:
        name = TopicName.parse(request.topic)
    except InvalidTopicName as exc:
        response.response = pb.CommandPartitionedTopicMetadataResponse.Failed
        response.error = pb.InvalidTopicName
        response.message = str(exc)
    else:
        response.partitions = cnx.service.partitions_for_lookup(
            name, request.metadata_auto_creation_enabled
        )
        response.response = pb.CommandPartitionedTopicMetadataResponse.Success
    cnx.write_command(
        BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=response)
    )


def handle_get_topics(cnx: ServerCnx, command: BaseCommand, frame: Frame) -> None:
    request = command.getTopicsOfNamespace
    topics = cnx.service.topics_of_namespace(request.namespace, request.mode)
    cnx.write_command(
        BaseCommand(
            type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
            getTopicsOfNamespaceResponse=pb.CommandGetTopicsOfNamespaceResponse(
                request_id=request.request_id, topics=topics, filtered=False, changed=True
            ),
        )
    )
