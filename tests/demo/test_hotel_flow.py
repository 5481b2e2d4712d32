"""HotelFlow end to end: the 14-turn reference conversation through FlowEngine."""

from __future__ import annotations

import json

import pytest

from picoflow_web.demos.hotel.backend import booking_confirmation
from picoflow_web.demos.hotel.flow import NO_HOTEL_FOUND, HotelFlow
from picoflow_web.demos.hotel.script import CURRENT_DATE, REFERENCE_TURNS, hotel_model
from runtime import FlowEngine, Rule, ScriptedModel, SQLiteSessionStore

pytestmark = pytest.mark.anyio

# The step under the cursor after each turn of REFERENCE_TURNS.
EXPECTED_CURSOR = [
    "ExploreStep", "ExploreStep", "ExploreStep", "ExploreStep", "ExploreStep", "ExploreStep",
    "ExploreStep", "PresentStep", "PresentStep", "CompareStep", "CompareStep", "CompareStep",
    "PresentStep", "TerminateSessionStep",
]


async def play(engine: FlowEngine) -> tuple[list[str], list[str], str]:
    session_id = None
    cursors: list[str] = []
    replies: list[str] = []
    for turn in REFERENCE_TURNS:
        reply = await engine.run(
            "HotelFlow", turn, session_id=session_id, config={"current_date": CURRENT_DATE}
        )
        assert reply.success, reply.message
        assert reply.completed == (turn == REFERENCE_TURNS[-1])
        session_id = reply.session_id
        doc = await engine.store.load(session_id)
        assert doc is not None
        cursors.append(str(doc.flow.current_step))
        replies.append(reply.message)
    assert session_id is not None
    return cursors, replies, session_id


async def test_reference_conversation_books_hotel_eight(tmp_path: object) -> None:
    model = hotel_model()
    engine = FlowEngine(flows=[HotelFlow], model_override=model)
    cursors, replies, session_id = await play(engine)

    assert cursors == EXPECTED_CURSOR
    doc = await engine.store.load(session_id)
    assert doc is not None
    assert doc.run_status == "completed"
    # The trail: Present→Explore→Present happened inside turn 9, Compare→Present in turn 13.
    assert [(e.level, e.step_name) for e in doc.flow.sequence] == [
        (1, "ExploreStep"), (1, "PresentStep"), (1, "ExploreStep"), (1, "PresentStep"),
        (1, "CompareStep"), (1, "PresentStep"), (1, "TerminateSessionStep"),
    ]
    states = {s.name: s.state for s in doc.flow.steps}
    criteria = json.loads(states["ExploreStep"]["json"])
    assert criteria["roomType"] == ["two beds"]
    assert criteria["amenities"] == ["freeWifi", "parking"]
    found = [q["hotelName"] for q in states["PresentStep"]["hotelFound"]]
    assert len(found) == 11
    assert states["PresentStep"]["hotel"]["hotelName"] == found[7] == "Eastbank Esplanade Hotel"
    assert states["CompareStep"]["available_hotel"] == found
    assert states["CompareStep"]["compare_hotel"] == [found[1], found[4]]
    assert [row["feature"] for row in states["CompareStep"]["chosen_hotels"]] == [
        "price", "amenities", "price"
    ]
    # Turn 8 presented 4 suites; turn 9 re-searched with two beds in the same turn.
    assert replies[7].startswith("I found 4 hotels")
    assert replies[8].startswith("I found 11 hotels")
    # Compare answers directly with the table: no second model call in those turns.
    assert replies[9].startswith("| Features | Hotel 1 | Hotel 2 | Hotel 3 |")
    assert "| freeWifi | ✅ | ✅ | ✅ |" in replies[10]
    assert replies[11].startswith("| Features | Hotel 1 | Hotel 2 |\n")
    assert "| total |" in replies[11]
    number = booking_confirmation(session_id, "Eastbank Esplanade Hotel")
    assert number in replies[13]
    assert doc.tokens.total_tokens == doc.tokens.input_tokens + doc.tokens.output_tokens > 0
    assert not doc.warn and not doc.error
    # Every answer was produced by the script and the per-step model choice reached it.
    steps_called = [(r.step, r.selection.name) for r in model.requests]
    assert ("ExploreStep", "gpt-5.1") in steps_called
    assert ("PresentStep", "gpt-4o") in steps_called
    assert all(r.selection.params.get("temperature") == 0.5
               for r in model.requests if r.step == "PresentStep")


async def test_direct_comparison_makes_one_model_call_per_turn() -> None:
    model = hotel_model()
    engine = FlowEngine(flows=[HotelFlow], model_override=model)
    session_id = None
    counts: list[int] = []
    for turn in REFERENCE_TURNS[:12]:
        before = len(model.requests)
        reply = await engine.run("HotelFlow", turn, session_id=session_id,
                                 config={"current_date": CURRENT_DATE})
        session_id = reply.session_id
        counts.append(len(model.requests) - before)
    # search: Explore tool call + Present answer; re-search: Present, Explore, Present.
    assert counts[7:] == [2, 3, 2, 1, 1]


async def test_conversation_survives_a_sqlite_store_between_engines(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "sessions.sqlite3"
    session_id = None
    cursors = []
    for turn in REFERENCE_TURNS:
        # A new engine (a new process, in effect) for every turn: only the file survives.
        engine = FlowEngine(flows=[HotelFlow], model_override=hotel_model(),
                            store=SQLiteSessionStore(path))
        reply = await engine.run("HotelFlow", turn, session_id=session_id,
                                 config={"current_date": CURRENT_DATE})
        assert reply.success, reply.message
        session_id = reply.session_id
        doc = await engine.store.load(session_id)
        assert doc is not None
        cursors.append(doc.flow.current_step)
        await engine.close()
    assert cursors == EXPECTED_CURSOR


async def test_search_without_results_stays_on_explore() -> None:
    no_match = json.dumps({
        "checkIn": "2027-08-01", "checkOut": "2027-08-08", "roomType": ["suite"],
        "amenities": ["freeWifi", "parking", "spa", "petFriendly", "evCharging"],
        "maxBudget": 300,
    })
    model = ScriptedModel([
        Rule(step="ExploreStep", last="^search$", tools=[("capture_choices", {"json": no_match})]),
        Rule(step="ExploreStep", last_type="tool", last=f"^{NO_HOTEL_FOUND}$",
             text="Nothing matches. What would you like to change?"),
        Rule(step="ExploreStep", text="Hello!"),
    ])
    engine = FlowEngine(flows=[HotelFlow], model_override=model)
    reply = await engine.run("HotelFlow", "search")
    assert reply.success
    assert reply.message == "Nothing matches. What would you like to change?"
    doc = await engine.store.load(reply.session_id)
    assert doc is not None
    assert doc.flow.current_step == "ExploreStep"
    tool_reply = model.requests[-1].messages[-1]
    assert tool_reply.type == "tool" and tool_reply.content == NO_HOTEL_FOUND


async def test_invalid_criteria_go_back_to_the_model_as_feedback() -> None:
    model = ScriptedModel([
        Rule(step="ExploreStep", last="^search$",
             tools=[("capture_choices", {"json": "{not json"})]),
        Rule(step="ExploreStep", last_type="tool", text="Let me fix that."),
    ])
    engine = FlowEngine(flows=[HotelFlow], model_override=model)
    reply = await engine.run("HotelFlow", "search")
    assert reply.success and reply.message == "Let me fix that."
    feedback = model.requests[-1].messages[-1]
    assert feedback.type == "tool" and feedback.content.startswith("The criteria are not valid")
