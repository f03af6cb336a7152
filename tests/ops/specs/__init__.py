"""Per-family op-suite specs: `specs/<family>.py` for `op-specs/src/<family>.rs`, same name, same
folders. Each module registers `SPECS[(domain, op)]` with `from op_specs import ...`; `op_specs`
imports them all."""
