"""The generated protobuf module under one short, stable name: ``pb``."""

from magnetar.protocol.generated import magnetar_pulsar_pb2 as pb

BaseCommand = pb.BaseCommand
CommandType = pb.BaseCommand.Type
ServerError = pb.ServerError

__all__ = ["BaseCommand", "CommandType", "ServerError", "pb"]
