"""The public surface of ``Flow`` and ``Step`` only grows on purpose.

Users subclass these classes, so every public name on them is one a subclass can override
by accident. The lists below are what the PicoFlow docs describe plus what our docs
teach, and the "What Flow and Step offer" section of docs/reference/flow-and-step.md lists
exactly them; engine internals live on :class:`runtime.turn.Turn`. Adding a name means
adding it here and in that page, in the same change.

The runtime also never reaches into another module's private attributes: an
``obj._name`` access is only allowed on ``self``/``cls`` or for a name the same module
assigns on its own instances.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from runtime import Flow, FlowEngine, LogicStep, ModelSelection, Step

ROOT = Path(__file__).resolve().parents[2]

FLOW_HOOKS = {
    "config_model", "define_steps", "initial_step", "define_tools", "init",
    "on_restore_session_doc", "call_timeout", "config_parallel_execution",
    "should_retry_model_error", "on_model_error", "on_model_blocked",
    "config_schema", "example_messages", "needs_message", "model_providers", "spawn_steps",
}
FLOW_HELPERS = {
    "id", "max_model_calls_per_turn", "retry_delay",
    "get_config", "get_context", "add_context", "steps", "require_step", "require_tool",
    "current_step_name", "require_current_step", "get_executing_step",
    "require_executing_step", "goto", "read_step_state", "get_step_state", "save_step_state",
    "save_transient_step_state", "get_memory", "model_selection", "session_id", "run_status",
    "sequence", "tokens", "get_session_doc", "mark_completed", "warn", "log",
    "require_engine", "save_session", "concurrent_steps",
}
STEP_HOOKS = {
    "get_prompt", "define_tools", "use_tools", "output_schema", "is_logic", "is_end",
    "check_response", "call_timeout", "on_start", "on_restore", "on_enter", "on_exit",
    "on_crossing", "on_response", "should_retry_model_error", "on_model_error",
    "on_model_blocked", "parallel_state_channels", "parallel_params_schema", "run",
    "terminate_session",
}
STEP_HELPERS = {
    "id", "name", "flow", "content_type", "use_memory", "use_model", "get_memory_space",
    "get_model_selection", "model_override", "get_state", "save_state", "remove_state",
    "save_transient_state", "get_transient_state", "contribute_state",
    "parallel_invocation", "run_steps", "get_context", "get_memory", "get_last_message",
    "erase_memory", "run_step", "session_completed",
}


def public_names(obj: object) -> set[str]:
    names = {n for n in dir(obj) if not n.startswith("_")}
    names |= {n for n in vars(obj) if not n.startswith("_")} if hasattr(obj, "__dict__") else set()
    return names


class _Probe(Flow):
    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[type[Step]]:
        return [_ProbeStep]


class _ProbeStep(LogicStep):
    pass


def test_flow_offers_exactly_the_documented_names() -> None:
    flow = _Probe()
    assert public_names(Flow) == FLOW_HOOKS | FLOW_HELPERS
    assert public_names(flow) - {"id"} == (FLOW_HOOKS | FLOW_HELPERS) - {"id"}


def test_step_offers_exactly_the_documented_names() -> None:
    step = _ProbeStep(_Probe())
    assert public_names(Step) | {"flow"} == STEP_HOOKS | STEP_HELPERS
    assert public_names(step) == STEP_HOOKS | STEP_HELPERS | {"run_logic"}


def test_engine_internals_are_not_on_flow() -> None:
    internals = {"apply_publication", "run_branch", "fork_view", "snapshot", "live_view",
                 "next_barrier_ordinal", "write_step_fields", "emit", "sync_document",
                 "observed", "bus", "doc", "engine", "collect_steps", "checkpoint_session",
                 "tally_tokens", "count_model_call", "model_call_slot", "channels_of"}
    assert internals.isdisjoint(public_names(_Probe()))


@pytest.mark.anyio
async def test_a_subclass_attribute_named_like_an_engine_internal_changes_nothing() -> None:
    # Before the split these names were the engine's own methods on Flow: a user's
    # attribute of the same name broke every turn.
    class Chatty(_Probe):
        bus = "the 42 to the station"
        doc = "Dr. Watson"
        emit = observed = engine = None

        def define_steps(self) -> list[type[Step]]:
            return [Echo]

    class Echo(LogicStep):
        async def run_logic(self) -> str:
            return f"{self.flow.bus}, {self.flow.doc}"  # type: ignore[attr-defined]

    reply = await FlowEngine(flows=[Chatty]).run("Chatty", "hi")
    assert (reply.success, reply.message) == (True, "the 42 to the station, Dr. Watson")


def _docs_section(title: str) -> str:
    text = (ROOT / "docs" / "reference" / "flow-and-step.md").read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n#", start + 4)
    return text[start:end]


def test_the_docs_list_the_public_surface() -> None:
    section = _docs_section("What Flow and Step offer")
    bullets = [" ".join(b.split()) for b in section.split("\n- **")[1:]]
    lines = {b.split(":", 1)[0].strip("* "): set(re.findall(r"`([a-z_]+)`", b)) - {"run_logic"}
             for b in bullets}
    assert lines == {
        "Flow hooks": FLOW_HOOKS,
        "Flow helpers": FLOW_HELPERS,
        "Step hooks": STEP_HOOKS,
        "Step helpers": STEP_HELPERS,
    }


def _private_accesses(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = {node.attr for node in ast.walk(tree)
           if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
           and isinstance(node.value, ast.Name) and node.value.id == "self"}
    own |= {node.target.id for node in ast.walk(tree)  # dataclass fields
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                and node.attr not in own):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another_objects_private_attributes() -> None:
    paths = [*sorted((ROOT / "runtime").rglob("*.py")),
             *sorted(p for p in (ROOT / "picoflow_web").rglob("*.py")
                     if "migrations" not in p.parts)]
    assert [hit for path in paths for hit in _private_accesses(path)] == []


def test_the_private_access_check_finds_one(tmp_path: Path) -> None:
    probe = tmp_path / "peek.py"
    probe.write_text("class Token:\n    def __init__(self):\n        self._own = []\n"
                     "    def link(self, other):\n        other._own.append(self)\n"
                     "def peek(token):\n    return token._children\n", encoding="utf-8")
    assert _private_accesses(probe, tmp_path) == ["peek.py:7: token._children"]


@pytest.mark.anyio
async def test_a_finished_turn_leaves_nothing_behind() -> None:
    import gc
    import weakref

    engine = FlowEngine(flows=[_Probe])
    seen: list[weakref.ref[Flow]] = []

    class Watched(_Probe):
        id = "Watched"

        def define_steps(self) -> list[type[Step]]:
            seen.append(weakref.ref(self))
            return [_ProbeStep]

    engine.register_flow(Watched)
    reply = await engine.run("Watched", "hi")
    gc.collect()
    assert reply.success is False  # _ProbeStep has no run_logic: the turn fails, and
    assert [ref() for ref in seen] == [None]  # still the flow and its turn are freed
