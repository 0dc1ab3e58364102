"""Reading one agent file: a YAML mapping of at most 256 KiB of UTF-8, read safely, in which
a key given twice in one mapping is an error rather than silently overridden. What its fields
mean is :mod:`orchestrator.core.agents`' business."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import AgentDefinitionError

__all__ = ["MAX_FILE_BYTES", "read_document"]

MAX_FILE_BYTES = 256 * 1024


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice in one mapping, where the last would win."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if key_node.tag != "tag:yaml.org,2002:str":
                continue
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key_node.value!r}",
                    key_node.start_mark,
                )
            seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


def read_document(path: Path) -> dict[object, object]:
    """The YAML document of the agent file at ``path``, which must be a mapping.

    Raises:
        AgentDefinitionError: naming the file, when it cannot be read, is too large, is not
            UTF-8 or YAML, gives a key twice in one mapping, or is not a mapping.
    """
    where = str(path)
    try:
        raw = path.read_bytes()
        if len(raw) > MAX_FILE_BYTES:
            raise AgentDefinitionError(where, "", f"larger than {MAX_FILE_BYTES} bytes")
        document = yaml.load(raw.decode("utf-8"), Loader=_StrictLoader)
    except OSError as exc:
        raise AgentDefinitionError(where, "", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise AgentDefinitionError(where, "", f"not UTF-8 text: {exc.reason}") from None
    except yaml.YAMLError as exc:
        raise AgentDefinitionError(where, "", _yaml_problem(exc)) from None
    except RecursionError:
        raise AgentDefinitionError(where, "", "invalid YAML: nested too deeply") from None
    if not isinstance(document, dict):
        kind = "empty" if document is None else type(document).__name__
        raise AgentDefinitionError(where, "", f"expected a mapping of fields, got {kind}")
    return document


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return f"invalid YAML: {problem}"
