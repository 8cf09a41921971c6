"""Every name grokray writes to MLflow, in one place: tags, metric names, what a parent run must carry, `flatten`.

Analysis, the atlas and the drivers read runs back by these names, so a name spelled twice is a name that drifts.
Pure: imports nothing.
"""

from __future__ import annotations

from ..contracts import DriverKind

# -- tags on every run ----------------------------------------------------------------------------------------
ROLE_TAG = "grokray.role"  # PARENT or CONFIGURATION
PARENT = "parent"
CONFIGURATION = "configuration"
SPEC_HASH_TAG = "grokray.spec_hash"  # what the sweep trains (after presets and overrides): how resume finds it
CODE_VERSION_TAG = "grokray.code_version"
DRIVER_TAG = "grokray.driver"  # on a parent: host:pid of the driver running it (a dead one's RUNNING parent is closed)
LAUNCH_TAG = "grokray.launch"  # on a parent: the launch's own key, chosen before the server answers (names its spool)
SWEPT_TAG = "grokray.swept"  # JSON list of the dotted keys that vary
LOG_AXES_TAG = "grokray.log_axes"  # JSON list of the swept keys drawn on a log scale

# -- parent runs ------------------------------------------------------------------------------------------------
KIND_TAG = "grokray.kind"  # which driver made it: one of DRIVERS
SEARCH_DIR = "search"  # a search parent's artifact directory of the study's figures (search/artifacts.py)
SLICES_PNG = "objective_vs_parameters.png"
# Every driver, as it declares itself (contracts.DriverKind): the one list of launch kinds.
DRIVERS = {d.kind: d for d in (
    DriverKind("grid", "run", one_run_of_packs=True),
    DriverKind("adaptive", "run", spec_block="adaptive"),
    DriverKind("search", "search", spec_block="search", study=True,
               figure_line=f"figures: `{SEARCH_DIR}/{SLICES_PNG}` (the objective against each searched parameter), "
                           f"`{SEARCH_DIR}/optimization_history_*.png`"),
)}
KINDS = tuple(DRIVERS)


def driver_for(spec) -> DriverKind:
    """The driver a spec asks for by its block (a `search:` spec with no sweep axes, an `adaptive:` one), else the
    default's (a grid): what `grokray run`, `grokray.sweep` and the atlas launch it with."""
    asked = [d for d in DRIVERS.values() if d.spec_block and spec.raw.get(d.spec_block) is not None
             and not (d.study and spec.axes)]
    return asked[0] if asked else next(d for d in DRIVERS.values() if not d.spec_block)


def driver_of(kind: str | None) -> DriverKind:
    """The driver a parent's grokray.kind names; a parent without one (an older store's) is a grid's."""
    return DRIVERS.get(kind or "", DRIVERS["grid"])

CONFIGURATIONS_TAG = "grokray.configurations"  # configurations the parent's children cover (set when it closes)
PACKS_TAG = "grokray.packs"
EXPERIMENT_PATH_TAG = "grokray.experiment_path"  # the Ray Tune experiment a grid's --resume restores
PHASE_COUNT_TAG = "grokray.phase_count."  # + phase: children with that phase (set when it closes)
PHASE_COUNT_METRIC = "phase_count/"  # + phase, the same count as a metric
SPEC_ARTIFACT = "spec.resolved.yaml"
NOTE_TAG = "mlflow.note.content"  # the run's description in MLflow's UI (markdown): what the launch did
ANALYSIS_DIR = "analysis"  # the parent's artifact directory of figures (grokray analyze and the launch's close)
# The launch's runs table: every child run as a record, one JSON line each, written at the close. What analyze,
# the atlas and the launch's own figure read instead of the runs one by one (10^5 runs take minutes to page).
RUNS_SUMMARY_ARTIFACT = "summary/runs.jsonl.gz"
RUNS_SUMMARY_TAG = "grokray.summary_rows"  # rows in it; absent while the launch runs (or was resumed)
# The tags every parent run carries from the moment it is opened, whichever driver opened it.
REQUIRED_PARENT_TAGS = (ROLE_TAG, KIND_TAG, SPEC_HASH_TAG, CODE_VERSION_TAG, SWEPT_TAG, LOG_AXES_TAG)
# ... and the ones it carries once closed (the atlas's skip-if-complete compares the two).
CLOSED_PARENT_TAGS = (CONFIGURATIONS_TAG,)

ADAPTIVE_TAG = "grokray.adaptive"  # "true" on an adaptive parent (read by older stores' resume)
ADAPTIVE_ROUND_TAG = "grokray.adaptive.round"
ADAPTIVE_BUDGET_TAG = "grokray.adaptive.budget"
ADAPTIVE_FULL_GRID_TAG = "grokray.adaptive.full_grid"
ADAPTIVE_LATTICE_TAG = "grokray.adaptive.lattice"
ADAPTIVE_ROUNDS_DIR = "adaptive"  # artifact directory of the round records
SEARCH_STUDY_TAG = "grokray.search.study"
CONFIRM_TAG = "grokray.search.confirmation"  # on a search's parent with search.confirm: pending, or the stage's parent
CONFIRM_PENDING = "pending"
SEARCH_STORAGE_TAG = "grokray.search.storage"
SEARCH_OBJECTIVE_TAG = "grokray.search.objective"
SEARCH_SAMPLER_TAG = "grokray.search.sampler"
SEARCH_PRUNED_TAG = "grokray.search.pruned"  # on a child that ASHA stopped before it was classified
SEARCH_BEST_TRIAL_TAG = "grokray.search.best_trial"
SEARCH_BEST_VALUE_TAG = "grokray.search.best_value"
SEARCH_BEST_PHASE_TAG = "grokray.search.best_phase"
SEARCH_PARETO_TAG = "grokray.search.pareto_trials"
SEARCH_TRIAL_TAG = "grokray.search.trial"  # on a search's child run: its Optuna trial number (the trial: mlflow_run_id)
ATLAS_SCALE_TAG = "grokray.atlas.scale"  # an atlas piece's parent: the scale and the piece it ran
ATLAS_PIECE_TAG = "grokray.atlas.piece"
ATLAS_USE_TAG = "grokray.atlas.estimate_budget_use"  # where the piece's estimate took its budget use from

# -- child runs (one per configuration) --------------------------------------------------------------------------
PHASE_TAG = "grokray.phase"  # set last, with the summaries: a child with it is finished
ENDED_TAG = "grokray.ended_ms"  # with the phase: when the member stopped, so whoever ends its run ends it then
COUNTED_TAG = "grokray.counted_as"  # on a child whose phase counts as another (an undecodable split): what it counts as
TRIAL_KEY_TAG = "grokray.trial_key"  # the configuration's content hash: how a retried pack finds its run
PACK_ID_TAG = "grokray.pack_id"
MODEL_TAG = "grokray.model"
TASK_TAG = "grokray.task"
NODE_TAG = "grokray.node"
STARTS_TAG = "grokray.starts"  # how many times the configuration was trained from step 0 (1 unless a retry lost it all)
RESUMES_TAG = "grokray.resumes"  # how many times a worker continued this run from a checkpoint (a retry, --resume)

STEPS_RUN_METRIC = "steps_run"


def phase_count_tags(counts: dict[str, int]) -> dict[str, str]:
    return {f"{PHASE_COUNT_TAG}{p}": str(n) for p, n in counts.items()}


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    """{'optim': {'decoder': {'lr': 1e-3}}} -> {'optim.decoder.lr': 1e-3}: a configuration as MLflow params.
    Lists stay values."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
