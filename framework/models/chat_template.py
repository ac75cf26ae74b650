"""Chat templates rendered without transformers, in the environment transformers 5 renders them in.

transformers (utils/chat_template_utils.py) renders with an ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True) with jinja's loopcontrols, its own `tojson` filter (no HTML escaping) and the globals
`raise_exception`, `strftime_now`, `dict` and `namespace` (no underscore names), and passes the messages, `tools`
and `documents` (None here), `add_generation_prompt` and the tokenizer's named special tokens. Its `{% generation %}`
tag (assistant masks) is not reproduced: `uses_unsupported_tags` sends such a template back to transformers.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any, Mapping, Sequence

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

GENERATION_TAG = re.compile(r"\{\%-?\s*generation\s*-?\%\}")  # transformers' pattern for its assistant-mask tag


def uses_unsupported_tags(template: str) -> bool:
    return GENERATION_TAG.search(template) is not None


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """`dict` in a template: calls and fromkeys only (no attribute access to the type)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """`namespace` in a template, refusing underscore-prefixed attributes as transformers does."""

    def __init__(*args: Any, **kwargs: Any):
        self, args = args[0], args[1:]  # jinja's signature trick: `namespace(self=...)` stays an attribute
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute.")


@lru_cache
def compile_template(template: str) -> jinja2.Template:
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[jinja2.ext.loopcontrols])
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    environment.globals["dict"] = _TemplateDict()
    environment.globals["namespace"] = _TemplateNamespace
    return environment.from_string(template)


def render(template: str, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool,
           variables: Mapping[str, str]) -> str:
    """One conversation of plain string messages (role, content), as apply_chat_template(tokenize=False) renders it."""
    for message in messages:
        if set(message) - {"role", "content"} or not all(isinstance(v, str) for v in message.values()):
            raise TypeError(f"chat message {dict(message)!r}: only string 'role' and 'content' are supported here")
    return compile_template(template).render(messages=[dict(m) for m in messages], tools=None, documents=None,
                                             add_generation_prompt=add_generation_prompt, **variables)
