"""What a parsed command must hold beyond protobuf's own checks: the body its type
names, and text that is UTF-8.

A BaseCommand carries its body in the field whose number is the command type
(SEND = 6 → ``send``). protobuf accepts a frame whose type names a body that is
absent (a flipped bit does that), and hands a proto2 ``string`` that is not UTF-8
over as ``bytes``; both would otherwise reach the handlers as default values or
as the wrong Python type.
"""

from __future__ import annotations

from functools import cache

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from magnetar.protocol.pb import BaseCommand

# Bodies that carry nothing: a PING or PONG without one is still a ping.
_OPTIONAL_BODIES = frozenset({BaseCommand.PING, BaseCommand.PONG})

# (string fields as (name, repeated)), (message fields that can hold strings, as
# (name, repeated, their plan))
_TextPlan = tuple[tuple[tuple[str, bool], ...], tuple[tuple[str, bool, "_TextPlan"], ...]]


def _body_fields() -> dict[int, str]:
    fields = BaseCommand.DESCRIPTOR.fields_by_number
    return {
        value.number: fields[value.number].name
        for value in BaseCommand.DESCRIPTOR.enum_types_by_name["Type"].values
        if value.number in fields
    }


BODY_FIELDS = _body_fields()


@cache
def _text_plan(descriptor: Descriptor) -> _TextPlan | None:
    """Where strings can sit in messages of this type; None where none can."""
    strings: list[tuple[str, bool]] = []
    nested: list[tuple[str, bool, _TextPlan]] = []
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            strings.append((field.name, field.is_repeated))
        elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type is not descriptor:
            plan = _text_plan(field.message_type)
            if plan is not None:
                nested.append((field.name, field.is_repeated, plan))
    if not strings and not nested:
        return None
    return tuple(strings), tuple(nested)


_TEXT_PLANS = {
    number: _text_plan(BaseCommand.DESCRIPTOR.fields_by_name[name].message_type)
    for number, name in BODY_FIELDS.items()
}


def _non_utf8_field(message: object, plan: _TextPlan) -> str | None:
    """The first field (as a dotted path) holding text that is not UTF-8."""
    strings, nested = plan
    for name, repeated in strings:
        value = getattr(message, name)
        if repeated:
            if any(type(item) is bytes for item in value):
                return name
        elif type(value) is bytes:
            return name
    for name, repeated, inner in nested:
        if repeated:
            items = getattr(message, name)
            if not items:
                continue
        elif message.HasField(name):  # type: ignore[attr-defined]
            items = (getattr(message, name),)
        else:
            continue
        for item in items:
            found = _non_utf8_field(item, inner)
            if found is not None:
                return f"{name}.{found}"
    return None


def command_problem(command: BaseCommand) -> str | None:
    """Why ``command`` (whose type is known) cannot be handled, or None if it can."""
    kind = command.type
    name = BODY_FIELDS[kind]
    if not command.HasField(name):
        if kind in _OPTIONAL_BODIES:
            return None
        return f"lacks its body ({name})"
    plan = _TEXT_PLANS[kind]
    if plan is not None:
        field = _non_utf8_field(getattr(command, name), plan)
        if field is not None:
            return f"has text that is not UTF-8 in {name}.{field}"
    return None


def command_body(command: BaseCommand) -> object:
    """The body the command's type names."""
    return getattr(command, BODY_FIELDS[command.type])
