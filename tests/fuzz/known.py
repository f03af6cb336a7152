"""Problem cases of the pytest slice that are known and not fixed yet, each with its reason.

``test_fuzz_slice`` fails on any problem not listed here, on a listed case that no longer has a
problem (the entry is stale: delete it), and on any death or hang whatever is listed: crashing the
host is never a known problem. Keep this list short and shrinking; every entry names the issue
or the reason it stays.
"""

from __future__ import annotations

# case id -> (category, why it is still open)
KNOWN: dict[str, tuple[str, str]] = {}
