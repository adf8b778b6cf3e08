"""Comparisons with the tolerances of doc/development.md, "Oracles and tolerances": fp16 5e-3, bf16 2e-2, quantized
caches one quantization step on cached values and 2e-2 on outputs."""
import numpy as np

import cases


def output_tolerance(cfg):
    if cfg.cache_dtype in ("int8", "float8e4m3fn"):
        return 2e-2
    return 2e-2 if cfg.dtype == "bfloat16" else 5e-3


def as_f64(x):
    if hasattr(x, "detach"):  # torch
        x = x.detach().cpu().float().numpy()
    return np.asarray(x).astype(np.float32).astype(np.float64)


def assert_close(test, actual, expected, tol, what, seed):
    actual, expected = as_f64(actual), np.asarray(expected, dtype=np.float64)
    test.assertEqual(actual.shape, expected.shape, "%s: shape (seed %d)" % (what, seed))
    err = np.abs(actual - expected)
    bound = tol * (1.0 + np.abs(expected))
    bad = ~(err <= bound)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        test.fail("%s: %d of %d elements off; first at %s: got %r, expected %r (tol %g, seed %d)"
                  % (what, int(bad.sum()), bad.size, idx, actual[idx], expected[idx], tol, seed))


def assert_output_qk(test, actual, expected, mode, tol, what, seed):
    """Admitted positions within tol; every other one exactly -inf (mode 1) or 0 (mode 2)."""
    actual, expected = as_f64(actual), np.asarray(expected, dtype=np.float64)
    test.assertEqual(actual.shape, expected.shape, "%s: shape (seed %d)" % (what, seed))
    masked = ~np.isfinite(expected) if mode == 1 else None
    if mode == 1:
        wrong_mask = masked & ~(actual == -np.inf)
        test.assertFalse(wrong_mask.any(), "%s: %d masked positions are not -inf (seed %d)"
                         % (what, int(wrong_mask.sum()), seed))
        assert_close(test, np.where(masked, 0, actual), np.where(masked, 0, expected), tol, what,
                     seed)
    else:
        assert_close(test, actual, expected, tol, what, seed)


def assert_cache(test, actual, expected, original, cfg, what, seed):
    """Entries the reference left alone are bit-identical (canaries); written ones are within one
    step of the cache's type (rounding order in QK-Norm / RoPE may differ by one ulp)."""
    actual = np.asarray(actual)
    untouched = (expected.view(np.uint8) == original.view(np.uint8)) if expected.itemsize == 1 \
        else (expected.view(np.uint16) == original.view(np.uint16))
    unit_view = np.uint8 if expected.itemsize == 1 else np.uint16
    changed = untouched & (actual.view(unit_view) != original.view(unit_view))
    test.assertFalse(changed.any(), "%s: %d entries outside the written slots changed (seed %d)"
                     % (what, int(changed.sum()), seed))
    if expected.dtype == np.int8:
        diff = np.abs(actual.astype(np.int32) - expected.astype(np.int32))
        test.assertLessEqual(int(diff.max(initial=0)), 1, "%s: more than one int8 step (seed %d)"
                             % (what, seed))
        return
    step = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}.get(str(expected.dtype), 2.0 ** -3)
    a, e = as_f64(actual), as_f64(expected)
    smallest_step = 2.0 ** -9 if step == 2.0 ** -3 else 1e-6  # float8 subnormals
    bad = np.abs(a - e) > step * np.abs(e) + smallest_step
    test.assertFalse(bad.any(), "%s: %d cached values more than one step off (seed %d)"
                     % (what, int(bad.sum()), seed))


def run_reference_model(inputs, attrs):
    import numpy_reference
    kwargs = {k: v for k, v in inputs.items() if k != "attention_metadata"}
    return numpy_reference.paged_attention_reference(**kwargs, **cases.reference_kwargs(attrs))
