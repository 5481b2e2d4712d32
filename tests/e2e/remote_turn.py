"""A user's own process: one turn of the tests' own flow, shipped to the dashboard.

Run as a plain script — ``python remote_turn.py RUN_ID EVENTS_FILE PAUSE TEAMS`` — with
``PICOFLOW_DASHBOARD_URL`` and ``PICOFLOW_DASHBOARD_TOKEN`` set: the engine attaches the
dashboard sink by itself. Every event is also appended to ``EVENTS_FILE`` as it is
emitted (flushed line by line, so a killed process leaves what it emitted), for the test
to compare with what the dashboard stored. Imports only the runtime and the flow.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runtime import FlowEngine
from runtime.events import CallbackSink, Event, dump_event
from tests.remoteflow import TeamSurvey


def main(run_id: str, events_file: str, pause: float, teams: int) -> int:
    path = Path(events_file)

    def write(event: Event) -> None:
        with path.open("a", encoding="utf-8") as out:  # on disk at once: a kill keeps it
            out.write(dump_event(event) + "\n")

    async def turn() -> bool:
        engine = FlowEngine(flows=[TeamSurvey], sinks=[CallbackSink(write)])
        try:
            reply = await engine.run("TeamSurvey", "How do the teams spend their week?",
                                     config={"pause": pause, "teams": teams}, run_id=run_id)
        finally:
            await engine.close()
        print(reply.message, flush=True)
        if not reply.success:
            print(f"error_code: {reply.error_code}", flush=True)
        return reply.success

    return 0 if anyio.run(turn) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])))
