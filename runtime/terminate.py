"""The built-in closing step."""

from __future__ import annotations

from .step import Step

DEFAULT_CLOSING_PROMPT = (
    "The conversation is over. Thank the user briefly and say goodbye. Do not ask questions."
)


class TerminateSessionStep(Step):
    """Marks the session completed on entry; its model call writes the closing reply.

    Its prompt is the ``_prompt`` a transition left (``go(TerminateSessionStep)
    .with_prompt(...)``), else a built-in closing line.
    """

    async def on_enter(self) -> None:
        self.flow.mark_completed()

    def is_end(self) -> bool:
        return True

    def get_prompt(self) -> str | None:
        return super().get_prompt() or DEFAULT_CLOSING_PROMPT
