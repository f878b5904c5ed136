#!/usr/bin/python3
"""Validates AWS request documents (an ECS task definition, an Application Auto
Scaling policy, as `aws ... --cli-input-json` takes them) against the service's own
model, as botocore (Debian's python3-botocore) checks a call before sending it: an
unknown field, a wrong type or a missing required one is refused.
Usage: aws_input_check.py [--mutate] SERVICE OPERATION FILE
  --mutate: each field name misspelled in turn (a letter added; the first letter's case
            changed); exit 1 unless every one is refused. Keys of maps (a shape that
            takes any key) are listed, not mutated."""
import copy
import json
import sys

import botocore.session
from botocore.exceptions import ParamValidationError
from botocore.validate import validate_parameters

args = sys.argv[1:]
mutate = args[0] == "--mutate"
if mutate:
    args = args[1:]
service, operation, path = args
model = botocore.session.get_session().get_service_model(service)
shape = model.operation_model(operation).input_shape
with open(path) as f:
    document = json.load(f)


def problems(params):
    try:
        validate_parameters(params, shape)
        return ""
    except ParamValidationError as e:
        return str(e)


found = problems(document)
if found:
    print(f"{path}: {found}")
    sys.exit(1)
if not mutate:
    print(f"{path}: valid input of {service} {operation}")
    sys.exit(0)


def keys(value, shape, at):
    """(path, in_map) of every key, following the model's shapes."""
    if isinstance(value, dict):
        for key, item in value.items():
            if shape is not None and shape.type_name == "map":
                yield at + [key], True
                yield from keys(item, shape.value, at + [key])
            else:
                member = shape.members.get(key) if shape is not None else None
                yield at + [key], False
                yield from keys(item, member, at + [key])
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from keys(item, shape.member if shape is not None else None, at + [i])


def renamed(document, at, to):
    out = copy.deepcopy(document)
    parent = out
    for step in at[:-1]:
        parent = parent[step]
    parent[to] = parent.pop(at[-1])
    return out


refused, maps, failed = 0, [], False
for at, in_map in keys(document, shape, []):
    key = at[-1]
    if in_map:
        maps.append("/".join(map(str, at)))
        continue
    for to in (key + "x", key[0].swapcase() + key[1:]):
        if problems(renamed(document, at, to)):
            refused += 1
        else:
            print(f"{path}: /{'/'.join(map(str, at))} misspelled as {to} was accepted")
            failed = True
print(f"{refused} misspellings refused; {len(maps)} keys of maps: {', '.join(maps)}")
sys.exit(1 if failed else 0)
