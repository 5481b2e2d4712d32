"""``run_steps()`` barriers: fork child steps into private views, join them, publish.

The package is the whole fork/join and nothing else. It imports only itself,
:mod:`runtime.events`, :mod:`runtime.errors` and :mod:`runtime.jsonutil`
(``runtime/LAYERS.toml``); what it needs from the flow running it is written down in
:mod:`._host`.

- :mod:`.types`: requests, options, results, the cancel token (public);
- :mod:`.reducers`: the built-in channel reducers (public);
- :mod:`.views`: branch views and their drafts and contributions;
- :mod:`._plan`: requests checked into branches before anything starts;
- :mod:`.ledger`: the branch ledger a resumed turn reuses fulfilled branches from;
- :mod:`._join`: the pure join — validation, conflicts, reduction order, publication;
- :mod:`._driver`: the task-group driver that forks, runs, cancels, joins and publishes;
- :mod:`._host`: the Protocols the core implements for the driver.
"""

from __future__ import annotations

from ._driver import run_barrier as run_barrier
from ._host import BarrierHost as BarrierHost
from ._host import PublishedValues as PublishedValues
from ._host import StepHost as StepHost
from .ledger import LedgerEntry as LedgerEntry
from .ledger import TurnLedger as TurnLedger
from .reducers import Channel as Channel
from .reducers import ContributionMeta as ContributionMeta
from .reducers import StepChannels as StepChannels
from .types import BarrierOptions as BarrierOptions
from .types import BranchResult as BranchResult
from .types import CancelToken as CancelToken
from .types import Checkpoint as Checkpoint
from .types import DirectResult as DirectResult
from .types import DiscardedBranch as DiscardedBranch
from .types import FailurePolicy as FailurePolicy
from .types import InvocationPath as InvocationPath
from .types import ParallelBatchResult as ParallelBatchResult
from .types import ParallelConfig as ParallelConfig
from .types import ParallelInvocation as ParallelInvocation
from .types import Publication as Publication
from .types import RunStepRequest as RunStepRequest
from .types import barrier_options as barrier_options
from .types import direct_result as direct_result
from .types import format_path as format_path
from .views import BranchView as BranchView
from .views import Contribution as Contribution
from .views import Draft as Draft
from .views import Snapshot as Snapshot
from .views import View as View
from .views import current_view as current_view
