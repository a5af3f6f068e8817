"""Validation of job records against the job schema this package ships (job.schema.json, the
copy of the repository's schema/job.schema.json that a test keeps identical).

Why a small validator and not the `jsonschema` package: the shipped schema uses a few dozen
keywords (type, properties, required, additionalProperties, propertyNames, const, oneOf, anyOf,
items, minItems, maxItems, minLength, maxLength, pattern, minimum, maximum, format), which this module checks in about a
hundred lines, while `jsonschema` would add four packages, one of them compiled (rpds-py), to
every Spark executor and Ray worker that sends records. A keyword the validator does not know
raises at import, so a schema change it cannot follow fails the package's tests, not a job.
"""

import json
import re
from importlib import resources
from urllib.parse import urlsplit

#: The job schema (JSON Schema, as a dict) that `validate` checks and the worker enforces.
SCHEMA = json.loads(resources.files(__package__).joinpath("job.schema.json").read_text("utf-8"))

_CHECKED = {
    "type", "properties", "required", "additionalProperties", "propertyNames", "const", "oneOf",
    "anyOf", "items", "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum",
    "maximum", "format",
}
_ANNOTATIONS = {"$schema", "title", "description", "contentEncoding"}
_TYPES = {
    "object": dict, "string": str, "boolean": bool, "array": list,
    "number": (int, float), "integer": int,
}


def _keywords(schema):
    for key, value in schema.items():
        yield key
        if key == "properties":
            for sub in value.values():
                yield from _keywords(sub)
        elif key in ("additionalProperties", "propertyNames", "items") and isinstance(value, dict):
            yield from _keywords(value)
        elif key in ("oneOf", "anyOf"):
            for sub in value:
                yield from _keywords(sub)


_UNKNOWN = set(_keywords(SCHEMA)) - _CHECKED - _ANNOTATIONS
if _UNKNOWN:
    raise ImportError(f"job.schema.json uses keywords this validator does not check: {sorted(_UNKNOWN)}")


def _pattern(pattern):
    # JSON Schema patterns are ECMA-262; those in the schema read the same in Python except `$`,
    # which in Python also matches before a final newline: `\Z` does not.
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))


def _is_type(value, name):
    if name in ("number", "integer") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES[name])


def _format_error(value, fmt):
    if fmt == "uri":
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return "must be an absolute http(s) URL"
    return None  # base64: the schema's pattern checks it


def _errors(value, schema, path):
    """Reasons `value` breaks `schema`, each "path: what is wrong" in the words of the schema."""
    where = path or "record"
    expected = schema.get("type")
    if expected and not _is_type(value, expected):
        return [f"{where}: must be {'an' if expected[0] in 'aeiou' else 'a'} {expected}"]
    if "const" in schema and value != schema["const"]:
        return [f"{where}: must be {json.dumps(schema['const'])}"]
    if "oneOf" in schema:
        return _one_of(value, schema["oneOf"], where, path)
    if "anyOf" in schema:
        results = [_errors(value, option, path) for option in schema["anyOf"]]
        if any(not r for r in results):
            return []
        # The reasons of the form of the value's own type (a string status: its pattern), if any.
        typed = [r for o, r in zip(schema["anyOf"], results) if "type" in o and _is_type(value, o["type"])]
        return (typed or results)[0]
    out = []
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            out.append(f"{where}: must not be empty" if schema["minLength"] == 1
                       else f"{where}: must be at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(f"{where}: must be at most {schema['maxLength']} characters")
        if "pattern" in schema and not _pattern(schema["pattern"]).search(value):
            out.append(f"{where}: must match {schema['pattern']}")
        if "format" in schema:
            reason = _format_error(value, schema["format"])
            if reason:
                out.append(f"{where}: {reason}")
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{where}: must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{where}: must be <= {schema['maximum']}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            out.append(f"{where}: must have at least {schema['minItems']} item{'s' if schema['minItems'] > 1 else ''}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{where}: must have at most {schema['maxItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                out.extend(_errors(item, schema["items"], f"{where}.{i}"))
    if isinstance(value, dict):
        out.extend(_object_errors(value, schema, path))
    return out


def _object_errors(value, schema, path):
    out = []
    prefix = f"{path}." if path else ""
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            out.append(f"{prefix}{name}: is required")
    extra = schema.get("additionalProperties", True)
    names = schema.get("propertyNames")
    for name, item in value.items():
        if names is not None:
            out.extend(_errors(name, names, f"{prefix}{name} (name)"))
        if name in properties:
            out.extend(_errors(item, properties[name], f"{prefix}{name}"))
        elif extra is False:
            out.append(f"{prefix}{name}: is not allowed")
        elif isinstance(extra, dict):
            out.extend(_errors(item, extra, f"{prefix}{name}"))
    return out


def _one_of(value, options, where, path):
    results = [_errors(value, option, path) for option in options]
    matches = [r for r in results if not r]
    if len(matches) == 1:
        return []
    if len(matches) > 1:
        return [f"{where}: matches more than one of its forms"]
    # The form the record meant is the one whose `type` const it names, when it names one.
    for option, reasons in zip(options, results):
        const = option.get("properties", {}).get("type", {}).get("const")
        if isinstance(value, dict) and const is not None and value.get("type") == const:
            return reasons
    kinds = [o.get("properties", {}).get("type", {}).get("const") for o in options]
    kinds = [k for k in kinds if k]
    if isinstance(value, dict) and kinds:
        return [f"{where}.type: must be one of {', '.join(kinds)}"]
    return [f"{where}: matches none of its forms"]


def validate(record):
    """The reasons `record` (a dict) breaks the job schema; an empty list when it is valid.

    The worker checks a few rules the schema cannot state (a sitekey is needed unless the
    captcha names one or is an image; an image needs token_field) and refuses those records
    with a `rejected` outcome; this function checks the schema only.
    """
    return _errors(record, SCHEMA, "")
