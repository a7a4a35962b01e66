"""What `report` calls each figure a run records, and what it means: one name per figure, said
in words, whichever method recorded it (the CLI prints them; `report --json` keeps the keys)."""

from __future__ import annotations

# What `report` calls a run's figures, and what each means, by metric key: one name per figure
# (the methods' own keys differ: `suppressed` and `suppressed_rows` are one figure), said in
# words. A key not here is shown under its own name.
FIGURES: dict[str, tuple[str, str]] = {
    "dm": ("discernibility (DM)", "sum of squared class sizes over rows with equal released QIs "
           "(Bayardo & Agrawal); lower is finer"),
    "discernibility": ("discernibility of groups", "DM over the groups the method formed, "
                       "which two groups released with equal QIs make smaller than DM"),
    "suppressed": ("suppressed rows", "source rows the release leaves out"),
    "suppressed_rows": ("suppressed rows", "source rows the release leaves out"),
    "exposure": ("exposure", "mean probability that an attacker who knows a person's QIs "
                 "names their sensitive value (thesis (3.21)/(3.22))"),
    "exposure_max": ("exposure, highest", "the same probability for the most exposed person"),
    "exposure_unmatched_rows": ("rows matched by no released row", "source rows no released "
                                "row's box contains (suppressed): exposure 0"),
    "ncp_height": ("NCP (heights)", "mean information loss per value, categories costing their "
                   "LCA's height (the k-member paper); 0 none, 1 all"),
    "ncp_leaf": ("NCP (leaves)", "mean information loss per value, categories costing the "
                 "share of leaves they cover (Xu et al.); 0 none, 1 all"),
    "total_il_height": ("total IL (heights)", "NCP (heights) summed over rows and QIs"),
    "total_il_leaf": ("total IL (leaves)", "NCP (leaves) summed over rows and QIs"),
    "loss": ("loss of the chosen node", "full-domain search's NCP of the node it chose"),
    "levels": ("levels", "the hierarchy level of each QI in the chosen node"),
    "nodes": ("lattice nodes", "nodes of the full-domain generalisation lattice"),
    "nodes_checked": ("nodes checked", "lattice nodes whose classes were counted"),
    "model_checks": ("model checks", "lattice nodes judged by every promised model"),
    "unique_share": ("unique share", "share of released rows whose value of the column no "
                     "other row has (kept and sensitive columns)"),
    "keep_unique_share_together": ("kept columns unique together", "share of released rows "
                                   "unique on the QIs as released and the kept columns"),
    "value_set_loss": ("value-set loss", "per QI released as sets of values: (values covered "
                       "- 1) / (values of the column - 1)"),
    "linkage": ("linkage", "share of sampled released rows whose nearest original row is their "
                "own"),
    "sec": ("security (SEC)", "per column: Var(value - released) / Var(value), Wang et al."),
    "msec": ("security, lowest (mSec)", "the least SEC of any column"),
    "noise_floor": ("noise floor", "least move of every value, a share of its column's scale"),
    "clamped": ("values clamped", "per column: noisy values moved back to the source's range"),
}


# A method's figure that repeats a common one (`report` shows it once): key -> the common key.
SAME_AS = {"loss": "gcp"}
