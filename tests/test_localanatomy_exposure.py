"""Exposure under the two attacker models (dbanon.metrics.personal) on the thesis's Table 4.1
with Table 4.4's buckets, including the erratum of §4.2.2 (Dean's disease bucket is 2)."""

from __future__ import annotations

import numpy as np

from dbanon.metrics.personal import View, candidates, eliminate, exposure, per_person, summary

# Table 4.1: Mark, Dave, Ella, Daphne, Sarah, Neil, Dean, Tina (rows 0..7 = ids 1001..1008).
AGE = [26, 35, 16, 24, 31, 22, 29, 34]
GENDER = ["Male", "Male", "Female", "Female", "Female", "Male", "Male", "Female"]
OCC = ["Lawyer", "Police", "Student", "Guider", "Lawyer", "Typist", "Guard", "Scientist"]
DISEASE = ["Pneumonia", "Dyspepsia", "Flu", "Bronchitis", "Hepatitis", "Dyspepsia", "Bronchitis",
           "Gastritis"]  # fmt: skip
AGE_FLAGGED = [3, 4, 6, 7]  # Daphne, Sarah, Dean, Tina
OCC_FLAGGED = [0, 1, 6, 7]  # Mark, Dave, Dean, Tina
DEAN = 6


def codes(values: list) -> np.ndarray:
    return np.unique(values, return_inverse=True)[1].reshape(-1).astype(np.int64)


def table_4_4(published: bool = True) -> View:
    """LA (published=True: flagged cells NULL) or Anatomy with the semi-sensitive attributes as
    QI (published=False: every age and occupation shown), disease buckets as Table 4.4's."""
    values = np.column_stack([codes(AGE), codes(GENDER), codes(OCC)])
    known = np.ones_like(values, dtype=bool)
    known[AGE_FLAGGED, 0] = False
    known[OCC_FLAGGED, 2] = False
    lo = values.astype(np.float64)
    if published:
        lo[~known] = np.nan
    hi = lo.copy()
    age_b = np.zeros(8, np.int64)
    occ_b = np.zeros(8, np.int64)
    disease_b = np.array([1, 1, 1, 1, 2, 2, 2, 2])
    buckets: dict[object, tuple[np.ndarray, np.ndarray]] = {
        "disease": (disease_b, codes(DISEASE))
    }
    if published:
        age_b[AGE_FLAGGED] = 1
        occ_b[OCC_FLAGGED] = 1
        buckets[0] = (age_b, values[:, 0])
        buckets[2] = (occ_b, values[:, 2])
    else:
        buckets[0] = (age_b, values[:, 0])
        buckets[2] = (occ_b, values[:, 2])
    return View(values, known, lo, hi, buckets)


def test_dean_under_both_attackers() -> None:
    """(a) knowing only 'Male': Dean matches 1001, 1002, 1006, 1007 (age bucket 1 and
    occupation bucket 1 through 1007, 1001, 1002; disease buckets 1 and 2). (b) knowing
    everyone's unflagged values: Mark, Dave and Neil are identified, only 1007 is left, and
    Dean's disease matching bucket is bucket 2 (the thesis's 'bucket 1' is the erratum)."""
    view = table_4_4()
    cls, cands = candidates(view)
    assert sorted(cands[cls[DEAN]].tolist()) == [0, 1, 5, 6]
    disease_b = view.buckets["disease"][0]
    assert sorted(set(disease_b[cands[cls[DEAN]]].tolist())) == [1, 2]
    after = eliminate(cls, cands)
    assert after[cls[DEAN]].tolist() == [DEAN]
    assert disease_b[after[cls[DEAN]]].tolist() == [2]
    for person in range(8):  # everyone is identified in this tiny table
        assert after[cls[person]].tolist() == [person]


def test_la_keeps_every_flagged_value_within_1_over_l() -> None:
    """Buckets of 4 distinct values: p(t, s) <= 1/4 whatever the attacker (Cor. 4.1); under (b)
    every person is identified, so each exposure is exactly 1/4."""
    for attacker in ("a", "b"):
        got = exposure(table_4_4(), attacker)
        assert set(got) == {"disease", 0, 2}
        assert all(v <= 0.25 + 1e-12 for v in got.values()), (attacker, got)
    assert exposure(table_4_4(), "b") == {"disease": 0.25, 0: 0.25, 2: 0.25}


def test_anatomy_shows_semi_sensitive_values() -> None:
    """Anatomy with age and occupation as QI: a flagged age is read off the matching rows,
    p = share of matching rows showing it; Dean's age 29 among the four males: 1/4; Tina's age
    34 among the four females: 1/4; Daphne (female, Guider) is unique: her age is exposed."""
    got = exposure(table_4_4(published=False), "a")
    # Daphne 1 (unique Guider), Sarah 1 (unique female Lawyer), Dean 1/4, Tina 1/4.
    assert abs(got[0] - (1 + 1 + 0.25 + 0.25) / 4) < 1e-12


def test_the_most_exposed_person_is_not_the_average() -> None:
    """The principle bounds each person: on Anatomy's release Daphne and Sarah are exposed with
    certainty while the mean reads 0.625; `per_person` keeps each, `summary` the largest."""
    each = per_person(table_4_4(published=False), "a")
    assert sorted(each[0].tolist()) == [0.25, 0.25, 1.0, 1.0]
    mean, worst = summary(each)
    assert worst[0] == 1.0 and abs(mean[0] - 0.625) < 1e-12
    assert summary(per_person(table_4_4(), "b"))[1] == {"disease": 0.25, 0: 0.25, 2: 0.25}
