"""The input distributions a problem is graded on (T-19): one table for both sides. The
validator runs the reference under each and records which keep it stable
(``validation.distributions``, ``sensitivity._distributions``); the grader's worker draws its trials
under them (``grade.worker.inputs.transform``), and the grader uses only those a record marks
supported (``grade.policy.Policy.distributions_for``). Standard library only: both are
worker-side modules.

Each is ``(scale, shift)`` of every floating-point input; integer and boolean inputs (indices,
masks) are left as drawn. A positive scale and shift keep a domain of positive values one, and
``scaled`` reaches magnitudes where a kernel that assumes its inputs' range breaks (exp past
float32's range: a softmax without its max subtracted, at logits over ~88, on a row of ten as of
thousands) while well-conditioned work does not (a shift of twice the spread: a variance taken
as E[x^2] - E[x]^2 loses a factor of 5, not 5 digits).
"""
from __future__ import annotations

DISTRIBUTIONS = {"natural": (1.0, 0.0), "affine": (3.0, 2.0), "scaled": (32.0, 64.0)}

# A distribution other than the problem's own draws is supported where the reference's output
# stays finite under it and its float32 error against float64 (the calibration's noise measure,
# the mixed error |a-b| / (1+|b|)) is at most this share of the calibrated tolerance. An honest
# kernel of the problem's precision that sums in another order errs against float64 about as
# much as the reference; its error against the reference is at most both added, so one up to
# three times as noisy as the reference still passes. The calibration itself leaves 10x
# (``checks.calibrate_tolerance``): this share asks less of a distribution the problem was not
# calibrated on, and still drops one where rounding alone fills the tolerance.
NOISE_SHARE = 0.25
