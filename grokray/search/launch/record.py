"""What a search keeps in its tracking record beside the runs: the study's report on the parent, the trial-to-run
links of runs made after their trials ended (a tracking outage; written by the close once the runs can be read, or
by `grokray replay` of the spool, which also completes the report), and the finished parent a resume finds."""

from __future__ import annotations

import json
from pathlib import Path

import optuna

from ...run.complete import stored_spec
from ...tracking.client import StoreAway
from ...tracking.parent import ParentRun
from ...tracking.records import RunStatus
from ...tracking.schema import SEARCH_PRUNED_TAG, TRIAL_KEY_TAG
from ...tracking.store import Store
from ..artifacts import log_parent_results
from ..config import SearchConfig, parse_search
from ..study import LINK_FILE, launch_of, link_trial_runs, storage_at


def leave_link(spool_dir: str, storage_label: str, study: str, experiment: str, launch_key: str) -> None:
    """Name, in the launch's spool, the study whose trials `grokray replay` links to the runs it makes."""
    Path(spool_dir, LINK_FILE).write_text(json.dumps({"storage": storage_label, "study": study,
                                                      "experiment": experiment, "launch": launch_key}))


def link_runs(parent, study) -> int:
    """Link the trials whose runs were made after they ended (an outage) to them, once the parent's children can
    be read; 0 while the server is away."""
    with StoreAway() as away:
        children = parent.children()
    if away.happened:
        return 0
    return link_trial_runs(study, {r.tags.get(TRIAL_KEY_TAG): r.run_id for r in children})


def link_after_replay(spool_dir: str, uri: str) -> int | None:
    """`grokray replay` of a search's spool: the trials whose runs the replay made are linked to them (how many);
    None for a spool that is not a search's."""
    path = Path(spool_dir, LINK_FILE)
    if not path.is_file():
        return None
    where = json.loads(path.read_text())
    study = optuna.load_study(study_name=where["study"], storage=storage_at(where["storage"]))
    parent = ParentRun(uri, where["experiment"], "")
    run = parent.find_launch(where["launch"])
    if run is None:
        return 0
    parent.attach(run)
    linked = link_runs(parent, study)
    store = Store(uri)  # the study's report, which the close left to the replay while the store was away
    parent.end_unfinished_children(SEARCH_PRUNED_TAG)
    log_parent_results(store, run.run_id, study, parse_search(stored_spec(store, run.run_id)))
    path.unlink()
    return linked


def end_pruned(parent: ParentRun) -> None:
    """Children ASHA stopped are tagged pruned and ended, before the close ends what is left RUNNING. Skipped while
    the tracking server is away (`grokray replay` does it then)."""
    with StoreAway():
        parent.end_unfinished_children(SEARCH_PRUNED_TAG)


def report_study(parent: ParentRun, study, cfg: SearchConfig) -> list[str]:
    """The study's report on the parent (best settings, trials table, figures), once every trial is told: after
    the close, whose delivery made the runs a trial held by an outage waited for. Skipped, with the rest of the
    close reporting what is undelivered, while the tracking server is away."""
    if not parent.run_id:  # the server was away for the whole launch: the replay makes the parent, then this
        return []
    with StoreAway():
        return log_parent_results(Store(parent.uri), parent.run_id, study, cfg)
    return []


def finished_parent(study, uri: str):
    """The study's last parent run, if it closed as finished."""
    parent_id, _ = launch_of(study)
    if not parent_id:
        return None
    try:
        run = Store(uri).run(parent_id)
    except Exception:  # noqa: BLE001 - gone, or in another store: the launch finds what it can, as before
        return None
    return run if run.status == RunStatus.FINISHED else None
