"""The fold: a run's events → its run model, and any invocation's view at any moment.

The browser has the same fold, in modules of the same names
(``static/picoflow_web/js/fold/``); both are checked against the golden traces in
``tests/golden/`` so they cannot drift. It folds without the runtime's code: the
built-in channels' rules it shares with the join are in :mod:`runtime.events.channels`.

=================  ========================================================================
``apply``          :func:`fold` and :func:`apply_event`: the checks every event meets, and
                   the dispatch on its ``type`` to the family that handles it
``model``          the run model's dataclasses and what every handler shares
``turn``           ``turn.*``, ``session.loaded``, ``session.saved``, ``cursor.moved``,
                   ``run.interrupted``, ``sink.overflowed``
``state``          ``state.replaced``, ``state.removed``, ``state.contributed``
``reduce``         a contribution that names its channel, reduced onto the view before it
``barrier``        ``barrier.forked``, ``barrier.requested`` and ``cancel.*``
``join``           ``join.*`` and ``checkpoint.*``
``branch``         ``branch.*``
``calls``          ``model.*`` (the tokens used, the open attempt's streamed text)
``concurrent``     ``concurrent.*``: a coordinator's calls, batches and children
``views``          :func:`view_at`: what an invocation could read at any moment
``publication``    :func:`publication_of`: what became of an invocation's writes
``io``             :func:`runs_of`
=================  ========================================================================

Canonical state starts from ``session.loaded`` and changes by non-draft state events, by
``join.published`` with target ``canonical``, and back by ``checkpoint.failed``. The
``_saveOn`` stamp is not in events and not in the fold. The canonical state is what the
session store holds, or will hold once the turn saves: ``turn.cancelled`` ends the run
with the state as of the last ``session.saved`` (a stopped turn saves nothing after the
stop), and keeps what the events published in memory since then apart, as unsaved.

Note that the package attribute ``fold`` is the function :func:`fold`.
"""

from __future__ import annotations

from .apply import apply_event, fold
from .io import runs_of
from .model import (
    Anomaly,
    Applied,
    Barrier,
    ConcurrentBatch,
    ConcurrentChild,
    ConcurrentGroup,
    Invocation,
    Overflow,
    RunModel,
    State,
    Stream,
    comparable,
    new_run,
)
from .publication import Publication, barrier_publication_of, publication_of
from .views import view_at

__all__ = [
    "Anomaly",
    "Applied",
    "Barrier",
    "ConcurrentBatch",
    "ConcurrentChild",
    "ConcurrentGroup",
    "Invocation",
    "Overflow",
    "Publication",
    "RunModel",
    "State",
    "Stream",
    "apply_event",
    "barrier_publication_of",
    "comparable",
    "fold",
    "new_run",
    "publication_of",
    "runs_of",
    "view_at",
]
