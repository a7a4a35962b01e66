"""Data shipped with dbanon: UCI Adult (45,222 complete rows) and ARX's Adult hierarchies.

adult.csv.gz holds the training rows first (30,162) then the test rows (15,060), every row with
a missing value removed, income labels without the test file's trailing dot.
"""

from __future__ import annotations

import csv
import gzip
import io
from importlib.resources import files
from pathlib import Path

ADULT_TRAIN_ROWS = 30162
ADULT_COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education_num",
    "marital_status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital_gain",
    "capital_loss",
    "hours_per_week",
    "native_country",
    "income",
)
ADULT_NUMERIC = {"age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week"}
# Adult column -> the ARX hierarchy file that generalises it.
ADULT_HIERARCHIES = {
    "age": "age",
    "workclass": "workclass",
    "education": "education",
    "marital_status": "marital-status",
    "occupation": "occupation",
    "race": "race",
    "sex": "sex",
    "native_country": "native-country",
    "income": "salary-class",
}


def adult_rows(limit: int | None = None) -> list[list[str]]:
    """Rows of Adult as text, training rows first."""
    raw = files(__name__).joinpath("adult.csv.gz").read_bytes()
    with io.TextIOWrapper(gzip.GzipFile(fileobj=io.BytesIO(raw)), newline="") as f:
        reader = csv.reader(f)
        next(reader)
        rows = list(reader)
    return rows[:limit] if limit is not None else rows


def hierarchy_file(name: str) -> Path:
    """Path of a shipped ARX hierarchy, e.g. 'native-country'."""
    return Path(str(files(__name__).joinpath("hierarchies", f"{name}.csv")))
