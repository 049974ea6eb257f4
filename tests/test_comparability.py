"""The comparability key: which two measurements of a case may be compared at all."""

from fp8bench.core.comparability import comparability_key, key_string
from fp8bench.core.records import case_key, load_record

RUN = {"device": {"name": "NVIDIA H100 80GB HBM3"}, "software": {"torch": "2.13.0", "cuda_runtime": "12.9"},
       "settings": {"flush_l2": True, "seed": 0, "threads": None}}
FP8 = {"workload": "gemm", "shape": {"m": 256, "n": 256, "k": 256}, "precision": "fp8_rowwise",
       "fp8_format": "e4m3", "backend": "torch", "device": "cuda:0"}


def key_of(fields, run):
    """The key of a measured record with ``fields``, as a stored record is read."""
    return comparability_key(load_record({"status": "ok", **fields}), run)


def test_accumulation_modes_are_never_compared() -> None:
    fast = {**FP8, "accumulation": "fast_forward"}
    full = {**FP8, "accumulation": "full"}
    differences = key_of(full, RUN).differences(key_of(fast, RUN))
    assert set(differences) == {"case", "definition_hash"}
    assert case_key(full).endswith("fp8_rowwise/e4m3/full-accum torch cuda:0")


def test_records_from_before_accumulation_was_recorded_keep_their_keys() -> None:
    """Every earlier record ran the default mode: its key equals a default-mode record's today."""
    assert key_of(FP8, RUN) == key_of({**FP8, "accumulation": "fast_forward"}, RUN)
    assert case_key(FP8) == case_key({**FP8, "accumulation": "fast_forward"})


def test_fast_accumulation_defaults_match_the_recipe_registry() -> None:
    from fp8bench.core.precisions import PRECISIONS, ScaledRecipe
    from fp8bench.core.records import FAST_ACCUM_BY_DEFAULT

    assert tuple(name for name, p in PRECISIONS.items()
                                          if isinstance(p, ScaledRecipe) and p.fast_accum) == FAST_ACCUM_BY_DEFAULT


def test_block_recipes_key_their_only_accumulation_mode_as_before() -> None:
    block = {**FP8, "precision": "fp8_blockwise", "accumulation": "full"}
    assert "/full-accum" not in case_key(block)
    assert key_of(block, RUN) == key_of({**block, "accumulation": None}, RUN)


def test_distributed_runs_are_compared_only_at_the_same_ranks_and_spread_over_nodes() -> None:
    def run(world_size: int, per_node: int) -> dict:
        return {**RUN, "spec": {"distributed": {"world_size": world_size, "ranks_per_node": per_node,
                                                "backend": "nccl", "launcher": "torchrun"}}}

    single = key_of(FP8, RUN)
    assert key_of(FP8, {**RUN, "spec": {"suite": None}}) == single  # single-process keys unchanged
    keys = {key_of(FP8, r) for r in (run(2, 2), run(8, 8), run(8, 4))}
    assert len(keys) == 3 and single not in keys
    assert key_of(FP8, run(8, 4)) == key_of(FP8, run(8, 4))


TE_BLOCK = {**FP8, "precision": "fp8_blockwise", "backend": "te", "accumulation": "full"}


def test_te_block_scaling_with_fp32_scales_is_never_compared_with_records_that_do_not_say_their_scales() -> None:
    """TE's Float8BlockScaling ran power-of-two scales by default; fp8bench now runs it with FP32 scales and states
    them. Records that state no scale format (written before, when TE's default most likely applied) stay apart,
    and the gate names the field with both values."""
    from fp8bench.core.comparability import describe_differences

    stated = key_of({**TE_BLOCK, "scale_format": "fp32"}, RUN)
    older = key_of(TE_BLOCK, RUN)
    assert stated.differences(older) == {"scale_format": ("fp32", None)}
    assert describe_differences(stated.differences(older)) == "scale_format (fp32 -> unrecorded)"
    pow2 = key_of({**TE_BLOCK, "scale_format": "pow2"}, RUN)
    assert set(stated.differences(pow2)) == {"scale_format"}
    assert key_string(stated) != key_string(older) != key_string(pow2)


def test_keys_of_records_that_state_no_scale_format_keep_their_stored_text() -> None:
    """The store keeps each record's key text (``records.comparability_key``): a record that states no scale format
    (every backend but te) keys exactly as before the field existed. Values computed before it was added."""
    assert key_string(key_of(FP8, RUN)) == "09bd8a690cf37f53c54ff8e2"
    assert key_string(key_of({**FP8, "precision": "fp8_blockwise", "backend": "te"}, RUN)) == \
        "59d1943c2ae7061db54624ae"
