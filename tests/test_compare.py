"""The comparison math: tolerance, NaN/inf agreement, shape and count mismatches."""

from __future__ import annotations

import numpy as np
import pytest

from harness.numeric.compare import compare, describe


def test_within_tolerance_passes_and_reports_the_largest_error() -> None:
    ref = np.array([1.0, -2.0, 100.0], dtype=np.float32)
    out = ref + np.array([1e-5, -5e-5, 0.05], dtype=np.float32)
    ok, s = compare([ref], [out], atol=1e-4, rtol=1e-3)
    assert ok
    assert s.mismatched == 0 and s.total == 3
    assert s.max_abs == pytest.approx(0.05, rel=1e-3)
    assert s.max_rel == pytest.approx(5e-4, rel=1e-2)


def test_outside_tolerance_counts_each_element() -> None:
    ref = np.zeros((2, 3), dtype=np.float32)
    out = ref.copy()
    out[0, 1] = 1e-3
    out[1, 2] = -2.0
    ok, s = compare([ref], [out], atol=1e-4, rtol=1e-3)
    assert not ok
    assert s.mismatched == 2
    assert s.max_abs == pytest.approx(2.0)
    assert s.max_rel is None  # every reference element is zero: no relative error defined
    assert "2/6 elements differ" in describe(s)


def test_rtol_scales_with_the_reference() -> None:
    ref = np.array([1000.0])
    ok, _ = compare([ref], [ref * (1 + 5e-4)], atol=0.0, rtol=1e-3)
    assert ok
    ok, _ = compare([ref], [ref * (1 + 5e-3)], atol=0.0, rtol=1e-3)
    assert not ok


def test_nan_must_meet_nan() -> None:
    ref = np.array([np.nan, 1.0, 2.0])
    ok, s = compare([ref], [ref.copy()], atol=1e-4, rtol=1e-3)
    assert ok and s.nan_ref == 1 and s.nan_out == 1
    # runtime NaN where torch had a number: a mismatch whatever the tolerance
    ok, s = compare([ref], [np.array([np.nan, np.nan, 2.0])], atol=1e9, rtol=1e9)
    assert not ok and s.mismatched == 1 and s.nan_out == 2
    assert "NaN: torch 1, runtime 2" in describe(s)
    # and a number where torch had NaN
    ok, s = compare([ref], [np.array([0.0, 1.0, 2.0])], atol=1e9, rtol=1e9)
    assert not ok and s.mismatched == 1


def test_inf_must_meet_inf_of_the_same_sign() -> None:
    ref = np.array([np.inf, -np.inf, 1.0])
    assert compare([ref], [ref.copy()], atol=0, rtol=0)[0]
    ok, s = compare([ref], [np.array([np.inf, np.inf, 1.0])], atol=0, rtol=0)
    assert not ok and s.mismatched == 1
    ok, s = compare([ref], [np.array([3e38, -np.inf, 1.0])], atol=1e9, rtol=1e9)
    assert not ok and s.inf_out == 1 and s.inf_ref == 2


def test_shape_mismatch_names_the_output() -> None:
    ok, s = compare([np.zeros((1, 10)), np.zeros(3)], [np.zeros((1, 10)), np.zeros(4)], atol=1, rtol=1)
    assert not ok
    assert s.shape_mismatch == "output 1: shape (4,), torch (3,)"
    assert describe(s) == s.shape_mismatch


def test_output_count_mismatch() -> None:
    ok, s = compare([np.zeros(2)], [np.zeros(2), np.zeros(2)], atol=1, rtol=1)
    assert not ok and s.shape_mismatch == "2 outputs, torch has 1"


def test_integer_and_bool_outputs_compare_exactly_under_zero_tolerance() -> None:
    ref = np.array([1, 2, 3], dtype=np.int64)
    assert compare([ref], [ref.copy()], atol=0, rtol=0)[0]
    assert not compare([ref], [ref + 1], atol=0, rtol=0)[0]
    b = np.array([True, False])
    assert not compare([b], [~b], atol=0, rtol=0)[0]


def test_dtype_mismatch_is_a_mismatch_even_with_equal_values() -> None:
    ok, s = compare([np.array([1, 2], dtype=np.int64)], [np.array([1, 2], dtype=np.int32)], atol=1, rtol=1)
    assert not ok and s.shape_mismatch == "output 0: dtype int32, torch int64"


def test_scalar_outputs_compare_as_one_element() -> None:
    ok, stats = compare([np.array(1.0, np.float32)], [np.array(1.0, np.float32)], atol=0, rtol=0)
    assert ok and stats.total == 1
    ok, stats = compare([np.array(np.nan)], [np.array(2.0)], atol=1, rtol=0)
    assert not ok and stats.mismatched == 1 and stats.nan_ref == 1


def test_complex_outputs_compare_both_parts() -> None:
    ref = np.array([1 + 1j, 2 - 1j], np.complex64)
    ok, stats = compare([ref], [ref.real.astype(np.complex64)], atol=1e-4, rtol=0)  # imaginary parts lost
    assert not ok and stats.mismatched == 2 and stats.total == 4


def test_string_outputs_are_equal_or_not() -> None:
    ok, stats = compare([np.array(["a", "b"])], [np.array(["a", "c"])], atol=1, rtol=1)
    assert not ok and (stats.mismatched, stats.total) == (1, 2)


# The scaled metric: max|out - ref| <= scaled * max|ref| for a floating output.


def _noisy_convnet_output() -> tuple[np.ndarray, np.ndarray]:
    """What fp32 rounding does to a real convnet's output (ResNet-50's, scaled down): values up to 255, and
    a few elements near zero (after a ReLU) off by 5e-4, which atol 1e-4 + rtol 1e-3 * |ref| cannot absorb."""
    rng = np.random.default_rng(0)
    ref = np.maximum(rng.standard_normal((8, 64)) * 80, 0).astype(np.float32)
    ref[0, :4] = [255.0, 0.0, 1e-3, 2e-4]
    out = ref * (1 + rng.standard_normal(ref.shape).astype(np.float32) * 1e-7)
    out[0, 1:4] += np.float32(5e-4)
    return ref, out


def test_rounding_noise_of_a_convnet_passes_within_its_scale() -> None:
    ref, out = _noisy_convnet_output()
    ok, stats = compare([ref], [out], atol=1e-4, rtol=1e-3)
    assert not ok and stats.mismatched == 3, "element-wise alone calls it a mismatch"
    ok, stats = compare([ref], [out], atol=1e-4, rtol=1e-3, scaled=1e-5)
    assert ok, describe(stats)
    assert stats.mismatched == 3  # still said: 3 elements outside the element-wise bound
    assert stats.scaled_error == pytest.approx(5e-4 / 255, rel=0.05) and stats.scaled_output == 0 and stats.scaled_limit == 1e-5


def test_an_error_at_the_outputs_own_scale_still_fails_and_says_by_how_much() -> None:
    ref = np.linspace(-4, 4, 64, dtype=np.float32)
    out = ref.copy()
    out[10] += 0.05  # a wrong value: 1.25% of the output's largest magnitude
    ok, stats = compare([ref], [out], atol=1e-4, rtol=1e-3, scaled=1e-5)
    assert not ok and stats.mismatched == 1
    assert stats.scaled_error == pytest.approx(0.05 / 4, rel=1e-3)
    assert describe(stats).endswith("error 0.0125 of output 0's largest |value| (limit 1e-05)")


def test_nan_and_inf_rules_hold_under_the_scaled_metric() -> None:
    ref = np.array([1000.0, 1.0, np.nan, np.inf], dtype=np.float32)
    assert not compare([ref], [np.array([1000.0, np.nan, np.nan, np.inf], np.float32)], atol=0, rtol=0, scaled=1.0)[0]
    assert not compare([ref], [np.array([1000.0, 1.0, np.nan, -np.inf], np.float32)], atol=0, rtol=0, scaled=1.0)[0]
    assert compare([ref], [np.array([1000.0, 1.0 + 1e-3, np.nan, np.inf], np.float32)], atol=0, rtol=0, scaled=1e-5)[0]


def test_the_scaled_metric_leaves_integers_exact_and_zeros_strict() -> None:
    ints = np.array([1000, 2000, 3], dtype=np.int64)
    assert not compare([ints], [ints + np.array([0, 0, 1])], atol=0, rtol=0, scaled=1.0)[0]  # never "within scale"
    zeros = np.zeros(4, np.float32)
    assert not compare([zeros], [zeros + np.float32(1e-3)], atol=0, rtol=0, scaled=1e-5)[0]  # no scale to be within
    assert compare([zeros], [zeros.copy()], atol=0, rtol=0, scaled=1e-5)[0]


def test_per_output_tolerance_overrides_the_shared_one() -> None:
    ref, out = _noisy_convnet_output()
    exact = {1: {"scaled": 0.0}}  # output 1 element-wise only; output 0 keeps the shared scaled bound
    ok, stats = compare([ref, ref], [out, out], atol=1e-4, rtol=1e-3, scaled=1e-5, outputs=exact)
    assert not ok and stats.scaled_output == 1 and stats.mismatched == 6
    assert compare([ref, ref], [out, out], atol=1e-4, rtol=1e-3, scaled=1e-5, outputs={"1": {"atol": 1e-3}})[0]  # JSON keys
