"""LOOKUP, PARTITIONED_METADATA and GET_TOPICS_OF_NAMESPACE: where a topic lives."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.auth.checks import list_topics_refusal, lookup_refusal
from magnetar.broker.policies.namespaces import NamespaceNotFound
from magnetar.broker.session import outgoing
from magnetar.broker.session.listeners import ListenerNotFound, is_loopback, select
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.session.context import Session
    from magnetar.protocol.frames import Frame


def handle_lookup(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    lookup = command.lookupTopic
    response = pb.CommandLookupTopicResponse(request_id=lookup.request_id)
    try:
        name = TopicName.parse(lookup.topic)
        # A missing tenant or namespace is TopicNotFound before any authorization
        # check, as Pulsar answers it (its provider looks the tenant up first).
        cnx.service.namespaces.check(name.namespace_name)
        refused = lookup_refusal(cnx, lookup.topic, "Lookup")
        if refused is not None:
            response.response = pb.CommandLookupTopicResponse.Failed
            response.error = pb.AuthorizationError
            response.message = refused
            cnx.write_command(outgoing.lookup_response(response))
            return
        listener = select(cnx.config, lookup.advertised_listener_name)
    except InvalidTopicName as exc:
        response.response = pb.CommandLookupTopicResponse.Failed
        response.error = pb.InvalidTopicName
        response.message = str(exc)
    except NamespaceNotFound as exc:  # as Pulsar answers a namespace that does not exist
        response.response = pb.CommandLookupTopicResponse.Failed
        response.error = pb.TopicNotFound
        response.message = str(exc)
    except ListenerNotFound as exc:
        # Pulsar answers ServiceNotReady, which the official clients retry until their
        # operation timeout (and the C++ client closes its connection for): a listener
        # name the broker lacks is a mistake no retry mends, so say so at once.
        response.response = pb.CommandLookupTopicResponse.Failed
        response.error = pb.NotAllowedError
        response.message = str(exc)
    else:
        response.response = pb.CommandLookupTopicResponse.Connect
        if listener.broker_url:
            response.brokerServiceUrl = listener.broker_url
        if listener.broker_url_tls:
            response.brokerServiceUrlTls = listener.broker_url_tls
        response.authoritative = True
        # As a Pulsar standalone: an address on the loopback is reached through the
        # service URL the client used, so that a broker in a container answering
        # 127.0.0.1 serves clients outside it (Docker, compose) without any setting.
        response.proxy_through_service_url = is_loopback(
            listener.broker_url or listener.broker_url_tls
        )
    cnx.write_command(outgoing.lookup_response(response))


def handle_partitioned_metadata(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.partitionMetadata
    response = pb.CommandPartitionedTopicMetadataResponse(request_id=request.request_id)
    try:
        name = TopicName.parse(request.topic)
        cnx.service.namespaces.check(name.namespace_name)  # before authorization, as LOOKUP
        refused = lookup_refusal(cnx, request.topic, "Get Partition Metadata")
        if refused is not None:
            response.response = pb.CommandPartitionedTopicMetadataResponse.Failed
            response.error = pb.AuthorizationError
            response.message = refused
            cnx.write_command(outgoing.partitioned_metadata_response(response))
            return
        partitions = cnx.service.partitions_for_lookup(name, request.metadata_auto_creation_enabled)
    except InvalidTopicName as exc:
        response.response = pb.CommandPartitionedTopicMetadataResponse.Failed
        response.error = pb.InvalidTopicName
        response.message = str(exc)
    except NamespaceNotFound as exc:
        response.response = pb.CommandPartitionedTopicMetadataResponse.Failed
        response.error = pb.TopicNotFound
        response.message = str(exc)
    else:
        response.partitions = partitions
        response.response = pb.CommandPartitionedTopicMetadataResponse.Success
    cnx.write_command(outgoing.partitioned_metadata_response(response))


def handle_get_topics(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.getTopicsOfNamespace
    refused = list_topics_refusal(cnx, request.namespace)
    if refused is not None:
        cnx.write_error(request.request_id, pb.AuthorizationError, refused)
        return
    topics = cnx.service.topics_of_namespace(request.namespace, request.mode)
    cnx.write_command(outgoing.topics_of_namespace(request.request_id, topics))
