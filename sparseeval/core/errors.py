"""The one base class of every error a user can fix (bad input, a missing predictor, a locked store).

The CLI prints these as one line naming the file and the fix, and exits 2; anything else is a bug
and keeps its traceback, so real defects are never disguised as user mistakes.
"""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix; its message says what and how."""


class UsageError(UserError, ValueError):
    """A request that cannot be carried out as asked (bad option, wrong predictor, too few models).
    A ValueError too, for callers of the library that catch those."""
