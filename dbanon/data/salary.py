"""Adult with the CBG thesis's attributes and a seeded numeric `salary`, its sensitive stand-in.

The thesis (Ch. 3, Table 3.7) samples 22,517 IPUMS census rows with QI sex, age, relationship,
marital status, race, education, hours per week, occupation and a numeric salary (702 distinct
values). IPUMS is not available here; UCI Adult has all eight QIs but only an income class
(<=50K / >50K), so the salary is derived, deterministically from the seed:

    base  = 24,000 if income is <=50K, else 62,000
    edu   = 0.70 + 0.05 * education_num                   (1..16: 0.75 .. 1.50)
    hours = clip(hours_per_week / 40, 0.25, 1.75) ** 0.8
    noise = lognormal(mean 0, sigma 0.30)                   (numpy default_rng(seed))
    salary = clip(round(base * edu * hours * noise / 500) * 500, 1,000, 250,000)

so salary follows income class, education and hours as a wage does, in steps of 500 (a few
hundred distinct values: 417 on the default sample, 445 on all 45,222 rows; the most frequent
value holds 1.6 % of the rows,
so the table is l-eligible for every l up to 62). The sample is `rows` rows of Adult's
45,222 complete rows drawn without replacement by the same generator (first the sample, then
the noise), kept in Adult's order; `id` numbers the sampled rows 1..rows. The same seed and row
count give the same table on every machine.

That is the `flat` profile. Census wages are heaped: people report round figures, so a few
values hold many rows. The `heaped` profile rounds the same salaries to the nearest 2,000
(issue 35: CBG against Mondrian on query error turns on this profile, so both are run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dbanon.data import ADULT_COLUMNS, adult_rows

if TYPE_CHECKING:
    import psycopg

    from dbanon.api import Database

SALARY_ROWS = 22517  # the thesis's sample size (Ch. 3)
SALARY_SEED = 2018  # the thesis's year
# The thesis's QIs (Table 3.7) in its order; Adult's names.
SALARY_QI = [
    "sex", "age", "relationship", "marital_status", "race", "education", "hours_per_week",
    "occupation",
]  # fmt: skip
SALARY_NUMERIC = ("age", "hours_per_week", "salary")
SALARY_COLUMNS = (*SALARY_QI, "salary")
SALARY_KEY = "id"
# Categorical QI -> shipped ARX hierarchy (relationship has none: value or '*').
SALARY_HIERARCHIES = {
    "sex": "sex",
    "marital_status": "marital-status",
    "race": "race",
    "education": "education",
    "occupation": "occupation",
}
STEP = 500
# Salary profiles: the step the salary is rounded to (the flat one's, or census-like heaping).
PROFILES = {"flat": STEP, "heaped": 2000}
BASE = {"<=50K": 24000.0, ">50K": 62000.0}


def salary_columns(
    rows: int = SALARY_ROWS, seed: int = SALARY_SEED, extra: tuple[str, ...] = (),
    profile: str = "flat",
) -> dict[str, np.ndarray]:
    """The table's columns (without the id), each an array of `rows` values; `extra` adds other
    Adult columns of the same sample as strings (the sample and the noise do not change)."""
    every = adult_rows()
    if not 1 <= rows <= len(every):
        raise ValueError(f"rows must be between 1 and {len(every)}, got {rows}")
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(len(every), rows, replace=False))
    sample = [every[i] for i in picked.tolist()]
    col = {name: i for i, name in enumerate(ADULT_COLUMNS)}

    def column(name: str) -> list[str]:
        return [r[col[name]] for r in sample]

    income = np.array([BASE[v] for v in column("income")])
    edu = 0.70 + 0.05 * np.array(column("education_num"), dtype=np.float64)
    hours_raw = np.array(column("hours_per_week"), dtype=np.int64)
    hours = np.clip(hours_raw / 40.0, 0.25, 1.75) ** 0.8
    noise = rng.lognormal(0.0, 0.30, rows)
    step = PROFILES[profile]
    salary = np.clip(np.round(income * edu * hours * noise / step) * step, 1000, 250000)
    out: dict[str, np.ndarray] = {}
    for name in SALARY_QI:
        values = column(name)
        out[name] = np.array(values, dtype=np.int64 if name in SALARY_NUMERIC else object)
    out["salary"] = salary.astype(np.int64)
    for name in extra:
        out[name] = np.array(column(name), dtype=object)
    return out


def salary_rows(rows: int = SALARY_ROWS, seed: int = SALARY_SEED,
                profile: str = "flat") -> list[tuple]:  # fmt: skip
    """The table's rows (without the id), as Python values in SALARY_COLUMNS order."""
    cols = salary_columns(rows, seed, profile=profile)
    return list(zip(*(cols[c].tolist() for c in SALARY_COLUMNS), strict=True))


def load_salary(
    conn: psycopg.Connection | Database,
    schema: str = "demo",
    table: str = "salary",
    rows: int = SALARY_ROWS,
    seed: int = SALARY_SEED,
    profile: str = "flat",
) -> int:
    """(Re)create SCHEMA.TABLE: `id` (key, 1..rows), the eight QIs and `salary`; commits.

    `conn` is a psycopg connection or a dbanon.api.Database (whose connection is used)."""
    from dbanon.demo import load_table

    db = conn if hasattr(conn, "conn") else _Wrapped(conn)
    return load_table(db, schema, table, SALARY_COLUMNS, SALARY_NUMERIC,  # type: ignore[arg-type]
                      salary_rows(rows, seed, profile))  # fmt: skip


class _Wrapped:
    """The one attribute of a Database that load_table reads: a bare connection as one."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
