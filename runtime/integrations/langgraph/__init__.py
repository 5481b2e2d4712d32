"""LangGraph runs as PicoFlow events: supersteps as barriers, tasks as branches.

:class:`LangGraphTracer` is a LangChain callback handler, passed the way LangSmith's and
Langfuse's are::

    tracer = LangGraphTracer(graph)
    await graph.ainvoke(inputs, config={"callbacks": [tracer]})
    tracer.last_run_id

The mapping:

* one top-level invocation (``invoke``, ``ainvoke``, ``stream``, ``astream``) is one run
  and one turn (``turn.started`` ... ``turn.finished`` or ``turn.failed``); its ``flow``
  is ``LangGraph`` (``LangGraph: <name>`` for a graph compiled with a name), its session
  the config's ``thread_id`` when that is a valid id. The graph state is the fold's state
  under one step, ``state``; the turn loads the invocation's input (over the
  checkpointer's state of the thread, when it can be read).
* LangGraph's input step is not a barrier: its ``__start__`` task (which has callbacks
  when ``START`` has a conditional edge, such as a ``Send`` fan-out from ``START``) only
  writes the invocation's input, which the turn's ``session.loaded`` state already holds,
  and routes. It is not recorded, nor anything called inside it (a model called by a
  routing function of ``START`` is not a model call of any branch).
* each superstep that runs tasks is an atomic barrier (LangGraph applies none of a
  superstep's writes when one of its tasks fails), its requests in LangGraph's task order
  (the order its ``apply_writes`` applies writes: PULL tasks by node name, then PUSH tasks
  from ``Send`` by index); a PULL task's key is its node, a PUSH task's ``node:index``.
  A request's ``params`` is what the task was given (the state, or a ``Send``'s arg);
  with ``graph``, its ``after`` names the previous superstep's tasks that could have
  triggered it (``_edges``), so a what-if can schedule each task after its own
  triggers instead of after the whole superstep.
* a task's writes to a reducer channel (``BinaryOperatorAggregate`` such as
  ``Annotated[list, operator.add]`` or ``add_messages``, ``Topic``) are contributions,
  reduced at the join in task order by the channel's own operator (named in
  ``join.reduced``); writes to any other channel are replacements. Two writes to one
  non-reducer key in a superstep are a ``join.invalidated`` naming both tasks and values;
  LangGraph then raises ``InvalidUpdateError``, and the turn fails with it. Both errors
  have the code our runtime gives two replacements of one field,
  ``parallel_state_conflict``, with ``extra`` ``{step, field, provenance, fix}`` (the
  fix in LangGraph's terms: a reducer, ``Annotated[T, operator.add]``, or one writer);
  the turn's error keeps LangGraph's type and message. Any other ``InvalidUpdateError``
  fails the turn with code ``invalid_update``.
* a task that raises is a rejected branch; the join discards every branch, and the turn
  fails with the error LangGraph raises. Tasks LangGraph cancelled then (no callback
  ended them) are rejected as cancelled.
* a subgraph (a compiled graph run as a node, or invoked inside one) is a nested barrier
  per superstep of it, in the branch of the task that ran it: its base is that branch and
  its join publishes into that branch's scope. Its channels are its own when
  ``graph.get_subgraphs()`` names it by the node, else the parent's stand in; its state
  starts as its first task's input. LangGraph writes a subgraph's returned state as the
  task's output, so the outer join names the inner branches that value came from: a
  non-reducer key's publication names the inner writer (as a nested join's does in our
  runtime), and a reducer key's ``join.reduced`` lists the subgraph's input value (the
  task's) and then each inner contribution, when reducing those gives the same result as
  the task's whole value (a list concatenation does; otherwise the task is the one input).
* ``interrupt()`` ends the turn: the task that called it is a rejected branch (error code
  ``interrupted``, carrying what it asked), the superstep publishes nothing this turn, and
  the turn finishes with ``completed`` false and the interrupts as its message. The next
  invocation of the thread (``Command(resume=...)``) is the next turn of the same session.
* a chat model called inside a task is a model call of its branch (``model.started`` /
  ``model.finished`` with the tokens the model reported, or ``model.failed``).

What is inferred. Callbacks announce tasks one at a time, and a task may end before a
sibling starts (a thread pool, ``max_concurrency``), so a superstep's task list is known
only when the next superstep begins or the invocation ends. The tracer records each
callback with its monotonic time and emits a superstep's events then, stamped with the
times the callbacks fired: within a superstep the events follow the callbacks' order, but
sinks receive them a superstep late. Without ``graph`` the tracer cannot tell reducer
channels: every write is a replacement, two writers of one key conflict only when
LangGraph raised, and a key several tasks wrote in a superstep LangGraph accepted is a
``join.reduced`` with channel ``unknown`` and no result (its value is then not published).

Checkpoints. LangGraph's checkpointer saves without a callback, so when the graph was
compiled with a checkpointer and the invocation has a ``thread_id``, the tracer reads the
thread's checkpoints as the invocation ends (newest back to the one it started from) and
records a ``checkpoint.saved`` for each superstep LangGraph saved (``source`` ``loop``),
its ``revision`` LangGraph's step number, after the run's last join. Not recorded: the
input step's checkpoint (no barrier), a subgraph's own checkpoints (its namespace), a
checkpointer passed in the config rather than compiled in, and a saver that cannot be
read synchronously from the callback (an async-only saver on the event loop).

=================  ========================================================================
``_tracer``        the callback handler: invocations, subgraphs, tasks, model calls
``_superstep``     a superstep's record and its events (fork, branches, join)
``_edges``         which tasks of the previous superstep a task waited for (the edges)
``_models``        a chat model call as ``model.*`` events
``_values``        channels and reducers, task order, values and errors for events
``_bus``           the event bus that stamps recorded times
=================  ========================================================================
"""

from __future__ import annotations

from ._superstep import STATE_STEP
from ._tracer import SOURCE, LangGraphTracer

__all__ = ["SOURCE", "STATE_STEP", "LangGraphTracer"]
