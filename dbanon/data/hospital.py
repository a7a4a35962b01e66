"""A generated hospital table, because the (θ,k) paper's Beijing hospital data is private.

Patients with the paper's quasi-identifiers (age, years of illness, gender, home district,
allergy history, marital status) and a disease drawn from the two-level hierarchy shipped as
hierarchies/disease.csv (8 categories x 5 diseases, ARX format). Deterministic: the same seed
and row count give the same rows, whatever the machine (numpy's default_rng).

The disease depends on the quasi-identifiers as illnesses do, which is what makes plain
k-anonymity open to the similarity attack: the category on the age band (children: respiratory
and skin; the elderly: cardiovascular), years of illness on the category (chronic ones last);
within a category the five diseases are mildly skewed (30/24/19/15/12 %), categories from
about 17 % down to 5 % of the rows. Gender, district and allergy are independent of it.
"""

from __future__ import annotations

import numpy as np

from dbanon.core.hierarchy import Hierarchy
from dbanon.data import hierarchy_file

HOSPITAL_ROWS = 30000
HOSPITAL_SEED = 2019  # the paper's year
HOSPITAL_COLUMNS = (
    "age", "years_ill", "gender", "district", "allergy", "marital_status", "disease",
)  # fmt: skip
HOSPITAL_QI = ["age", "years_ill", "gender", "district", "allergy", "marital_status"]
HOSPITAL_NUMERIC = ("age", "years_ill")
# Column -> the shipped hierarchy that generalises it (the others are flat: value or '*').
HOSPITAL_HIERARCHIES = {"district": "district", "disease": "disease"}

_BANDS = ((0, 14, 0.10), (15, 64, 0.55), (65, 95, 0.35))  # age band: low, high, share
# Category weights per age band (child, adult, elderly), in the order of disease.csv.
_CATEGORY_WEIGHTS = np.array([
    [0.40, 0.14, 0.14],  # respiratory
    [0.18, 0.20, 0.12],  # digestive
    [0.01, 0.12, 0.28],  # cardiovascular
    [0.10, 0.14, 0.14],  # orthopaedic
    [0.03, 0.14, 0.14],  # endocrine
    [0.06, 0.08, 0.12],  # neurological
    [0.18, 0.12, 0.03],  # skin
    [0.04, 0.06, 0.03],  # urinary
])  # fmt: skip
_CHRONIC = {"cardiovascular", "orthopaedic", "endocrine", "neurological"}
_DISEASE_WEIGHTS = np.array([0.30, 0.24, 0.19, 0.15, 0.12])
_DISTRICT_WEIGHTS = {  # roughly by population
    "Chaoyang": 16, "Haidian": 14, "Fengtai": 9, "Changping": 9, "Daxing": 8, "Tongzhou": 7,
    "Shunyi": 6, "Xicheng": 5, "Fangshan": 6, "Dongcheng": 3, "Shijingshan": 2, "Miyun": 2,
    "Huairou": 2, "Pinggu": 2, "Mentougou": 2, "Yanqing": 1,
}  # fmt: skip
_MARITAL = ("single", "married", "divorced", "widowed")


def disease_hierarchy() -> Hierarchy:
    return Hierarchy.from_csv("disease", hierarchy_file("disease"))


def hospital_columns(rows: int = HOSPITAL_ROWS, seed: int = HOSPITAL_SEED) -> dict[str, np.ndarray]:
    """The table's columns (without the id), each an array of `rows` values."""
    rng = np.random.default_rng(seed)
    h = disease_hierarchy()
    by_category: dict[str, list[str]] = {}
    for value in h.leaves:
        by_category.setdefault(h.generalize(value, 1), []).append(value)
    categories = list(by_category)
    band = rng.choice(len(_BANDS), rows, p=[b[2] for b in _BANDS])
    lows = np.array([b[0] for b in _BANDS])
    highs = np.array([b[1] for b in _BANDS])
    age = rng.integers(lows[band], highs[band] + 1)
    weights = _CATEGORY_WEIGHTS[:, band].T  # rows x categories
    category = (weights.cumsum(axis=1) > rng.random(rows)[:, None]).argmax(axis=1)
    disease_idx = rng.choice(len(_DISEASE_WEIGHTS), rows, p=_DISEASE_WEIGHTS)
    disease = np.array(
        [by_category[categories[c]][d] for c, d in zip(category, disease_idx, strict=True)]
    )
    chronic = np.isin(np.array(categories)[category], list(_CHRONIC))
    years_ill = np.where(chronic, rng.exponential(8.0, rows), rng.exponential(1.0, rows)).astype(
        np.int64
    )
    years_ill = np.minimum(years_ill, age)
    gender = rng.choice(np.array(["F", "M"]), rows)
    names = np.array(list(_DISTRICT_WEIGHTS))
    share = np.array(list(_DISTRICT_WEIGHTS.values()), dtype=np.float64)
    district = rng.choice(names, rows, p=share / share.sum())
    allergy = np.where(rng.random(rows) < 0.18, "yes", "no")
    # Marital status by age: single under 20, then married most, widowed growing with age.
    u = rng.random(rows)
    widowed = np.clip((age - 55) / 100, 0, 0.35)
    divorced = np.full(rows, 0.08)
    single = np.clip(0.9 - (age - 18) * 0.03, 0.05, 0.9)
    marital = np.select(
        [age < 20, u < single, u < single + divorced, u < single + divorced + widowed],
        ["single", "single", "divorced", "widowed"],
        "married",
    )
    return {
        "age": age.astype(np.int64),
        "years_ill": years_ill,
        "gender": gender,
        "district": district,
        "allergy": allergy,
        "marital_status": marital,
        "disease": disease,
    }


def hospital_rows(rows: int = HOSPITAL_ROWS, seed: int = HOSPITAL_SEED) -> list[tuple]:
    """The table's rows (without the id), as Python values in HOSPITAL_COLUMNS order."""
    cols = hospital_columns(rows, seed)
    return list(zip(*(cols[c].tolist() for c in HOSPITAL_COLUMNS), strict=True))
