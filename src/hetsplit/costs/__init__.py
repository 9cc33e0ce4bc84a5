"""Costs: per-(layer, device type) time/energy/memory, link costs, device models, profiles, and the
calibrations of this machine (cached only when trusted; docs/architecture.md, "Calibrations")."""

from hetsplit.costs.build import build_cost_table, build_problem
from hetsplit.costs.problem import SplitProblem
from hetsplit.costs.profile import Profile, load_profile, save_profile
from hetsplit.costs.table import CostTable

__all__ = ["CostTable", "Profile", "SplitProblem", "build_cost_table", "build_problem", "load_profile",
           "save_profile"]
