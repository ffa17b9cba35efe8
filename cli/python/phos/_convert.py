"""Protobuf messages to plain Python values (dicts, lists, ints, strings).

The conversion is protobuf's own google.protobuf.json_format.MessageToDict
(field names as in the .proto, fields at their default values included),
then a pass that turns its JSON-compatible values back into the Python
values the SDK has always returned:

- 64-bit integers are ints (MessageToDict writes them as strings, JSON's
  numbers being doubles);
- every field is present: also unset message fields (a dict of their
  defaults), unset `optional` scalars and oneof members (their default), so
  status()["session_count"] always exists;
- enum values are named in lower case without their type's common prefix
  (SESSION_RUNNING -> "running"); a number the .proto does not name stays
  an int;
- bytes are bytes (not base64), floats are the message's (NaN and
  infinities too, not "NaN"/"Infinity"), map keys have their key type (not
  str);
- keys come in the order of the fields in the .proto.

Only the stable parts of the descriptor API are used (field names, types,
message and enum types, default values; a field's repeatedness is read from
the value MessageToDict produced), so the same code works with every
protobuf runtime from Debian 12's 4.21 to PyPI's 7.x (docs/python-sdk.md).
"""
import base64
import inspect

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

# MessageToDict's option to print fields at their default values was
# renamed in protobuf 5.26 (26.x) and the old name removed later.
_PRINT_DEFAULTS = ("always_print_fields_with_no_presence"
                   if "always_print_fields_with_no_presence" in inspect.signature(json_format.MessageToDict).parameters
                   else "including_default_value_fields")

_INT64_CPP_TYPES = (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)
_FLOAT_CPP_TYPES = (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE)
_INT_CPP_TYPES = _INT64_CPP_TYPES + (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_UINT32)


def _enum_prefix(enum_type):
    """The longest prefix, ending in '_', that all value names share."""
    names = [v.name for v in enum_type.values]
    prefix = names[0]
    for n in names[1:]:
        while not n.startswith(prefix):
            prefix = prefix[:-1]
    return prefix[:prefix.rfind("_") + 1]


def enum_name(enum_type, value):
    """The value's name in lower case without the enum's prefix (SESSION_RUNNING,
    by name or number: "running"); a number the enum does not name stays an int."""
    if isinstance(value, str):
        known = enum_type.values_by_name.get(value)
    else:
        known = enum_type.values_by_number.get(value)
    if known is None:
        return value
    return known.name[len(_enum_prefix(enum_type)):].lower()


def _is_map(field):
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _value(field, v, current):
    """One JSON-compatible value `v` of `field` (an element, for a repeated
    field) as a Python value; `current` is the value in the message (for a
    message field, the message)."""
    cpp_type = field.cpp_type
    if cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
        # Well-known types (Timestamp, Duration, ...) print as strings; phos.proto uses none.
        return _message(current, v) if isinstance(v, dict) else v
    if cpp_type == FieldDescriptor.CPPTYPE_ENUM:
        return enum_name(field.enum_type, v)
    if cpp_type in _INT64_CPP_TYPES:
        return int(v)
    if cpp_type in _FLOAT_CPP_TYPES:
        # The message's own value where there is one: json_format rounds a
        # float (32-bit) to its shortest decimal form. Else "NaN",
        # "Infinity", "-Infinity" and numbers alike.
        return current if isinstance(current, float) else float(v)
    if field.type == FieldDescriptor.TYPE_BYTES and isinstance(v, str):
        return base64.b64decode(v)
    return v


def _map_key(key_field, k):
    if key_field.cpp_type == FieldDescriptor.CPPTYPE_BOOL:
        return k == "true"
    if key_field.cpp_type in _INT_CPP_TYPES:
        return int(k)
    return k


def _message(message, d):
    """MessageToDict's dict `d` of `message`, its values made Python values."""
    out = {}
    for field in message.DESCRIPTOR.fields:
        current = getattr(message, field.name)
        if field.name not in d:
            # Unset, and it has presence (a message field, an `optional`
            # scalar, a oneof member): its default, as the message reads.
            if field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
                out[field.name] = message_to_dict(current)
            else:
                out[field.name] = _value(field, current, current)
            continue
        value = d[field.name]
        if isinstance(value, dict) and _is_map(field):
            key_field = field.message_type.fields_by_name["key"]
            value_field = field.message_type.fields_by_name["value"]
            entries = {}
            for k, v in value.items():
                key = _map_key(key_field, k)
                entries[key] = _value(value_field, v, current[key] if value_field.message_type else None)
            out[field.name] = entries
        elif isinstance(value, list):
            out[field.name] = [_value(field, v, c) for v, c in zip(value, current)]
        else:
            out[field.name] = _value(field, value, current)
    return out


def message_to_dict(message):
    """The message as a dict of plain Python values (see the module's doc)."""
    d = json_format.MessageToDict(message, preserving_proto_field_name=True, **{_PRINT_DEFAULTS: True})
    return _message(message, d)
