"""Op-suite specs kept per family: each module does `from op_specs import SPECS, OpSpec, ...`
and registers its entries; `op_specs` imports every module here."""
