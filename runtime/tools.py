"""Tools: definition, exposure and the flow-wide registry.

Three concerns, kept apart as PicoFlow keeps them:

* **Definition** — a :class:`ToolSpec` (name, description, argument model). The
  :func:`tool` decorator defines one from a handler's pydantic argument model or from its
  type hints; ``define_tools()`` on flows and steps adds schema-only definitions.
* **Exposure** — which tools a step offers the model: its decorated handlers (unless
  ``expose=False``) plus the names from ``use_tools()``.
* **Registry** — one per flow, built at bootstrap; two *different* definitions of one name
  (description or argument schema differ) are a :class:`~runtime.errors.FlowDefinitionError`.
  The same definition reached through several steps (a shared base class, a shared spec
  object, the same ``define_tools()`` on two steps) is one tool.

Dispatch itself lives in :mod:`runtime.dispatch`.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .errors import FlowDefinitionError, ToolArgumentsError
from .llm import ToolSchema

if TYPE_CHECKING:
    from .step import Step

F = TypeVar("F", bound=Callable[..., Any])

_TOOL_ATTR = "__picoflow_tool__"


@dataclass(frozen=True, eq=False)
class ToolSpec:
    """A tool definition: a name, a description and an argument model."""

    name: str
    description: str
    args_model: type[BaseModel]

    def same_definition(self, other: ToolSpec) -> bool:
        """Whether two specs define the same tool (name, description, argument schema)."""
        return self is other or self.schema() == other.schema()

    def schema(self) -> ToolSchema:
        """The tool as offered to a model."""
        return ToolSchema(
            name=self.name, description=self.description,
            parameters=self.args_model.model_json_schema(),
        )

    def validate(self, args: dict[str, Any]) -> BaseModel:
        """Validate raw arguments from a tool call.

        Raises:
            ToolArgumentsError: with a message written for the model to read.
        """
        if "_raw" in args and "_raw" not in self.args_model.model_fields:
            # Adapters keep unparseable argument text under `_raw`: report it, whatever
            # the argument model's extra-field policy.
            raise ToolArgumentsError(
                f"Invalid arguments for tool '{self.name}': they are not a JSON object "
                f"({str(args['_raw'])[:200]!r}). Call the tool again with valid JSON arguments.",
                extra={"tool": self.name},
            )
        try:
            return self.args_model.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ToolArgumentsError(
                f"Invalid arguments for tool '{self.name}': {problems}. "
                "Call the tool again with corrected arguments.",
                extra={"tool": self.name, "errors": exc.errors(include_url=False)},
            ) from None


def define_tool(
    name: str, description: str, args: type[BaseModel] | None = None, **fields: Any
) -> ToolSpec:
    """Define a schema-only tool (for ``define_tools()``).

    Pass either a pydantic model as ``args`` or field definitions as keyword arguments
    (``hotel_name=(str, ...)``, as :func:`pydantic.create_model` takes them).
    """
    _check_name(name)
    model = args or create_model(
        _model_name(name), __config__=ConfigDict(extra="forbid"), **fields
    )
    return ToolSpec(name=name, description=description, args_model=model)


@dataclass(frozen=True)
class ToolHandler:
    """A step method bound to a tool: how to call it with validated arguments."""

    spec: ToolSpec
    function: Callable[..., Any]
    expose: bool = True
    pass_model: bool = field(default=False)
    """True: called as ``fn(self, args_model)``; False: ``fn(self, **fields)``."""

    async def call(self, step: Step, args: BaseModel) -> Any:
        """Call the handler on ``step`` (sync or async) with validated ``args``."""
        if self.pass_model:
            result = self.function(step, args)
        else:
            result = self.function(step, **{
                info.alias or name: getattr(args, name)
                for name, info in type(args).model_fields.items()
            })
        if inspect.isawaitable(result):
            result = await result
        return result


@overload
def tool(name: F, /) -> F: ...


@overload
def tool(
    name: str | ToolSpec | None = None,
    *,
    description: str | None = None,
    args: type[BaseModel] | None = None,
    expose: bool = True,
) -> Callable[[F], F]: ...


def tool(
    name: str | ToolSpec | Callable[..., Any] | None = None,
    *,
    description: str | None = None,
    args: type[BaseModel] | None = None,
    expose: bool = True,
) -> Any:
    """Decorate a step method as the handler of a tool, defining the tool on the way.

    The argument schema comes from, in order: ``args``; a single parameter annotated with a
    pydantic model (the handler then receives the validated model); or the parameters' type
    hints and defaults (the handler receives them as keyword arguments). The description
    defaults to the docstring's first paragraph. Pass an existing :class:`ToolSpec` instead
    of a name to handle a tool defined elsewhere (``@tool(TERMINATE_SESSION_TOOL)``).

    A handler returns a transition (``go``/``stay``/``direct``), a step class (``go`` to
    it), or None (no transition; the model gets "input validated"). ``@tool`` without
    arguments names the tool after the method.
    """

    def decorate(fn: F) -> F:
        spec, pass_model = _spec_for(fn, label, description, args)
        setattr(fn, _TOOL_ATTR, ToolHandler(spec, fn, expose=expose, pass_model=pass_model))
        return fn

    if callable(name) and not isinstance(name, ToolSpec):  # bare @tool
        label = None
        return decorate(name)
    label = name
    return decorate


def handlers_of(step_cls: type) -> Mapping[str, ToolHandler]:
    """Decorated handlers of a step class by tool name (read-only).

    The nearest class in the MRO wins; the order is base classes first, then definition
    order (the order tools are offered to the model). Collected once per class: every
    model call of every branch asks, and walking the MRO's attributes each time would be
    the largest single cost of a fan-out of model-calling branches. ``@tool`` marks methods
    as the class body runs, so a class's handlers are fixed by then.
    """
    found = _HANDLERS.get(step_cls)
    if found is None:
        found = _HANDLERS[step_cls] = MappingProxyType(_collect_handlers(step_cls))
    return found


_HANDLERS: weakref.WeakKeyDictionary[type, Mapping[str, ToolHandler]] = (
    weakref.WeakKeyDictionary())


def _collect_handlers(step_cls: type) -> dict[str, ToolHandler]:
    nearest: dict[str, ToolHandler] = {}
    order: list[str] = []
    for klass in step_cls.__mro__:
        for attr in vars(klass).values():
            handler = getattr(attr, _TOOL_ATTR, None)
            if isinstance(handler, ToolHandler):
                nearest.setdefault(handler.spec.name, handler)
    for klass in reversed(step_cls.__mro__):
        for attr in vars(klass).values():
            handler = getattr(attr, _TOOL_ATTR, None)
            if isinstance(handler, ToolHandler) and handler.spec.name not in order:
                order.append(handler.spec.name)
    return {name: nearest[name] for name in order}


class ToolRegistry:
    """The flow-wide tool registry: unique names, built once per flow instance."""

    def __init__(self, flow_id: str) -> None:
        self.flow_id = flow_id
        self._specs: dict[str, ToolSpec] = {}

    def add(self, specs: Iterable[ToolSpec]) -> None:
        """Register definitions; the same spec twice is fine, a different one is not."""
        for spec in specs:
            if not isinstance(spec, ToolSpec):
                raise FlowDefinitionError(
                    f"define_tools() must return ToolSpec objects, got {type(spec).__name__}."
                )
            known = self._specs.get(spec.name)
            if known is not None and not known.same_definition(spec):
                raise FlowDefinitionError(
                    f"Duplicate tool '{spec.name}' registered in flow '{self.flow_id}'."
                )
            self._specs[spec.name] = spec

    def require(self, name: str) -> ToolSpec:
        """The spec named ``name``; unknown names are a definition error."""
        try:
            return self._specs[name]
        except KeyError:
            raise FlowDefinitionError(
                f"Tool '{name}' is not defined in flow '{self.flow_id}'."
            ) from None

    def names(self) -> list[str]:
        """Registered tool names in registration order."""
        return list(self._specs)


def _spec_for(
    fn: Callable[..., Any],
    name: str | ToolSpec | None,
    description: str | None,
    args: type[BaseModel] | None,
) -> tuple[ToolSpec, bool]:
    params = list(inspect.signature(fn).parameters.values())[1:]  # drop self
    hints = get_type_hints(fn)
    single = (
        len(params) == 1
        and inspect.isclass(hints.get(params[0].name))
        and issubclass(hints[params[0].name], BaseModel)
    )
    if isinstance(name, ToolSpec):
        return name, single or args is not None or takes_model(params, name.args_model)
    tool_name = name or fn.__name__
    _check_name(tool_name)
    desc = description or _doc_summary(fn) or tool_name
    if args is not None:
        return ToolSpec(tool_name, desc, args), True
    if single:
        return ToolSpec(tool_name, desc, hints[params[0].name]), True
    fields: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise FlowDefinitionError(f"Tool handler '{tool_name}' cannot take *args/**kwargs.")
        if p.name not in hints:
            raise FlowDefinitionError(
                f"Tool handler '{tool_name}' needs a type hint on parameter '{p.name}'."
            )
        default = ... if p.default is inspect.Parameter.empty else p.default
        if hasattr(BaseModel, p.name):  # e.g. `json`: keep the wire name as an alias
            fields[f"{p.name}_"] = (hints[p.name], Field(default, alias=p.name))
        else:
            fields[p.name] = (hints[p.name], default)
    model = create_model(
        _model_name(tool_name), __config__=ConfigDict(extra="forbid"), **fields
    )
    return ToolSpec(tool_name, desc, model), False


def takes_model(params: list[inspect.Parameter], model: type[BaseModel]) -> bool:
    """Whether a handler of an existing spec takes the argument model as one parameter.

    It does unless its parameters spell out the model's fields.
    """
    return not (params and all(p.name in model.model_fields for p in params))


def _check_name(name: str) -> None:
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise FlowDefinitionError(
            f"Tool name {name!r} must be non-empty letters, digits, '_' or '-'."
        )


def _model_name(tool_name: str) -> str:
    return "".join(part.capitalize() for part in tool_name.replace("-", "_").split("_")) + "Args"


def _doc_summary(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()
