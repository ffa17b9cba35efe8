"""Protobuf messages to plain Python values (dicts, lists, ints, strings).

Unlike google.protobuf.json_format this keeps 64-bit integers as ints, shows
every field (defaults included, so status()["session_count"] always exists)
and names enum values in lower case without their type's prefix
(SESSION_RUNNING -> "running")."""
from google.protobuf.descriptor import FieldDescriptor


def _enum_prefix(enum_type):
    """The longest prefix, ending in '_', that all value names share."""
    names = [v.name for v in enum_type.values]
    prefix = names[0]
    for n in names[1:]:
        while not n.startswith(prefix):
            prefix = prefix[:-1]
    return prefix[:prefix.rfind("_") + 1]


def enum_name(enum_type, number):
    value = enum_type.values_by_number.get(number)
    if value is None:
        return number
    return value.name[len(_enum_prefix(enum_type)):].lower()


def _scalar(field, value):
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message_to_dict(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return enum_name(field.enum_type, value)
    return value


def message_to_dict(message):
    out = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _scalar(value_field, v) for k, v in value.items()}
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            out[field.name] = [_scalar(field, v) for v in value]
        else:
            out[field.name] = _scalar(field, value)
    return out
