"""The anchor-set state machine: the only place that says which role changes are allowed.

An anchor set lives across many refreshes, and several steps change it (the fit, the publishing
checks, the publication, a later refresh that supersedes it). Before this table there were eight
words for its state and each writer decided for itself what could follow what; a stale
``proposed`` set was then published days later by a refresh that had skipped its own fit. Every
role change now goes through :func:`check_transition` (the store calls it inside the transaction
that writes the new role), so an illegal change is an error at the writer, not a surprise later.

``origin`` (``selected`` / ``refit``: where the anchors came from) is not a state.
"""

from __future__ import annotations

from types import MappingProxyType

#: every role and what it means (``sql/schema.sql`` and ``docs/architecture.md`` repeat this table)
ROLES: MappingProxyType[str, str] = MappingProxyType({
    "candidate": "fitted and stored by the fit step; the publishing checks have not decided yet",
    "proposed": "passed the publishing checks; its publication (as champion or challenger) is pending "
                "in the publications table",
    "champion": "published: the MLflow alias 'champion', the published folder and predict --benchmark "
                "serve it (one per benchmark)",
    "challenger": "published under the MLflow alias 'challenger' for comparison; never served by default",
    "retired": "was published or proposed and was replaced or abandoned; 'reason' says why (terminal)",
    "rejected": "failed a publishing check; 'reason' names the checks (terminal)",
})

#: allowed changes: role -> roles it may become (staying in the same role is always allowed)
TRANSITIONS: MappingProxyType[str, frozenset[str]] = MappingProxyType({
    "candidate": frozenset({"proposed", "rejected", "retired"}),
    "proposed": frozenset({"champion", "challenger", "retired"}),
    "champion": frozenset({"retired"}),
    "challenger": frozenset({"proposed", "retired"}),  # a challenger may later be proposed as champion
    "retired": frozenset(),
    "rejected": frozenset(),
})

#: roles a set never leaves: a new fit with the same content becomes a new anchor set row
TERMINAL = frozenset(r for r, nxt in TRANSITIONS.items() if not nxt)
#: roles that still wait for something (a decision or a publication)
PENDING = frozenset({"candidate", "proposed"})


class IllegalTransitionError(ValueError):
    """A role change the state table does not allow (a bug in the writer, never a user error)."""


def check_transition(anchor_set_id: int, old: str, new: str) -> None:
    """Raise :class:`IllegalTransitionError` unless ``old -> new`` is in :data:`TRANSITIONS`."""
    if new not in ROLES:
        raise IllegalTransitionError(f"anchor set #{anchor_set_id}: unknown role {new!r} (known: {', '.join(ROLES)})")
    if old not in ROLES:
        raise IllegalTransitionError(f"anchor set #{anchor_set_id}: stored role {old!r} is not a known role")
    if old != new and new not in TRANSITIONS[old]:
        allowed = ", ".join(sorted(TRANSITIONS[old])) or "nothing (terminal)"
        raise IllegalTransitionError(f"anchor set #{anchor_set_id}: {old} -> {new} is not allowed ({old} may become "
                                f"{allowed})")


def state_table_markdown() -> str:
    """The state table as markdown (the docs and the closing notes print this, so they cannot drift)."""
    lines = ["| role | meaning | may become |", "|---|---|---|"]
    for role, meaning in ROLES.items():
        lines.append(f"| `{role}` | {meaning} | {', '.join(sorted(TRANSITIONS[role])) or '(terminal)'} |")
    return "\n".join(lines)
